"""Step records, headroom samples and the record log (bounded ring plus thinned history)."""

import math

import pytest

from gradient_doctor.core.records import (
    HEADROOM_KINDS,
    HeadroomSample,
    LayerRecord,
    RecordLog,
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


def test_record_log_keeps_recent_records_in_a_ring():
    log = RecordLog(capacity=5, history_size=4)
    assert log.latest is None
    for step in range(12):
        log.append(StepRecord(step, loss=float(step)))
    assert [record.step for record in log.recent()] == [7, 8, 9, 10, 11]
    assert log.latest.step == 11
    assert log.count == 12


def test_record_log_history_spans_the_whole_run_in_bounded_memory():
    log = RecordLog(capacity=10, history_size=50)
    for step in range(10_000):
        log.append(StepRecord(step))
    steps = [record.step for record in log.history()]
    assert 25 <= len(steps) <= 50
    assert steps[0] == 0 and steps[-1] >= 10_000 - 10_000 // 25
    gaps = {later - earlier for earlier, later in zip(steps, steps[1:])}
    assert len(gaps) == 1  # evenly spaced


def test_timeline_puts_thinned_history_before_the_recent_records():
    log = RecordLog(capacity=10, history_size=8)
    for step in range(100):
        log.append(StepRecord(step))
    steps = [record.step for record in log.timeline()]
    assert steps[-10:] == list(range(90, 100))
    assert steps == sorted(set(steps))
    assert steps[0] == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": 0}, "`capacity` must be an int of at least 1. Received: capacity=0"),
        ({"history_size": 1}, "`history_size` must be an int of at least 2"),
        ({"capacity": 2.5}, "Received: capacity=2.5"),
    ],
)
def test_record_log_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RecordLog(**kwargs)
