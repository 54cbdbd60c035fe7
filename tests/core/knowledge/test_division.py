"""Divisions by zero (or by values tiny enough to overflow) in the forward pass."""

from gradient_doctor.core.knowledge import diagnose


def division_evidence(make_evidence, make_stats, code, op="RealDiv", denominator=None):
    denominator = denominator or make_stats(min=0.0, max=3.0, zeros=4)
    return make_evidence(
        op=op,
        code=code,
        inputs=(make_stats(min=-2.0, max=5.0), denominator),
        outputs=(make_stats(inf=2, nan=2),),
    )


def test_zero_denominator(make_evidence, make_stats, families, not_fixes):
    evidence = division_evidence(make_evidence, make_stats, "w = a / tf.reduce_sum(a, axis=1)")
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_domain"
    assert "denominator of RealDiv" in diagnosis.explanation
    assert "4 zeros of 256" in diagnosis.explanation
    assert "2 inf and 2 NaN values" in diagnosis.explanation
    assert families(diagnosis) == ["safe_div"]
    assert diagnosis.fixes[0].code.splitlines() == [
        "w = tf.math.divide_no_nan(a, tf.reduce_sum(a, axis=1))",
        "# or, for a denominator that is never negative, keep it away from 0:",
        "w = a / (tf.reduce_sum(a, axis=1) + 1e-12)",
    ]
    assert not_fixes(diagnosis) == ["gradient_clipping", "lower_learning_rate", "larger_batch"]


def test_division_by_a_norm_proposes_a_safe_norm_first(make_evidence, make_stats, families):
    code = "u = x / tf.norm(x, axis=-1, keepdims=True)"
    diagnosis = diagnose(division_evidence(make_evidence, make_stats, code))
    assert families(diagnosis) == ["safe_norm", "safe_div"]
    assert diagnosis.fixes[0].code.splitlines() == [
        "u = x / tf.sqrt(tf.reduce_sum(tf.square(x), axis=-1, keepdims=True) + 1e-12)",
        "# or, for x / norm(x):",
        "u = tf.math.l2_normalize(x, axis=-1)",
    ]


def test_tiny_denominator_overflow(make_evidence, make_stats):
    tiny = make_stats(min=1e-40, max=1.0, min_abs=1e-40)
    evidence = division_evidence(make_evidence, make_stats, "r = p / q", denominator=tiny)
    diagnosis = diagnose(evidence)
    assert "smallest |denominator| of RealDiv" in diagnosis.explanation
    assert "reached 1e-40" in diagnosis.explanation
    assert "float32's largest value 3.4e+38" in diagnosis.explanation


def test_reciprocal_and_floor_division_and_calls(make_evidence, make_stats):
    code = "inv = tf.math.reciprocal(d)"
    reciprocal = make_evidence(
        op="Reciprocal",
        code=code,
        inputs=(make_stats(min=0.0, max=1.0, zeros=1),),
        outputs=(make_stats(inf=1),),
    )
    assert diagnose(reciprocal).fixes[0].code.startswith("inv = tf.math.divide_no_nan(1.0, d)")
    floor = division_evidence(make_evidence, make_stats, "k = n // m", op="FloorDiv")
    assert diagnose(floor).fixes[0].code.startswith("k = tf.floor(tf.math.divide_no_nan(n, m))")
    call = division_evidence(make_evidence, make_stats, "z = keras.ops.divide(a, b)")
    assert diagnose(call).fixes[0].code.startswith("z = keras.ops.divide_no_nan(a, b)")


def test_unparsable_division_gets_a_generic_fix(make_evidence, make_stats):
    diagnosis = diagnose(division_evidence(make_evidence, make_stats, None))
    assert diagnosis.fixes[0].code.startswith("z = tf.math.divide_no_nan(x, y)")


def test_a_denominator_the_batch_alone_makes_rules_out_the_rate_as_a_fact(
    make_evidence, make_stats
):
    # A masked mean: the weights make the numerator, the count of valid labels (0 in a
    # batch of padding only) the denominator; the rate cannot change the count.
    from dataclasses import replace

    code = "return (per_tok * valid).sum() / n_valid"
    evidence = division_evidence(make_evidence, make_stats, code)
    mixed = replace(evidence, weights_upstream=True, weights_upstream_of=(True, False))
    why = {n.remedy: n for n in diagnose(mixed).not_fixes}
    assert why["lower_learning_rate"].structural
    assert "cannot change it at all" in why["lower_learning_rate"].why
    assert "comes from the batch alone" in diagnose(mixed).explanation
    weighted = replace(evidence, weights_upstream=True, weights_upstream_of=(False, True))
    assert not {n.remedy: n for n in diagnose(weighted).not_fixes}["lower_learning_rate"].structural
