"""Loss spikes: a step's loss far above the running median of the recent losses."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from gradient_doctor.core.arguments import check_float, check_int
from gradient_doctor.core.detectors.protocol import CountedFindings
from gradient_doctor.core.detectors.sorted_window import SortedWindow
from gradient_doctor.core.evidence import TrainingSetup
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.forecast import MAD_TO_SIGMA
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.wording import approximately, count, format_number
from gradient_doctor.core.records import StepRecord

# Like large-scale trainers, compare each loss with the running window of the last
# WINDOW losses, once WARMUP are in: a spike is a loss above
#   median + max(SIGMAS * 1.4826 * MAD, TAIL_RISE * (q90 - median),
#                MIN_RISE * |median|, MIN_SCALE_RISE * scale),
# where `scale` is the median |loss| of the run's first WARMUP losses and q90 the
# window's 90th percentile.
# Six robust standard deviations keep the per-batch noise of small batches quiet; the
# relative floor keeps a loss that has settled to near-constant values (MAD ~ 0) from
# flagging rounding-sized bumps; the floor on the run's own scale keeps a loss that has
# converged near zero from flagging a hard batch: from 2.3 down to 1e-4, a batch at
# 5e-4 is five times the median but a rise of 0.02% of where the run began.
WINDOW = 100
WARMUP = 20
SIGMAS = 6.0
# A spike is at least half again the median: a GAN's generator loss swinging to 1.4x,
# a VAE's last, smaller batch at 1.3x are the loss's own noise, not an event.
MIN_RISE = 0.5
# The tail of a skewed loss is its own spread: a hinge or triplet loss is 0 on most
# batches (MAD 0) and 0.005-0.011 on a third of them, and such a batch is no spike.
# For noise that is symmetric about the median (q90 - median ~ 1.28 sigma) the term is
# below SIGMAS' and changes nothing.
TAIL_QUANTILE = 0.9
TAIL_RISE = 3.0
MIN_SCALE_RISE = 0.05
# Episodes beyond this many are counted in the last finding, not reported one by one.
MAX_EPISODES = 10


@dataclass(frozen=True)
class Episode:
    """One run of consecutive steps whose loss stayed above the spike threshold.

    Attributes:
        start: the first step above the threshold.
        end: the last step seen above it so far.
        steps: how many records were above it.
        peak: the highest loss of the episode.
        peak_step: the step of `peak`.
        baseline: the running median of the losses before the episode began.
        threshold: the spike threshold when the episode began.
        losses: how many losses the running median was taken over.
    """

    start: int
    end: int
    steps: int
    peak: float
    peak_step: int
    baseline: float
    threshold: float
    losses: int


class LossSpikeDetector(CountedFindings):
    """Warns once per episode in which the loss jumps far above its running median.

    Args:
        window: int, losses in the running window. Defaults to 100.
        warmup: int, losses needed before any spike is judged. Defaults to 20.
        sigmas: float, robust standard deviations (1.4826 * MAD) above the running
            median that make a spike. Defaults to 6.0.
        min_rise: float, the least rise above the median, as a fraction of |median|.
            Defaults to 0.5.
        min_scale_rise: float, the least rise above the median, as a fraction of the
            run's starting scale (the median |loss| of its first `warmup` losses).
            Defaults to 0.05.
        setup: `TrainingSetup` or None, the user's optimizer settings, so that the
            fixes name the actual learning rate and clipping. Defaults to None.

    Raises:
        ValueError: for an argument out of range, e.g. a `warmup` above `window`.
    """

    def __init__(
        self,
        window: int = WINDOW,
        warmup: int = WARMUP,
        sigmas: float = SIGMAS,
        min_rise: float = MIN_RISE,
        min_scale_rise: float = MIN_SCALE_RISE,
        setup: TrainingSetup | None = None,
    ) -> None:
        self._window = check_int(window, "window", 3)
        self._warmup = check_int(warmup, "warmup", 3)
        if self._warmup > self._window:
            raise ValueError(
                f"`warmup` must be at most `window` ({self._window}). Received: warmup={warmup!r}"
            )
        self._sigmas = check_float(sigmas, "sigmas")
        self._min_rise = check_float(min_rise, "min_rise", 0.0, math.inf, True)
        self._min_scale_rise = check_float(min_scale_rise, "min_scale_rise", 0.0, math.inf, True)
        self._scale: float | None = None  # set once `warmup` losses are in
        self._setup = setup or TrainingSetup()
        # Kept sorted: the running median and its spread without sorting every step.
        self._losses = SortedWindow(self._window)
        self._episodes: list[Episode] = []
        self._uncounted = 0
        self._in_episode = False

    def observe(self, record: StepRecord) -> None:
        """Take in the loss of one step; a missing or non-finite loss is skipped."""
        loss = record.loss
        if loss is None or not math.isfinite(loss):
            return
        spike = False
        if self._scale is None and len(self._losses) >= self._warmup:
            self._scale = self._starting_scale()
        if self._scale is not None:  # `warmup` losses are in
            baseline = self._losses.median()
            floor = max(self._min_rise * abs(baseline), self._min_scale_rise * self._scale)
            # The threshold is never below baseline + floor: a loss at or under it is no
            # spike, whatever the spread (most steps; the spread is then not needed).
            if loss > baseline + floor:
                spread = MAD_TO_SIGMA * self._losses.median_abs_deviation(baseline)
                tail = self._losses.quantile(TAIL_QUANTILE) - baseline
                threshold = baseline + max(self._sigmas * spread, TAIL_RISE * tail, floor)
                spike = loss > threshold
                if spike:
                    self._extend(record.step, loss, baseline, threshold)
        self._in_episode = spike
        self._losses.append(loss)

    def _starting_scale(self) -> float:
        """The median |loss| of the losses in so far (the first `warmup` of the run)."""
        return statistics.median(abs(loss) for loss in self._losses)

    def _build_findings(self) -> list[Finding]:
        """One warning for all the spikes (no warning storm), or none.

        It is raised at the first episode's step and describes the largest one
        (against its running median), with how many episodes there were.
        """
        if not self._episodes:
            return []
        first = self._episodes[0]
        worst = max(self._episodes, key=_size)
        finding = self._finding(worst)
        total = len(self._episodes) + self._uncounted
        if total > 1:
            finding = replace(
                finding,
                step=first.start,
                explanation=f"{finding.explanation} It is the largest of {total} spike "
                f"episodes so far, the first at step {first.start}.",
            )
        return [finding]

    def _extend(self, step: int, loss: float, baseline: float, threshold: float) -> None:
        """Start an episode, or extend the current one."""
        self._changed()
        if not self._in_episode:
            if len(self._episodes) >= MAX_EPISODES:
                self._uncounted += 1
                return
            self._episodes.append(
                Episode(step, step, 1, loss, step, baseline, threshold, len(self._losses))
            )
            return
        if self._uncounted:
            return
        last = self._episodes[-1]
        peak, peak_step = (loss, step) if loss > last.peak else (last.peak, last.peak_step)
        self._episodes[-1] = replace(
            last, end=step, steps=last.steps + 1, peak=peak, peak_step=peak_step
        )

    def _finding(self, episode: Episode) -> Finding:
        return Finding(
            category="loss_spike",
            step=episode.start,
            phase=None,
            origin=None,
            explanation=explain(episode),
            fixes=(
                remedies.gradient_clipping(self._setup),
                remedies.lower_learning_rate(self._setup),
            ),
        )


def _size(episode: Episode) -> float:
    """How far an episode's peak rose above its running median (a ratio where defined)."""
    if episode.baseline > 0:
        return episode.peak / episode.baseline
    return episode.peak - episode.threshold


def explain(episode: Episode) -> str:
    """Describe one spike episode against the running median.

    Example: "The loss jumped to 7.2 at step 813, 5.5 times the running median 1.3 of
    the last 100 losses (spike threshold 2.1); it stayed above the threshold for 3
    steps, from step 812 to step 814."
    """
    compared = "against"
    if episode.baseline > 0:
        compared = f"{approximately(episode.peak / episode.baseline)} times"
    text = (
        f"The loss jumped to {format_number(episode.peak)} at step "
        f"{episode.peak_step}, {compared} the running median "
        f"{format_number(episode.baseline)} of the last {episode.losses} losses "
        f"(spike threshold {format_number(episode.threshold)})"
    )
    if episode.steps == 1:
        return f"{text}."
    return (
        f"{text}; it stayed above the threshold for {count(episode.steps, 'step')}, "
        f"from step {episode.start} to step {episode.end}."
    )
