"""Finite gradients whose global norm overflows: the update itself would write inf or NaN.

Every gradient can be finite while the sum of their squares is not (each value above
~1.8e19 in float32). Adam and RMSprop square the gradients into their second moments,
and clipping by the global norm divides by that infinite norm (Keras and TensorFlow
return NaN then): the update would write non-finite weights. The guard therefore skips
such a step, and the replay measures the norm in float64.
"""

from __future__ import annotations

import math

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix, NotFix, Origin
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.rewrites.exp import clip_blown_up_exps
from gradient_doctor.core.knowledge.rules.exploding_gradients import norm_growth
from gradient_doctor.core.knowledge.wording import at_step, format_number, other_blowups

CLIP_VALUE = Fix(
    "clip_by_value",
    "Clip each gradient value (clipvalue), which needs no norm",
    "optimizer = keras.optimizers.Adam(learning_rate=1e-4, clipvalue=1.0)",
)
GLOBAL_NORM_CLIPPING = NotFix(
    "gradient_clipping",
    "Clipping by the global norm (global_clipnorm, tf.clip_by_global_norm) divides by a "
    "norm that is itself infinite in float32: Keras and TensorFlow then return NaN "
    "gradients. Clip each value instead (clipvalue), or stop the growth.",
)


TORCH_CLIP_VALUE = Fix(
    "clip_by_value",
    "Clip each gradient value (clip_grad_value_), which needs no norm",
    "torch.nn.utils.clip_grad_value_(model.parameters(), clip_value=1.0)  # before step()",
)
TORCH_GLOBAL_NORM_CLIPPING = NotFix(
    "gradient_clipping",
    "clip_grad_norm_ squares the gradients to take their norm: past 1.8e19 in float32 the "
    "norm is inf, and every gradient is scaled by max_norm / inf = 0, so the update moves "
    "nothing, now and at every such step. Clip each value instead (clip_grad_value_), or "
    "stop the growth.",
    structural=True,
)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a step whose finite gradients had a global norm beyond float32 (or, in
    PyTorch, a value whose square is); else decline."""
    norm = evidence.overflowed_norm
    if norm is None:
        return None
    if evidence.setup.framework == "torch":
        return _torch(evidence, norm)
    explanation = (
        f"Every gradient{at_step(evidence.step)} was finite, but their global norm was "
        f"{format_number(norm)}: its square overflows float32 (above 3.4e38). "
        + _what_the_update_would_do(evidence.setup)
    ) + _largest(evidence.origin)
    explanation += _growth_note(evidence) + _blowup_note(evidence)
    fixes = (
        clip_blown_up_exps(evidence.forward_blowup, evidence.setup.framework),
        remedies.lower_learning_rate(evidence.setup),
        CLIP_VALUE,
        remedies.better_init(evidence.setup.framework),
        remedies.batch_normalization("each hidden layer", evidence.setup.framework),
    )
    return Diagnosis(
        "exploding_gradients",
        explanation,
        (GLOBAL_NORM_CLIPPING,),
        tuple(fix for fix in fixes if fix is not None),
    )


# Keras optimizers that keep no square of the gradients: their update is the gradient
# times the rate (with momentum), finite however large the gradients are.
_NO_SQUARES = frozenset({"SGD", "Lion"})


def _what_the_update_would_do(setup) -> str:
    """What applying such gradients would do with the user's optimizer: NaN weights where
    it clips by their norm; frozen weights where it keeps their squares (an inf square
    makes every later update 0: the loss stalls, finite, as RMSprop's did at 1.4e26);
    else weights moved by about the rate times gradients past 1e19, which no training
    comes back from."""
    if setup.optimizer in _NO_SQUARES and not setup.clipping:
        return (
            f"{setup.optimizer} keeps no square of the gradients, so its update would have "
            "stayed finite, but it would have moved the weights by the learning rate times "
            "gradients past 1e19: the loss and the weights run to astronomical values that "
            "training does not come back from (finite, so nothing stops it). The update was "
            "skipped."
        )
    if setup.clipping:
        return (
            "Clipping by the norm divides the gradients by their norm, which is inf: the "
            "update would have written NaN into the weights; it was skipped."
        )
    return (
        "Adam and RMSprop keep the squares of the gradients: those squares would be inf, "
        "and every later update of their weights 0 (the average gradient over the root of "
        "inf), so the weights would stop training for good with every value finite (or "
        "turn NaN where a gradient was inf too); the update was skipped."
    )


def _torch(evidence: Evidence, largest: float) -> Diagnosis:
    """PyTorch's side: the optimizers that keep the squares of the gradients (Adam,
    AdamW, RMSprop, Adagrad) square each value, and a square past the dtype is inf for
    good; `clip_grad_norm_` squares them too, and scales by 0 where its norm is inf."""
    origin = evidence.origin
    stats = origin.inputs[0] if origin is not None and origin.inputs else None
    dtype = stats.dtype if stats is not None else "float32"
    whose = f" of `{origin.variable}`" if origin is not None and origin.variable else ""
    module = f" (module `{origin.layer}`)" if origin is not None and origin.layer else ""
    explanation = (
        f"Every gradient{at_step(evidence.step)} was finite, but a value of the gradient"
        f"{whose}{module} reached {format_number(largest)}: its square overflows {dtype}. "
        "Adam, AdamW and RMSprop keep the squares of the gradients: that parameter's would "
        "be inf, and every later update of it 0 (the average gradient over the root of "
        "inf), so it would stop training for good with every value finite."
    )
    explanation += _growth_note(evidence) + _blowup_note(evidence)
    fixes = (
        clip_blown_up_exps(evidence.forward_blowup, evidence.setup.framework),
        TORCH_CLIP_VALUE,
        remedies.lower_learning_rate(evidence.setup),
        remedies.better_init("torch"),
    )
    return Diagnosis(
        "exploding_gradients",
        explanation,
        (TORCH_GLOBAL_NORM_CLIPPING,),
        tuple(fix for fix in fixes if fix is not None),
    )


def _growth_note(evidence: Evidence) -> str:
    """ " The gradient norm grew from 2 at step 1 to 3866 at step 6: ..." when it grew
    so over the history, else ""."""
    growth = norm_growth(evidence.history)
    if growth is None:
        return ""
    return (
        f" The gradient norm grew from {format_number(growth.low)} at step "
        f"{growth.low_step} to {format_number(growth.peak)} at step {growth.peak_step}: "
        "the gradients are exploding."
    )


def _largest(origin: Origin | None) -> str:
    """The sentence naming the largest gradient's variable, its layer and the line that
    created it: " The largest is the gradient of `dense/kernel` (layer `dense`, created
    at train.py:12), up to 2.3e+21." ("" when the origin names no variable)."""
    if origin is None or origin.variable is None:
        return ""
    where = []
    if origin.layer:
        where.append(f"layer `{origin.layer}`")
    if origin.source is not None and origin.source_kind == "layer_creation":
        where.append(f"created at {origin.source.file}:{origin.source.line}")
    place = f" ({', '.join(where)})" if where else ""
    largest = origin.inputs[0].largest_magnitude if origin.inputs else None
    size = f", up to {format_number(largest)}" if largest is not None else ""
    return f" The largest is the gradient of `{origin.variable}`{place}{size}."


def _blowup_note(evidence: Evidence) -> str:
    """ " The gradients were that large because the forward pass was: ..." naming the op
    and line where the step's forward values first grew past 1e6, when the replay saw
    where; else ""."""
    if not evidence.forward_blowup:
        return ""
    first = evidence.forward_blowup[0]
    fed = max((s.largest_magnitude or 0.0 for s in first.inputs), default=0.0)
    reached = max((s.largest_magnitude or 0.0 for s in first.outputs), default=0.0)
    loss = evidence.step_loss
    loss_note = (
        f" (the step's loss was {format_number(loss)})"
        if loss is not None and math.isfinite(loss)
        else ""
    )
    return (
        " The gradients were that large because the forward pass was"
        f"{loss_note}: its values first grew past 1e6 at {first.op} "
        f"({first.source.file}:{first.source.line}), from inputs up to {format_number(fed)} "
        f"to {format_number(reached)}, and the gradients of what such values feed are as "
        f"large.{other_blowups(evidence.forward_blowup)}"
    )
