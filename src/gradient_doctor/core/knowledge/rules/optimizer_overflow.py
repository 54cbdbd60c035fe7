"""The optimizer's own update wrote inf or NaN: its arithmetic left the dtype of its state.

An optimizer computes each update in its variables' dtype. Under the global policy
"float16" the weights are float16, and so are the slots made after them: Adam keeps
each gradient's square in `velocity`, and a gradient past 256 in magnitude squares
past float16's largest value, 65504, to inf. The loss and the gradients (what the
guard checks before an update) are finite, so the update runs; its next one computes
inf - inf there and writes NaN into the weights, and the step after reads them. The
mixed policy keeps the variables, and so the optimizer's state, in float32.
"""

from __future__ import annotations

from gradient_doctor.core.dtype_limits import HALF_PRECISION, dtype_limits
from gradient_doctor.core.evidence import Evidence, StateValues, UpdateOverflow
from gradient_doctor.core.findings import Fix, NotFix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.rewrites.dtype_policy import MIXED_POLICIES
from gradient_doctor.core.knowledge.wording import count, format_number, line_ref, listing

# What each slot of Keras's optimizers holds, by its name beside the weight's.
SLOT_MEANINGS = {
    "velocity": "a running mean of each gradient's square",
    "velocity_hat": "the largest running mean of each gradient's square",
    "accumulator": "the sum of each gradient's squares",
    "momentum": "a running mean of the gradients",
    "average_gradient": "a running mean of the gradients",
}


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain weights the optimizer's update wrote non-finite; decline otherwise."""
    overflow = evidence.update_overflow
    if overflow is None:
        return None
    squared = any(gradient.inf for gradient in overflow.gradients)
    fixes = [guarded_step(overflow)] if overflow.own_step is not None else []
    if overflow.weights[0].dtype in HALF_PRECISION:
        fixes.append(mixed_precision(overflow))
    if squared:
        fixes.append(clip_each_value(overflow))
    else:
        fixes.append(remedies.lower_learning_rate(evidence.setup))
    return Diagnosis(
        category="optimizer_overflow",
        explanation=explain(overflow),
        not_fixes=not_fixes(overflow) if squared else (),
        fixes=tuple(fixes),
    )


def guarded_step(overflow: UpdateOverflow) -> Fix:
    """Guard the arithmetic of the user's own optimizer: its `step` wrote the NaN from
    finite gradients (a division by a root of a sum that is 0 for a parameter whose
    gradients were all 0 so far; torch's own Adagrad and Adam add `eps` there)."""
    site = overflow.own_step
    return Fix(
        "safe_div",
        f"Guard the arithmetic of your {overflow.optimizer}.step ({site.file}:{site.line}): it "
        "wrote NaN from finite gradients. Keep every denominator and root above 0, as torch's "
        "Adagrad and Adam do with eps",
        "update = grad / (state_sum.sqrt() + 1e-10)  # eps in every denominator of step()",
    )


def explain(overflow: UpdateOverflow) -> str:
    """Who wrote the non-finite weights, how the update's arithmetic overflowed (as the
    replay showed it), and that the doctor let those updates through."""
    weights = listing([_counted(w) for w in overflow.weights])
    read = overflow.read_at
    text = (
        f"The NaN that step {read} read in {weights} was written by the optimizer's own "
        f"update at step {overflow.written_at}, not by an op of that step or a call of "
        f"yours: step {overflow.written_at} read those weights finite (its loss and "
        f"gradients were finite), and its {overflow.optimizer} update wrote them."
    )
    dtype = overflow.weights[0].dtype
    if overflow.policy is not None:
        where = f" ({line_ref(overflow.policy_site)})" if overflow.policy_site else ""
        text += (
            f' Under the dtype policy "{overflow.policy}"{where} the weights are {dtype}, and '
            f"so is the optimizer's state kept for them; {dtype} holds at most "
            f"{format_number(dtype_limits(dtype).max)}."
        )
    text += _how(overflow)
    if not overflow.reproduced and overflow.state:
        text += f" The optimizer's state holds NaN or inf as well: {_slots(overflow.state)}."
    text += (
        f" The doctor checks the loss and the gradients before each update; they were finite "
        f"up to step {read - 1}, so those updates were applied, and the weights were already "
        f"NaN when step {read} began."
    )
    return text


def _how(overflow: UpdateOverflow) -> str:
    """What the replay saw the first update that went non-finite do, or ""."""
    if overflow.first_step is None:
        return ""
    slots = [v for v in overflow.first_state if v.weight is not None]
    squared = [g for g in overflow.gradients if g.inf]
    step = overflow.first_step
    saved = f"the state saved before step {overflow.replayed_from}, on {overflow.replayed_on}"
    if overflow.reproduced:
        text = (
            f" Replayed from {saved}, the updates went as in the run (they left the "
            f"weights bit for bit as the run did, NaN at the same entries): at step {step}"
        )
    else:
        text = (
            f" A replay from {saved} (not the run's own batches, so its steps need not be "
            f"the run's) shows how: at step {step}"
        )
    if squared:
        largest = max(squared, key=lambda g: g.largest or 0.0)
        limit = format_number(dtype_limits(largest.dtype).max)
        names = listing([f"`{g.name}`" for g in squared])
        text += (
            f" the gradients of {names} reached {format_number(largest.largest)}, and "
            f"{count(sum(g.inf for g in squared), 'value')} of them square past {limit};"
        )
    written = slots or list(overflow.first_state)
    if written:
        text += f" the update wrote inf or NaN into {_slots(written)}"
        meaning = _meanings(slots, overflow.optimizer)
        text += f" ({meaning})" if meaning else ""
    text += "."
    weights_step = overflow.weights_step
    if weights_step is not None and weights_step > step:
        text += (
            f" At step {weights_step} the update read those values back (inf - inf and "
            "inf / inf are NaN) and wrote NaN into the weights."
        )
    return text


def _counted(values: StateValues) -> str:
    """ "`dense/kernel` (12 NaN of 96)"."""
    parts = [f"{values.nan} NaN" if values.nan else "", f"{values.inf} inf" if values.inf else ""]
    return f"`{values.name}` ({' and '.join(p for p in parts if p)} of {values.size})"


def _slots(slots: tuple[StateValues, ...] | list[StateValues]) -> str:
    """ "`adam/dense_kernel_velocity` (float16, 12 inf of 96; largest finite 65.2)"."""
    described = []
    for values in slots:
        parts = [
            f"{values.nan} NaN" if values.nan else "",
            f"{values.inf} inf" if values.inf else "",
        ]
        largest = (
            f"; largest finite {format_number(values.largest)}"
            if values.largest is not None
            else ""
        )
        counts = " and ".join(p for p in parts if p)
        described.append(f"`{values.name}` ({values.dtype}, {counts} of {values.size}{largest})")
    return listing(described, limit=3)


def _meanings(slots: list[StateValues], optimizer: str) -> str:
    """ "Adam's `velocity` holds a running mean of each gradient's square", or ""."""
    kinds = dict.fromkeys(v.slot for v in slots if v.slot in SLOT_MEANINGS)
    return "; ".join(f"{optimizer}'s `{kind}` holds {SLOT_MEANINGS[kind]}" for kind in kinds)


def mixed_precision(overflow: UpdateOverflow) -> Fix:
    """The mixed policy in place of the half-precision one: float32 variables and state."""
    policy = overflow.policy or overflow.weights[0].dtype
    mixed = MIXED_POLICIES.get(policy, "mixed_float16")
    return Fix(
        "mixed_precision",
        f'Train under the "{mixed}" policy: the layers still compute in {policy}, but the '
        "weights, and the optimizer's state with them, are float32, where these squares fit "
        "(`compile` then scales the loss too; a custom loop wraps its optimizer in "
        "`keras.optimizers.LossScaleOptimizer` for that)",
        f'keras.mixed_precision.set_global_policy("{mixed}")  # before the model is built',
    )


def clip_each_value(overflow: UpdateOverflow) -> Fix:
    """Clip each gradient value, so that its square stays far inside the dtype."""
    dtype = overflow.weights[0].dtype
    return Fix(
        "clip_by_value",
        f"Clip each gradient value to 1 (clipvalue=1.0), so that no square leaves {dtype}",
        f"optimizer = keras.optimizers.{overflow.optimizer}(learning_rate=1e-3, clipvalue=1.0)",
    )


def not_fixes(overflow: UpdateOverflow) -> tuple[NotFix, ...]:
    """What users try on a half-precision optimizer that goes NaN, and why it cannot
    reach a square that overflowed."""
    dtype = overflow.weights[0].dtype
    first = overflow.reproduced and overflow.first_step == 0
    rate = (
        NotFix(
            "lower_learning_rate",
            "Step 0's gradients, which the first update squares, do not depend on the "
            f"learning rate: they already square past {dtype}'s range, and the rate only "
            "scales the update after that.",
        )
        if first
        else NotFix(
            "lower_learning_rate",
            "The learning rate scales the update after the gradient is squared: a lower one "
            "moves the weights more slowly, but the gradients keep their size.",
            structural=False,
        )
    )
    return (
        rate,
        NotFix(
            "optimizer_epsilon",
            "Epsilon cannot undo a square that already overflowed, since it is added after it "
            "(to the square root of the squares): inf + epsilon is inf, and the next "
            "update's inf - inf is NaN whatever epsilon is.",
        ),
        NotFix(
            "loss_scaling",
            "A LossScaleOptimizer divides the gradients by its scale again before the inner "
            f"optimizer's update, which squares them in {dtype} all the same.",
        ),
        NotFix(
            "gradient_clipping",
            f"Clipping by the global norm computes the norm in {dtype}, where the sum of the "
            "squares overflows before a single square does, and then makes every clipped "
            "gradient NaN.",
            structural=False,
        ),
    )
