"""A step non-finite only as XLA compiled it: said plainly, no op of the eager replay blamed."""

from dataclasses import replace

from gradient_doctor.core.evidence import TrainingSetup
from gradient_doctor.core.knowledge import diagnose


def _unreproduced(make_evidence, xla):
    evidence = make_evidence(with_origin=False, phase=None, reproduced=False)
    return replace(evidence, setup=TrainingSetup(learning_rate=0.01, xla=xla))


def test_xla_step_that_did_not_reproduce_says_so(make_evidence, families):
    diagnosis = diagnose(_unreproduced(make_evidence, xla=True))
    assert diagnosis.category == "xla_only"
    assert "Step 57 went non-finite in the step compiled with XLA" in diagnosis.explanation
    assert "did not reproduce without XLA" in diagnosis.explanation
    assert families(diagnosis)[0] == "disable_xla"
    assert "jit_compile=False" in diagnosis.fixes[0].code


def test_without_xla_the_generic_wording_stays(make_evidence):
    diagnosis = diagnose(_unreproduced(make_evidence, xla=False))
    assert "XLA" not in diagnosis.explanation
    assert "replaying the step stayed finite" in diagnosis.explanation


def test_an_xla_step_that_reproduced_is_explained_by_its_op(make_evidence):
    evidence = make_evidence()
    evidence = replace(evidence, setup=TrainingSetup(xla=True))
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_overflow"
    assert "XLA" not in diagnosis.explanation


def test_an_xla_step_that_could_not_be_replayed_claims_nothing_about_xla(make_evidence):
    evidence = replace(_unreproduced(make_evidence, xla=True), replayed=False)
    diagnosis = diagnose(evidence)
    assert "XLA" not in diagnosis.explanation
    assert "could not be run again" in diagnosis.explanation
