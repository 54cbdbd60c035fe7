"""Vanishing gradients: a layer whose gradient norm stays orders of magnitude below the others."""

import math

import pytest

from gradient_doctor.core.detectors import VanishingGradientsDetector


def _noisy(value, rng):
    return value * math.exp(rng.gauss(0.0, 0.5))


def test_layer_far_below_the_others_is_named(layer_record, run, rng):
    records = [
        layer_record(
            step,
            embedding=_noisy(1e-9, rng),
            dense=_noisy(1e-2, rng),
            dense_1=_noisy(3e-2, rng),
            output=_noisy(1e-1, rng),
        )
        for step in range(100)
    ]
    history = run(VanishingGradientsDetector(), records)
    assert history[18] == []  # not before the window is full
    (warning,) = history[-1]
    assert warning.step == 19
    assert warning.category == "vanishing_gradients"
    assert warning.explanation.startswith("Gradients vanish in layer `embedding`: its gradient")
    assert "over the last 20 records" in warning.explanation
    assert [item.remedy for item in warning.not_fixes] == [
        "gradient_clipping",
        "lower_learning_rate",
    ]
    assert [fix.family for fix in warning.fixes] == [
        "better_init",
        "batch_normalization",
        "activation_change",
    ]


def test_one_warning_updated_not_repeated(layer_record, run, rng):
    records = [
        layer_record(step, a=_noisy(1e-9, rng), b=_noisy(1e-9, rng), c=1.0, d=2.0)
        for step in range(300)
    ]
    history = run(VanishingGradientsDetector(), records)
    assert all(len(findings) == 1 for findings in history[19:])
    (warning,) = history[-1]
    assert warning.step == 19
    assert "in 2 layers (`a` and `b`)" in warning.explanation


def test_healthy_spread_of_norms_is_quiet(layer_record, run, rng):
    records = [
        layer_record(
            step, a=_noisy(1e-4, rng), b=_noisy(1e-3, rng), c=_noisy(1e-2, rng), d=_noisy(1.0, rng)
        )
        for step in range(500)
    ]
    assert run(VanishingGradientsDetector(), records)[-1] == []


def test_one_quiet_batch_is_not_sustained(layer_record, run, rng):
    records = [
        layer_record(step, a=1e-12 if step == 50 else _noisy(1e-2, rng), b=_noisy(1e-2, rng))
        for step in range(100)
    ]
    assert run(VanishingGradientsDetector(), records)[-1] == []


def test_absolute_floor_when_the_others_are_not_tiny(layer_record, run, rng):
    # 5e-8 is only 5e-4 of the others (above the ratio) but below the 1e-7 floor.
    records = [layer_record(step, a=_noisy(5e-8, rng) * 0.5, b=1e-4, c=1e-4) for step in range(40)]
    (warning,) = run(VanishingGradientsDetector(), records)[-1]
    assert "`a`" in warning.explanation


def test_converged_model_is_quiet(layer_record, run, rng):
    # Every layer below the floor: the loss is flat everywhere, not a flow problem.
    records = [
        layer_record(step, a=_noisy(1e-9, rng), b=_noisy(2e-9, rng), c=_noisy(1e-8, rng))
        for step in range(100)
    ]
    assert run(VanishingGradientsDetector(), records)[-1] == []


def test_exactly_zero_gradients_are_left_to_the_zero_gradient_check(layer_record, run):
    records = [layer_record(step, unused=0.0, a=1e-2, b=1e-2) for step in range(100)]
    assert run(VanishingGradientsDetector(), records)[-1] == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": 0}, r"^`window` must be an int of at least 3. Received: window=0$"),
        ({"ratio": 1.0}, r"`ratio` must be a float in \(0, 1\). Received: ratio=1.0"),
        ({"floor": -1e-7}, r"`floor` must be a float > 0"),
    ],
)
def test_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VanishingGradientsDetector(**kwargs)


def test_a_layer_with_a_sizeable_gradient_is_not_vanishing_beside_exploding_ones(
    layer_record, run, rng
):
    # A GRU's gradients exploding to 2.5e7 beside dense layers at 1600 and 40: the dense
    # layers' kernels moved from norm 5.6 to 147; they are not where the trouble is.
    records = [
        layer_record(
            step,
            gru=_noisy(2.5e7, rng),
            gru_1=_noisy(3e7, rng),
            dense=_noisy(1600.0, rng),
            dense_1=_noisy(40.0, rng),
        )
        for step in range(100)
    ]
    assert run(VanishingGradientsDetector(), records)[-1] == []


def test_under_a_scale_free_optimizer_the_weights_are_not_said_to_stand_still(
    layer_record, run, rng
):
    from gradient_doctor.core.evidence import TrainingSetup

    records = [
        layer_record(step, embedding=_noisy(1e-9, rng), dense=_noisy(1e-2, rng), out=0.1)
        for step in range(60)
    ]
    setup = TrainingSetup(optimizer="RMSprop")
    (warning,) = run(VanishingGradientsDetector(setup=setup), records)[-1]
    assert "barely move" not in warning.explanation
    assert "RMSprop divides each step by the gradient's own running size" in (warning.explanation)
    (plain,) = run(VanishingGradientsDetector(setup=TrainingSetup(optimizer="SGD")), records)[-1]
    assert plain.explanation.endswith("so its weights barely move.")
