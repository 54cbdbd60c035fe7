"""Silent failures, decided on synthetic records: standing warnings whose loss never improved."""

import math
import random

import pytest

from gradient_doctor.core.detectors import (
    DeadUnitsDetector,
    SaturationDetector,
    VanishingGradientsDetector,
)
from gradient_doctor.core.detectors.protocol import Standing
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.records import LayerRecord, StepRecord
from gradient_doctor.core.silent_failures import silent_failures

STEPS = 400


def _gradients(step, first_layer):
    layers = (LayerRecord("dense", grad_norm=first_layer), LayerRecord("dense_1", grad_norm=1e-2))
    return StepRecord(step, layers=layers + (LayerRecord("dense_2", grad_norm=3e-2),))


def _vanishing(until=STEPS, recovers_at=None):
    """A detector fed a first layer whose gradient is 1e-9 of the others' (until it recovers)."""
    detector = VanishingGradientsDetector()
    for step in range(until):
        tiny = recovers_at is None or step < recovers_at
        detector.observe(_gradients(step, 1e-9 if tiny else 5e-3))
    return detector


def _losses(values):
    values = list(values)
    return list(range(len(values))), values


def _noisy(rng, level, spread=0.05):
    return level * math.exp(rng.gauss(0.0, spread))


def _judge(detector, losses, **kwargs):
    steps, values = losses
    return silent_failures(detector.standing(), steps, values, len(values), **kwargs)


@pytest.fixture
def rng():
    return random.Random(7)


def test_vanishing_gradients_with_a_flat_loss_are_a_problem(rng):
    detector = _vanishing()
    (problem,) = _judge(detector, _losses(_noisy(rng, 0.693) for _ in range(STEPS)))
    assert problem.category == "vanishing_gradients"
    assert problem.step == 19  # where the condition began to hold
    assert problem.explanation.startswith("Gradients vanish in layer `dense`")
    assert "held from step 19 to the end of the run (step 399)" in problem.explanation
    assert "the loss did not improve: about 0.7 over the last steps, against 0.68" in (
        problem.explanation
    )
    assert [fix.family for fix in problem.fixes] == [
        "better_init",
        "batch_normalization",
        "activation_change",
    ]


def test_a_warning_that_resolved_by_itself_stays_a_warning(rng):
    # The slow starter: the first layer's gradient vanishes, then recovers; the loss is
    # flat throughout the window judged (the worst case for the loss test).
    detector = _vanishing(recovers_at=250)
    assert detector.findings()  # it was warned about
    assert detector.standing() == []
    assert _judge(detector, _losses(_noisy(rng, 0.693) for _ in range(STEPS))) == ()


def test_a_loss_still_falling_is_learning(rng):
    falling = [_noisy(rng, 2.0 * math.exp(-step / 300)) for step in range(STEPS)]
    assert _judge(_vanishing(), _losses(falling)) == ()


def test_a_run_that_learned_then_levelled_off_has_converged(rng):
    # Warnings that stand at a converged run's end are not a failure: the loss fell far.
    converged = [_noisy(rng, 0.2 + 2.0 * math.exp(-step / 40)) for step in range(STEPS)]
    assert _judge(_vanishing(), _losses(converged)) == ()


def test_a_condition_held_briefly_is_not_sustained(rng):
    detector = _vanishing(until=90)  # standing from step 19 to 89: 70 steps
    assert detector.standing()
    assert _judge(detector, _losses(_noisy(rng, 0.693) for _ in range(90))) == ()


def test_a_condition_held_for_a_small_share_of_a_long_run_is_not_sustained(rng):
    detector = _vanishing()
    steps, values = _losses(_noisy(rng, 0.693) for _ in range(STEPS))
    assert silent_failures(detector.standing(), steps, values, 4 * STEPS) == ()


def test_several_optimizers_are_not_judged_by_one_loss(rng):
    flat = _losses(_noisy(rng, 0.693) for _ in range(STEPS))
    assert _judge(_vanishing(), flat, several_objectives=True) == ()


def test_a_loss_that_starts_at_or_below_zero_is_not_judged_by_its_level(rng):
    # A policy gradient's surrogate with an entropy bonus: -0.016 at the start, rising
    # to about 0 as the policy learns to earn every reward (its level is no measure).
    surrogate = [-0.016 * math.exp(-step / 20) + rng.gauss(0.0, 1e-6) for step in range(STEPS)]
    assert _judge(_vanishing(), _losses(surrogate)) == ()
    # The same stretch of a loss with a floor (cross-entropy near ln 2) is a problem.
    assert len(_judge(_vanishing(), _losses(_noisy(rng, 0.693) for _ in range(STEPS)))) == 1


def test_a_loss_that_never_moves_is_not_measured():
    # The guard records 0 when it cannot see the loss: that is no evidence of a stall.
    assert _judge(_vanishing(), _losses([0.0] * STEPS)) == ()


def test_noise_alone_does_not_make_a_stalled_loss_look_improving():
    # Per-batch losses scattered by 30%: in this draw the last quarter's median lands 6.5%
    # below the third's by chance (a standard error of the difference is about 5%); the
    # stall is still a stall.
    rng = random.Random(17)
    noisy = [_noisy(rng, 3.0, spread=0.3) for _ in range(STEPS)]
    (problem,) = _judge(_vanishing(), _losses(noisy))
    assert problem.category == "vanishing_gradients"


def test_a_thinned_loss_series_is_judged_on_its_steps(rng):
    steps = list(range(0, STEPS, 4))
    values = [_noisy(rng, 0.693) for _ in steps]
    (problem,) = silent_failures(_vanishing().standing(), steps, values, STEPS)
    assert problem.step == 19


def _fractions(detector, field, layer, fraction, trained, steps=STEPS, every=10):
    for step in range(0, steps, every):
        record = LayerRecord(layer, weight_norm=1.0 if trained else None, **{field: fraction})
        detector.observe(StepRecord(step, layers=(record,)))
    return detector


@pytest.mark.parametrize(
    ("detector", "field", "category"),
    [
        (DeadUnitsDetector, "dead_fraction", "dead_units"),
        (SaturationDetector, "saturated_fraction", "saturation"),
    ],
)
def test_stuck_units_of_a_trained_layer_with_a_flat_loss_are_a_problem(
    rng, detector, field, category
):
    stuck = _fractions(detector(), field, "dense", 0.97, trained=True)
    (problem,) = _judge(stuck, _losses(_noisy(rng, 1.2) for _ in range(STEPS)))
    assert problem.category == category
    assert problem.step == 0
    assert "`dense` (97% since step 0)" in problem.explanation


def test_dead_units_of_a_frozen_layer_are_no_failure_of_training(rng):
    frozen = _fractions(DeadUnitsDetector(), "dead_fraction", "extractor", 0.97, trained=False)
    assert frozen.findings()  # still warned about
    assert frozen.standing() == []


def test_units_that_came_back_are_no_longer_standing():
    detector = _fractions(DeadUnitsDetector(), "dead_fraction", "dense", 0.97, trained=True)
    detector.observe(StepRecord(STEPS, layers=(LayerRecord("dense", dead_fraction=0.2),)))
    assert detector.findings() and detector.standing() == []


def test_each_standing_warning_is_judged_on_its_own_stretch(rng):
    finding = Finding("saturation", 0, "forward", None, "Units saturate.")
    losses = [_noisy(rng, 2.0 * math.exp(-step / 100)) for step in range(200)]
    losses += [_noisy(rng, losses[-1]) for _ in range(200)]
    # Standing since step 0 the loss fell from 2 to 0.3: learning. Standing only over
    # the flat end, it is judged there, and the run's start still shows the progress.
    steps, values = _losses(losses)
    assert silent_failures([Standing(finding, 0, 399)], steps, values, 400) == ()
    assert silent_failures([Standing(finding, 250, 399)], steps, values, 400) == ()


def test_a_loss_that_fell_a_little_then_stalled_is_said_to_have_barely_improved(rng):
    # 0.83 -> 0.69 (a sigmoid net stalled at chance): it fell, short of real progress.
    detector = _vanishing()
    start = [_noisy(rng, 0.83, 0.01) for _ in range(20)]
    (problem,) = _judge(
        detector, _losses([*start, *(_noisy(rng, 0.69, 0.01) for _ in range(STEPS - 20))])
    )
    assert "the loss barely improved: about 0.69 over the last steps, against 0.83 when " in (
        problem.explanation
    )
    assert "(17% lower, and flat since)" in problem.explanation


def test_a_run_whose_first_updates_blew_the_loss_up_is_judged_from_its_first_loss(rng):
    # Adam at a rate far too high: 631, then 4.5e8, 1.2e5, 8.4e5, ..., back to a constant
    # predictor's ~640, its ReLUs dead: the first points' median is no start.
    blown = [631.0, 4.5e8, 1.2e5, 8.4e5, 5.6e5, 5.4e4, 1.7e3, 829.0, 1011.0, 874.0]
    flat = [_noisy(rng, 640.0) for _ in range(STEPS - len(blown))]
    (problem,) = _judge(_vanishing(), _losses(blown + flat))
    assert "over the last steps, against 630 when the run started" in (problem.explanation)
    assert "the loss did not improve" in problem.explanation
