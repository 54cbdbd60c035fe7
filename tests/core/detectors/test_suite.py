"""The detector suite and the protocol every detector shares."""

import pytest

from gradient_doctor.core.detectors import (
    DeadUnitsDetector,
    Detector,
    DetectorSuite,
    HeadroomDetector,
    LossSpikeDetector,
    default_detectors,
)
from gradient_doctor.core.records import HeadroomSample, LayerRecord, StepRecord


def test_every_default_detector_follows_the_protocol():
    detectors = default_detectors()
    assert len(detectors) == 6
    assert all(isinstance(detector, Detector) for detector in detectors)
    assert len({type(detector) for detector in detectors}) == 6


def test_suite_feeds_all_detectors_and_orders_findings_by_step():
    suite = DetectorSuite([LossSpikeDetector(), DeadUnitsDetector(), HeadroomDetector()])
    for step in range(200):
        sample = HeadroomSample(
            "e", "Exp", None, None, None, None, "float32", "max_input", 1.0, 88.72
        )
        if step >= 150:
            sample = HeadroomSample(
                "e", "Exp", None, None, None, None, "float32", "max_input", 86.0, 88.72
            )
        suite.observe(
            StepRecord(
                step,
                loss=9.0 if step == 120 else 1.0 + 0.01 * (step % 3),
                layers=(LayerRecord("a", dead_fraction=0.99),),
                headroom=(sample,),
            )
        )
    assert [(finding.category, finding.step) for finding in suite.findings()] == [
        ("dead_units", 19),
        ("loss_spike", 120),
        ("forward_overflow", 150),
    ]


def test_default_suite_is_quiet_on_a_healthy_run():
    suite = DetectorSuite()
    for step in range(300):
        suite.observe(
            StepRecord(
                step,
                loss=1.0 / (1 + step / 100),
                grad_norm=1.0,
                layers=(
                    LayerRecord("a", grad_norm=0.5, dead_fraction=0.3, saturated_fraction=0.1),
                    LayerRecord("b", grad_norm=0.2, dead_fraction=0.4),
                ),
            )
        )
    assert suite.findings() == []


def test_suite_rejects_what_is_not_a_detector():
    with pytest.raises(TypeError, match=r"Received: detectors\[1\]=42"):
        DetectorSuite([HeadroomDetector(), 42])
