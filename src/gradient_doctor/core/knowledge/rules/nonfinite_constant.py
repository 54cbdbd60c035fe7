"""An op that read a non-finite value no op of the step made: a constant its dtype cannot
hold (an overflow), or a value computed before the step that already held it (bad input).

The classic case is an attention mask written `scores + (1 - mask) * -1e9` under
mixed precision: -1e9 does not fit float16 (largest 65504), so the constant is
already -inf before any op runs, and `0 * -inf` makes NaN of every kept score.
"""

from __future__ import annotations

import re
from dataclasses import replace

from gradient_doctor.core.dtype_limits import HALF_PRECISION, dtype_limits
from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import source_code, source_focus
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.remedies.not_fixes import forward_not_fixes
from gradient_doctor.core.knowledge.source.call_names import call_names
from gradient_doctor.core.knowledge.wording import (
    at_step,
    format_number,
    nonfinite_counts,
    op_place,
)

# A number written on the user's line (no sign: the sign is kept as written).
_LITERAL = re.compile(r"(?<![\w.])(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)(?![\w.])")
_NO_WEIGHTS = (
    "The constant is non-finite whatever the weights are: the learning rate cannot change it."
)
# What a mask constant becomes in a dtype that cannot hold it: ample for a softmax
# (exp(-1e4) is 0) and far inside float16's range.
_HALF_SAFE = "1e4"


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain an op whose non-finite input came from no op of the step; decline others."""
    origin = evidence.origin
    if not evidence.nonfinite_constant or origin is None:
        return None
    bad = [stats for stats in origin.inputs if not stats.finite]
    dtype = bad[0].dtype if bad else (origin.inputs[0].dtype if origin.inputs else "float32")
    kind = _kind(bad)
    code = source_code(evidence)
    limit = dtype_limits(dtype).max
    literal = too_large_literal(code, limit)
    if literal is not None:
        cause = (
            f"the number {literal} on your line does not fit {dtype} (its largest value is "
            f"{format_number(limit)}), so it became {kind} when it was converted"
        )
    else:
        cause = "a constant, or a tensor computed before the step, that already held it"
    explanation = (
        f"{op_place(origin)}{at_step(evidence.step)} read a {dtype} input that was already "
        f"{kind} before any op of the step made it: {cause}. {origin.reported_op} then wrote "
        f"{nonfinite_counts(origin)}."
    )
    if literal is None:  # data the step was given, made before it: make it finite there
        explanation += (
            " Make that value finite where it was computed: an inf there usually comes from "
            "a division by zero (a count or a norm of 0, which NumPy only warns about), a NaN "
            "from 0/0 or the log of a negative number."
        )
    fixes: list[Fix | None] = [_safe_constant(code, literal, dtype, limit)]
    if dtype in HALF_PRECISION:
        fixes.append(
            remedies.float32_island(
                code, call_names(origin.op), source_focus(evidence), evidence.setup.framework
            )
        )
    return Diagnosis(
        # A number its dtype cannot hold overflowed as it was converted; any other value
        # was non-finite before the step: bad input, as a broken weight is.
        category="forward_overflow" if literal is not None else "bad_input",
        explanation=explanation,
        not_fixes=tuple(
            replace(item, why=_NO_WEIGHTS, structural=True)
            if item.remedy == "lower_learning_rate"
            else item
            for item in forward_not_fixes(f"the {kind} constant read by {origin.reported_op}")
        ),
        fixes=tuple(fix for fix in fixes if fix is not None),
    )


def too_large_literal(code: str, limit: float) -> str | None:
    """The first number written on `code` whose magnitude exceeds `limit`, as written."""
    for match in _LITERAL.finditer(code):
        try:
            value = float(match.group(1))
        except ValueError:
            continue
        if value > limit:
            return match.group(1)
    return None


def _safe_constant(code: str, literal: str | None, dtype: str, limit: float) -> Fix | None:
    """Write the too-large number as one the dtype holds (the sign stays as written)."""
    if literal is None:
        return None
    safe = _HALF_SAFE if dtype in HALF_PRECISION and limit < 1e5 else f"{limit / 10:.0e}"
    rewritten = re.sub(rf"(?<![\w.]){re.escape(literal)}(?![\w.])", safe, code, count=1)
    return Fix(
        "dtype_safe_constant",
        f"Write the constant as a value {dtype} can hold",
        f"{rewritten}  # {literal} is out of {dtype}'s range",
        rewrite=(rewritten,),
    )


def _kind(bad) -> str:
    """ "-inf", "inf" or "NaN": what the non-finite input held."""
    if any(stats.nan for stats in bad):
        return "NaN"
    if bad and all(stats.neg_inf and not stats.pos_inf for stats in bad):
        return "-inf"
    return "inf"
