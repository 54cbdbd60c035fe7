"""Read the user's text of a softmax normaliser's parts: its call, a mask, a segment count.

The walk to the op that sums a hand-written softmax's exp (`core/summed_groups.py`)
and each adapter's reader of that op spell the reduction as the user wrote it: the
call that made an op (also when split over several lines), the mask of a product,
the condition a mask keeps, the first size of the tensor a segment sum fills.
"""

from __future__ import annotations

import ast
import linecache

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.source.calls import Call, find_call, matching_close
from gradient_doctor.core.knowledge.source.syntax_edit import callee

_LONGEST_STATEMENT = 8  # lines read to close the brackets of a call split over lines


def user_call(source: SourceLine | None, names: tuple[str, ...]) -> Call | None:
    """The user's call of one of `names` that made an op: the one at its span, or the
    first on its statement when the call is split over several lines."""
    if source is None:
        return None
    call = find_call(source.code, names, source.span)
    if call is not None or source.span is not None:
        return call
    return find_call(_statement(source), names)


def spelled(call: Call | None) -> str | None:
    """The user's spelling of `call`'s function (`tf.math.reduce_sum`), or None."""
    return call.prefix + call.name if call is not None else None


def _statement(source: SourceLine) -> str:
    """The op's line joined with the lines that close its brackets (a call split over lines)."""
    text = source.code
    for number in range(source.line + 1, source.line + _LONGEST_STATEMENT):
        opening = text.find("(")
        if opening < 0 or matching_close(text, opening) is not None:
            break
        text += " " + linecache.getline(source.file, number).strip()
    return text


def product_operand(source: SourceLine | None, position: int) -> str | None:
    """The user's text of operand `position` of the product that made an op.

    Read from the expression at the op's span (`a * b`, `tf.multiply(a, b)`,
    `x *= m`), else from the line's only product.
    """
    if source is None:
        return None
    code = source.code
    pieces = [code[slice(*source.span)]] if source.span is not None else []
    for text in [*pieces, code]:
        operands = _product_operands(text)
        if operands is not None:
            return operands[position]
    return None


def _product_operands(text: str) -> tuple[str, str] | None:
    """The two operands of the only product in `text`, as written; None when not one."""
    source = text.strip()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    pairs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            pairs.append((node.left, node.right))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult):
            pairs.append((node.target, node.value))
        elif isinstance(node, ast.Call) and callee(node.func) == "multiply" and len(node.args) == 2:
            pairs.append((node.args[0], node.args[1]))
    if len(pairs) != 1:
        return None
    left, right = (ast.get_source_segment(source, node) for node in pairs[0])
    return (left, right) if left is not None and right is not None else None


def negated(condition: str) -> str:
    """The condition that holds where `condition` does not: `m` for `~m`, else `~(c)`."""
    text = condition.strip()
    if text.startswith("~"):
        inner = text[1:].strip()
        if inner.isidentifier():
            return inner
    return f"~{text}" if text.isidentifier() else f"~({text})"


def first_element(shape: str) -> str | None:
    """The text of the first element of a list or tuple literal (`n` for `[n, d]`), or None."""
    node = _expression(shape)
    if isinstance(node, ast.List | ast.Tuple) and node.elts:
        return ast.get_source_segment(shape, node.elts[0])
    return None


def first_size(target: str, constructors: tuple[str, ...], *, scalar_sizes: bool) -> str | None:
    """The text of the first size of the tensor `target` makes, or None.

    Args:
        target: the user's text of the tensor a segment sum adds into.
        constructors: the names of the calls that make a tensor of a shape (`zeros`).
        scalar_sizes: the sizes may be passed one by one, as PyTorch's `zeros(n, d)`;
            else only a shape literal is read (TensorFlow's `zeros([n, d])`, whose
            second argument is a dtype).

    Returns:
        `n` for a target written `zeros([n, d])` or `zeros((n, d))`, and with
        `scalar_sizes` `zeros(n, d)`; None for anything else (a name: its size is not
        read here).
    """
    text = target.strip()
    node = _expression(text)
    if not isinstance(node, ast.Call) or callee(node.func) not in constructors or not node.args:
        return None
    first = ast.get_source_segment(text, node.args[0])
    if first is None:
        return None
    if isinstance(node.args[0], ast.List | ast.Tuple):
        return first_element(first)
    return first if scalar_sizes else None


def _expression(text: str) -> ast.expr | None:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
