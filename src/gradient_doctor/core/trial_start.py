"""Where each fix trial starts: the last good state, or a saved state from before the trouble.

A remedy that acts on the op (its line rewritten) can be tried from the state just
before the failing step: it changes the value the op computes at once. A remedy that
acts on the updates (a lower learning rate, clipping, bounded weights) cannot: by
then the weights it was meant to protect are already ruined, and it fails at the
first trial step whatever its worth. It is tried from a saved state from before the
signal began (the gradient norm's growth, the loss's rise, the first warning), and
a remedy that only acts from the start (a better initialisation) from the first
saved state, when the run is short enough to run that far again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gradient_doctor.core.evidence import StepHistory
from gradient_doctor.core.findings import Finding

# Remedies whose effect builds up over the updates: tried from before the trouble.
UPDATE_REMEDIES = frozenset(
    {
        "lower_learning_rate",
        "gradient_clipping",
        "clip_by_value",
        "constrain_weights",
        "larger_batch",
    }
)
# Remedies that change the model or the data from the first step on (a new activation
# changes what every weight computes: dropped into the middle of training, its first
# steps are a shock the model never had to take).
FROM_START_REMEDIES = frozenset(
    {
        "better_init",
        "batch_normalization",
        "normalize_input",
        "normalize_target",
        "mixed_precision",
        "activation_change",
    }
)
# A trial from the start is run when the failure came within this many steps of it.
FROM_START_MAX_STEPS = 5000
# A rise of the gradient norm (or the loss) by this factor over its earlier median
# marks where the trouble began.
RISE_FACTOR = 3.0


@dataclass(frozen=True)
class TrialStart:
    """The step a trial starts from and why.

    Attributes:
        step: the first step the trial runs (its state is the one saved before it).
        reason: why it starts there, in words, for the evidence.
    """

    step: int
    reason: str


def trouble_began(history: StepHistory, failing_step: int, first_warning: int | None) -> int:
    """The step from which the run was heading for the failure, as far as the history shows.

    The earliest of: the first early warning, and the step after which the gradient
    norm (or, without norms, the loss) stayed above `RISE_FACTOR` times its median
    over the steps before. The failing step itself when nothing rose.
    """
    began = failing_step
    for values in (history.grad_norms, history.losses):
        rise = _sustained_rise(history.steps, values)
        if rise is not None:
            began = min(began, rise)
            break
    if first_warning is not None:
        began = min(began, first_warning)
    return began


def _sustained_rise(steps: Sequence[int], values: Sequence[float | None]) -> int | None:
    """The first step from which every later value stays above `RISE_FACTOR` x the median
    of the values before it, or None."""
    points = [(s, v) for s, v in zip(steps, values) if v is not None and math.isfinite(v) and v > 0]
    if len(points) < 8:
        return None
    start = None
    for index in range(len(points) - 1, 3, -1):
        before = sorted(v for _, v in points[:index])
        median = before[len(before) // 2]
        if all(v > RISE_FACTOR * median for _, v in points[index:]):
            start = points[index][0]
        else:
            break
    return start


def trial_start(
    remedy: str,
    finding: Finding,
    began: int,
    saved_steps: Sequence[int],
) -> TrialStart | None:
    """Where the trial of `remedy` starts, or None when it cannot be tried from a state
    that makes sense for it.

    Args:
        remedy: the fix family to try.
        finding: the problem (its `step` is the failing step).
        began: where the trouble began (`trouble_began`).
        saved_steps: the steps whose starting state was saved (ascending); the state
            just before the failing step is always there.
    """
    failing = finding.step or 0
    if remedy in FROM_START_REMEDIES:
        first = min(saved_steps, default=failing)
        if failing - first > FROM_START_MAX_STEPS:
            return None
        return TrialStart(first, f"this remedy acts from the start of training (step {first})")
    before = [s for s in saved_steps if s < failing]
    if remedy in UPDATE_REMEDIES and before:
        # From before the trouble; with no sign of where it began, from the last state
        # saved before the failing step (the updates before it may be the trouble).
        began = min(began, max(before))
        earlier = [s for s in before if s <= began]
        step = max(earlier) if earlier else min(before)
        where = "before" if earlier else "after (the earliest state kept)"
        return TrialStart(
            step,
            f"this remedy acts on the updates, and the trouble began at step {began} or "
            f"earlier: the trial starts from the state saved {where} it",
        )
    return TrialStart(failing, "the last good state, just before the failing step")
