"""Lower the learning rate of a script that updates its tensors itself, where it is written.

PyTorch's own autograd tutorial trains with no optimizer: after `loss.backward()`,
`w -= learning_rate * w.grad` under `torch.no_grad()`. The rate is the script's own:
a number on each update line, or a name assigned a number once (`learning_rate =
1e-6`). This finds the update statements in the file (`t -= r * t.grad`, `t.data -=
r * t.grad.data`, `t.sub_(r * t.grad)`, `t.add_(t.grad, alpha=-r)`), and scales the
number they multiply by: each literal as written, or the one assignment of the name.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from gradient_doctor.core.findings import Edit
from gradient_doctor.core.knowledge.source.syntax_edit import (
    literal,
    number,
    parse,
    replace_node,
    rounded,
)


def lower_own_rate(
    lines: Sequence[str], file: str, factor: float
) -> tuple[tuple[Edit, ...], float] | None:
    """The edits that scale the rate of the script's own updates by `factor`, and the
    rate as written (the first update's); None when the file holds no such update, its
    updates use different names, or the rate is not a number written in this file.

    Args:
        lines: the file's lines.
        file: its path, as edits name it.
        factor: the new rate over the old.
    """
    tree, text = parse(lines)
    if tree is None:
        return None
    rates = [rate for node in ast.walk(tree) if (rate := _update_rate(node)) is not None]
    if not rates:
        return None
    if all(number(rate) is not None for rate in rates):
        if len({rate.lineno for rate in rates}) != len(rates):
            return None  # two literals on one line: one edit each would overlap
        edits = tuple(
            replace_node(text, rate, literal(rounded(number(rate) * factor)), file)
            for rate in rates
        )
        return edits, number(rates[0])
    names = {rate.id for rate in rates if isinstance(rate, ast.Name)}
    if len(names) != 1 or len(rates) != sum(isinstance(rate, ast.Name) for rate in rates):
        return None
    (name,) = names
    assigned = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and [getattr(target, "id", None) for target in node.targets] == [name]
    ]
    if len(assigned) != 1 or number(assigned[0]) is None or number(assigned[0]) <= 0:
        return None
    was = number(assigned[0])
    return (replace_node(text, assigned[0], literal(rounded(was * factor)), file),), was


def _update_rate(node: ast.AST) -> ast.expr | None:
    """The rate of one update statement (`w -= lr * w.grad`: `lr`), or None."""
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Sub):
        return _rate_times_grad(node.value)
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    method = node.func.attr
    alpha = next((k.value for k in node.keywords if k.arg == "alpha"), None)
    if method in ("add_", "sub_") and node.args and _reads_grad(node.args[0]):
        if method == "add_":  # `w.add_(w.grad, alpha=-lr)`
            negative = isinstance(alpha, ast.UnaryOp) and isinstance(alpha.op, ast.USub)
            return alpha.operand if negative else None
        return alpha  # `w.sub_(w.grad, alpha=lr)`
    if method == "sub_" and len(node.args) == 1:
        return _rate_times_grad(node.args[0])
    return None


def _rate_times_grad(value: ast.expr) -> ast.expr | None:
    """`r` of `r * t.grad` or `t.grad * r` (the gradient read alone on its side)."""
    if not isinstance(value, ast.BinOp) or not isinstance(value.op, ast.Mult):
        return None
    if _reads_grad(value.right) and not _reads_grad(value.left):
        return value.left
    if _reads_grad(value.left) and not _reads_grad(value.right):
        return value.right
    return None


def _reads_grad(node: ast.expr) -> bool:
    """Whether `node` is a tensor's gradient (`t.grad`, `t.grad.data`)."""
    while isinstance(node, ast.Attribute) and node.attr == "data":
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "grad"
