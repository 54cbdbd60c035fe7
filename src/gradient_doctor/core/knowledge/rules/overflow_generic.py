"""Arithmetic ops (MatMul, Mul, Add, Square, Conv2D, a squared-error loss, ...) whose finite
inputs gave inf."""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Origin
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import limits_of, origin_dtype, outputs_inf
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.remedies.not_fixes import forward_not_fixes
from gradient_doctor.core.knowledge.rules import masked_softmax
from gradient_doctor.core.knowledge.rules.exploding_gradients import exploding_fixes
from gradient_doctor.core.knowledge.wording import (
    at_step,
    format_number,
    from_data_note,
    growth_note,
    nonfinite_counts,
    op_place,
    value_range,
)
from gradient_doctor.core.op_trace import MEETS_A_MASK, REGRESSION_LOSSES

OPS = frozenset(
    {
        "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum",
        "Mul", "Add", "AddV2", "AddN", "Sub", "Sum", "Prod", "Mean", "Cumsum",
        "Square", "SquaredDifference", "BiasAdd", "BiasAddGrad",
        "Conv1D", "Conv2D", "Conv3D", "DepthwiseConv2dNative",
        "Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv3DBackpropInputV2",
        "Conv3DBackpropFilterV2", "DepthwiseConv2dNativeBackpropInput",
        "DepthwiseConv2dNativeBackpropFilter",
        *REGRESSION_LOSSES,
    }
)  # fmt: skip


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain an arithmetic op that overflowed; decline when it wrote no inf."""
    origin = evidence.origin
    if origin is not None and origin.op in MEETS_A_MASK:
        met = masked_softmax.diagnose(evidence)  # -inf - -inf or 0 * -inf: a mask's
        if met is not None:
            return met
    if origin is None or not outputs_inf(origin):
        return None
    if evidence.phase == "forward":
        upstream = evidence.weights_upstream
        constrain, *normalize = remedies.upstream_remedies(evidence)
        # Values that blew up inside a layer: its initial scale is the first suspect.
        init = (remedies.better_init(evidence.setup.framework),) if evidence.growth else ()
        fixes = (
            (
                constrain,
                *init,
                remedies.batch_normalization(origin.op, evidence.setup.framework),
                *normalize,
            )
            if normalize
            else (constrain,)
        )
        return Diagnosis(
            category="forward_overflow",
            explanation=explain(origin, evidence.step, "values")
            + growth_note(evidence.growth)
            + from_data_note(upstream),
            not_fixes=forward_not_fixes(f"the overflow in {origin.reported_op}", upstream),
            fixes=fixes,
        )
    return Diagnosis(
        category="exploding_gradients",
        explanation=explain(origin, evidence.step, "gradients"),
        not_fixes=(),
        fixes=exploding_fixes(evidence),
    )


def explain(origin: Origin, step: int | None, what: str) -> str:
    """Say that finite inputs gave a result past the dtype's largest value.

    Args:
        origin: the op's `Origin`.
        step: int or None, the failing step.
        what: str, "values" in the forward pass, "gradients" in the backward pass.
    """
    place = op_place(
        origin, f"the gradient of {origin.gradient_of}" if origin.gradient_of else None
    )
    return (
        f"{place[0].upper()}{place[1:]}{at_step(step)} wrote {nonfinite_counts(origin)} from "
        f"finite inputs ranging {value_range(origin.inputs)}: the {what} exceeded "
        f"{origin_dtype(origin)}'s largest value {format_number(limits_of(origin).max)}."
    )
