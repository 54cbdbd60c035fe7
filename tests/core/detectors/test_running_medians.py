"""The detectors' running medians are exactly `forecast.median` of the same values: the sorted
window's median and median absolute deviation, and the median of the other layers' medians."""

import random

import pytest

from gradient_doctor.core.detectors.sorted_window import SortedWindow
from gradient_doctor.core.detectors.vanishing_gradients import _median_without
from gradient_doctor.core.forecast import median


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 100])
def test_the_running_statistics_equal_those_of_the_window_sorted_afresh(size):
    rng = random.Random(size)
    window, recent = SortedWindow(size), []
    for step in range(600):
        # Ties, repeats of the median itself, and values far apart.
        value = rng.choice(
            [rng.gauss(0.0, 1.0), float(rng.randint(-3, 3)), 1e6 * rng.random(), 0.0]
        )
        window.append(value)
        recent = (recent + [value])[-size:]
        center = median(recent)
        assert len(window) == len(recent)
        assert window.full == (len(recent) == size)
        assert window.any_nonzero() == any(recent)
        assert window.median() == center
        for around in (center, center + 0.5, recent[0], -1e9, 1e9):
            expected = median([abs(v - around) for v in recent])
            assert window.median_abs_deviation(around) == expected, (step, around)


def test_an_empty_window_has_no_median():
    with pytest.raises(ValueError, match="empty"):
        SortedWindow(3).median()
    with pytest.raises(ValueError, match="empty"):
        SortedWindow(3).median_abs_deviation(0.0)
    with pytest.raises(ValueError, match="`size` must be an int of at least 1"):
        SortedWindow(0)


@pytest.mark.parametrize("count", [2, 3, 4, 5, 16, 51])
def test_the_median_of_the_others_is_the_median_of_the_list_less_one(count):
    rng = random.Random(count)
    for _ in range(200):
        values = [rng.choice([rng.random(), float(rng.randint(0, 2))]) for _ in range(count)]
        ordered = sorted(values)
        for index, value in enumerate(values):
            others = values[:index] + values[index + 1 :]
            assert _median_without(ordered, value) == median(others)


def test_the_windows_quantile_is_the_nearest_rank_at_or_above():
    from gradient_doctor.core.detectors.sorted_window import SortedWindow

    window = SortedWindow(10)
    for value in (5.0, 1.0, 4.0, 2.0, 3.0):
        window.append(value)
    assert [window.quantile(q) for q in (0.0, 0.2, 0.5, 0.9, 1.0)] == [1.0, 1.0, 3.0, 5.0, 5.0]
