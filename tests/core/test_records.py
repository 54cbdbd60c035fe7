"""Step records and headroom samples."""

import math

import pytest

from gradient_doctor.core.records import (
    HEADROOM_KINDS,
    HeadroomSample,
    LayerRecord,
    StepRecord,
)


def _sample(kind="max_input", value=61.3, limit=88.72):
    return HeadroomSample(
        "mp/Exp", "Exp", "mp", "train.py", 42, "w = tf.exp(s)", "float32", kind, value, limit
    )


def test_headroom_kind_is_checked():
    with pytest.raises(ValueError, match=r"`kind` must be one of .*Received: kind='max'"):
        _sample(kind="max")


@pytest.mark.parametrize(
    ("kind", "value", "limit", "gap"),
    [
        ("max_input", 61.3, 88.72, 88.72 - 61.3),
        ("max_abs_value", 60000.0, 65504.0, 5504.0),
        ("abs_input", 0.75, 1.0, 0.25),
        ("min_input", 0.25, 0.0, 0.25),
        ("min_abs_denominator", 1e-3, 0.0, 1e-3),
    ],
)
def test_gap_is_positive_on_the_safe_side(kind, value, limit, gap):
    assert kind in HEADROOM_KINDS
    assert _sample(kind, value, limit).gap == pytest.approx(gap)


def test_layer_values_skip_missing_and_non_finite_fields():
    record = StepRecord(
        3,
        layers=(
            LayerRecord("a", grad_norm=0.5),
            LayerRecord("b"),
            LayerRecord("c", grad_norm=math.nan),
            LayerRecord("d", grad_norm=math.inf, dead_fraction=0.2),
        ),
    )
    assert record.layer_values("grad_norm") == {"a": 0.5}
    assert record.layer_values("dead_fraction") == {"d": 0.2}


def test_measured_values_are_shared_and_fields_measured_nowhere_left_out():
    record = StepRecord(
        3, layers=(LayerRecord("a", grad_norm=0.5), LayerRecord("b", grad_norm=math.inf))
    )
    assert record.measured("grad_norm") == {"a": 0.5}
    assert record.measured("grad_norm") is record.measured("grad_norm")  # gathered once
    assert record.measured("dead_fraction") == {}
    assert list(record.measured_fields()) == ["grad_norm"]
    copy = record.layer_values("grad_norm")
    copy["c"] = 1.0  # the caller's own dict
    assert record.measured("grad_norm") == {"a": 0.5}


def test_measured_fields_keep_the_fields_order_and_the_record_stays_equal():
    layers = (LayerRecord("a", dead_fraction=0.5), LayerRecord("b", grad_norm=1.0))
    record = StepRecord(3, layers=layers)
    assert list(record.measured_fields()) == ["grad_norm", "dead_fraction"]
    assert record == StepRecord(3, layers=layers) and hash(record) == hash(
        StepRecord(3, layers=layers)
    )


def test_a_record_without_layers_measured_nothing_and_names_are_checked():
    record = StepRecord(3, loss=1.0)
    assert record.measured("grad_norm") == {} and record.measured_fields() == {}
    for reader in (StepRecord(3).measured, record.layer_values):
        with pytest.raises(AttributeError, match="no field 'grad'"):
            reader("grad")
    with pytest.raises(AttributeError, match="no field 'grad'"):
        StepRecord(3, layers=(LayerRecord("a", grad_norm=1.0),)).measured("grad")
