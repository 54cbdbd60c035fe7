"""Rewrite the statement that makes a trained variable so that it starts at another value.

The statement is found by the variable's own name in the user's file: an assignment to
`self.<name>` or `<name>` (`self.scale = nn.Parameter(torch.zeros(dim))`,
`log_std = tf.Variable(0.0)`) or a Keras `add_weight(..., name="<name>")`. In it, the
one place that writes the starting value changes: a `"zeros"` initializer becomes
`"ones"`, `torch.zeros(...)` `torch.ones(...)` (and `zeros_like` `ones_like`), the fill
value of `full(shape, 0.0)` or the literal of `tf.Variable(0.0)`,
`torch.tensor([0.0, 0.0])` the new one. A statement with no such place, or with several
(two zeros, one of them a bias's), is not rewritten: the fix keeps its example code.
"""

from __future__ import annotations

import ast

from gradient_doctor.core.findings import Edit
from gradient_doctor.core.knowledge.source.syntax_edit import (
    callee,
    combined,
    literal,
    number,
    segment,
)

# Calls whose first argument is the value itself (`tf.Variable(0.0)`, `torch.tensor(0.)`).
_VALUE_FIRST = frozenset(
    {"tensor", "as_tensor", "Variable", "constant", "Parameter", "array", "convert_to_tensor"}
)
# Calls that fill a shape with their second argument (`torch.full((3,), 0.0)`).
_FILL_SECOND = frozenset({"full", "full_like", "fill"})
# Factories of zeros, and the same factory's ones.
_ZERO_FACTORIES = {"zeros": "ones", "zeros_like": "ones_like"}
# Initializers that start a Keras weight at zero, as a name or a class.
_ZERO_INITIALIZERS = frozenset({"zeros", "Zeros", "zeros_initializer"})


def made_at(tree: ast.Module, name: str) -> ast.stmt | None:
    """The one statement of `tree` that makes the variable `name`, or None when there is
    none or more than one."""
    found = [
        statement
        for statement in ast.walk(tree)
        if isinstance(statement, ast.Assign | ast.AnnAssign)
        and isinstance(statement.value, ast.Call)
        and (_assigns(statement, name) or _named_weight(statement.value, name))
    ]
    return found[0] if len(found) == 1 else None


def started_at(
    text: list[str], statement: ast.stmt, value: float, start: float, file: str
) -> Edit | None:
    """The edit of `statement` that makes its variable start at `start` instead of
    `value`, or None when no single place in it writes `value`."""
    places: list[list[tuple[ast.AST, str]]] = []  # each place's changes
    for node in ast.walk(statement.value):
        if isinstance(node, ast.keyword) and node.arg == "initializer":
            if value == 0 and start == 1 and _zero_initializer(node.value):
                quote = "'" if segment(text, node.value).startswith("'") else '"'
                places.append([(node.value, f"{quote}ones{quote}")])
            continue
        if not isinstance(node, ast.Call):
            continue
        name = callee(node.func)
        if name in _ZERO_FACTORIES and value == 0 and start == 1:
            spelled = segment(text, node.func)
            places.append([(node.func, spelled[: -len(name)] + _ZERO_FACTORIES[name])])
        elif name in _FILL_SECOND and len(node.args) > 1 and number(node.args[1]) == value:
            places.append([(node.args[1], literal(start))])
        elif name in _VALUE_FIRST and node.args and (found := _literals_of(node.args[0], value)):
            places.append([(item, literal(start)) for item in found])
    if len(places) != 1:
        return None
    return combined(text, statement, places[0], file)


def _assigns(statement: ast.Assign | ast.AnnAssign, name: str) -> bool:
    """`statement` assigns to `self.<name>` or `<name>`."""
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    return any(
        (isinstance(t, ast.Attribute) and t.attr == name)
        or (isinstance(t, ast.Name) and t.id == name)
        for t in targets
    )


def _named_weight(call: ast.Call, name: str) -> bool:
    """`call` is an `add_weight(..., name="<name>")` (or a `tf.Variable(..., name=...)`)."""
    return callee(call.func) in ("add_weight", "Variable") and any(
        k.arg == "name" and isinstance(k.value, ast.Constant) and k.value.value == name
        for k in call.keywords
    )


def _zero_initializer(node: ast.expr) -> bool:
    """`node` names an initializer that starts at zero: "zeros", `Zeros()`."""
    if isinstance(node, ast.Constant):
        return node.value in _ZERO_INITIALIZERS
    return isinstance(node, ast.Call) and callee(node.func) in _ZERO_INITIALIZERS


def _literals_of(node: ast.expr, value: float) -> list[ast.expr]:
    """The numeric literals of `node` (one, or a list or tuple of them) when every one is
    `value`; else none."""
    items = node.elts if isinstance(node, ast.List | ast.Tuple) else [node]
    if items and all(number(item) == value for item in items):
        return list(items)
    return []
