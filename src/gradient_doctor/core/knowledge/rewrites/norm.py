"""Rewrite a vector norm on the user's line so that its gradient is finite at zero."""

from __future__ import annotations

from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.source.calls import find_call, replace_span
from gradient_doctor.core.knowledge.source.operands import risky_operand
from gradient_doctor.core.knowledge.source.operators import find_binary
from gradient_doctor.core.knowledge.source.spelling import fill, spell

_TITLE = "Compute the norm with an epsilon inside the square root (finite gradient at zero)"
_FALLBACK = "norm = tf.sqrt(tf.reduce_sum(tf.square(x), axis=-1) + 1e-12)"
_EUCLIDEAN = ("None", "2", "'euclidean'", '"euclidean"', "'fro'", '"fro"')


def mentions_norm(code: str) -> bool:
    """True when the line computes or names a norm."""
    return "norm" in code.lower()


def safe_norm(
    code: str, required: bool = False, focus: tuple[int, int] | None = None
) -> Fix | None:
    """Replace a Euclidean `norm(x, axis=...)` by `sqrt(sum(square(x), axis=...) + 1e-12)`.

    A line that names a norm but computes it with an explicit square root gets the
    epsilon added inside that root instead.

    Args:
        code: str, the user's line, e.g. "gp = tf.reduce_mean((tf.norm(g, axis=1) - 1.0) ** 2)".
        required: bool, return a generic fix rather than None when the line has no
            norm to rewrite. Defaults to False.
        focus: where on the line the op was made (`SourceLine.span`), to pick the
            right one of several norms.

    Returns:
        A `safe_norm` fix, or None when the line has no norm to rewrite.
    """
    fix = _rewrite(code, focus)
    if fix is None and required:
        return Fix("safe_norm", _TITLE, _FALLBACK)
    return fix


def _rewrite(code: str, focus: tuple[int, int] | None) -> Fix | None:
    """The rewrite behind `safe_norm`."""
    call = find_call(code, ("norm",), focus)
    tensor = None if call is None else call.argument(0, "tensor") or call.argument(0, "x")
    if call is None or tensor is None:
        operand = risky_operand(code, "Sqrt", focus) if mentions_norm(code) else None
        if operand is None:
            return None
        rewritten = operand.replaced(code, f"{operand.text} + 1e-12")
        return Fix("safe_norm", _TITLE, rewritten, rewrite=(rewritten,))
    if (call.argument(1, "ord") or "None") not in _EUCLIDEAN:
        return None
    options = "".join(
        f", {keyword}={value}"
        for keyword, position in (("axis", 2), ("keepdims", 3))
        if (value := call.argument(position, keyword)) is not None
    )
    norm = fill("{sqrt}({sum}({square}({arg})" + options + ") + 1e-12)", call, tensor)
    lines = [replace_span(code, call.start, call.end, norm)]
    division = find_binary(code, "/")
    if division and division.right == call.text and division.left == tensor:
        normalize = (
            f"{spell(call, 'l2_normalize')}({tensor}{options.replace(', keepdims=True', '')})"
        )
        lines += [
            "# or, for x / norm(x):",
            replace_span(code, division.start, division.end, normalize),
        ]
    return Fix("safe_norm", _TITLE, "\n".join(lines), rewrite=(lines[0],))
