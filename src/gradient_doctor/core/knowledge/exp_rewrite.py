"""Rewrite a line that calls exp so that its input stays below the overflow limit."""

from __future__ import annotations

import math
import re

from gradient_doctor.core.dtype_limits import DtypeLimits
from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.risky_operand import risky_operand
from gradient_doctor.core.knowledge.source_rewrite import (
    assigned_name,
    find_call,
    find_calls,
    is_identifier,
    matching_close,
    replace_span,
)
from gradient_doctor.core.knowledge.spelling import fill, spell
from gradient_doctor.core.knowledge.wording import format_number

_SHIFT_TITLE = "Subtract the maximum before exp (a softmax's result is unchanged)"


def looks_like_softmax(code: str) -> bool:
    """True when the line normalises an exp by its sum, or says softmax."""
    lowered = code.lower()
    return "softmax" in lowered or ("exp(" in lowered and "sum(" in lowered and "/" in code)


def stable_softmax(code: str, axis: int = -1, focus: tuple[int, int] | None = None) -> Fix:
    """Shift the exp's input by its maximum; offer the library softmax for a softmax line.

    Args:
        code: str, the user's line, e.g. "w = tf.exp(scores)" ("" when unknown).
        axis: int, the axis the exp's result is normalised over: the shift must
            be constant along it (a max over another axis changes the softmax).
            Defaults to -1.
        focus: where on the line the exp was made (`SourceLine.span`).

    Returns:
        A `stable_softmax` fix; a generic one when the line has no parsable exp call.
    """
    call = find_call(code, ("exp",), focus)
    if call is None or not call.args:
        return Fix(
            "stable_softmax",
            _SHIFT_TITLE,
            f"x = x - tf.reduce_max(x, axis={axis}, keepdims=True)  # just before exp(x)\n"
            "# or, for a softmax, let the library do it:\n"
            f"probs = tf.nn.softmax(x, axis={axis})",
        )
    arg = call.args[0]
    shift = f"{spell(call, 'max')}({arg}, axis={axis}, keepdims=True)"
    # Shifted inside the call, and inside every exp of the same argument on the line
    # (a softmax written `exp(s) / sum(exp(s))` must shift both), so that no name of
    # the user's is reassigned for the lines after.
    operand = arg if is_identifier(arg) else f"({arg})"
    shifted = code
    for same in reversed([c for c in find_calls(code, ("exp",)) if c.args[:1] == (arg,)]):
        new_call = same.with_argument(0, f"{operand} - {shift}")
        shifted = replace_span(shifted, same.start, same.end, new_call)
    lines = [shifted]
    rewrite = (shifted,)
    if looks_like_softmax(code):
        target = assigned_name(code) or "probs"
        lines += [
            "# or let the library do it:",
            f"{target} = {spell(call, 'softmax')}({arg}, axis={axis})",
        ]
    return Fix("stable_softmax", _SHIFT_TITLE, "\n".join(lines), rewrite=rewrite)


def stable_logsumexp(code: str, focus: tuple[int, int] | None = None) -> Fix | None:
    """Replace log(sum(exp(x))) on the line by logsumexp(x); None when absent.

    `focus` is where on the line the exp was made: the log around it is rewritten.
    """
    log = find_call(code, ("log",), focus)
    inner = find_call(log.args[0], ("reduce_sum", "sum")) if log and log.args else None
    exp = find_call(inner.args[0], ("exp",)) if inner and inner.args else None
    if exp is None or not exp.args:
        return None
    keywords = "".join(f", {key}={value}" for key, value in inner.kwargs)
    axis = f", {inner.args[1]}" if len(inner.args) > 1 else ""
    logsumexp = f"{spell(exp, 'logsumexp')}({exp.args[0]}{axis}{keywords})"
    rewritten = replace_span(code, log.start, log.end, logsumexp)
    return Fix(
        "stable_logsumexp",
        "Compute log(sum(exp(x))) as logsumexp(x), which never overflows",
        rewritten,
        rewrite=(rewritten,),
    )


_ONE = r"1(?:\.0*)?"


def library_form(code: str, focus: tuple[int, int] | None = None) -> Fix | None:
    """Replace a hand-written sigmoid or softplus on the line by the library's own.

    `exp(a) / (1 + exp(a))` and `1 / (1 + exp(-a))` are `sigmoid(a)`;
    `log(1 + exp(a))` and `log1p(exp(a))` are `softplus(a)`. The library versions
    never overflow (sigmoid saturates at 1, softplus(a) tends to a).

    `focus` is where on the line the exp was made (`SourceLine.span`).

    Returns:
        A `library_function` fix, or None when the line has neither pattern.
    """
    call = find_call(code, ("exp",), focus)
    if call is None or len(call.args) != 1:
        return None
    arg, exp = call.args[0].strip(), re.escape(call.text)
    patterns = [  # (regex around the exp call, the argument of the library function)
        (rf"{exp}\s*/\s*\(\s*{_ONE}\s*\+\s*{exp}\s*\)", arg, "sigmoid"),
        (rf"{_ONE}\s*/\s*\(\s*{_ONE}\s*\+\s*{exp}\s*\)", _negated(arg), "sigmoid"),
        (rf"(?<![\w.])(?:[A-Za-z_]\w*\.)*log\(\s*{_ONE}\s*\+\s*{exp}\s*\)", arg, "softplus"),
        (rf"(?<![\w.])(?:[A-Za-z_]\w*\.)*log1p\(\s*{exp}\s*\)", arg, "softplus"),
    ]
    numpy = call.prefix in ("np.", "numpy.")
    for pattern, argument, helper in patterns:
        match = re.search(pattern, code)
        if match is None or argument is None:
            continue
        if helper == "softplus" and numpy:  # numpy has no softplus; logaddexp is one
            replacement = f"np.logaddexp(0.0, {argument})"
        else:
            replacement = f"{spell(call, helper)}({argument})"
        rewritten = replace_span(code, match.start(), match.end(), replacement)
        return Fix(
            "library_function",
            f"Use the library's {helper}, which computes the same without overflowing",
            rewritten,
            rewrite=(rewritten,),
        )
    return None


def _negated(arg: str) -> str | None:
    """`a` for an argument written `-a` (or `-(a)`), else None."""
    if not arg.startswith("-"):
        return None
    inner = arg[1:].strip()
    if inner.startswith("(") and matching_close(inner, 0) == len(inner) - 1:
        return inner[1:-1].strip()
    return inner  # an argument of its own: no brackets needed


def clip_exp_input(
    code: str, op: str, limits: DtypeLimits, focus: tuple[int, int] | None = None
) -> Fix | None:
    """Keep the input of exp, expm1, cosh or sinh below the overflow limit.

    Not offered for a softmax line (the shift is exact there) or a line without such
    a call (a clip placed blindly elsewhere would hide the cause).

    Args:
        code: str, the user's line.
        op: str, the op type: "Exp", "Expm1", "Cosh" or "Sinh".
        limits: the limits of the op's dtype.
        focus: where on the line the op was made (`SourceLine.span`).
    """
    operand = None if looks_like_softmax(code) else risky_operand(code, op, focus)
    if operand is None:
        return None
    bound = format_number(float(math.floor(0.9 * limits.exp_limit)))
    if op in ("Exp", "Expm1"):
        template = f"{{minimum}}({{arg}}, {bound}.0)"
    else:
        template = f"{{clip}}({{arg}}, -{bound}.0, {bound}.0)"
    rewritten = operand.replaced(code, fill(template, operand.call, operand.text))
    return Fix(
        "clip_input_domain",
        f"Keep the input of {op} below {bound} (its gradient is 0 beyond)",
        rewritten,
        rewrite=(rewritten,),
    )
