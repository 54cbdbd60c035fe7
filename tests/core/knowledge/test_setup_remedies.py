"""Remedies fitted to the user's setup: clipping and loss scaling that were already on."""

from dataclasses import replace

from gradient_doctor.core.evidence import TrainingSetup
from gradient_doctor.core.knowledge import diagnose


def _with_setup(evidence, **setup):
    return replace(evidence, setup=TrainingSetup(**setup))


def _why(diagnosis, remedy):
    return {item.remedy: item.why for item in diagnosis.not_fixes}[remedy]


def test_clipping_already_on_is_named_in_the_clipping_not_fix(make_evidence):
    diagnosis = diagnose(_with_setup(make_evidence(), clipping="global_clipnorm=1.0"))
    why = _why(diagnosis, "gradient_clipping")
    assert why.startswith("Clipping (global_clipnorm=1.0) was already on and did not prevent this.")
    assert "forward pass" in why  # the rule's own reason follows


def test_clipping_already_on_is_said_even_where_the_rule_had_no_clipping_not_fix(
    make_evidence,
):
    evidence = make_evidence(with_origin=False, phase=None, reproduced=False)
    diagnosis = diagnose(_with_setup(evidence, clipping="clipnorm=5.0", xla=True))
    assert _why(diagnosis, "gradient_clipping") == (
        "Clipping (clipnorm=5.0) was already on and did not prevent this."
    )


def test_a_stronger_clipping_fix_is_not_also_a_not_fix(make_evidence, make_stats, families):
    evidence = make_evidence(
        op="MatMul",
        phase="backward",
        gradient_of="MatMul",
        outputs=(make_stats(inf=3),),
        grad_norms=(1.0, 2.0, 40.0, 900.0),
    )
    diagnosis = diagnose(_with_setup(evidence, clipping="clipnorm=5.0"))
    assert diagnosis.category == "exploding_gradients"
    assert "gradient_clipping" in families(diagnosis)
    assert "clipping is already on: clipnorm=5.0" in diagnosis.fixes[-1].title
    assert "gradient_clipping" not in [item.remedy for item in diagnosis.not_fixes]


def test_without_clipping_the_not_fix_is_unchanged(make_evidence):
    diagnosis = diagnose(make_evidence())
    assert "already on" not in _why(diagnosis, "gradient_clipping")


def test_loss_scaling_already_on_is_never_proposed(make_evidence, make_stats, families):
    evidence = make_evidence(
        op="MatMul",
        phase="backward",
        gradient_of="MatMul",
        inputs=(make_stats("float16"),),
        outputs=(make_stats("float16", inf=5),),
    )
    assert "loss_scaling" in families(diagnose(evidence))
    scaled = diagnose(_with_setup(evidence, loss_scale=4096.0))
    assert "loss_scaling" not in families(scaled)
    assert "already on (loss scale 4096)" in _why(scaled, "loss_scaling")


def test_missing_gradients_get_no_setup_remedies(make_break_evidence):
    evidence = _with_setup(make_break_evidence(), clipping="clipnorm=1.0", loss_scale=2.0)
    diagnosis = diagnose(evidence)
    assert "gradient_clipping" not in [item.remedy for item in diagnosis.not_fixes]
    assert "loss_scaling" not in [item.remedy for item in diagnosis.not_fixes]
