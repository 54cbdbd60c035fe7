"""A normalization layer that normalised a constant slice with no epsilon: 0 / 0."""

from gradient_doctor.core.knowledge import diagnose


def test_a_layer_norm_with_no_epsilon_over_a_constant_row(make_evidence, make_stats, families):
    # nn.LayerNorm(12, eps=0.0) over a batch holding a row of zeros (missing features):
    # the row's variance is 0, its output NaN, its inverse deviation inf.
    evidence = make_evidence(
        op="NativeLayerNorm",
        code="return self.mlp(self.norm(x)).squeeze(-1)",
        layer="norm",
        inputs=(make_stats(min=-11.4, max=12.4, zeros=12), make_stats(min=0.99, max=1.0)),
        outputs=(make_stats(min=-2.5, max=3.1, nan=12), make_stats(min=0.2, max=0.8, inf=1)),
        framework="torch",
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_domain"
    assert "sqrt(var + eps)" in diagnosis.explanation
    assert "has variance 0" in diagnosis.explanation
    assert families(diagnosis) == ["layer_epsilon"]
    assert "eps=1e-5" in diagnosis.fixes[0].code
    assert [item.remedy for item in diagnosis.not_fixes] == [
        "gradient_clipping",
        "lower_learning_rate",
        "larger_batch",
    ]


def test_a_normalization_handed_a_nan_is_not_its_own(make_evidence, make_stats):
    evidence = make_evidence(
        op="FusedBatchNormV3",
        code="h = layers.BatchNormalization()(h)",
        inputs=(make_stats(min=-1.0, max=1.0, nan=3),),
        outputs=(make_stats(min=-1.0, max=1.0, nan=3),),
    )
    assert all(fix.family != "layer_epsilon" for fix in diagnose(evidence).fixes)


def _keras_layer_rsqrt(make_evidence, make_stats, code):
    # Keras 3 computes a normalization layer in plain ops: its Rsqrt of var + epsilon,
    # named on the line that built the layer.
    from dataclasses import replace

    evidence = make_evidence(
        op="Rsqrt",
        code=code,
        layer="layer_normalization",
        inputs=(make_stats(min=0.0, max=0.0011, zeros=192),),
        outputs=(make_stats(min=29.5, max=48.5, inf=192),),
        step=0,
    )
    return replace(evidence, origin=replace(evidence.origin, source_kind="layer_creation"))


def test_a_keras_layer_built_with_epsilon_zero_gets_its_line_patched(
    make_evidence, make_stats, families
):
    code = "h = layers.LayerNormalization(epsilon=0.0)(e)"
    diagnosis = diagnose(_keras_layer_rsqrt(make_evidence, make_stats, code))
    assert diagnosis.category == "forward_domain"
    assert "sqrt(var + epsilon)" in diagnosis.explanation
    assert families(diagnosis) == ["layer_epsilon"]
    fix = diagnosis.fixes[0]
    assert fix.trial_setting == ("epsilon", 1e-3)
    (edit,) = fix.keyword_edits
    assert (edit.keyword, edit.values, edit.new, edit.callee) == (
        "epsilon",
        (0.0, 0),
        "0.001",
        "LayerNormalization",
    )
    assert "larger_batch" in [item.remedy for item in diagnosis.not_fixes]
    # A batch normalization's statistics depend on which rows share a batch.
    batch = "layers.BatchNormalization(epsilon=0)"
    diagnosis = diagnose(_keras_layer_rsqrt(make_evidence, make_stats, batch))
    assert "larger_batch" not in [item.remedy for item in diagnosis.not_fixes]


def test_a_keras_layer_with_its_default_epsilon_is_left_to_the_roots_rule(
    make_evidence, make_stats, families
):
    for code in (
        "h = layers.LayerNormalization()(e)",
        "h = layers.LayerNormalization(epsilon=1e-3)(e)",
    ):
        diagnosis = diagnose(_keras_layer_rsqrt(make_evidence, make_stats, code))
        assert "layer_epsilon" not in families(diagnosis)
