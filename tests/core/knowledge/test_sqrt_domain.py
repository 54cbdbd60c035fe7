"""Square roots of negative values, and Rsqrt at zero, in the forward pass."""

from gradient_doctor.core.knowledge import diagnose


def test_sqrt_of_a_slightly_negative_value(make_evidence, make_stats, families, not_fixes):
    evidence = make_evidence(
        op="Sqrt",
        code="std = tf.sqrt(mean_sq - tf.square(mean))",
        inputs=(make_stats(min=-2e-7, max=4.0),),
        outputs=(make_stats(min=0.0, max=2.0, nan=1),),
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_domain"
    assert "reached -2e-07" in diagnosis.explanation
    assert "rounding" in diagnosis.explanation
    assert "square root of a negative number is NaN" in diagnosis.explanation
    assert families(diagnosis) == ["safe_sqrt"]
    assert diagnosis.fixes[0].code == "std = tf.sqrt(tf.maximum(mean_sq - tf.square(mean), 1e-12))"
    assert not_fixes(diagnosis) == ["gradient_clipping", "lower_learning_rate", "larger_batch"]


def test_rsqrt_at_zero(make_evidence, make_stats):
    evidence = make_evidence(
        op="Rsqrt",
        code="inv = tf.math.rsqrt(var)",
        inputs=(make_stats(min=0.0, max=1.0, zeros=2),),
        outputs=(make_stats(min=1.0, max=9.0, inf=2),),
    )
    diagnosis = diagnose(evidence)
    assert "reached 0 (2 exact zeros)" in diagnosis.explanation
    assert "1 / sqrt(0) is inf" in diagnosis.explanation
    assert diagnosis.fixes[0].code == "inv = tf.math.rsqrt(tf.maximum(var, 1e-12))"
