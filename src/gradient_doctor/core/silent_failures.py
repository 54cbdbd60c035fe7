"""Silent failures: warnings still standing at the end of a run whose loss never improved.

Nothing non-finite happens when a network's gradients vanish or its units are dead or
saturated, so the early warnings are all a user sees, and a run that ends "healthy"
says the opposite of the truth. At the end of the run, a warning becomes a problem
when all of these hold:

- it still stands: its condition held at the detector's latest record, without a
  break, for at least `MIN_STEPS` steps and `MIN_SHARE` of the run (a warning that
  resolved by itself, like a slow starter's vanishing gradients, stays a warning);
- the loss is flat over the second half of that stretch: the median of its last
  quarter is less than `FLAT` (relatively) below the third's, beyond what the batches'
  noise explains (two standard errors of the difference of those medians);
- and the loss never got far below where the run started: the last quarter is less
  than `PROGRESS` below the first steps of the run (their median, or the first loss,
  the untrained model's, when it is lower). A converged run that learned a lot and
  then flattened out, whatever its warnings, is healthy; a run whose first updates
  blew the loss up by orders of magnitude, and which came back only to where it
  started, did not learn.

A run with several optimizers (a GAN's two halves) is not judged at all: the loss the
adapter sees is one of several objectives, and an adversarial loss hovers by design.
Nor is a run whose loss started at or below zero: such a loss has no floor its level
could be measured from (a policy gradient's surrogate with a baseline and an entropy
bonus starts at -0.016 and rises to 0 as the policy learns to earn every reward).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from gradient_doctor.core.detectors.protocol import Standing
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.forecast import median
from gradient_doctor.core.knowledge.wording import approximately

MIN_STEPS = 100
MIN_SHARE = 0.25
FLAT = 0.02
PROGRESS = 0.25
# The run's start is the median loss of its first this-share of points (at least
# `_START_POINTS`): one lucky or unlucky first batch must not decide.
_START_SHARE = 0.05
_START_POINTS = 3
# Quarters of the standing stretch need this many loss points each.
_QUARTER_POINTS = 3


def silent_failures(
    standing: Sequence[Standing],
    steps: Sequence[int],
    losses: Sequence[float],
    steps_watched: int,
    several_objectives: bool = False,
) -> tuple[Finding, ...]:
    """The standing warnings that are silent failures, each as a problem.

    Args:
        standing: the detectors' standing warnings at the end of the run.
        steps: the steps of the loss points, increasing (the loss may be thinned).
        losses: the loss at each of `steps` (non-finite ones are skipped).
        steps_watched: int, how many steps the run had.
        several_objectives: bool, more than one optimizer trained (a GAN): the loss
            of one does not show whether the run learns. Defaults to False.

    Returns:
        One problem per silent failure, in the order of `standing`: the warning with
        `step` = the start of its stretch and the loss's evidence added to the
        explanation.
    """
    if several_objectives:
        return ()
    points = [(s, v) for s, v in zip(steps, losses, strict=True) if math.isfinite(v)]
    if len({v for _, v in points}) < 2:  # no loss, or one that never moves: not measured
        return ()
    start_count = max(_START_POINTS, int(_START_SHARE * len(points)))
    # The first loss, before any update, when it is lower than the first points' median:
    # updates that blew the loss up at once (631, then 4.5e8, 1.2e5, ...) make that
    # median no start to improve on.
    run_start = min(median([v for _, v in points[:start_count]]), points[0][1])
    if run_start <= 0:  # no floor: the loss's level says nothing of learning
        return ()
    found = []
    for item in standing:
        span = item.until - item.since
        if span < MIN_STEPS or span < MIN_SHARE * steps_watched:
            continue
        values = [v for s, v in points if item.since <= s <= item.until]
        quarter = len(values) // 4
        if quarter < _QUARTER_POINTS:
            continue
        third, last = values[-2 * quarter : -quarter], values[-quarter:]
        noise = _noise(third, last) / max(abs(median(third)), abs(median(last)), 1e-30)
        if _drop(median(third), median(last)) >= FLAT + noise:
            continue
        last = median(last)
        if _drop(run_start, last) >= PROGRESS:
            continue
        found.append(_promoted(item, run_start, last))
    return tuple(found)


def _noise(first: Sequence[float], second: Sequence[float]) -> float:
    """Two standard errors of the difference of the two samples' medians.

    Each median's standard error is taken as 1.2533 sigma / sqrt(n), with sigma
    estimated robustly from the median absolute deviation (1.4826 MAD).
    """
    variance = 0.0
    for sample in (first, second):
        centre = median(sample)
        sigma = 1.4826 * median([abs(v - centre) for v in sample])
        variance += (1.2533 * sigma) ** 2 / len(sample)
    return 2.0 * math.sqrt(variance)


def _drop(before: float, after: float) -> float:
    """How far `after` fell below `before`, relative to their size (negative: it rose)."""
    scale = max(abs(before), abs(after))
    return 0.0 if scale == 0 else (before - after) / scale


# A fall of the loss below this share of where it started is "did not improve"; a larger
# one (still short of `PROGRESS`) "barely improved", with how much.
_NO_FALL = 0.05


def _promoted(item: Standing, run_start: float, last: float) -> Finding:
    """The warning as a problem: since when it held, and what the loss did meanwhile."""
    fall = _drop(run_start, last)
    moved = (
        f"the loss barely improved: about {approximately(last)} over the last steps, "
        f"against {approximately(run_start)} when the run started ({fall:.0%} lower, and "
        "flat since)"
        if fall >= _NO_FALL
        else f"the loss did not improve: about {approximately(last)} over the last steps, "
        f"against {approximately(run_start)} when the run started"
    )
    evidence = (
        f" This held from step {item.since} to the end of the run (step {item.until}), "
        f"and {moved}. Training went on without learning; nothing was non-finite, so no "
        "step failed."
    )
    return replace(item.finding, step=item.since, explanation=item.finding.explanation + evidence)
