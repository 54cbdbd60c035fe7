"""Saturated sigmoid/tanh units: most of a layer sits in the flat ends of the curve."""

import pytest

from gradient_doctor.core.detectors import SaturationDetector


def test_sustained_saturation_is_named(layer_record, run):
    records = [
        layer_record(step, "saturated_fraction", lstm=0.96, dense=0.05) for step in range(100)
    ]
    history = run(SaturationDetector(), records)
    (warning,) = history[-1]
    assert warning.category == "saturation" and warning.step == 19
    assert warning.explanation.startswith(
        "In 1 layer more than 90% of the sigmoid/tanh units sit in the flat ends of the curve "
        "for every example, for 20 records in a row: `lstm` (96% since step 0)."
    )
    assert [fix.family for fix in warning.fixes] == [
        "batch_normalization",
        "normalize_input",
        "activation_change",
    ]
    assert all(len(findings) == 1 for findings in history[19:])


def test_custom_threshold_and_window(layer_record, run):
    records = [layer_record(step, "saturated_fraction", lstm=0.8) for step in range(10)]
    assert run(SaturationDetector(), records)[-1] == []
    (warning,) = run(SaturationDetector(threshold=0.75, window=5), records)[-1]
    assert warning.step == 4
    assert "more than 75%" in warning.explanation and "for 5 records in a row" in (
        warning.explanation
    )


def test_healthy_and_briefly_saturated_layers_are_quiet(layer_record, run):
    records = [
        layer_record(step, "saturated_fraction", lstm=0.95 if step % 20 < 19 else 0.5)
        for step in range(400)
    ]
    assert run(SaturationDetector(), records)[-1] == []


def test_threshold_is_checked():
    with pytest.raises(ValueError, match=r"`threshold` must be a float in \(0, 1\)"):
        SaturationDetector(threshold=0)
