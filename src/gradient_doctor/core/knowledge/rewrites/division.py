"""Rewrite a division on the user's line so that a zero denominator gives 0, not inf or NaN."""

from __future__ import annotations

from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.source.call_names import call_names
from gradient_doctor.core.knowledge.source.calls import (
    Call,
    find_call,
    grouped,
    replace_span,
)
from gradient_doctor.core.knowledge.source.operators import find_binary
from gradient_doctor.core.knowledge.source.spelling import namespace, spell

_TITLE = "Divide safely: the result is 0 where the denominator is 0"
_FALLBACK = {
    "tf": "z = tf.math.divide_no_nan(x, y)  # 0 where y == 0",
    "torch": "z = torch.where(y == 0, 0.0, x / torch.where(y == 0, 1.0, y))  # 0 where y == 0",
}


def safe_div(
    code: str, op: str, focus: tuple[int, int] | None = None, framework: str = "tf"
) -> Fix:
    """Rewrite the op's division on the line to give 0 where the denominator is 0, plus
    an epsilon variant.

    TensorFlow has `tf.math.divide_no_nan` (its gradient is finite at 0 too); PyTorch
    has none, so its division is written with the double `where`: the denominator is
    swapped for 1 where it is 0 before dividing, so neither the value nor the gradient
    of the discarded branch is inf or NaN.

    Args:
        code: str, the user's line, e.g. "w = a / tf.reduce_sum(a, axis=1)".
        op: str, the division op type ("RealDiv", "Div", "FloorDiv", "Reciprocal", ...).
        focus: where on the line the op was made (`SourceLine.span`).
        framework: the framework the user trains with ("tf" or "torch"): a division
            written as an operator is spelled in it.

    Returns:
        A `safe_div` fix; a generic one when the line has no division to rewrite.
    """
    operands = _operands(code, op, focus)
    if operands is None:
        return Fix("safe_div", _TITLE, _FALLBACK.get(framework, _FALLBACK["tf"]))
    numerator, denominator, start, end, call = operands
    if namespace(call, framework) == "torch":
        kept = grouped(denominator)
        safe = (
            f"torch.where({kept} == 0, 0.0, "
            f"{grouped(numerator)} / torch.where({kept} == 0, 1.0, {kept}))"
        )
    else:
        safe = f"{spell(call, 'divide_no_nan')}({numerator}, {denominator})"
    if op == "FloorDiv":
        safe = f"{spell(call, 'floor', framework)}({safe})"
    epsilon = f"{numerator} / ({denominator} + 1e-12)"
    lines = [
        replace_span(code, start, end, safe),
        "# or, for a denominator that is never negative, keep it away from 0:",
        replace_span(code, start, end, epsilon),
    ]
    return Fix("safe_div", _TITLE, "\n".join(lines), rewrite=(lines[0],))


def _operands(
    code: str, op: str, focus: tuple[int, int] | None
) -> tuple[str, str, int, int, Call | None] | None:
    """Numerator, denominator and span of the op's division on the line."""
    call = find_call(code, call_names(op), focus)
    if call is not None and call.args:
        if op in ("Reciprocal", "Inv"):
            return "1.0", call.args[0], call.start, call.end, call
        if len(call.args) > 1:
            return call.args[0], call.args[1], call.start, call.end, call
    binary = find_binary(code, "//" if op == "FloorDiv" else "/", focus)
    if binary is None:
        return None
    return binary.left, binary.right, binary.start, binary.end, None
