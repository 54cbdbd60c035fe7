"""A loss scale lowered to the gradients' true size while they stay non-finite."""

from dataclasses import replace

from gradient_doctor.core.evidence import TrainingSetup
from gradient_doctor.core.knowledge import diagnose


def _float16_gradient_overflow(make_evidence, make_stats, loss_scale, op="MatMul"):
    evidence = make_evidence(
        op=op,
        code=None,
        phase="backward",
        gradient_of="MatMul",
        layer="dense_1",
        inputs=(make_stats("float16", min=-9696.0, max=14072.0),),
        outputs=(make_stats("float16", inf=2),),
    )
    return replace(evidence, setup=TrainingSetup(loss_scale=loss_scale))


def test_collapsed_scale_is_its_own_finding(make_evidence, make_stats, families, not_fixes):
    diagnosis = diagnose(_float16_gradient_overflow(make_evidence, make_stats, 1.0))
    assert diagnosis.category == "loss_scale_collapse"
    assert "lowered to 1" in diagnosis.explanation
    assert "the gradient of MatMul in layer `dense_1`" in diagnosis.explanation
    assert "float16 holds at most 65504" in diagnosis.explanation
    assert "no floor" in diagnosis.explanation
    assert families(diagnosis)[0] == "float32_island"
    assert "loss_scaling" not in families(diagnosis)
    assert not_fixes(diagnosis) == ["loss_scaling", "gradient_clipping", "lower_learning_rate"]


def test_a_scale_still_above_one_is_not_a_collapse(make_evidence, make_stats):
    diagnosis = diagnose(_float16_gradient_overflow(make_evidence, make_stats, 512.0))
    assert diagnosis.category != "loss_scale_collapse"


def test_a_forward_origin_is_left_to_the_forward_rules(make_evidence, make_stats):
    evidence = replace(
        make_evidence(
            inputs=(make_stats("float16", max=40.0),), outputs=(make_stats("float16", inf=3),)
        ),
        setup=TrainingSetup(loss_scale=0.5),
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_overflow"


def test_a_singular_op_keeps_its_own_rule_with_the_scale_noted(make_evidence, make_stats):
    evidence = make_evidence(
        op="SqrtGrad",
        code="n = tf.norm(d, axis=-1)",
        phase="backward",
        gradient_of="Sqrt",
        inputs=(make_stats("float16", min=0.0, max=2.0, zeros=4),),
        outputs=(make_stats("float16", inf=4),),
    )
    diagnosis = diagnose(replace(evidence, setup=TrainingSetup(loss_scale=1.0)))
    assert diagnosis.category == "backward_singularity"
    scaling = {n.remedy: n.why for n in diagnosis.not_fixes}["loss_scaling"]
    assert "already on (loss scale 1)" in scaling
    assert "stayed non-finite" in scaling
