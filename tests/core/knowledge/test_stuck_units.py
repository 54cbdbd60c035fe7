"""Zero gradients behind dead or saturated units: dead_units / saturation, with the cause."""

from gradient_doctor.core.evidence import Evidence, StepHistory, TrainingSetup
from gradient_doctor.core.gradient_paths import ZERO_GRADIENT, PathBreak
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.stuck_units import DEAD, SATURATED, StuckUnits

VARIABLES = ("net/dense/kernel", "net/dense/bias", "net/dense_1/kernel", "net/dense_1/bias")


def _evidence(kind=DEAD, since=4, grad_norms=(10.3, 3.2e5, 3.5e3, 4.8), update=None, rate=0.5):
    steps = tuple(range(len(grad_norms)))
    return Evidence(
        step=since,
        phase=None,
        origin=None,
        history=StepHistory(steps, tuple(1.0 for _ in steps), grad_norms),
        setup=TrainingSetup(learning_rate=rate),
        stuck_units=StuckUnits(kind, ("net/dense_1",), VARIABLES, since, update),
    )


def test_relus_killed_by_a_huge_update_are_dead_units_with_that_cause():
    diagnosis = diagnose(_evidence(update=("net/dense_1", 0, 0.94)))
    assert diagnosis.category == "dead_units"
    text = diagnosis.explanation
    assert text.startswith(
        "Every ReLU unit of layer `net/dense_1` outputs 0 for every example (dead) since step 4"
    )
    assert "4 variables (2 layers: `net/dense` (kernel, bias) and `net/dense_1`" in text
    assert "Nothing on the path to the loss is broken" in text
    assert "It followed a huge update with a learning rate of 0.5" in text
    assert "the gradient norm reached 3.2e+05 at step 1, 31000 times its 10 at step 0" in text
    assert "changed the weights of `net/dense_1` by 94% of their norm at once" in text
    families = [fix.family for fix in diagnosis.fixes]
    assert families[0] == "lower_learning_rate" and "straight_through" not in families
    assert "from 0.5 to 0.05" in diagnosis.fixes[0].title
    assert [item.remedy for item in diagnosis.not_fixes] == ["straight_through"]


def test_units_dead_from_the_first_step_blame_the_start_not_the_learning_rate():
    diagnosis = diagnose(_evidence(since=0, grad_norms=()))
    assert diagnosis.category == "dead_units"
    assert "stuck from the first step" in diagnosis.explanation
    assert "learning rate" not in diagnosis.explanation
    assert [fix.family for fix in diagnosis.fixes] == [
        "activation_change",
        "normalize_input",
        "better_init",
    ]


def test_without_a_huge_update_no_update_is_blamed():
    diagnosis = diagnose(_evidence(grad_norms=(1.0, 1.2, 0.9, 1.1), update=("net/dense", 0, 1e-3)))
    assert diagnosis.category == "dead_units"
    assert "huge update" not in diagnosis.explanation
    assert "lower_learning_rate" not in [fix.family for fix in diagnosis.fixes]


def test_saturated_units_are_saturation():
    diagnosis = diagnose(_evidence(kind=SATURATED, since=0, grad_norms=()))
    assert diagnosis.category == "saturation"
    assert "where float32 rounds the slope to 0" in diagnosis.explanation
    assert [fix.family for fix in diagnosis.fixes][0] == "normalize_input"


def test_zero_gradients_without_stuck_units_stay_a_broken_path():
    evidence = Evidence(
        step=4, phase=None, origin=None, path_break=PathBreak(ZERO_GRADIENT, None, VARIABLES)
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "disconnected_gradients"
    assert "straight_through" in [fix.family for fix in diagnosis.fixes]
