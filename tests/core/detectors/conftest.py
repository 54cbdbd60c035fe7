"""Factories of synthetic step records for the detectors (no framework involved)."""

from __future__ import annotations

import random

import pytest

from gradient_doctor.core.records import HeadroomSample, LayerRecord, StepRecord

EXP_LIMIT = 88.72  # float32 exp overflows above log(3.4e38)


def _headroom_record(
    step: int,
    value: float,
    kind: str = "max_input",
    limit: float = EXP_LIMIT,
    op: str = "Exp",
    key: str | None = None,
    layer: str | None = "message_passing",
    code: str | None = "w = tf.exp(scores)",
    dtype: str = "float32",
    reduction_axis: int | None = 2,  # story 1 sums the exp over its neighbours' axis
) -> StepRecord:
    sample = HeadroomSample(
        key=key or f"{layer}/{op}",
        op=op,
        layer=layer,
        file="train.py" if code is not None else None,
        line=42 if code is not None else None,
        code=code,
        dtype=dtype,
        kind=kind,
        value=value,
        limit=limit,
        reduction_axis=reduction_axis,
    )
    return StepRecord(step, headroom=(sample,))


def _layer_record(step: int, field: str = "grad_norm", **values: float) -> StepRecord:
    layers = tuple(LayerRecord(name, **{field: value}) for name, value in values.items())
    return StepRecord(step, layers=layers)


def _run(detector, records):
    """Feed every record, calling `findings` after each as a live report would."""
    history = []
    for record in records:
        detector.observe(record)
        history.append(detector.findings())
    return history


@pytest.fixture
def headroom_record():
    """Build a `StepRecord` with one headroom sample; defaults describe story 1's Exp."""
    return _headroom_record


@pytest.fixture
def layer_record():
    """Build a `StepRecord` with one `LayerRecord` field per layer: layer_record(7, a=0.1)."""
    return _layer_record


@pytest.fixture
def run():
    """Feed records to a detector; returns its findings after each record."""
    return _run


@pytest.fixture
def rng():
    """A seeded random generator, so the noisy series are the same on every run."""
    return random.Random(1234)
