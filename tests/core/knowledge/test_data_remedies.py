"""Unscaled input features: normalize_input comes first, with the reason."""

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.remedies.data import fit_to_data

LOWER = Fix("lower_learning_rate", "lower", "lr")


def _diagnosis(category="exploding_gradients"):
    return Diagnosis(category, "The gradient norm grew.", (), (LOWER,))


def test_unscaled_features_put_standardisation_first_and_say_why():
    evidence = Evidence(step=1, phase=None, origin=None, input_scale=("x", 19540.0))
    fitted = fit_to_data(_diagnosis(), evidence)
    assert [fix.family for fix in fitted.fixes] == ["normalize_input", "lower_learning_rate"]
    assert "The input `x` reaches 19540: features that far from unit scale" in fitted.explanation


def test_scaled_features_and_other_problems_are_left_alone():
    scaled = Evidence(step=1, phase=None, origin=None, input_scale=("x", 3.2))
    assert fit_to_data(_diagnosis(), scaled) == _diagnosis()
    unscaled = Evidence(step=1, phase=None, origin=None, input_scale=("x", 1e4))
    missing = Diagnosis("disconnected_gradients", "x", (), ())
    assert fit_to_data(missing, unscaled) == missing
