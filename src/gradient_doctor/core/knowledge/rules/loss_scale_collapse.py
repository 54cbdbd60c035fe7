"""Mixed precision's loss scale lowered to the gradients' true size while they stay non-finite.

A loss-scaling optimizer multiplies the loss by a scale so that float16 gradients
do not underflow, and on a step whose gradients overflow it skips the update and
halves the scale. Those skipped steps are normal while the scale settles. Once the
scale is down to `COLLAPSED_LOSS_SCALE` the gradients are at (or below) their true
size, so an overflow is no longer the scale's doing. Keras 3 sets no floor: it goes
on halving the scale and skipping updates until float16 flushes the scaled gradients
to zero, and training then runs on without learning and without a word.
"""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence, TrainingSetup
from gradient_doctor.core.findings import NotFix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import limits_of, origin_dtype, source_code, source_focus
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.source.call_names import call_names
from gradient_doctor.core.knowledge.wording import (
    at_step,
    format_number,
    nonfinite_counts,
    op_place,
    value_range,
)

# At this scale the gradients are at their true size: below it, scaling only shrinks them.
COLLAPSED_LOSS_SCALE = 1.0


def collapsed(setup: TrainingSetup) -> bool:
    """True when a loss-scaling optimizer has lowered its scale to the collapse mark."""
    return setup.loss_scale is not None and setup.loss_scale <= COLLAPSED_LOSS_SCALE


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain gradients that stay non-finite at a collapsed loss scale; decline otherwise.

    A non-finite loss (a forward-pass origin) is left to the forward rules: loss
    scaling never touches the forward pass.
    """
    if not collapsed(evidence.setup) or evidence.phase == "forward":
        return None
    scale = format_number(evidence.setup.loss_scale)
    explanation = (
        f"The gradients{at_step(evidence.step)} are not finite even with the loss scale "
        f"lowered to {scale}: the LossScaleOptimizer skipped each step whose gradients "
        "overflowed and halved the scale, and at a scale of 1 or less the gradients are at "
        "(or under) their true size, so the overflow is not the scale's doing."
    )
    origin = evidence.origin
    if origin is not None:
        forward_op = f"the gradient of {origin.gradient_of}" if origin.gradient_of else None
        place = op_place(origin, forward_op)
        explanation += (
            f" They first turn non-finite in {place}, which wrote {nonfinite_counts(origin)} "
            f"from inputs ranging {value_range(origin.inputs)}; {origin_dtype(origin)} holds "
            f"at most {format_number(limits_of(origin).max)}."
        )
    explanation += (
        " Keras 3 sets no floor on the scale: left alone it keeps halving it and skipping "
        "those updates; below 1 small float16 gradients flush to zero, and if every step "
        "overflows, the scale falls until all of them do and training goes on without "
        "learning."
    )
    names = call_names(origin.gradient_of or origin.op) if origin is not None else ()
    return Diagnosis(
        category="loss_scale_collapse",
        explanation=explanation,
        not_fixes=(
            NotFix(
                "loss_scaling",
                f"Loss scaling is already on and has lowered the scale to {scale}; lowering "
                "it further only flushes small gradients to zero.",
            ),
            NotFix(
                "gradient_clipping",
                "Clipping acts on the gradients after they are computed in float16, when they "
                "are already infinite; clipping an infinite norm gives NaN.",
            ),
            NotFix(
                "lower_learning_rate",
                "The learning rate scales the update after the gradient is computed; the "
                "overflow happens while computing it.",
            ),
        ),
        fixes=(
            remedies.float32_island(
                source_code(evidence), names, source_focus(evidence), evidence.setup.framework
            ),
            remedies.batch_normalization(
                "the layer whose gradient overflows", evidence.setup.framework
            ),
            remedies.normalize_input(evidence.setup.framework),
        ),
    )
