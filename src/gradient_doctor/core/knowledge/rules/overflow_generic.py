"""Arithmetic ops (MatMul, Mul, Add, Square, Conv2D, a squared-error loss, ...) whose finite
inputs gave inf."""

from __future__ import annotations

import dataclasses

from gradient_doctor.core.evidence import Evidence, Reduction
from gradient_doctor.core.findings import Edit, Fix, Origin
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import (
    framework_of,
    limits_of,
    origin_dtype,
    outputs_inf,
)
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.remedies.not_fixes import forward_not_fixes
from gradient_doctor.core.knowledge.rewrites.exp import clip_blown_up_exps, stable_softmax
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
        summed = summed_exp(evidence)
        if summed is not None:
            fix, note = summed
            return Diagnosis(
                category="forward_overflow",
                explanation=explain(origin, evidence.step, "values") + note,
                not_fixes=forward_not_fixes(f"the overflow in {origin.reported_op}", upstream),
                fixes=(fix, *remedies.upstream_remedies(evidence)),
            )
        upstream_fixes = remedies.upstream_remedies(evidence)
        constrain = tuple(f for f in upstream_fixes if f.family == "constrain_weights")
        normalize = tuple(f for f in upstream_fixes if f.family != "constrain_weights")
        # Values that blew up inside a layer: its initial scale is the first suspect.
        init = (remedies.better_init(evidence.setup.framework),) if evidence.growth else ()
        fixes = (
            normalize  # from the batch alone: no weight lies between
            if upstream is False
            else (
                *constrain,
                *init,
                remedies.batch_normalization(origin.op, evidence.setup.framework),
                *normalize,
            )
        )
        # Values an exp of the user's blew up (`exp(log_var)`): its input is the cause.
        clipped = clip_blown_up_exps(evidence.forward_blowup, evidence.setup.framework)
        return Diagnosis(
            category="forward_overflow",
            explanation=explain(origin, evidence.step, "values")
            + growth_note(evidence.growth, evidence.forward_blowup)
            + from_data_note(upstream),
            not_fixes=forward_not_fixes(f"the overflow in {origin.reported_op}", upstream),
            fixes=(clipped, *fixes) if clipped is not None else fixes,
        )
    return Diagnosis(
        category="exploding_gradients",
        explanation=explain(origin, evidence.step, "gradients"),
        not_fixes=(),
        fixes=exploding_fixes(evidence),
    )


def summed_exp(evidence: Evidence) -> tuple[Fix, str] | None:
    """For a sum that overflowed adding up an exp's finite values (a softmax's or a
    contrastive loss's denominator, `reduce_sum(exp(sim), axis=1)` with each value near
    the limit), the exp's line shifted by the maximum along the summed axis (which the
    ratio of an exp to its sum, and a log of it plus the shift, do not change), and
    the note saying so; None for any other sum, or an exp no user's line called."""
    origin = evidence.origin
    producer = evidence.input_producers[0] if evidence.input_producers else None
    if origin.op != "Sum" or producer is None or producer.op != "Exp":
        return None
    source = producer.source
    code = source.code.strip() if source.code else ""
    axis = summed_axis(origin)
    if producer.source_kind != "op" or not code or axis is None or source.end_line is not None:
        return None
    shifted = stable_softmax(
        code,
        Reduction("axis", "Sum", axis=axis),
        source.span,
        limits_of(origin),
        framework=framework_of(evidence),
        rank=len(origin.inputs[0].shape),
    )
    if not shifted.rewrite or shifted.rewrite[0] == code:
        return None
    edit = Edit(source.file, source.line, source.line, shifted.rewrite, (code,))
    note = (
        f" It sums along axis {axis} the exp of {source.file}:{source.line}, each of whose "
        "values was finite: a softmax's (or log-sum-exp's) denominator. Shifted by its "
        "maximum along that axis, the exp's largest value is 1 and the sum stays finite; "
        "the ratio of an exp to its sum does not change."
    )
    return dataclasses.replace(shifted, rewrite=(), edits=(edit,)), note


def summed_axis(origin: Origin) -> int | None:
    """The one axis a sum reduced: its axis input when that holds one integer (a
    TensorFlow `Sum`'s), else from its input's and output's shapes (kept as 1 or
    dropped); None when that is not one axis that can be told."""
    if not origin.inputs or not origin.outputs:
        return None
    before, after = origin.inputs[0].shape, origin.outputs[0].shape
    axes = origin.inputs[1] if len(origin.inputs) > 1 else None
    if (
        axes is not None
        and axes.dtype.startswith("int")
        and axes.shape in ((), (1,))
        and axes.min is not None
        and axes.min == axes.max
        and -len(before) <= axes.min < len(before)
    ):
        return int(axes.min) % len(before)
    if None in before or None in after:
        return None
    found = [
        axis
        for axis in range(len(before))
        if before[:axis] + before[axis + 1 :] == after
        or (len(after) == len(before) and after == before[:axis] + (1,) + before[axis + 1 :])
    ]
    return found[0] if len(found) == 1 and before[found[0]] > 1 else None


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
