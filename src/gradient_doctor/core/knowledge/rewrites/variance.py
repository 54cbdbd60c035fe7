"""Rewrite a variance computed in one pass, E[x^2] - E[x]^2, as the framework's variance.

In floating point the one-pass formula cancels: for values far from 0 (raw pressures
near 1013, pixel sums) both terms are large and nearly equal, their difference is
rounding, and it comes out negative for some rows, which a root or a log of it turns
into NaN. The framework's own variance (`tf.math.reduce_variance`, `keras.ops.var`,
`torch.var` with `correction=0`, the same biased estimate) takes the mean of the
squared deviations, which is never negative. The subtraction is rewritten on its own
line, from the call that takes the mean of the squares: the same reduction arguments
(axis, keepdims), the squared tensor's base as its input, so the result has the shape
the code had.
"""

from __future__ import annotations

import ast

from gradient_doctor.core.evidence import OpCall
from gradient_doctor.core.findings import Edit, Fix

TITLE = (
    "Compute the variance with the framework's own function, which subtracts the mean "
    "first and is never negative (the one-pass E[x^2] - E[x]^2 cancels in floating point)"
)
# The mean function a call names -> the variance function of the same namespace; the
# keyword that makes PyTorch's the biased estimate the one-pass formula computes.
_VARIANCES = {"reduce_mean": "reduce_variance", "mean": "var"}
_TORCH_BIASED = "correction=0"
_CODE = {
    "tf": "var = tf.math.reduce_variance(x, axis=-1, keepdims=True)  # two passes: never < 0",
    "keras": "var = keras.ops.var(x, axis=-1, keepdims=True)  # two passes: never < 0",
    "torch": "var = x.var(dim=-1, correction=0, keepdim=True)  # two passes: never < 0",
}


def two_pass_variance(sub: OpCall, mean_of_squares: OpCall, framework: str = "tf") -> Fix:
    """The fix replacing the subtraction by the framework's variance of the same tensor
    (a patch when both calls' texts are on record and parse), else code to read."""
    replacement = _variance_call(_expression(mean_of_squares), framework)
    source = sub.source
    span = source.span
    namespace = "torch" if framework == "torch" else "tf"
    if replacement is None or span is None:
        return Fix("two_pass_variance", TITLE, _CODE[namespace])
    code = source.code.strip()
    new = code[: span[0]] + replacement + code[span[1] :]
    edit = Edit(source.file, source.line, source.line, (new,), (code,))
    return Fix("two_pass_variance", TITLE, new, edits=(edit,))


def _expression(call: OpCall) -> ast.expr | None:
    """The expression of `call` on its line (its recorded span), parsed; else None."""
    span = call.source.span
    if span is None:
        return None
    text = call.source.code.strip()[span[0] : span[1]]
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None


def _variance_call(mean: ast.expr | None, framework: str) -> str | None:
    """`tf.reduce_mean(tf.square(x), axis=-1)` -> `tf.math.reduce_variance(x, axis=-1)`,
    `(x ** 2).mean(-1)` -> `x.var(-1, correction=0)`; None for another shape."""
    if not isinstance(mean, ast.Call) or not isinstance(mean.func, ast.Attribute | ast.Name):
        return None
    name = mean.func.attr if isinstance(mean.func, ast.Attribute) else mean.func.id
    if name not in _VARIANCES:
        return None
    variance = _VARIANCES[name]
    torch = framework == "torch"
    extra = [_TORCH_BIASED] if torch else []
    if isinstance(mean.func, ast.Attribute) and _base(mean.func.value) is not None:
        # a method: `(x ** 2).mean(-1)`
        base = _base(mean.func.value)
        args = [ast.unparse(a) for a in mean.args] + [ast.unparse(k) for k in mean.keywords]
        return f"{_atom(base)}.{variance}({', '.join([*args, *extra])})"
    if not mean.args:
        return None
    base = _base(mean.args[0])
    if base is None:
        return None
    prefix = ast.unparse(mean.func.value) + "." if isinstance(mean.func, ast.Attribute) else ""
    if prefix == "tf." and variance == "reduce_variance":
        prefix = "tf.math."
    rest = [ast.unparse(a) for a in mean.args[1:]] + [ast.unparse(k) for k in mean.keywords]
    return f"{prefix}{variance}({', '.join([ast.unparse(base), *rest, *extra])})"


def _base(square: ast.expr) -> ast.expr | None:
    """The `x` of `square(x)`, `x ** 2`, `x * x`, `x.square()`, `x.pow(2)`; else None."""
    if isinstance(square, ast.BinOp):
        if isinstance(square.op, ast.Pow) and _is_two(square.right):
            return square.left
        if isinstance(square.op, ast.Mult) and ast.dump(square.left) == ast.dump(square.right):
            return square.left
        return None
    if not isinstance(square, ast.Call):
        return None
    function = square.func
    name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
    if name == "square" and len(square.args) == 1:
        return square.args[0]
    if name == "square" and not square.args and isinstance(function, ast.Attribute):
        return function.value
    if name == "pow" and isinstance(function, ast.Attribute) and len(square.args) == 1:
        return function.value if _is_two(square.args[0]) else None
    return None


def _is_two(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in (2, 2.0)


def _atom(node: ast.expr) -> str:
    """`node`'s text, bracketed unless it binds as a whole before a method call."""
    text = ast.unparse(node)
    atoms = ast.Name | ast.Attribute | ast.Call | ast.Subscript
    return text if isinstance(node, atoms) else f"({text})"
