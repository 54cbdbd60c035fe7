"""Ops that overflow the small range of float16 or bfloat16."""

from gradient_doctor.core.knowledge import diagnose


def half(make_evidence, make_stats, phase="forward", dtype="float16", **kwargs):
    return make_evidence(
        op="MatMul",
        code="h = tf.matmul(x, w)",
        phase=phase,
        inputs=(make_stats(dtype, min=-300.0, max=400.0), make_stats(dtype, min=-9.0, max=9.0)),
        outputs=(make_stats(dtype, inf=5),),
        **kwargs,
    )


def test_forward_float16_overflow(make_evidence, make_stats, families, not_fixes):
    diagnosis = diagnose(half(make_evidence, make_stats))
    assert diagnosis.category == "forward_overflow"
    assert "float16's largest value 65504" in diagnosis.explanation
    assert "float32 the limit would be 3.4e+38" in diagnosis.explanation
    assert families(diagnosis)[0] == "float32_island"
    assert diagnosis.fixes[0].code == (
        'h = tf.matmul(tf.cast(x, "float32"), tf.cast(w, "float32"))  # the result is float32'
    )
    assert not_fixes(diagnosis) == [
        "gradient_clipping",
        "lower_learning_rate",
        "larger_batch",
        "loss_scaling",  # it acts on the gradients; this overflow is in the forward pass
    ]


def test_backward_half_overflow_proposes_loss_scaling(make_evidence, make_stats, families):
    diagnosis = diagnose(
        half(make_evidence, make_stats, "backward", "bfloat16", gradient_of="MatMul")
    )
    assert diagnosis.category == "exploding_gradients"
    assert "bfloat16's largest value 3.4e+38" in diagnosis.explanation
    assert families(diagnosis) == ["loss_scaling", "float32_island"]


def test_unknown_op_in_float16_gets_a_layer_level_island(make_evidence, make_stats, families):
    evidence = make_evidence(
        op="Foo",
        code=None,
        inputs=(make_stats("float16"),),
        outputs=(make_stats("float16", inf=1),),
    )
    diagnosis = diagnose(evidence)
    assert families(diagnosis)[0] == "float32_island"
    assert 'dtype="float32"' in diagnosis.fixes[0].code
