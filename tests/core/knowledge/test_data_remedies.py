"""Unscaled input features: normalize_input comes first, with the reason."""

from gradient_doctor.core.evidence import Evidence, TargetScale
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


def test_unscaled_targets_put_their_standardisation_first_and_say_why():
    target = TargetScale("`y`", 6.7e5, 4e5, 1.3e5)
    evidence = Evidence(
        step=1, phase=None, origin=None, input_scale=("x", 7.9), target_scale=target
    )
    fitted = fit_to_data(_diagnosis(), evidence)
    assert [fix.family for fix in fitted.fixes] == ["normalize_target", "lower_learning_rate"]
    assert "The targets `y` reach 6.7e+05 (mean 4e+05, std 1.3e+05 in this batch)" in (
        fitted.explanation
    )
    assert "a squared error near its square" in fitted.explanation


def test_unscaled_targets_and_features_both_first_the_targets_before_the_features():
    evidence = Evidence(
        step=1,
        phase=None,
        origin=None,
        input_scale=("x", 5e4),
        target_scale=TargetScale("`y['price']`", 3e5, 2e5, 1e5),
    )
    fitted = fit_to_data(_diagnosis("forward_overflow"), evidence)
    assert [fix.family for fix in fitted.fixes][:2] == ["normalize_target", "normalize_input"]
    assert fitted.explanation.index("The input `x`") < fitted.explanation.index("The targets")


def test_scaled_targets_and_problems_they_do_not_drive_are_left_alone():
    scaled = Evidence(step=1, phase=None, origin=None, target_scale=TargetScale("y", 3, 0, 1))
    assert fit_to_data(_diagnosis(), scaled) == _diagnosis()
    unscaled = Evidence(
        step=1, phase=None, origin=None, target_scale=TargetScale("y", 1e5, 5e4, 2e4)
    )
    missing = Diagnosis("disconnected_gradients", "x", (), ())
    assert fit_to_data(missing, unscaled) == missing


def test_targets_in_the_hundreds_are_not_called_far_from_unit_scale():
    # An autoencoder rebuilding 8-bit pixels (targets up to 242) failed for another reason
    # (its log-variance's exp); targets that size are ones Adam trains on.
    pixels = Evidence(
        step=6, phase=None, origin=None, target_scale=TargetScale("of MseLoss", 242.5)
    )
    assert fit_to_data(_diagnosis(), pixels) == _diagnosis()


def test_a_division_by_a_batch_statistic_keeps_no_claim_that_a_larger_batch_will_not_help():
    # x / x.std(dim=0) on micro-batches of 8: a binary column constant in the batch gives
    # std 0; with batches of 32 the script ran finite. "A larger batch ... computes the
    # forward pass the same way" was not so.
    from gradient_doctor.core.evidence import OpCall
    from gradient_doctor.core.findings import NotFix, SourceLine
    from gradient_doctor.core.knowledge.remedies.data import fit_to_batch_statistics

    larger = NotFix("larger_batch", "computes the forward pass the same way", structural=False)
    diagnosis = Diagnosis("forward_domain", "x", (larger,), (LOWER,))
    std = OpCall("Std", SourceLine("t.py", 18, "return (x - x.mean(dim=0)) / x.std(dim=0)"), ())
    read = Evidence(step=9, phase="forward", origin=None, input_producers=(None, std))
    assert fit_to_batch_statistics(diagnosis, read).not_fixes == ()
    weights = OpCall("MatMul", std.source, ())
    other = Evidence(step=9, phase="forward", origin=None, input_producers=(weights,))
    assert fit_to_batch_statistics(diagnosis, other) == diagnosis


def test_gradients_that_grew_with_both_unscaled_put_the_features_first():
    # A linear regression on a year column (~2000) and prices (8e5): the features set the
    # curvature, so standardised prices alone still went to inf at the same step.
    evidence = Evidence(
        step=16,
        phase=None,
        origin=None,
        input_scale=("read at train.py:30", 2022.0),
        target_scale=TargetScale("of MseLoss", 8.3e5),
    )
    fitted = fit_to_data(_diagnosis(), evidence)
    assert [fix.family for fix in fitted.fixes] == [
        "normalize_input",
        "normalize_target",
        "lower_learning_rate",
    ]
    assert "the loss's curvature grows with the features' square" in fitted.explanation
    assert fitted.explanation.index("The input read at") < fitted.explanation.index("targets")
