"""Robust trends and forecasts: noisy, flat, decreasing and plateau-then-rise series."""

import random

import pytest

from gradient_doctor.core.forecast import (
    Trend,
    crossing_step,
    median,
    robust_slope,
    robust_trend,
    step_spread,
)


def _noisy(function, steps, sigma, seed=0):
    rng = random.Random(seed)
    return [function(step) + rng.gauss(0.0, sigma) for step in steps]


def _forecast(steps, values, limit):
    """Where a clear trend of the series reaches `limit`, as the headroom detector asks it."""
    trend = robust_trend(steps, values)
    if trend is None or not trend.is_clear():
        return None
    return crossing_step(trend, limit)


def test_median():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    with pytest.raises(ValueError, match="`values` must not be empty"):
        median([])


def test_slope_of_an_exact_line_with_uneven_steps():
    steps = [0, 1, 3, 7, 8, 20]
    assert robust_slope(steps, [2.0 * step + 1.0 for step in steps]) == pytest.approx(2.0)


def test_slope_ignores_a_fifth_of_wild_outliers():
    steps = list(range(100))
    values = [0.5 * step for step in steps]
    for index in range(0, 100, 5):
        values[index] = 1e6
    assert robust_slope(steps, values) == pytest.approx(0.5)


def test_slope_needs_two_points_at_distinct_steps():
    assert robust_slope([3], [1.0]) is None
    assert robust_slope([3, 3], [1.0, 2.0]) is None
    with pytest.raises(ValueError, match=r"same length. Received: len\(steps\)=2, len\(values\)=1"):
        robust_slope([1, 2], [1.0])


def test_trend_of_an_exact_line():
    trend = robust_trend([0, 1, 2, 3], [1.0, 3.0, 5.0, 7.0])
    assert (trend.slope, trend.level, trend.noise) == (2.0, 7.0, 0.0)
    assert trend.value_at(5) == 11.0
    assert trend.change == 6.0
    assert trend.is_clear()


def test_noisy_rise_is_clear_and_its_slope_close():
    steps = list(range(1000, 1100))
    trend = robust_trend(steps, _noisy(lambda step: 0.05 * step, steps, sigma=0.3))
    assert trend.slope == pytest.approx(0.05, rel=0.2)
    assert trend.noise == pytest.approx(0.3, rel=0.3)
    assert trend.is_clear()


@pytest.mark.parametrize("seed", range(5))
def test_flat_noise_is_not_a_trend(seed):
    steps = list(range(100))
    trend = robust_trend(steps, _noisy(lambda step: 83.5, steps, sigma=0.4, seed=seed))
    assert not trend.is_clear()
    assert _forecast(steps, _noisy(lambda step: 83.5, steps, 0.4, seed), 88.72) is None


def test_constant_series_is_not_a_trend():
    trend = robust_trend(list(range(10)), [5.0] * 10)
    assert trend.slope == 0.0 and not trend.is_clear()
    assert crossing_step(trend, 6.0) is None


def test_too_short_a_series_has_no_trend():
    assert robust_trend([0, 1], [0.0, 1.0]) is None


def test_decreasing_series_forecasts_reaching_a_lower_limit():
    steps = list(range(0, 500, 5))  # recorded every 5 steps
    values = _noisy(lambda step: 1.0 - step / 1000.0, steps, sigma=0.01)
    crossing = _forecast(steps, values, 0.0)
    assert crossing == pytest.approx(1000, rel=0.05)
    assert _forecast(steps, values, 2.0) is None  # moving away from it


def test_linear_rise_forecast_long_before_the_limit():
    limit = 88.72

    def rise(step):
        return 10.0 + (limit - 10.0) * step / 2400

    steps = list(range(1300, 1400))
    crossing = _forecast(steps, _noisy(rise, steps, sigma=0.5), limit)
    assert 2400 / 2 <= crossing <= 2400 * 2
    assert crossing == pytest.approx(2400, rel=0.15)


def test_plateau_then_rise():
    def series(step):
        return 20.0 if step < 500 else 20.0 + 0.1 * (step - 500)

    plateau = list(range(400, 500))
    assert _forecast(plateau, _noisy(series, plateau, 0.3), 88.72) is None
    rising = list(range(550, 650))
    crossing = _forecast(rising, _noisy(series, rising, 0.3), 88.72)
    assert crossing == pytest.approx(500 + 687, rel=0.05)
    # Half plateau, half rise: the robust line sees the rise, only slower.
    mixed = list(range(450, 550))
    trend = robust_trend(mixed, _noisy(series, mixed, 0.3))
    assert trend.slope > 0 and trend.is_clear()


def test_crossing_step_cases():
    rising = Trend(slope=0.5, level=10.0, start=0, end=100, noise=0.0)
    assert crossing_step(rising, 20.0) == 120
    assert crossing_step(rising, 10.0) == 100
    assert crossing_step(rising, 5.0) is None  # already past it, moving away
    assert crossing_step(Trend(0.0, 10.0, 0, 100, 0.0), 20.0) is None
    falling = Trend(slope=-0.3, level=1.0, start=0, end=100, noise=0.0)
    assert crossing_step(falling, 0.0) == 104


def test_rounding_sized_changes_are_not_a_trend():
    trend = Trend(slope=1e-12, level=1.0, start=0, end=100, noise=0.0)
    assert not trend.is_clear()


def test_step_spread():
    assert step_spread([1.0]) == 0.0
    assert step_spread([0.0, 1.0, 0.0, 2.0]) == 1.0
