"""Exp-like ops (Exp, Expm1, Cosh, Sinh, Pow) whose result overflowed the dtype's range."""

from __future__ import annotations

import math
from dataclasses import replace

from gradient_doctor.core.dtype_limits import HALF_PRECISION
from gradient_doctor.core.evidence import Evidence, Reduction
from gradient_doctor.core.findings import Edit, Fix, Origin
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import (
    framework_of,
    input_at,
    largest_magnitude,
    limits_of,
    origin_dtype,
    outputs_inf,
    source_code,
    source_focus,
)
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.remedies.not_fixes import forward_not_fixes
from gradient_doctor.core.knowledge.rewrites.exp import (
    clip_exp_input,
    library_form,
    logsumexp_over_lines,
    looks_like_softmax,
    stable_logsumexp,
    stable_softmax,
)
from gradient_doctor.core.knowledge.rules.domain_rule import (
    BY_DESIGN_SHARE,
    Domain,
    diagnose_domain,
    output_share,
)
from gradient_doctor.core.knowledge.source.call_names import call_names
from gradient_doctor.core.knowledge.wording import explain_input, format_number, from_data_note

OPS = frozenset({"Exp", "Expm1", "Cosh", "Sinh", "Pow"})
_EXP_LIKE = frozenset({"Exp", "Expm1"})


# A negative base to a non-integer power: Pow's own domain, where it writes NaN, not inf.
_POW_DOMAIN = Domain(
    "a negative base raised to a non-integer power is NaN",
    "clip_input_domain",
    "Keep the base of the power positive",
    boundary=0,
    signed=True,
)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a forward overflow of an exp-like op (or Pow's NaN domain); decline others."""
    origin = evidence.origin
    if origin is None or evidence.phase != "forward":
        return None
    base = input_at(origin, 0)
    if origin.op == "Pow" and not outputs_inf(origin) and base and (base.min or 0.0) < 0:
        return diagnose_domain(evidence, _POW_DOMAIN)
    if not outputs_inf(origin):
        return None
    code = source_code(evidence)
    upstream = evidence.weights_upstream
    return Diagnosis(
        category="forward_overflow",
        explanation=explain(origin, evidence.step)
        + scaled_note(evidence)
        + summed_note(evidence.reduction)
        + from_data_note(upstream),
        not_fixes=forward_not_fixes(f"the overflow in {origin.reported_op}", upstream),
        fixes=_fixes(evidence, code),
    )


def explain(origin: Origin, step: int | None) -> str:
    """Say how far the input went and where the dtype's limit is."""
    limits = limits_of(origin)
    dtype = origin_dtype(origin)
    base = input_at(origin, 0)
    if origin.op == "Pow":
        exponent = input_at(origin, 1)
        power = f" with exponent up to {format_number(exponent.max)}" if exponent else ""
        reached = f"{format_number(largest_magnitude(base))}{power}"
        rule = f"{dtype} values overflow above {format_number(limits.max)}"
        return explain_input(origin, step, "The base of", reached, rule)
    if origin.op in _EXP_LIKE:
        reached, limit = (base.max if base else None), limits.exp_limit
        subject = "The input to"
    else:
        reached, limit = largest_magnitude(base), limits.exp_limit + math.log(2.0)
        subject = "The magnitude of the input to"
    rule = f"{dtype} {origin.op.lower()} overflows above {format_number(limit)}"
    return explain_input(origin, step, subject, format_number(reached), rule)


def scaled_note(evidence: Evidence) -> str:
    """ " Its input was divided by 0.005 at train.py:22 ..." when a constant factor scaled
    the exp's input up past its limit from values that stayed below it (a temperature);
    else ""."""
    scaled = evidence.scaled_up
    origin = evidence.origin
    if scaled is None or origin.op not in _EXP_LIKE:
        return ""
    call, factor, before = scaled
    limit = limits_of(origin).exp_limit
    if before <= 0 or before > limit:
        return ""
    source = call.source
    how = (
        f"divided by {format_number(1.0 / factor)}"
        if call.op in ("RealDiv", "Div")
        else f"multiplied by {format_number(factor)}"
    )
    least = f"a divisor of at least {format_number(before / limit)}"
    if call.op == "Mul":
        least = f"a factor of at most {format_number(limit / before)}"
    return (
        f" Its input was {how} at {source.file}:{source.line} (a temperature), which takes "
        f"values of magnitude up to {format_number(before)} to {format_number(factor * before)}"
        f": {least} keeps the exp finite, or compute the loss from the scaled values with "
        "logsumexp (a cross-entropy over them), which needs no exp of its own."
    )


# The largest magnitude of values a normalisation bounds (a cosine), with rounding.
_UNIT = 1.0 + 1e-3


def _scaled_past_the_limit(evidence: Evidence) -> bool:
    """True when a constant factor (a temperature) took the exp's input past its limit
    from values of magnitude at most `_UNIT` (cosines of normalised embeddings): bounded
    by construction, whatever the weights and the data, so bounding or standardising
    them is not what keeps the exp finite. (Scores that trained weights grew to 15 before
    a factor of 6 are another matter: bounded weights keep them small.)"""
    scaled, origin = evidence.scaled_up, evidence.origin
    if scaled is None or origin.op not in _EXP_LIKE:
        return False
    return 0 < scaled[2] <= _UNIT


def summed_note(reduction: Reduction | None) -> str:
    """ " Its values are then summed per segment of `ids` (...)" when the replay saw the sum.

    Says which groups a max-shift must respect: the axis, the segments, the mask.
    """
    if reduction is None:
        return ""
    if reduction.kind == "axis":
        groups = f"along axis {reduction.axis}"
    else:
        groups = f"per segment of `{reduction.segment_ids}`"
    if reduction.mask is not None:
        how = "kept where" if reduction.mask_is_condition else "masked by"
        groups = f"{how} `{reduction.mask}` and summed {groups}"
    else:
        groups = f"summed {groups}"
    where = []
    if reduction.function and reduction.source is not None:  # the user's own call, read there
        where = [f"`{reduction.function}`", f"line {reduction.source.line}"]
    return f" Its values are then {groups}" + (f" ({', '.join(where)})." if where else ".")


def _fixes(evidence: Evidence, code: str) -> tuple[Fix, ...]:
    """Most specific first: a rewrite of the user's line, then the upstream causes.

    The max-shift is offered only for an exp whose result is normalised by its sum
    (the replay saw the sum, or the line says softmax), and not when a log reads the
    sum (there the shift must be added back: logsumexp, over the two lines when the
    sum and its log are written on two): elsewhere it changes the result.
    """
    origin, reduction = evidence.origin, _reduction(evidence)
    names, focus = call_names(origin.op), source_focus(evidence)
    fixes: list[Fix | None] = []
    if origin_dtype(origin) in HALF_PRECISION:
        fixes.append(remedies.float32_island(code, names, focus, evidence.setup.framework))
    library = library_form(code, focus) if origin.op in _EXP_LIKE else None
    logged = evidence.log_of_sum
    if origin.op in _EXP_LIKE:
        logsumexp = stable_logsumexp(code, focus)
        if logsumexp is None and logged is not None:
            logsumexp = logsumexp_over_lines(code, logged)
        fixes += [logsumexp, library]
        # Under a log of the sum, a max-shift that is not added back changes the result.
        if logged is None and (reduction is not None or looks_like_softmax(code)):
            base = input_at(origin, 0)
            minus_infinity = base is not None and base.neg_inf > 0
            rank = len(origin.outputs[0].shape) if origin.outputs else None
            fixes.append(
                stable_softmax(
                    code,
                    reduction,
                    focus,
                    limits_of(origin),
                    minus_infinity,
                    framework=framework_of(evidence),
                    rank=rank,
                )
            )
    if not _scaled_past_the_limit(evidence):  # else neither weights nor data put it there
        fixes += remedies.upstream_remedies(evidence)
    if library is None:  # the library's version is exact; a clip would only bend it
        clip = clip_exp_input(code, origin.op, limits_of(origin), focus, framework_of(evidence))
        if clip is not None:
            clip = _with_risky_twins(clip, evidence)
            # Each value that overflowed the clip holds at the bound, where its gradient is
            # 0: all of a hand-written InfoNCE's positive pairs, whose attraction it ends.
            share = output_share(origin, "inf")
            if share is not None and share > BY_DESIGN_SHARE:
                clip = replace(clip, clamped_share=share)
        fixes.append(clip)
    return tuple(fix for fix in fixes if fix is not None)


def _with_risky_twins(clip: Fix, evidence: Evidence) -> Fix:
    """The clip of the origin's line with the step's other calls of the same op on other
    lines of the user's, whose input went past the limit too, clipped alike (one edit
    each): a hand-written NT-Xent's `exp(diag(sim))` and `exp(sim)` overflow together,
    and a copy with one clipped fails at the other."""
    origin, limits = evidence.origin, limits_of(evidence.origin)
    here = (origin.source.file, origin.source.line) if origin.source else None
    edits, lines = [], {here}
    for call in evidence.same_op_calls:
        source, stats = call.source, call.inputs[0] if call.inputs else None
        place = (source.file, source.line)
        risky = stats is not None and stats.max is not None and stats.max > limits.exp_limit
        if not risky or place in lines or call.op != origin.op or source.end_line is not None:
            continue
        code = source.code.strip() if source.code else ""
        twin = clip_exp_input(code, call.op, limits, source.span, framework_of(evidence))
        if twin is None or not twin.rewrite or twin.rewrite[0] == code:
            continue
        lines.add(place)
        edits.append(Edit(source.file, source.line, source.line, twin.rewrite, (code,)))
    if not edits:
        return clip
    also = ", ".join(f"{edit.file}:{edit.line}" for edit in edits)
    return replace(
        clip,
        title=f"{clip.title}; and at {also}, where it went past the limit too",
        code="\n".join([clip.code, *(edit.new_lines[0] for edit in edits)]),
        edits=tuple(edits),
    )


def _reduction(evidence: Evidence) -> Reduction | None:
    """How the origin's output is summed next: the replay's reduction, else the axis
    alone (all a headroom warning knows), else None."""
    if evidence.reduction is not None:
        return evidence.reduction
    if evidence.reduction_axis is None:
        return None
    return Reduction("axis", "Sum", axis=evidence.reduction_axis)
