"""Early warnings for risky ops (exp, log, division, ...) whose inputs near their limits."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

from gradient_doctor.core.arguments import check_float, check_int
from gradient_doctor.core.detectors.headroom_remedies import headroom_remedies, source_of
from gradient_doctor.core.detectors.protocol import CountedFindings
from gradient_doctor.core.evidence import TrainingSetup
from gradient_doctor.core.findings import Finding, Headroom, Origin
from gradient_doctor.core.forecast import crossing_step, robust_trend, step_spread
from gradient_doctor.core.knowledge.wording import (
    approximately,
    format_number,
    line_ref,
    op_place,
)
from gradient_doctor.core.records import FALLING_KINDS, HeadroomSample, StepRecord
from gradient_doctor.core.thinned_history import ThinnedHistory

# The trend is fitted over the last WINDOW samples of each op, once MIN_POINTS are in.
WINDOW = 100
MIN_POINTS = 20
# A forecast is a warning when the limit is expected within HORIZON_FACTOR times the
# span of steps already observed: the doctor never extrapolates a trend further ahead
# than the history it has seen behind.
HORIZON_FACTOR = 1.0
# Near the limit, warn whatever the trend (a value can rise, linger just below the
# limit, then cross): within NOISE_MULTIPLE typical step-to-step changes of the limit,
# or, for an overflow threshold, within NEAR_FRACTION of it. 0.10 leaves the
# doctor's own clip fix (0.9 x the exp limit, rounded down: 79 for float32) unflagged,
# while story 1's plateau (~83.5 below 88.72) is flagged. Domain edges (0 for log, 1
# for acos) get no relative margin: inputs legitimately live next to them (a cosine
# similarity of 0.99, a guard such as clip(x, -1 + 1e-7, 1 - 1e-7)).
NEAR_FRACTION = 0.10
NOISE_MULTIPLE = 3.0
_OVERFLOW_KINDS = frozenset({"max_input", "max_abs_value"})
# Samples of an op between two fits of its trends.
REFIT_EVERY = 10
# Points of each op's whole-run history kept to estimate its long-run rate.
LONG_RUN_POINTS = 64
# Slopes are reported per this many steps.
RATE_STEPS = 100


@dataclass(frozen=True)
class _Words:
    """How explanations speak of one headroom kind."""

    measure: str  # e.g. "largest input"
    event: str  # what happens at the limit, before "expected near step N"
    threshold: str  # the limit, after "only 5.2 from"


_WORDS = {
    "max_input": _Words(
        "largest input", "{dtype} overflow", "the {dtype} {op} overflow threshold {limit}"
    ),
    "max_abs_value": _Words(
        "largest |value|", "{dtype} overflow", "{dtype}'s largest value {limit}"
    ),
    "min_input": _Words(
        "smallest input", "{op} leaving its domain", "the edge of {op}'s domain ({limit})"
    ),
    "min_abs_denominator": _Words("smallest |denominator|", "division by zero", "zero"),
    "abs_input": _Words(
        "largest |input|", "{op} leaving its domain", "the edge of {op}'s domain ({limit})"
    ),
}


@dataclass
class _Track:
    """What the detector keeps about one risky op (one key).

    The fitted quantities are those of the last refit (every `refit_every` samples).
    """

    first_step: int
    recent: deque[tuple[int, float]]
    long_run: ThinnedHistory[tuple[int, float]]
    samples: int = 0
    spread: float = 0.0  # the typical step-to-step change of the gap
    crossing: int | None = None  # where the recent clear trend reaches the limit
    rate: float = 0.0  # that trend's rate of approach, per step
    long_rate: float = 0.0  # the whole run's rate of approach, per step (0: none)
    warning: Finding | None = None


class HeadroomDetector(CountedFindings):
    """Warns when a risky op's input approaches the value where the op leaves the finite range.

    For each op (each `HeadroomSample.key`) the detector follows the gap between the
    input's extreme and the limit. It warns when a clear trend of that gap (a robust
    line over the last `window` samples) reaches the limit within `horizon_factor`
    times the steps observed so far, or when the value is already near the limit,
    whatever the trend. One warning per op, updated as samples arrive.

    Args:
        window: int, samples per op the trend is fitted over. Defaults to 100.
        min_points: int, samples before a trend is trusted. Defaults to 20.
        horizon_factor: float, how far ahead, in multiples of the steps observed, a
            forecast crossing is worth a warning. Defaults to 1.0.
        near_fraction: float, warn when the value is within this fraction of an
            overflow threshold. Defaults to 0.10.
        noise_multiple: float, warn when the value is within this many typical
            step-to-step changes of the limit. Defaults to 3.0.
        refit_every: int, samples of an op between two fits of its trend (a fit
            costs O(window log window); the near check runs on every sample).
            Defaults to 10.
        setup: `TrainingSetup` or None, the user's training setup: its framework
            spells the warning's fixes. Defaults to None (unknown).

    Raises:
        ValueError: for an argument out of range, e.g. a `window` below 3.

    Example:
        >>> detector = HeadroomDetector()
        >>> for record in records:
        ...     detector.observe(record)
        >>> warnings = detector.findings()
    """

    def __init__(
        self,
        window: int = WINDOW,
        min_points: int = MIN_POINTS,
        horizon_factor: float = HORIZON_FACTOR,
        near_fraction: float = NEAR_FRACTION,
        noise_multiple: float = NOISE_MULTIPLE,
        refit_every: int = REFIT_EVERY,
        setup: TrainingSetup | None = None,
    ) -> None:
        self._window = check_int(window, "window", 3)
        self._min_points = check_int(min_points, "min_points", 3)
        if self._min_points > self._window:
            raise ValueError(
                f"`min_points` must be at most `window` ({self._window}). "
                f"Received: min_points={min_points!r}"
            )
        self._horizon_factor = check_float(horizon_factor, "horizon_factor")
        self._near_fraction = check_float(near_fraction, "near_fraction", 0.0, 1.0, True)
        self._noise_multiple = check_float(noise_multiple, "noise_multiple", 0.0, math.inf, True)
        self._refit_every = check_int(refit_every, "refit_every", 1)
        self._tracks: dict[str, _Track] = {}
        self._setup = setup

    def observe(self, record: StepRecord) -> None:
        """Take in the headroom samples of one step; non-finite samples are skipped."""
        for sample in record.headroom:
            if math.isfinite(sample.value) and math.isfinite(sample.limit):
                self._observe_sample(record.step, sample)

    def _build_findings(self) -> list[Finding]:
        """One warning per op that came near its limit, in the order first raised."""
        warned = [track.warning for track in self._tracks.values() if track.warning]
        return sorted(warned, key=lambda finding: finding.step)

    def _observe_sample(self, step: int, sample: HeadroomSample) -> None:
        track = self._tracks.get(sample.key)
        if track is None:
            track = _Track(step, deque(maxlen=self._window), ThinnedHistory(LONG_RUN_POINTS))
            self._tracks[sample.key] = track
        gap = sample.gap
        track.recent.append((step, gap))
        track.long_run.append((step, gap))
        track.samples += 1
        if track.samples % self._refit_every == 0:
            self._refit(track)
        near = gap <= 0 or gap < self._noise_multiple * track.spread
        if sample.kind in _OVERFLOW_KINDS:
            near = near or gap <= self._near_fraction * abs(sample.limit)
        horizon = self._horizon_factor * max(step - track.first_step, 1)
        soon = track.crossing is not None and track.crossing - step <= horizon
        if not (near or soon):
            return
        if gap <= 0:
            forecast, explanation = step, _explain_reached(sample)
        elif track.crossing is not None:
            forecast = max(track.crossing, step)
            explanation = _explain_trend(sample, track.rate, forecast)
        else:
            forecast = step + math.ceil(gap / track.long_rate) if track.long_rate else None
            explanation = _explain_near(sample, gap, len(track.recent), track.long_rate, forecast)
        self._warn(track, step, sample, explanation, forecast)

    def _refit(self, track: _Track) -> None:
        """Fit the recent and the whole-run trends of the op's gap, and its spread."""
        steps, gaps = zip(*track.recent)
        track.spread = step_spread(gaps)
        track.crossing, track.rate = None, 0.0
        recent = robust_trend(steps, gaps) if len(gaps) >= self._min_points else None
        if recent is not None and recent.is_clear() and recent.slope < 0:
            track.crossing, track.rate = crossing_step(recent, 0.0), -recent.slope
        points = track.long_run.items()
        long_run = robust_trend([point[0] for point in points], [point[1] for point in points])
        clear = long_run is not None and long_run.is_clear() and long_run.slope < 0
        track.long_rate = -long_run.slope if clear else 0.0

    def _warn(
        self,
        track: _Track,
        step: int,
        sample: HeadroomSample,
        explanation: str,
        forecast: int | None,
    ) -> None:
        """Raise the op's warning, or update the one already raised."""
        headroom = Headroom(limit=sample.limit, value=sample.value)
        self._changed()
        if track.warning is not None:
            track.warning = replace(
                track.warning, explanation=explanation, forecast_step=forecast, headroom=headroom
            )
            return
        fixes, not_fixes = headroom_remedies(sample, self._setup)
        track.warning = Finding(
            category="forward_overflow" if sample.kind in _OVERFLOW_KINDS else "forward_domain",
            step=step,
            phase="forward",
            origin=_origin(sample),
            explanation=explanation,
            not_fixes=not_fixes,
            fixes=fixes,
            forecast_step=forecast,
            headroom=headroom,
        )


def _origin(sample: HeadroomSample) -> Origin:
    """The op and the user's line; its values are in the warning's `headroom`."""
    return Origin(
        op=sample.op,
        framework_op=sample.framework_op,
        op_name=sample.key,
        layer=sample.layer,
        source=source_of(sample),
        gradient_of=None,
        inputs=(),
        outputs=(),
    )


def _place(sample: HeadroomSample) -> str:
    """ "Exp in layer `message_passing` (train.py:42)"."""
    origin = _origin(sample)
    where = f" ({line_ref(origin.source)})" if origin.source else ""
    return f"{op_place(origin)}{where}"


def _fill(template: str, sample: HeadroomSample) -> str:
    """Fill a `_Words` template with the sample's dtype, op and limit."""
    return template.format(dtype=sample.dtype, op=sample.op, limit=format_number(sample.limit))


def _rate(rate: float) -> str:
    """ "~2.1 per 100 steps"."""
    return f"~{approximately(rate * RATE_STEPS)} per {RATE_STEPS} steps"


def _explain_trend(sample: HeadroomSample, rate: float, forecast: int) -> str:
    """E.g. "Exp in layer `mp` (train.py:42): largest input 61.3 and growing ~2.1 per
    100 steps; float32 overflow expected near step 2400."."""
    words = _WORDS[sample.kind]
    moving = "falling" if sample.kind in FALLING_KINDS else "growing"
    return (
        f"{_place(sample)}: {words.measure} {format_number(sample.value)} and {moving} "
        f"{_rate(rate)}; {_fill(words.event, sample)} expected near step {forecast}."
    )


def _explain_reached(sample: HeadroomSample) -> str:
    """E.g. "Exp in layer `mp` (train.py:42): largest input 88.95 reached the float32 Exp
    overflow threshold 88.72."."""
    words = _WORDS[sample.kind]
    return (
        f"{_place(sample)}: {words.measure} {format_number(sample.value)} reached "
        f"{_fill(words.threshold, sample)}."
    )


def _explain_near(
    sample: HeadroomSample, gap: float, points: int, rate: float, forecast: int | None
) -> str:
    """E.g. "Exp in layer `mp` (train.py:42): largest input 83.5, only 5.2 (5.9%) from
    the float32 Exp overflow threshold 88.72, with no clear trend toward it over the
    last 100 samples; at its average rate over the run (~8.1 per 100 steps), float32
    overflow expected near step 1230."."""
    words = _WORDS[sample.kind]
    distance = approximately(gap)
    if sample.limit != 0:
        distance += f" ({approximately(100 * gap / abs(sample.limit))}%)"
    start = (
        f"{_place(sample)}: {words.measure} {format_number(sample.value)}, only {distance} "
        f"from {_fill(words.threshold, sample)}, with no clear trend toward it over the "
        f"last {points} samples"
    )
    if forecast is None:
        return f"{start}; noise or a small drift is enough to cross it."
    return (
        f"{start}; at its average rate over the run ({_rate(rate)}), "
        f"{_fill(words.event, sample)} expected near step {forecast}."
    )
