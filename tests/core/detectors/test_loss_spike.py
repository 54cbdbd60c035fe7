"""Loss spikes against a running median: one warning, naming the largest episode."""

import math

import pytest

from gradient_doctor.core.detectors import LossSpikeDetector
from gradient_doctor.core.detectors.loss_spike import MAX_EPISODES
from gradient_doctor.core.records import StepRecord


def _decaying(step, rng):
    """A healthy loss: decaying from 2 toward 0.5 with +-10% batch noise."""
    return (0.5 + 1.5 * math.exp(-step / 300)) * math.exp(rng.gauss(0.0, 0.1))


def _records(losses):
    return [StepRecord(step, loss=loss) for step, loss in enumerate(losses)]


def test_a_spike_is_reported_with_its_values(run, rng):
    losses = [_decaying(step, rng) for step in range(600)]
    losses[400] = 5.0 * losses[399]
    history = run(LossSpikeDetector(), _records(losses))
    assert history[399] == []
    (warning,) = history[-1]
    assert warning.category == "loss_spike" and warning.step == 400
    assert warning.explanation.startswith("The loss jumped to ")
    assert "at step 400, 5" in warning.explanation
    assert "times the running median" in warning.explanation
    assert "of the last 100 losses (spike threshold " in warning.explanation
    assert [fix.family for fix in warning.fixes] == ["gradient_clipping", "lower_learning_rate"]


def test_an_episode_of_several_steps_is_one_warning(run, rng):
    losses = [_decaying(step, rng) for step in range(600)]
    for step in range(400, 405):
        losses[step] = 4.0 + step - 400
    history = run(LossSpikeDetector(), _records(losses))
    assert all(len(findings) == 1 for findings in history[400:])
    (warning,) = history[-1]
    assert warning.step == 400
    assert "The loss jumped to 8 at step 404" in warning.explanation
    assert "above the threshold for 5 steps, from step 400 to step 404." in warning.explanation


def test_separate_episodes_are_one_warning_about_the_largest(run, rng):
    losses = [_decaying(step, rng) for step in range(600)]
    losses[200], losses[300] = 10.0, 30.0
    (warning,) = run(LossSpikeDetector(), _records(losses))[-1]
    assert warning.step == 200
    assert "The loss jumped to 30 at step 300" in warning.explanation
    assert warning.explanation.endswith(
        "the largest of 2 spike episodes so far, the first at step 200."
    )


def test_many_episodes_are_capped(run, rng):
    losses = [_decaying(step, rng) for step in range(1000)]
    for step in range(100, 1000, 50):
        losses[step] = 20.0
    (warning,) = run(LossSpikeDetector(), _records(losses))[-1]
    assert warning.step == 100
    assert "the largest of 18 spike episodes so far" in warning.explanation
    assert MAX_EPISODES < 18  # episodes past the cap are counted, not kept


def test_healthy_and_noisy_losses_are_quiet(run, rng):
    decaying = [_decaying(step, rng) for step in range(3000)]
    assert run(LossSpikeDetector(), _records(decaying))[-1] == []
    noisy = [1.0 + rng.gauss(0.0, 0.2) for _ in range(3000)]
    assert run(LossSpikeDetector(), _records(noisy))[-1] == []


def test_no_spike_during_warmup(run):
    losses = [1.0, 1.0, 100.0] + [1.0] * 50
    assert run(LossSpikeDetector(), _records(losses))[-1] == []


def test_a_settled_loss_does_not_flag_rounding_bumps(run):
    losses = [0.1] * 200 + [0.11] + [0.1] * 10
    assert run(LossSpikeDetector(), _records(losses))[-1] == []


def test_missing_and_non_finite_losses_are_skipped(run):
    records = [StepRecord(step, loss=None if step % 2 else math.nan) for step in range(100)]
    assert run(LossSpikeDetector(), records)[-1] == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": 2}, r"^`window` must be an int of at least 3. Received: window=2$"),
        ({"warmup": 200}, r"`warmup` must be at most `window` \(100\). Received: warmup=200"),
        ({"sigmas": 0}, r"`sigmas` must be a float > 0. Received: sigmas=0"),
        ({"min_rise": -0.1}, r"`min_rise` must be a float >= 0"),
        ({"min_scale_rise": -1}, r"`min_scale_rise` must be a float >= 0"),
    ],
)
def test_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LossSpikeDetector(**kwargs)


def _converging(step, rng):
    """A loss that converges from 2.3 to about 1e-4, with +-50% batch noise."""
    return (2.3 * math.exp(-step / 40) + 1e-4) * math.exp(rng.gauss(0.0, 0.5))


def test_a_converged_loss_does_not_flag_a_hard_batch(run, rng):
    losses = [_converging(step, rng) for step in range(600)]
    losses[500] = 8 * losses[499]  # eight times the median, 0.04% of the start
    assert run(LossSpikeDetector(), _records(losses))[-1] == []


def test_a_converged_loss_still_flags_a_rise_on_the_runs_scale(run, rng):
    losses = [_converging(step, rng) for step in range(600)]
    losses[500] = 0.5  # a fifth of where the run began
    (warning,) = run(LossSpikeDetector(), _records(losses))[-1]
    assert warning.step == 500 and "The loss jumped to 0.5 at step 500" in warning.explanation


def _hinge(step, rng):
    """A triplet or hinge loss once the margin is met: 0 on most batches, 0.002-0.011
    on about a third of them (a few hard triplets)."""
    return rng.uniform(0.002, 0.011) if rng.random() < 0.35 else 0.0


def test_a_loss_that_is_zero_on_most_batches_does_not_flag_its_ordinary_batches(run, rng):
    # Its median is 0 and so is its MAD: a batch at 0.0068 was "a spike" ten times over.
    losses = [_hinge(step, rng) for step in range(300)]
    assert run(LossSpikeDetector(), _records(losses))[-1] == []


def test_a_loss_that_is_zero_on_most_batches_still_flags_a_real_jump(run, rng):
    losses = [_hinge(step, rng) for step in range(300)]
    losses[200] = 0.4  # forty times its largest ordinary batch
    (warning,) = run(LossSpikeDetector(), _records(losses))[-1]
    assert warning.step == 200
