"""Rewrite a vector norm on the user's line so that its gradient is finite at zero."""

from __future__ import annotations

from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.source.calls import Call, find_call, find_calls, replace_span
from gradient_doctor.core.knowledge.source.operands import risky_operand
from gradient_doctor.core.knowledge.source.operators import find_binary
from gradient_doctor.core.knowledge.source.spelling import fill, reduce_keywords, spell

_TITLE = "Compute the norm with an epsilon inside the square root (finite gradient at zero)"
_FALLBACK = "norm = tf.sqrt(tf.reduce_sum(tf.square(x), axis=-1) + 1e-12)"
_EUCLIDEAN = ("None", "2", "2.0", "'euclidean'", '"euclidean"', "'fro'", '"fro"')


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
    """The rewrite behind `safe_norm`: the norm at `focus`, and every other Euclidean
    norm of the line with it (`cos = dot / (norm(u) * norm(v))` has two, and either
    may be of a zero vector: rooting one leaves the other's NaN gradient)."""
    call = find_call(code, ("norm",), focus)
    tensor = None if call is None else _tensor(call)
    if call is None or tensor is None:
        operand = risky_operand(code, "Sqrt", focus) if mentions_norm(code) else None
        if operand is None:
            return None
        rewritten = operand.replaced(code, f"{operand.text} + 1e-12")
        return Fix("safe_norm", _TITLE, rewritten, rewrite=(rewritten,))
    if not _euclidean(call):
        return None
    others = [
        other
        for other in find_calls(code, ("norm",))
        if other.start != call.start and _euclidean(other) and _tensor(other) is not None
    ]
    rooted = [call] + [
        other
        for other in others
        # One not nested in another rooted call (its text is rewritten with that one).
        if not any(o.start < other.start and other.end <= o.end for o in [call, *others])
    ]
    rewritten = code
    for one in sorted(rooted, key=lambda c: c.start, reverse=True):
        rewritten = replace_span(rewritten, one.start, one.end, _rooted(one))
    lines = [rewritten]
    options = _options(call)
    division = find_binary(code, "/")
    if len(rooted) == 1 and division and division.right == call.text and division.left == tensor:
        normalize = (
            f"{spell(call, 'l2_normalize')}({tensor}{options.replace(', keepdims=True', '')})"
        )
        lines += [
            "# or, for x / norm(x):",
            replace_span(code, division.start, division.end, normalize),
        ]
    return Fix("safe_norm", _TITLE, "\n".join(lines), rewrite=(lines[0],))


def _tensor(call: Call) -> str | None:
    """The tensor a norm call takes (`tf.norm(tensor)`, `torch.norm(input)`,
    `torch.linalg.norm(A)`)."""
    return next(
        (arg for keyword in ("tensor", "x", "input", "A") if (arg := call.argument(0, keyword))),
        None,
    )


def _euclidean(call: Call) -> bool:
    """Whether a norm call computes the Euclidean norm: its order (`ord`, PyTorch's `p`)
    left as it is, or 2."""
    order = call.argument(1, "ord") or dict(call.kwargs).get("p") or "None"
    return order.replace(" ", "") in _EUCLIDEAN


def _options(call: Call) -> str:
    """The call's axis and keeping of it, as keywords to pass on, in its framework's
    words (`dim=`, `keepdim=` for PyTorch's; `axis=`, `keepdims=` elsewhere)."""
    axis, keep = reduce_keywords(call)
    return "".join(
        f", {keyword}={value}"
        for keyword, position in ((axis, 2), (keep, 3))
        if (value := call.argument(position, keyword)) is not None
    )


def _rooted(call: Call) -> str:
    """The norm call written as a square root of the summed squares plus an epsilon."""
    return fill("{sqrt}({sum}({square}({arg})" + _options(call) + ") + 1e-12)", call, _tensor(call))
