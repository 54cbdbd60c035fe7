"""Finite gradients whose global norm overflows float32: what the update would have done
is said for the user's optimizer (SGD stays finite but runs away; Adam writes inf)."""

from gradient_doctor.core.evidence import Evidence, TrainingSetup
from gradient_doctor.core.knowledge.rules import norm_overflow


def _explained(**setup) -> str:
    evidence = Evidence(
        step=15, phase=None, origin=None, setup=TrainingSetup(**setup), overflowed_norm=3.1e21
    )
    diagnosis = norm_overflow.diagnose(evidence)
    assert diagnosis.category == "exploding_gradients"
    return diagnosis.explanation


def test_plain_sgd_is_not_said_to_write_inf_but_to_run_away():
    said = _explained(optimizer="SGD", learning_rate=0.01)
    assert "SGD keeps no square of the gradients, so its update would have stayed finite" in said
    assert "Adam and RMSprop" not in said


def test_adam_or_clipping_by_the_norm_would_write_inf():
    for setup in ({"optimizer": "Adam"}, {"optimizer": "SGD", "clipping": "global_clipnorm=1.0"}):
        assert "would have written inf or NaN into the weights" in _explained(**setup)
