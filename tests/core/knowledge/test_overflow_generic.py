"""Arithmetic ops whose finite inputs produced inf: forward overflow or exploding gradients."""

import dataclasses

from gradient_doctor.core.knowledge import diagnose


def test_forward_matmul_overflow(make_evidence, make_stats, families, not_fixes):
    evidence = make_evidence(
        op="MatMul",
        code="h = tf.matmul(x, w)",
        inputs=(make_stats(min=-1e20, max=2e20), make_stats(min=-1e19, max=3e19)),
        outputs=(make_stats(inf=5),),
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_overflow"
    assert "MatMul in layer `message_passing` at step 57 wrote 5 inf values" in (
        diagnosis.explanation
    )
    assert "from -1e+20 to 2e+20 (float32)" in diagnosis.explanation
    assert "float32's largest value 3.4e+38" in diagnosis.explanation
    assert families(diagnosis) == ["constrain_weights", "batch_normalization", "normalize_input"]
    assert not_fixes(diagnosis) == ["gradient_clipping", "lower_learning_rate", "larger_batch"]


def test_backward_overflow_is_exploding_gradients(make_evidence, make_stats, families):
    evidence = make_evidence(
        op="MatMul",
        code=None,
        phase="backward",
        gradient_of="MatMul",
        inputs=(make_stats(min=-1e20, max=1e20),),
        outputs=(make_stats(inf=3),),
        learning_rate=0.01,
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "exploding_gradients"
    assert diagnosis.explanation.startswith("The gradient of MatMul in layer `message_passing`")
    assert "the gradients exceeded float32's largest value" in diagnosis.explanation
    assert families(diagnosis)[:2] == ["lower_learning_rate", "gradient_clipping"]
    assert "from 0.01 to 0.001" in diagnosis.fixes[0].title
    assert diagnosis.not_fixes == ()


def test_nan_without_inf_is_left_to_the_default_rule(make_evidence, make_stats):
    evidence = make_evidence(op="Mul", code=None, outputs=(make_stats(nan=1),))
    assert "no specific rule" in diagnose(evidence).explanation


def test_a_loss_overflowing_on_huge_predictions_names_the_layer_they_grew_in(make_evidence):
    evidence = dataclasses.replace(
        make_evidence(op="Square", code="model.fit(x, y)", reduction_axis=None),
        growth=("sequential/simple_rnn/simple_rnn_cell", "MatMul", 1.5e6),
    )
    diagnosis = diagnose(evidence)
    assert "first grew past 1e6 in layer `sequential/simple_rnn/simple_rnn_cell`" in (
        diagnosis.explanation
    )
    fixes = [fix.family for fix in diagnosis.fixes]
    assert fixes[:2] == ["constrain_weights", "better_init"]
    assert "`sequential/simple_rnn/simple_rnn_cell`" in diagnosis.fixes[0].title


def test_a_sum_of_finite_exps_that_overflowed_gets_the_exp_shifted_by_its_row_max(
    make_evidence, make_stats, families
):
    # NT-Xent at temperature 0.0115: each exp(sim) finite (up to 5.5e37), their row sums
    # past float32. The sum is the origin; the exp's line gets the max-shift, along the
    # summed axis the Sum's axis input names (the matrix is square: shapes cannot tell).
    from gradient_doctor.core.evidence import OpCall
    from gradient_doctor.core.findings import SourceLine, TensorStats

    square = TensorStats("float32", (256, 256), 0.0, 5.5e37, 0, 0, 0)
    axis = TensorStats("int32", (), 1, 1, 0, 0, 0)
    rows = TensorStats("float32", (256,), None, None, 0, 8, 0)
    evidence = make_evidence(
        op="Sum",
        code="denom = tf.reduce_sum(exp_sim, axis=1)",
        inputs=(square, axis),
        outputs=(rows,),
    )
    exp_line = SourceLine("train.py", 36, "exp_sim = tf.exp(sim)", column=10, end_column=21)
    evidence = dataclasses.replace(
        evidence, input_producers=(OpCall("Exp", exp_line, (make_stats(),)), None)
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_overflow"
    assert "It sums along axis 1 the exp of train.py:36" in diagnosis.explanation
    assert families(diagnosis)[0] == "stable_softmax"
    (edit,) = diagnosis.fixes[0].edits
    assert (edit.line, edit.new_lines) == (
        36,
        ("exp_sim = tf.exp(sim - tf.reduce_max(sim, axis=1, keepdims=True))",),
    )
    # A sum of anything else keeps the generic remedies.
    other = dataclasses.replace(evidence, input_producers=(None, None))
    assert families(diagnose(other))[0] != "stable_softmax"
