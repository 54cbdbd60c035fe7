"""A root or fractional power fed a large share of negatives: the values look negative by
design, so the root of the magnitude comes first and the clamp is marked as rewriting."""

from gradient_doctor.core.knowledge import diagnose


def test_a_power_of_a_signed_difference_gets_the_magnitude_first(make_evidence, make_stats):
    evidence = make_evidence(
        op="Pow",
        code="return tf.reduce_mean(tf.pow(y_true - y_pred, 0.5))",
        inputs=(make_stats(min=-6.5, max=7.3, size=64), make_stats(min=0.5, max=0.5, size=1)),
        outputs=(make_stats(min=0.2, max=2.7, nan=20, size=64),),
        step=0,
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_domain"
    assert "20 of 64 values (31%) were below 0 at step 0" in diagnosis.explanation
    magnitude, clamp = diagnosis.fixes[:2]
    assert magnitude.family == "magnitude" and magnitude.clamped_share is None
    assert (
        magnitude.code
        == "return tf.reduce_mean(tf.pow(tf.maximum(tf.abs(y_true - y_pred), 1e-12), 0.5))"
    )
    assert clamp.family == "clip_input_domain"
    assert abs(clamp.clamped_share - 20 / 64) < 1e-12


def test_a_root_in_torch_spells_the_magnitude_in_torch(make_evidence, make_stats):
    evidence = make_evidence(
        op="Sqrt",
        code="spread = torch.sqrt(a - b)",
        inputs=(make_stats(min=-1.0, max=3.0, size=256),),
        outputs=(make_stats(min=0.0, max=1.8, nan=100, size=256),),
    )
    fixes = diagnose(evidence).fixes
    assert [fix.family for fix in fixes[:2]] == ["magnitude", "safe_sqrt"]
    assert fixes[0].code == "spread = torch.sqrt(torch.clamp_min(torch.abs(a - b), 1e-12))"


def test_a_few_negatives_or_a_rounding_are_an_edge_case_for_the_clamp(make_evidence, make_stats):
    few = make_evidence(
        op="Sqrt",
        code="std = tf.sqrt(var)",
        inputs=(make_stats(min=-0.5, max=4.0, size=256),),
        outputs=(make_stats(min=0.0, max=2.0, nan=3, size=256),),
    )
    rounded = make_evidence(
        op="Sqrt",
        code="std = tf.sqrt(mean_sq - tf.square(mean))",
        inputs=(make_stats(min=-2e-7, max=4.0, size=256),),
        outputs=(make_stats(min=0.0, max=2.0, nan=200, size=256),),
    )
    for evidence in (few, rounded):
        diagnosis = diagnose(evidence)
        assert [fix.family for fix in diagnosis.fixes] == ["safe_sqrt"]
        assert diagnosis.fixes[0].clamped_share is None
        assert "by design" not in diagnosis.explanation


def test_zeros_at_a_logs_edge_are_not_negatives_by_design(make_evidence, make_stats):
    evidence = make_evidence(
        op="Log",
        code="log_probs = tf.math.log(probs)",
        inputs=(make_stats(min=0.0, max=1.0, zeros=120, size=256),),
        outputs=(make_stats(min=-30.0, max=0.0, inf=120, size=256),),
    )
    diagnosis = diagnose(evidence)
    assert all(fix.clamped_share is None for fix in diagnosis.fixes)
    assert "magnitude" not in [fix.family for fix in diagnosis.fixes]


def test_a_root_of_a_layers_raw_output_gets_softplus_not_the_magnitude(make_evidence, make_stats):
    # A variance head with no positive parameterisation: a third of its outputs below 0.
    # The magnitude made that model worse than untrained (its likelihood 0.27 -> 5.07);
    # predicted through softplus it trains (0.12 -> 0.03).
    import dataclasses

    from gradient_doctor.core.evidence import OpCall
    from gradient_doctor.core.findings import SourceLine

    evidence = make_evidence(
        op="Pow",
        code="return self.mean(h), torch.pow(var, 0.5)",
        inputs=(make_stats(min=-0.1, max=1.9, size=64), make_stats(min=0.5, max=0.5, size=1)),
        outputs=(make_stats(min=0.0, max=1.4, nan=22, size=64),),
        step=7,
    )
    made = SourceLine("dp_sgd.py", 24, "var = self.var(h) + 1.0  # about unit variance")
    head = OpCall("AddV2", made, (make_stats(min=-1.1, max=0.9, size=64),))
    setup = dataclasses.replace(evidence.setup, framework="torch")
    diagnosis = diagnose(dataclasses.replace(evidence, input_producers=(head, None), setup=setup))
    softplus, clamp = diagnosis.fixes[:2]
    assert softplus.family == "activation_change"
    assert softplus.edits[0].new_lines == (  # the user's comment kept
        "var = torch.nn.functional.softplus(self.var(h) + 1.0) + 1e-6  # about unit variance",
    )
    assert (softplus.edits[0].file, softplus.edits[0].line) == ("dp_sgd.py", 24)
    assert clamp.family == "clip_input_domain" and clamp.clamped_share is not None
    assert "magnitude" not in [fix.family for fix in diagnosis.fixes]
    assert "the value is a layer's output, which nothing keeps positive" in diagnosis.explanation
    # A difference stays signed by design: its root is the magnitude's.
    difference = OpCall("Sub", made, ())
    signed = diagnose(dataclasses.replace(evidence, input_producers=(difference, None)))
    assert signed.fixes[0].family == "magnitude"


def test_a_log_of_a_scale_heads_raw_output_gets_softplus_on_the_heads_line(
    make_evidence, make_stats
):
    # A distribution's log-density takes the log of its scale (inside the library, on
    # the user's log_prob line); the scale is a Linear's raw output made two lines up:
    # 4 of 64 below 0 is a positive quantity with nothing to keep it so, not a value
    # negative by design, and the patch goes where the head's output is made.
    import dataclasses

    from gradient_doctor.core.evidence import OpCall
    from gradient_doctor.core.findings import SourceLine

    evidence = make_evidence(
        op="Log",
        code="loss = -dist.log_prob(yb).mean()",
        inputs=(make_stats(min=-0.016, max=1.2, size=64),),
        outputs=(make_stats(min=-3.0, max=0.2, nan=4, size=64),),
        step=59,
        framework="torch",
    )
    made = SourceLine("train.py", 25, "sigma = scale_head(h)  # the noise scale")
    head = OpCall("MatMul", made, (make_stats(min=-1.0, max=1.0, size=2048),))
    diagnosis = diagnose(dataclasses.replace(evidence, input_producers=(head,)))
    assert "negative by design" not in diagnosis.explanation
    assert "the value is a layer's output, which nothing keeps positive" in diagnosis.explanation
    assert "magnitude" not in diagnosis.explanation
    families = [fix.family for fix in diagnosis.fixes]
    assert families[:2] == ["activation_change", "safe_log"]
    assert families.count("activation_change") == 1  # no generic snippet beside the patch
    assert diagnosis.fixes[0].edits[0].new_lines == (
        "sigma = torch.nn.functional.softplus(scale_head(h)) + 1e-6  # the noise scale",
    )
