"""Ops no rule knows get an honest, generic diagnosis."""

from gradient_doctor.core.knowledge import diagnose


def test_unknown_forward_op_with_nan_is_a_domain_problem(make_evidence, make_stats, not_fixes):
    evidence = make_evidence(op="Foo", code="z = weird(x)", outputs=(make_stats(nan=1),))
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_domain"
    assert "Foo in layer `message_passing` at step 57 wrote 1 NaN value" in diagnosis.explanation
    assert "from -3.1 to 712.4 (float32)" in diagnosis.explanation
    assert "no specific rule for Foo" in diagnosis.explanation
    assert diagnosis.fixes[0].family == "clip_input_domain"
    assert not_fixes(diagnosis) == ["gradient_clipping", "lower_learning_rate", "larger_batch"]


def test_unknown_forward_op_with_inf_is_an_overflow(make_evidence, make_stats, families):
    diagnosis = diagnose(make_evidence(op="Foo", outputs=(make_stats(inf=2),)))
    assert diagnosis.category == "forward_overflow"
    assert families(diagnosis) == ["constrain_weights", "normalize_input"]


def test_unknown_backward_op_is_a_singularity(make_evidence, make_stats, families, not_fixes):
    evidence = make_evidence(
        op="FooGrad", phase="backward", gradient_of="Foo", outputs=(make_stats(nan=1),)
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "backward_singularity"
    assert "no specific rule for the gradient of Foo" in diagnosis.explanation
    assert families(diagnosis) == ["clip_input_domain", "custom_gradient"]
    assert not_fixes(diagnosis) == ["gradient_clipping", "lower_learning_rate"]


def test_no_origin_and_no_trend(make_evidence, families):
    diagnosis = diagnose(make_evidence(with_origin=False, phase=None, reproduced=False))
    assert diagnosis.category == "unlocated_nonfinite"
    assert "Step 57 went non-finite" in diagnosis.explanation
    assert "replaying the step stayed finite" in diagnosis.explanation
    assert families(diagnosis) == ["lower_learning_rate", "gradient_clipping"]
    # Reproduced by the replay, yet no op named: no claim of nondeterminism.
    diagnosis = diagnose(make_evidence(with_origin=False, phase=None, reproduced=True))
    assert diagnosis.category == "unlocated_nonfinite"
    assert "its replay went non-finite again, but no op it recorded" in diagnosis.explanation
    assert "nondeterministic" not in diagnosis.explanation


def test_bounding_the_layer_that_computes_the_op_itself_does_not_say_it_feeds_it():
    from gradient_doctor.core.findings import Origin
    from gradient_doctor.core.knowledge.remedies.fixes import constrain_weights

    matmul = Origin("MatMul", "head/MatMul", "head", None, None, (), ())
    own = constrain_weights(matmul, "head", "torch")
    assert own.title == "Bound the weights of `head`, which computes MatMul itself"
    fed = constrain_weights(matmul, "body.2", "torch")
    assert fed.title == "Bound the weights of `body.2`, whose output feeds MatMul"
