"""A weight or statistic that was NaN or Inf before the step is bad_input, named with the
call that wrote it and a remedy written for that call's line."""

from dataclasses import replace

import pytest

from gradient_doctor.core.evidence import BrokenState, Evidence
from gradient_doctor.core.findings import Origin, SourceLine, TensorStats
from gradient_doctor.core.knowledge.registry import diagnose

_READ = TensorStats("float32", (1, 4), -0.2, 0.1, 1, 0, 0)
_SUB = Origin("Sub", "normalization/Sub", "normalization", None, None, (_READ,), (_READ,))
_ADAPTED = BrokenState(
    variables=("normalization/mean", "normalization/variance"),
    layer="normalization",
    nan=2,
    inf=0,
    written_by="adapt",
    written_at=SourceLine("train.py", 11, "normalizer.adapt(table)"),
)


def _evidence(state: BrokenState) -> Evidence:
    # The walk ended at an op that read a value no op made: without the broken state
    # this would be the non-finite-constant case.
    return Evidence(
        step=0, phase="forward", origin=_SUB, nonfinite_constant=False, broken_state=state
    )


def test_adapt_on_missing_values_is_bad_input_that_names_variables_layer_and_line():
    diagnosis = diagnose(_evidence(_ADAPTED))
    assert diagnosis.category == "bad_input"
    assert diagnosis.explanation.startswith(
        "`normalization/mean` and `normalization/variance` of layer `normalization` already "
        "held 2 NaN values before step 0"
    )
    assert "`normalizer.adapt(table)` (train.py:11)" in diagnosis.explanation
    fix = diagnosis.fixes[0]
    assert fix.family == "clean_input"
    assert "table = table[finite]" in fix.code and "normalizer.adapt(table)" in fix.code
    assert "np.isfinite(table)" in fix.code


@pytest.mark.parametrize(
    ("call", "code", "expected"),
    [
        (
            "load_weights",
            "model.load_weights('run3.weights.h5')",
            "model.load_weights('run3.weights.h5')",
        ),
        ("set_weights", "head.set_weights(saved)", "for w in saved"),
        ("assign", "layer.kernel.assign(values)", "for w in [values]"),
    ],
)
def test_each_writer_gets_a_remedy_for_its_own_line(call, code, expected):
    state = replace(_ADAPTED, written_by=call, written_at=SourceLine("train.py", 5, code))
    fix = diagnose(_evidence(state)).fixes[0]
    assert fix.family == "finite_weights"
    assert expected in fix.code


def test_an_unseen_writer_still_names_the_variable_and_says_it_was_not_seen():
    state = replace(_ADAPTED, written_by=None, written_at=None, inf=3, nan=0)
    diagnosis = diagnose(_evidence(state))
    assert diagnosis.category == "bad_input"
    assert "already held 3 infinite values" in diagnosis.explanation
    assert "did not see the call that wrote them" in diagnosis.explanation
    assert diagnosis.fixes[0].family == "finite_weights"
    assert {n.remedy for n in diagnosis.not_fixes} == {"gradient_clipping", "lower_learning_rate"}
