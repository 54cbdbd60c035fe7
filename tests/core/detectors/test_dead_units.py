"""Dead ReLU units: most of a layer's units output 0 for every example, record after record."""

import pytest

from gradient_doctor.core.detectors import DeadUnitsDetector
from gradient_doctor.core.evidence import TrainingSetup


def test_sustained_dead_layer_is_named(layer_record, run):
    records = [
        layer_record(step, "dead_fraction", dense=0.1, dense_1=0.97 if step >= 100 else 0.2)
        for step in range(300)
    ]
    history = run(DeadUnitsDetector(), records)
    assert history[118] == []
    (warning,) = history[119]
    assert warning.category == "dead_units" and warning.step == 119
    assert warning.explanation == (
        "In 1 layer more than 90% of the ReLU units output 0 for every example, for 20 "
        "records in a row: `dense_1` (97% since step 100). A dead unit gets no gradient, "
        "so it never recovers."
    )
    assert [fix.family for fix in warning.fixes] == [
        "activation_change",
        "lower_learning_rate",
        "better_init",
    ]
    assert 'activation="leaky_relu"' in warning.fixes[0].code


def test_one_warning_updated_not_repeated(layer_record, run):
    records = [
        layer_record(step, "dead_fraction", a=0.95, b=0.99 if step > 50 else 0.0)
        for step in range(500)
    ]
    history = run(DeadUnitsDetector(setup=TrainingSetup(learning_rate=0.5)), records)
    assert all(len(findings) == 1 for findings in history[19:])
    (warning,) = history[-1]
    assert warning.step == 19
    assert "In 2 layers" in warning.explanation and "`a` (95% since step 0)" in (
        warning.explanation
    )
    assert "from 0.5 to 0.05" in warning.fixes[1].title


def test_short_bursts_and_healthy_fractions_are_quiet(layer_record, run):
    bursts = [
        layer_record(step, "dead_fraction", a=0.99 if step % 30 < 10 else 0.3)
        for step in range(600)
    ]
    assert run(DeadUnitsDetector(), bursts)[-1] == []
    healthy = [layer_record(step, "dead_fraction", a=0.5) for step in range(600)]
    assert run(DeadUnitsDetector(), healthy)[-1] == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 1.0}, r"`threshold` must be a float in \(0, 1\). Received: threshold=1.0"),
        ({"window": 0}, r"^`window` must be an int of at least 1. Received: window=0$"),
    ],
)
def test_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DeadUnitsDetector(**kwargs)


def test_units_dead_at_the_first_record_blame_the_start_not_the_rate(layer_record, run):
    # Biases initialised at -2: every unit dead before any update; a lower rate cannot
    # revive a unit that gets no gradient.
    records = [layer_record(step, "dead_fraction", dense=1.0) for step in range(0, 300, 10)]
    history = run(DeadUnitsDetector(setup=TrainingSetup(learning_rate=0.01)), records)
    (warning,) = history[-1]
    assert "They were dead at the first record, before any update" in warning.explanation
    assert [fix.family for fix in warning.fixes] == ["better_init", "activation_change"]
    assert warning.fixes[0].title.endswith("and start the biases at 0")
