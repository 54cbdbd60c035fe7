"""Ops whose results passed the small range of float16 or bfloat16 (65504 for float16)."""

from __future__ import annotations

from gradient_doctor.core.dtype_limits import HALF_PRECISION, dtype_limits
from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import (
    origin_dtype,
    outputs_inf,
    source_code,
    source_focus,
)
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.remedies.not_fixes import forward_not_fixes
from gradient_doctor.core.knowledge.rules.overflow_generic import explain
from gradient_doctor.core.knowledge.source.call_names import call_names
from gradient_doctor.core.knowledge.wording import format_number, from_data_note


def applies(evidence: Evidence) -> bool:
    """True when the origin computed in half precision and wrote an infinity."""
    origin = evidence.origin
    return origin is not None and origin_dtype(origin) in HALF_PRECISION and outputs_inf(origin)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a half-precision overflow; decline in other dtypes."""
    origin = evidence.origin
    if origin is None or not applies(evidence):
        return None
    island = remedies.float32_island(
        source_code(evidence),
        call_names(origin.op),
        source_focus(evidence),
        evidence.setup.framework,
    )
    dtype = origin_dtype(origin)
    if evidence.phase == "forward":
        wide = format_number(dtype_limits("float32").max)
        explanation = explain(origin, evidence.step, "values")
        upstream = evidence.weights_upstream
        return Diagnosis(
            category="forward_overflow",
            explanation=f"{explanation} In float32 the limit would be {wide}."
            + from_data_note(upstream),
            not_fixes=forward_not_fixes(f"the {dtype} overflow in {origin.reported_op}", upstream),
            fixes=(island, *remedies.upstream_remedies(evidence)),
        )
    explanation = explain(origin, evidence.step, "gradients")
    return Diagnosis(
        category="exploding_gradients",
        explanation=f"{explanation} Dynamic loss scaling skips such steps and lowers the scale.",
        not_fixes=(),
        fixes=(remedies.loss_scaling(evidence.setup.framework), island),
    )
