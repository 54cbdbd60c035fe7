"""Robust trend lines through noisy per-step series, and the step at which one meets a limit.

Everything here is resistant to outliers (medians, never means) and to uneven step
spacing (slopes are per step, not per point), so series recorded every k steps, or
with gaps, fit as well as series recorded every step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Scales a median absolute deviation to the standard deviation of normal noise.
MAD_TO_SIGMA = 1.4826
# A trend is clear when the change it fits across the series exceeds this many noise
# standard deviations: a flat series of n noisy points rarely fits a change past 3 sigma.
CLEAR_TREND_SIGMAS = 3.0
# Changes smaller than this fraction of the level are rounding, not a trend.
_RELATIVE_RESOLUTION = 1e-9


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence (the mean of the two middle values if even).

    Raises:
        ValueError: for an empty sequence.
    """
    if not values:
        raise ValueError("`values` must not be empty. Received: values=[]")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return 0.5 * (ordered[middle - 1] + ordered[middle])


def robust_slope(steps: Sequence[float], values: Sequence[float]) -> float | None:
    """The change per step of a series, robust to noise and outliers.

    A Theil-Sen style estimator restricted to pairs half the series apart: the median
    of the slopes between point i and point i + n // 2. Each slope spans half the
    series, so noise on single points moves it little; each point is in at most two
    pairs, so up to a quarter of the points can be outliers without moving the
    median far. Cost: O(n log n).

    Args:
        steps: the steps of the points, increasing.
        values: the values at those steps.

    Returns:
        The slope in value units per step, or None with fewer than 2 points or when
        all paired points share a step.

    Raises:
        ValueError: when `steps` and `values` differ in length.
    """
    _check_lengths(steps, values)
    lag = len(steps) // 2
    if lag < 1:
        return None
    slopes = [
        (values[i + lag] - values[i]) / (steps[i + lag] - steps[i])
        for i in range(len(steps) - lag)
        if steps[i + lag] != steps[i]
    ]
    return median(slopes) if slopes else None


@dataclass(frozen=True)
class Trend:
    """A straight line fitted through a series, with the noise around it.

    Attributes:
        slope: the change per step, in value units.
        level: the line's value at step `end`.
        start: the step of the series' first point.
        end: the step of the series' last point.
        noise: the robust standard deviation of the points around the line
            (scaled median absolute residual), in value units.
    """

    slope: float
    level: float
    start: float
    end: float
    noise: float

    def value_at(self, step: float) -> float:
        """The line's value at `step`."""
        return self.level + self.slope * (step - self.end)

    @property
    def change(self) -> float:
        """The change the line makes from the first point's step to the last's."""
        return self.slope * (self.end - self.start)

    def is_clear(self, sigmas: float = CLEAR_TREND_SIGMAS) -> bool:
        """Whether the fitted change stands out of the noise.

        Args:
            sigmas: float, how many noise standard deviations the change across the
                series must exceed. Defaults to `CLEAR_TREND_SIGMAS` (3).

        Returns:
            True when |change| > sigmas * noise and the change is more than rounding.
        """
        change = abs(self.change)
        resolution = _RELATIVE_RESOLUTION * max(1.0, abs(self.level))
        return change > sigmas * self.noise and change > resolution


def robust_trend(steps: Sequence[float], values: Sequence[float]) -> Trend | None:
    """Fit a straight line through a noisy series, robust to outliers.

    The slope is `robust_slope`'s; the level at the last step is the median of the
    points moved along that slope to the last step; the noise is the scaled median of
    the absolute residuals.

    Args:
        steps: the steps of the points, increasing.
        values: the values at those steps.

    Returns:
        The `Trend`, or None with fewer than 3 points or no two distinct steps.

    Raises:
        ValueError: when `steps` and `values` differ in length.

    Example:
        >>> trend = robust_trend([0, 1, 2, 3], [1.0, 3.0, 5.0, 7.0])
        >>> trend.slope, trend.level, trend.noise
        (2.0, 7.0, 0.0)
    """
    _check_lengths(steps, values)
    if len(steps) < 3:
        return None
    slope = robust_slope(steps, values)
    if slope is None:
        return None
    end = steps[-1]
    level = median([value + slope * (end - step) for step, value in zip(steps, values)])
    residuals = [abs(value - level - slope * (step - end)) for step, value in zip(steps, values)]
    return Trend(slope, level, steps[0], end, MAD_TO_SIGMA * median(residuals))


def crossing_step(trend: Trend, limit: float) -> int | None:
    """The first step, from the trend's last step on, at which the line reaches `limit`.

    Args:
        trend: the fitted `Trend`.
        limit: float, the value to reach.

    Returns:
        The step (rounded up) at which the line reaches the limit; the trend's last
        step when the line is at the limit there; None when the line is flat or moves
        away from the limit (including a line already past it).
    """
    distance = limit - trend.level
    if distance == 0:
        return math.ceil(trend.end)
    if trend.slope == 0 or (distance > 0) != (trend.slope > 0):
        return None
    return math.ceil(trend.end + distance / trend.slope)


def step_spread(values: Sequence[float]) -> float:
    """How much a series typically moves from one point to the next.

    Returns:
        The median of the absolute differences of consecutive values; 0 with fewer
        than 2 values.
    """
    if len(values) < 2:
        return 0.0
    return median([abs(later - earlier) for earlier, later in zip(values, values[1:])])


def _check_lengths(steps: Sequence[float], values: Sequence[float]) -> None:
    if len(steps) != len(values):
        raise ValueError(
            "`steps` and `values` must have the same length. "
            f"Received: len(steps)={len(steps)}, len(values)={len(values)}"
        )
