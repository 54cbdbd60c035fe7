"""Fit a diagnosis to the steps before it: a forward failure thrown by one huge update.

Rules explain the op that went non-finite. When that op's input is huge because the
update just before it was huge (the gradient norm jumped by orders of magnitude at
the last good steps), the weights feeding the op were thrown there by that one
update, and clipping the gradient norm bounds exactly that update. Rules that look
only at the failing step rule clipping out for a forward problem; this pass uses the
recorded gradient norms to say when it is the remedy, and lets the trials judge it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from gradient_doctor.core.evidence import Evidence, StepHistory
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.wording import format_number

# A jump is a norm this many times the median of the steps before it.
JUMP_FACTOR = 100.0
# The jump must be among this many of the last finite steps before the failing one.
RECENT = 3
# The median is taken over at least this many earlier finite norms.
MIN_BEFORE = 3
_FORWARD_FAILURES = frozenset({"forward_overflow", "forward_domain"})


@dataclass(frozen=True)
class UpdateJump:
    """A gradient norm far above the ones before it, just before the failing step."""

    step: int
    norm: float
    median: float
    steps_before: int

    @property
    def factor(self) -> float:
        """How many times the median of the earlier norms the jump is."""
        return self.norm / self.median


def update_jump(history: StepHistory, failing: int | None) -> UpdateJump | None:
    """The first gradient norm among the last `RECENT` finite ones before `failing` that
    is at least `JUMP_FACTOR` times the median of the finite ones before it, or None.

    The first, because the updates after a jump are larger still only because of it.
    """
    if len(history.steps) != len(history.grad_norms):
        return None
    points = [
        (step, norm)
        for step, norm in zip(history.steps, history.grad_norms, strict=True)
        if norm is not None
        and math.isfinite(norm)
        and norm > 0
        and (failing is None or step < failing)
    ]
    for index in range(max(len(points) - RECENT, MIN_BEFORE), len(points)):
        earlier = [norm for _, norm in points[:index]]
        median = statistics.median(earlier)
        step, norm = points[index]
        if norm >= JUMP_FACTOR * median:
            return UpdateJump(step, norm, median, len(earlier))
    return None


def fit_to_history(diagnosis: Diagnosis, evidence: Evidence) -> Diagnosis:
    """`diagnosis` with gradient clipping among its fixes (first) and the jump explained,
    when a forward failure fed by weights follows a jump of the gradient norm; a lower
    learning rate, said only to slow a drift, becomes a fix too (after the others).

    Left alone for failures of the backward pass (the other rules judge clipping
    there), for inputs that come from the batch alone (no update reaches them), when
    clipping is already on (it did not bound the jump) or already proposed.
    """
    jump = update_jump(evidence.history, evidence.step) or _early_update(evidence)
    if (
        jump is None
        or diagnosis.category not in _FORWARD_FAILURES
        or evidence.phase != "forward"
        or evidence.weights_upstream is False
        or evidence.setup.clipping
        or any(fix.family == "gradient_clipping" for fix in diagnosis.fixes)
    ):
        return diagnosis
    op = evidence.origin.op if evidence.origin is not None else "the op"
    if jump.steps_before == 0 and evidence.step == 1:  # no earlier norm to compare with
        note = (
            f" Step 0 computed {op} finitely on the initial weights; its update, with a "
            f"gradient norm of {format_number(jump.norm)}, is the only one before this "
            f"step: it moved the weights that feed {op}. Clipping the gradient norm "
            "bounds that update."
        )
    elif jump.steps_before == 0:
        note = (
            f" Step 0 computed {op} finitely on the initial weights; the {evidence.step} "
            f"updates before this step are the only ones, the largest at step {jump.step} "
            f"with a gradient norm of {format_number(jump.norm)}: they moved the weights "
            f"that feed {op}. Clipping the gradient norm bounds such updates."
        )
    else:
        note = (
            f" The update at step {jump.step} had a gradient norm of "
            f"{format_number(jump.norm)}, {format_number(jump.factor)} times the median of "
            f"the {jump.steps_before} steps before it ({format_number(jump.median)}): that "
            f"one update threw the weights that feed {op} this far. Clipping the gradient "
            "norm bounds such an update."
        )
    if _scale_free(evidence.setup.optimizer):
        return _rate_sets_the_step(diagnosis, evidence, note)
    # A smaller rate makes that update smaller too: no longer a remedy "that only slows
    # the drift" (a temperature-scaled softmax saturated by the first update of norm 50
    # trains clean at a tenth of the rate).
    slower = [
        item
        for item in diagnosis.not_fixes
        if item.remedy == "lower_learning_rate" and not item.structural
    ]
    not_fixes = tuple(
        item
        for item in diagnosis.not_fixes
        if item.remedy != "gradient_clipping" and not any(item is s for s in slower)
    )
    fixes = (remedies.gradient_clipping(evidence.setup), *diagnosis.fixes)
    if slower and not any(fix.family == "lower_learning_rate" for fix in fixes):
        fixes = (*fixes, remedies.lower_learning_rate(evidence.setup))
    return replace(
        diagnosis, explanation=diagnosis.explanation + note, fixes=fixes, not_fixes=not_fixes
    )


# Optimizers that divide each gradient by a running scale of its own: an update moves a
# weight by about the learning rate whatever the gradient's norm (Adam's first update is
# the learning rate times the gradient's sign), so clipping the norm does not bound it.
SCALE_FREE_OPTIMIZERS = frozenset(
    {"Adam", "AdamW", "Adamax", "Nadam", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta", "Lion"}
)


def _scale_free(optimizer: str | None) -> bool:
    return optimizer is not None and optimizer in SCALE_FREE_OPTIMIZERS


def _rate_sets_the_step(diagnosis: Diagnosis, evidence: Evidence, note: str) -> Diagnosis:
    """Under a scale-free optimizer (`SCALE_FREE_OPTIMIZERS`), the update that threw the
    weights is as large as the learning rate makes it: the clause on clipping in `note`
    gives way to that, a lower rate becomes the fix (first among the remedies on the
    updates), and clipping stays what the rules said of it."""
    said = note[: note.rfind(" Clipping the gradient")]
    optimizer = evidence.setup.optimizer
    note = (
        f"{said} {optimizer} divides each gradient by a running scale of its own, so each "
        "update moves a weight by about the learning rate, whatever the gradient's norm: "
        "clipping the norm does not bound it, a lower learning rate does."
    )
    not_fixes = tuple(
        item
        for item in diagnosis.not_fixes
        if not (item.remedy == "lower_learning_rate" and not item.structural)
    )
    fixes = tuple(f for f in diagnosis.fixes if f.family != "lower_learning_rate")
    fixes = (*fixes, remedies.lower_learning_rate(evidence.setup))
    return replace(
        diagnosis, explanation=diagnosis.explanation + note, fixes=fixes, not_fixes=not_fixes
    )


def _early_update(evidence: Evidence) -> UpdateJump | None:
    """A failure in the first steps, too few for a median of earlier norms to call a
    jump against (`MIN_BEFORE`), follows only the updates of the steps before it: they
    are the one change the weights went through since step 0 computed finitely (a
    recurrent net's first update, norm 478224, throws its kernel out; two SGD updates on
    targets in the 1e5s throw a regressor's output to -1e23). Their largest, or None
    when any of their norms was not recorded finite, or, after more than one update,
    when the values did not grow huge on the way to the op (`Evidence.growth`)."""
    history = evidence.history
    step = evidence.step
    if step is None or not 1 <= step <= MIN_BEFORE or history is None:
        return None
    if step > 1 and evidence.growth is None:
        # Several updates, each of which may be ordinary: only values the replay saw
        # blow past 1e6 on their way to the op say the updates threw the weights (a
        # float16 exp a few units past its limit at step 2 is no update's doing).
        return None
    if len(history.steps) != len(history.grad_norms):
        return None
    norms = dict(zip(history.steps, history.grad_norms, strict=True))
    before = [(norms.get(earlier), earlier) for earlier in range(step)]
    if any(norm is None or not math.isfinite(norm) or norm <= 0 for norm, _ in before):
        return None
    norm, largest = max(before)
    return UpdateJump(largest, norm, norm, 0)


# The remedies that act on the updates, which a failure in the first step's forward
# pass comes before.
_ON_THE_UPDATES = frozenset({"lower_learning_rate", "gradient_clipping", "clip_by_value"})


def fit_to_first_step(diagnosis: Diagnosis, evidence: Evidence) -> Diagnosis:
    """`diagnosis` with the remedies on the updates said, as a fact, not to help a
    failure in the forward pass of the first step: no update ran before it, so the
    weights it read are the initial ones whatever the learning rate or clipping (their
    expectations, "only slows the drift of the weights", describe updates that never
    happened)."""
    if evidence.step != 0 or evidence.phase != "forward":
        return diagnosis
    what = evidence.origin.op if evidence.origin is not None else "the op"
    not_fixes = tuple(
        replace(
            item,
            why=(
                f"Step 0 failed in its forward pass, before any update: {what} read the "
                "initial weights and the batch, which no learning rate or clipping changes."
            ),
            structural=True,
        )
        if item.remedy in _ON_THE_UPDATES and not item.structural  # a fact stands
        else item
        for item in diagnosis.not_fixes
    )
    return replace(diagnosis, not_fixes=not_fixes)
