"""Rewrite a division on the user's line so that a zero denominator gives 0, not inf or NaN."""

from __future__ import annotations

from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.source.call_names import call_names
from gradient_doctor.core.knowledge.source.calls import Call, find_call, replace_span
from gradient_doctor.core.knowledge.source.operators import find_binary
from gradient_doctor.core.knowledge.source.spelling import spell

_TITLE = "Divide safely: the result is 0 where the denominator is 0"
_FALLBACK = "z = tf.math.divide_no_nan(x, y)  # 0 where y == 0"


def safe_div(code: str, op: str, focus: tuple[int, int] | None = None) -> Fix:
    """Rewrite the op's division on the line with divide_no_nan, plus an epsilon variant.

    Args:
        code: str, the user's line, e.g. "w = a / tf.reduce_sum(a, axis=1)".
        op: str, the division op type ("RealDiv", "Div", "FloorDiv", "Reciprocal", ...).
        focus: where on the line the op was made (`SourceLine.span`).

    Returns:
        A `safe_div` fix; a generic one when the line has no division to rewrite.
    """
    operands = _operands(code, op, focus)
    if operands is None:
        return Fix("safe_div", _TITLE, _FALLBACK)
    numerator, denominator, start, end, call = operands
    safe = f"{spell(call, 'divide_no_nan')}({numerator}, {denominator})"
    if op == "FloorDiv":
        safe = f"{spell(call, 'floor')}({safe})"
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
