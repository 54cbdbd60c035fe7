"""Acos, Asin, Atanh and Acosh fed values outside their domain."""

import pytest

from gradient_doctor.core.knowledge import diagnose


def test_acos_just_past_one_from_rounding(make_evidence, make_stats, families, not_fixes):
    evidence = make_evidence(
        op="Acos",
        code="theta = tf.acos(cos_sim)",
        inputs=(make_stats(min=-0.3, max=1.0000001),),
        outputs=(make_stats(min=0.0, max=3.0, nan=2),),
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_domain"
    assert "reached 1.0000001" in diagnosis.explanation
    assert "rounding" in diagnosis.explanation
    assert "acos is defined only on [-1, 1]" in diagnosis.explanation
    assert families(diagnosis) == ["clip_input_domain"]
    assert diagnosis.fixes[0].code == (
        "theta = tf.acos(tf.clip_by_value(cos_sim, -1.0 + 1e-7, 1.0 - 1e-7))"
    )
    assert not_fixes(diagnosis) == ["gradient_clipping", "lower_learning_rate", "larger_batch"]


@pytest.mark.parametrize(
    ("op", "code", "rewritten"),
    [
        ("Asin", "a = keras.ops.arcsin(c)", "keras.ops.clip(c, -1.0 + 1e-7, 1.0 - 1e-7)"),
        ("Atanh", "z = tf.math.atanh(r)", "tf.clip_by_value(r, -1.0 + 1e-7, 1.0 - 1e-7)"),
        ("Acosh", "d = tf.acosh(g)", "tf.maximum(g, 1.0 + 1e-7)"),
    ],
)
def test_each_op_gets_its_own_domain(make_evidence, make_stats, op, code, rewritten):
    evidence = make_evidence(
        op=op, code=code, inputs=(make_stats(min=0.5, max=1.5),), outputs=(make_stats(nan=1),)
    )
    diagnosis = diagnose(evidence)
    assert op.lower() in diagnosis.explanation
    assert rewritten in diagnosis.fixes[0].code
