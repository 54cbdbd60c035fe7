"""Exploding gradients read from the trend of the gradient norm."""

import pytest

from gradient_doctor.core.evidence import StepHistory
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.rules.exploding_gradients import norm_growth

GROWING = (0.8, 1.5, 3.0, 40.0, 900.0, 3.1e5)


def matmul_grad(make_evidence, make_stats, **kwargs):
    return make_evidence(
        op="MatMul",
        code=None,
        phase="backward",
        gradient_of="MatMul",
        inputs=(make_stats(min=-1e20, max=1e20),),
        outputs=(make_stats(inf=3),),
        **kwargs,
    )


def test_growth_is_quoted_with_steps(make_evidence, make_stats, families):
    evidence = matmul_grad(make_evidence, make_stats, grad_norms=GROWING, learning_rate=1e-3)
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "exploding_gradients"
    assert "gradient norm grew from 0.8 at step 10 to 3.1e+05 at step 15" in (diagnosis.explanation)
    assert "first in the gradient of MatMul" in diagnosis.explanation
    assert families(diagnosis) == [
        "lower_learning_rate",
        "gradient_clipping",
        "better_init",
        "batch_normalization",
    ]
    assert "learning_rate=0.0001)  # was 0.001" in diagnosis.fixes[0].code
    assert "global_clipnorm=1.0" in diagnosis.fixes[1].code


def test_clipping_already_on_is_said(make_evidence, make_stats, families):
    evidence = matmul_grad(make_evidence, make_stats, grad_norms=GROWING, clipping="clipnorm=1.0")
    diagnosis = diagnose(evidence)
    assert "Clipping was already on (clipnorm=1.0)" in diagnosis.explanation
    assert families(diagnosis)[-1] == "gradient_clipping"
    assert "already on" in diagnosis.fixes[-1].title


def test_trend_applies_without_an_origin(make_evidence):
    evidence = make_evidence(with_origin=False, phase=None, grad_norms=GROWING)
    assert diagnose(evidence).category == "exploding_gradients"


@pytest.mark.parametrize(
    ("norms", "exploding"),
    [
        (GROWING, True),
        ((1.0, 0.5, 150.0), True),  # a factor of 150 from the low point
        ((1.0, 2.0, 4.0, 8.0, 16.0), True),  # steady rise, 16x
        ((1.0, 12.0, 1.0, 12.0, 1.0, 12.0), False),  # noisy, 12x, not steady
        ((1.0, 2.0, 4.0), False),  # steady but only 4x
        ((5.0, None, 6.0, float("nan"), 7.0), False),
        ((0.8, 3.1e5), False),  # too few points
    ],
)
def test_norm_growth_thresholds(norms, exploding):
    history = StepHistory(steps=tuple(range(len(norms))), grad_norms=norms)
    assert (norm_growth(history) is not None) is exploding


def test_growth_measures_from_the_low_point_before_the_peak():
    history = StepHistory(grad_norms=(3.0, 0.5, 2.0, 500.0, 80.0))
    growth = norm_growth(history)
    assert (growth.low_step, growth.low, growth.peak_step, growth.peak) == (1, 0.5, 3, 500.0)
    assert growth.factor == 1000.0


def test_exp_origin_is_not_blamed_on_growth(make_evidence):
    assert diagnose(make_evidence(grad_norms=GROWING)).category == "forward_overflow"
