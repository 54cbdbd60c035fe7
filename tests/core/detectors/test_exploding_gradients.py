"""Exploding gradients: layers whose gradient norm grows exponentially, caught before the NaN."""

import math

import pytest

from gradient_doctor.core.detectors import ExplodingGradientsDetector
from gradient_doctor.core.evidence import TrainingSetup

DEEP = [f"dense_{index}" for index in range(1, 6)]


def _story3(step, layer, rng):
    """Norms steady near 1 until step 205, then +25% a step in the deep layers (NaN at 238)."""
    noise = math.exp(rng.gauss(0.0, 0.3))
    if layer in DEEP and step > 205:
        return noise * 1.25 ** (step - 205)
    return noise


def _story3_records(layer_record, rng, steps=238):
    layers = ["dense", *DEEP]
    return [
        layer_record(step, **{layer: _story3(step, layer, rng) for layer in layers})
        for step in range(steps)
    ]


def test_story3_names_the_exploding_layers_before_the_nan(layer_record, run, rng):
    history = run(ExplodingGradientsDetector(), _story3_records(layer_record, rng))
    first = next(step for step, findings in enumerate(history) if findings)
    assert 215 <= first < 238
    (warning,) = history[-1]
    assert warning.category == "exploding_gradients"
    assert warning.step == first
    assert warning.explanation.startswith(
        "Gradient norms are growing exponentially in 5 layers (`dense_1`, `dense_2`, `dense_3`,"
    )
    assert "`dense`," not in warning.explanation and "(`dense`" not in warning.explanation
    assert "% per step" in warning.explanation
    assert [fix.family for fix in warning.fixes][:2] == ["lower_learning_rate", "gradient_clipping"]


def test_fixes_name_the_users_learning_rate(layer_record, run, rng):
    detector = ExplodingGradientsDetector(setup=TrainingSetup(learning_rate=2.0))
    (warning,) = run(detector, _story3_records(layer_record, rng))[-1]
    assert "from 2 to 0.2" in warning.fixes[0].title


def test_one_warning_updated_not_repeated(layer_record, run, rng):
    history = run(ExplodingGradientsDetector(), _story3_records(layer_record, rng))
    first = next(step for step, findings in enumerate(history) if findings)
    assert all(len(findings) == 1 for findings in history[first:])
    assert {findings[0].step for findings in history[first:]} == {first}


def test_healthy_noisy_norms_are_quiet(layer_record, run, rng):
    records = [
        layer_record(step, **{layer: math.exp(rng.gauss(0.0, 1.0)) for layer in DEEP})
        for step in range(2000)
    ]
    assert run(ExplodingGradientsDetector(), records)[-1] == []


def test_slow_growth_is_not_an_explosion(layer_record, run, rng):
    # x10 over 1000 steps: a trend, but nowhere near x100 within a window.
    records = [
        layer_record(step, dense=10 ** (step / 1000) * math.exp(rng.gauss(0.0, 0.1)))
        for step in range(1000)
    ]
    assert run(ExplodingGradientsDetector(), records)[-1] == []


def test_global_norm_alone(run, rng):
    from gradient_doctor.core.records import StepRecord

    records = [StepRecord(step, grad_norm=1.3**step) for step in range(40)]
    (warning,) = run(ExplodingGradientsDetector(), records)[-1]
    assert warning.explanation.startswith("The global gradient norm is growing exponentially")
    assert "~30% per step" in warning.explanation


def test_one_layer(layer_record, run):
    records = [layer_record(step, dense_9=1.5**step, dense=1.0) for step in range(30)]
    (warning,) = run(ExplodingGradientsDetector(), records)[-1]
    assert warning.explanation.startswith(
        "The gradient norm of layer `dense_9` is growing exponentially: from "
    )


def test_zero_and_non_finite_norms_are_skipped(layer_record, run):
    records = [layer_record(step, dense=value) for step, value in enumerate([0.0, math.inf] * 20)]
    assert run(ExplodingGradientsDetector(), records)[-1] == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": 2}, r"^`window` must be an int of at least 3. Received: window=2$"),
        ({"min_points": 50}, r"`min_points` must be at most `window` \(30\)"),
        ({"growth_factor": 1}, r"`growth_factor` must be a float > 1. Received: growth_factor=1"),
    ],
)
def test_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ExplodingGradientsDetector(**kwargs)


def test_a_layer_waking_up_while_the_global_norm_stays_flat_is_no_explosion(layer_record, run):
    # A GAN generator's first layer: its gradient grows 150x from 0.002 while the
    # discriminator is still random, the global norm flat near 0.6; nothing overflows.
    import dataclasses

    def record(step, first, overall):
        return dataclasses.replace(
            layer_record(step, **{"G.0": first, "D.0": 0.5}), grad_norm=overall
        )

    waking = [record(step, 0.002 * 1.2**step, 0.6) for step in range(30)]
    assert run(ExplodingGradientsDetector(), waking)[-1] == []
    # The same layer's growth carrying the global norm with it is an explosion.
    exploding = [record(step, 0.002 * 1.3**step, 0.6 + 0.002 * 1.3**step) for step in range(40)]
    (warning,) = run(ExplodingGradientsDetector(), exploding)[-1]
    assert "`G.0`" in warning.explanation


def test_gradients_waking_up_far_below_any_overflow_are_no_explosion_until_they_grow_on(run):
    # A sparse-reward agent: its gradients grow from 6.5e-5 to 0.0095 as the first
    # rewards arrive, as fast as an explosion but nowhere near an overflow.
    from gradient_doctor.core.records import StepRecord

    waking = [StepRecord(step, grad_norm=6.5e-5 * 1.2**step) for step in range(28)]
    assert waking[-1].grad_norm < 0.01
    assert run(ExplodingGradientsDetector(), waking)[-1] == []
    # Growing on at the same rate, it is warned of once it passes a norm of 1.
    growing = [StepRecord(step, grad_norm=6.5e-5 * 1.2**step) for step in range(60)]
    findings = run(ExplodingGradientsDetector(), growing)
    first = next(step for step, found in enumerate(findings) if found)
    assert growing[first].grad_norm >= 1.0 > growing[first - 1].grad_norm


def test_the_warning_gives_the_norms_measured_at_the_windows_ends_not_the_fit(run):
    # A GRU at a high rate: the norm rose 2.84 -> 6.8e27 over ten steps, faster at first;
    # a fit's value at step 0 (0.0046) was no norm the run ever had.
    from gradient_doctor.core.records import StepRecord

    norms = [2.84, 53.9, 2329.2, 2.53e5, 4.61e8, 2.40e10, 1.29e13, 6.91e16, 1.62e21, 4.99e23]
    records = [StepRecord(step, grad_norm=norm) for step, norm in enumerate([*norms, 6.81e27])]
    warning = next(findings for findings in run(ExplodingGradientsDetector(), records) if findings)[
        0
    ]
    assert "from 2.8 at step 0 to " in warning.explanation, warning.explanation


def test_a_warning_updated_past_its_first_window_says_when_it_was_first_seen(
    layer_record, run, rng
):
    # Growing from step 10 for 60 steps: the warning is raised early, then updated with
    # the fastest window, which starts later than the step the warning keeps.
    records = [
        layer_record(step, dense=math.exp(rng.gauss(0.0, 0.1)) * 1.3 ** max(0, step - 10))
        for step in range(70)
    ]
    history = run(ExplodingGradientsDetector(), records)
    (warning,) = history[-1]
    start = int(warning.explanation.split(" at step ")[1].split(" ")[0])
    assert start > warning.step  # the window described began after the warning's step
    assert f"(first seen growing at step {warning.step})" in warning.explanation
    # When first raised, the window it described began before its step: nothing to add.
    (first,) = next(findings for findings in history if findings)
    assert "first seen growing" not in first.explanation
