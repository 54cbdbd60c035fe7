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
