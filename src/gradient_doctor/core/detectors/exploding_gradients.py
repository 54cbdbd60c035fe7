"""Early warning of exploding gradients: a layer's gradient norm growing exponentially."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from gradient_doctor.core.arguments import check_float, check_int
from gradient_doctor.core.detectors.protocol import CountedFindings
from gradient_doctor.core.evidence import Evidence, TrainingSetup
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.forecast import robust_trend
from gradient_doctor.core.knowledge.rules.exploding_gradients import GROWTH_FACTOR, exploding_fixes
from gradient_doctor.core.knowledge.wording import approximately, listing
from gradient_doctor.core.records import StepRecord

# The log of each layer's gradient norm is fitted over the last WINDOW records, once
# MIN_POINTS are in; an explosion is a clear rise whose fitted growth across the window
# is at least GROWTH_FACTOR (100x, the knowledge base's own mark of an explosion: more
# than six doublings in a row).
WINDOW = 30
MIN_POINTS = 10
# A norm that grew 100x but is still below this is no explosion yet: gradients waking up
# (the first rewards of a sparse-reward agent, 6.5e-5 -> 0.0095) grow as fast, about
# forty orders of magnitude short of an overflow; an explosion on its way there passes
# this mark soon after, and is warned of then.
MIN_EXPLODING_NORM = 1.0
# The series name of the global gradient norm (`StepRecord.grad_norm`).
_GLOBAL = ""


@dataclass(frozen=True)
class Explosion:
    """How one gradient norm grew across the window.

    Attributes:
        layer: the layer's name ("" for the global gradient norm).
        start: the window's first step.
        end: the window's last step.
        low: the norm measured at `start`.
        high: the norm measured at `end`.
        rate: the fitted growth per step (0.25 for +25% a step).
    """

    layer: str
    start: int
    end: int
    low: float
    high: float
    rate: float

    @property
    def factor(self) -> float:
        """How many times the norm grew across the window."""
        return self.high / self.low


class _LogNorms:
    """One series' latest log norms and their steps, with the window's range kept as
    they arrive (the largest and smallest are found again only when one drops out)."""

    __slots__ = ("steps", "values", "high", "low")

    def __init__(self, size: int) -> None:
        self.steps: deque[int] = deque(maxlen=size)
        self.values: deque[float] = deque(maxlen=size)
        self.high = -math.inf
        self.low = math.inf

    def append(self, step: int, value: float) -> None:
        """Add one finite log norm, dropping the oldest when the window is full."""
        values = self.values
        oldest = values[0] if len(values) == values.maxlen else None
        self.steps.append(step)
        values.append(value)
        if oldest is not None and (oldest == self.high or oldest == self.low):
            self.high, self.low = max(values), min(values)
            return
        if value > self.high:
            self.high = value
        if value < self.low:
            self.low = value


class ExplodingGradientsDetector(CountedFindings):
    """Warns when gradient norms grow exponentially, naming the layers where they do.

    Follows each layer's gradient norm, and the global norm, on a log scale. A series
    explodes when a robust line through its last `window` log norms rises clearly and
    its fitted growth across the window reaches `growth_factor`. One warning for the
    run, listing every layer that exploded, updated as records arrive.

    Args:
        window: int, records the growth is fitted over. Defaults to 30.
        min_points: int, records before a series is judged. Defaults to 10.
        growth_factor: float, the growth across the window that makes an explosion.
            Defaults to 100.
        setup: `TrainingSetup` or None, the user's optimizer settings, so that the fixes
            name the actual learning rate and clipping. Defaults to None (unknown).

    Raises:
        ValueError: for an argument out of range, e.g. a `growth_factor` of 1 or less.
    """

    def __init__(
        self,
        window: int = WINDOW,
        min_points: int = MIN_POINTS,
        growth_factor: float = GROWTH_FACTOR,
        setup: TrainingSetup | None = None,
    ) -> None:
        self._window = check_int(window, "window", 3)
        self._min_points = check_int(min_points, "min_points", 3)
        if self._min_points > self._window:
            raise ValueError(
                f"`min_points` must be at most `window` ({self._window}). "
                f"Received: min_points={min_points!r}"
            )
        self._growth_factor = check_float(growth_factor, "growth_factor", 1.0)
        self._least_range = 0.5 * math.log(self._growth_factor)
        self._setup = setup or TrainingSetup()
        self._series: dict[str, _LogNorms] = {}  # in the order first recorded
        self._explosions: dict[str, Explosion] = {}
        self._first_step: int | None = None

    def observe(self, record: StepRecord) -> None:
        """Take in the gradient norms of one step; missing, zero and non-finite ones are skipped."""
        step, norm = record.step, record.grad_norm
        overall = norm is not None and math.isfinite(norm)
        if record.layers:
            norms = record.measured("grad_norm")
            if overall and norms:  # the layers', then the global one (over a layer "")
                norms, overall = {**norms, _GLOBAL: norm}, False
            for layer, value in norms.items():
                self._take(step, layer, value)
        if overall:
            self._take(step, _GLOBAL, norm)

    def _take(self, step: int, layer: str, norm: float) -> None:
        """Add one finite norm to its series and judge the series."""
        if norm <= 0:
            return
        series = self._series.get(layer)
        if series is None:
            series = self._series[layer] = _LogNorms(self._window)
        series.append(step, math.log(norm))
        # A line through evenly spaced points fits at most twice their range, so a series
        # whose norms span less than sqrt(growth_factor) cannot be an explosion: no fit.
        if len(series.values) < self._min_points or series.high - series.low < self._least_range:
            return
        explosion = self._explosion(layer, series)
        if explosion is not None and not self._global_grows(layer, explosion):
            explosion = None
        if explosion is not None:
            self._explosions[layer] = explosion
            self._changed()
            if self._first_step is None:
                self._first_step = step

    def _global_grows(self, layer: str, explosion: Explosion) -> bool:
        """Whether the global norm rose too across a layer's growth, by at least the
        square root of `growth_factor` (10x): a layer that grows 100x from far below
        the others (a GAN generator's first layer while the discriminator is still
        random) while the global norm stays flat is waking up, not exploding. True for
        the global norm itself, and for a layer when no global norm is known or it
        does not hold the layer's (the layer's norm is above it: another optimizer's)."""
        overall = self._series.get(_GLOBAL)
        if layer == _GLOBAL or overall is None or not overall.values:
            return True
        if explosion.high > math.exp(overall.values[-1]):
            return True
        since = [v for step, v in zip(overall.steps, overall.values) if step >= explosion.start]
        return bool(since) and overall.values[-1] - min(since) >= self._least_range

    def _build_findings(self) -> list[Finding]:
        """One warning naming the layers whose gradient norms explode, or none."""
        if self._first_step is None:
            return []
        return [
            Finding(
                category="exploding_gradients",
                step=self._first_step,
                phase=None,
                origin=None,
                explanation=explain(self._in_record_order(), self._first_step),
                fixes=exploding_fixes(
                    Evidence(step=None, phase=None, origin=None, setup=self._setup)
                ),
            )
        ]

    def _in_record_order(self) -> tuple[Explosion, ...]:
        """The explosions in the order their layers first appeared in the records."""
        return tuple(self._explosions[name] for name in self._series if name in self._explosions)

    def _explosion(self, layer: str, series: _LogNorms) -> Explosion | None:
        """The series' growth across the window when it is an explosion, else None (a
        series of at least `min_points` norms spanning at least `_least_range`)."""
        if series.values[-1] < math.log(MIN_EXPLODING_NORM):
            return None
        trend = robust_trend(list(series.steps), list(series.values))
        if trend is None or not trend.is_clear() or trend.slope <= 0:
            return None
        if trend.change < math.log(self._growth_factor):
            return None
        # The norms as measured at the window's ends (a fit's values there can be far
        # from any the run had: 0.0046 for a measured 2.84), the rate as fitted.
        measured = dict(zip(series.steps, series.values, strict=True))
        start, end = int(trend.start), int(trend.end)
        return Explosion(
            layer=layer,
            start=start,
            end=end,
            low=math.exp(measured.get(start, trend.value_at(trend.start))),
            high=math.exp(measured.get(end, trend.level)),
            rate=math.expm1(trend.slope),
        )


def explain(explosions: tuple[Explosion, ...], first_step: int | None = None) -> str:
    """Name the exploding layers and describe the fastest growth; when that window
    starts after `first_step`, the step the warning was first raised (the warning is
    updated as records arrive, its step stays), say so.

    Example: "Gradient norms are growing exponentially in 3 layers (`dense`, `dense_1`
    and `dense_2`): in `dense_2` from 0.98 at step 205 to 700 at step 236 (x714, ~24% per
    step). Left alone, the updates grow with them until the weights overflow."
    """
    in_layers = [explosion for explosion in explosions if explosion.layer != _GLOBAL]
    layers = [explosion.layer for explosion in in_layers]
    worst = max(in_layers or explosions, key=lambda explosion: explosion.factor)
    growth = (
        f"from {approximately(worst.low)} at step {worst.start} to "
        f"{approximately(worst.high)} at step {worst.end} "
        f"(x{approximately(worst.factor)}, "
        f"~{approximately(100 * worst.rate)}% per step)"
    )
    if not layers:
        subject = f"The global gradient norm is growing exponentially: {growth}"
    elif len(layers) == 1:
        subject = f"The gradient norm of layer `{layers[0]}` is growing exponentially: {growth}"
    else:
        named = listing([f"`{layer}`" for layer in layers])
        subject = (
            f"Gradient norms are growing exponentially in {len(layers)} layers ({named}): "
            f"in `{worst.layer}` {growth}"
        )
    if first_step is not None and first_step < worst.start:
        subject += f" (first seen growing at step {first_step})"
    return f"{subject}. Left alone, the updates grow with them until the weights overflow."
