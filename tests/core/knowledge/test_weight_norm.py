"""Weight normalization of a direction that is all zeros (a weight zero-initialised before
`weight_norm`): 0 / 0 at the first forward, named as such, with the magnitude g zeroed in
place of the weight; a direction with any non-zero entry is left to other rules."""

from gradient_doctor.core.knowledge import diagnose


def test_a_zero_direction_is_named_and_its_magnitude_zeroed_instead(
    make_evidence, make_stats, families, not_fixes
):
    evidence = make_evidence(
        op="WeightNormInterface",
        code="return x + self.fc2(torch.relu(self.fc1(x)))",
        inputs=(make_stats(min=0.0, max=0.0, zeros=256), make_stats(min=0.0, max=0.0, zeros=256)),
        outputs=(make_stats(min=None, max=None, nan=256),),
        framework="torch",
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_domain"
    assert "its direction v is all zeros (256 of 256)" in diagnosis.explanation
    assert families(diagnosis) == ["better_init"]
    assert "parametrizations.weight.original0" in diagnosis.fixes[0].code
    assert not_fixes(diagnosis) == ["lower_learning_rate", "gradient_clipping"]


def test_a_direction_with_values_is_not_claimed(make_evidence, make_stats):
    evidence = make_evidence(
        op="WeightNormInterface",
        code="h = self.fc(x)",
        inputs=(make_stats(min=-1.0, max=1.0, zeros=3), make_stats(min=0.5, max=2.0)),
        outputs=(make_stats(min=None, max=None, nan=4),),
        framework="torch",
    )
    assert "direction v is all zeros" not in diagnose(evidence).explanation
