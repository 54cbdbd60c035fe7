"""When a finite run counts as diverged: its loss rose and stayed up, and some layer's
updates were far too large; a loss that rises by design does not count."""

import math

from gradient_doctor.core.divergence import MIN_POINTS, find_divergence

STEPS = list(range(100))
RISING = [0.7 + 0.05 * step for step in STEPS]  # 0.7 -> 5.65
FLAT_WEIGHTS = {"dense": ([0, 50, 99], [10.0, 10.5, 11.0])}
SMALL_UPDATES = {"dense": ([0, 50, 99], [0.002, 0.001, 0.001])}


def test_a_rising_loss_with_weights_grown_tenfold_diverged():
    grown = {"rnn": ([0, 50, 99], [8.0, 400.0, 9000.0]), **FLAT_WEIGHTS}
    found = find_divergence(STEPS, RISING, grown, SMALL_UPDATES)
    assert found is not None
    assert found.layer.layer == "rnn" and math.isclose(found.layer.growth, 9000.0 / 8.0)
    assert math.isclose(found.first_loss, 0.7 + 0.05 * 4.5)  # the first tenth's median
    assert found.last_steps == (90, 99)
    assert found.limit == 2 * found.first_loss
    assert RISING[found.rose_at] > found.limit >= RISING[found.rose_at - 1]


def test_a_rising_loss_with_updates_a_tenth_of_the_weights_diverged():
    huge = {"dense": ([0, 50, 99], [0.2, 0.1, 0.15])}
    found = find_divergence(STEPS, RISING, FLAT_WEIGHTS, huge)
    assert found is not None and math.isclose(found.layer.median_update, 0.15)


def test_a_loss_rising_by_design_with_small_steady_updates_did_not():
    # A DQN's TD loss grows with its values; its weights neither explode nor jump.
    assert find_divergence(STEPS, RISING, FLAT_WEIGHTS, SMALL_UPDATES) is None


def test_without_per_layer_statistics_nothing_is_judged():
    assert find_divergence(STEPS, RISING, {}, {}) is None


def test_a_loss_that_fell_or_rose_a_little_did_not():
    grown = {"rnn": ([0, 99], [8.0, 9000.0])}
    falling = [2.0 - 0.01 * step for step in STEPS]
    assert find_divergence(STEPS, falling, grown, {}) is None
    rose_by_half = [1.0 + 0.005 * step for step in STEPS]
    assert find_divergence(STEPS, rose_by_half, grown, {}) is None


def test_gans_signed_losses_and_short_runs_are_not_judged():
    grown = {"rnn": ([0, 99], [8.0, 9000.0])}
    assert find_divergence(STEPS, RISING, grown, {}, several_objectives=True) is None
    signed = [value - 1.0 for value in RISING]
    assert find_divergence(STEPS, signed, grown, {}) is None
    short = MIN_POINTS - 1
    assert find_divergence(STEPS[:short], RISING[:short], grown, {}) is None
