"""Logarithms fed zero or negative values in the forward pass."""

from dataclasses import replace

import pytest

from gradient_doctor.core.knowledge import diagnose

FORWARD_NOT_FIXES = ["gradient_clipping", "lower_learning_rate", "larger_batch"]


def log_evidence(make_evidence, make_stats, code, op="Log", inputs=None, **kwargs):
    inputs = inputs or (make_stats(min=0.0, max=1.0, zeros=3),)
    outputs = (make_stats(min=-5.0, max=0.0, inf=3),)
    return make_evidence(op=op, code=code, inputs=inputs, outputs=outputs, **kwargs)


def test_log_of_zero_probability(make_evidence, make_stats, families, not_fixes):
    code = "loss = -tf.reduce_mean(y_true * tf.math.log(y_pred))"
    diagnosis = diagnose(log_evidence(make_evidence, make_stats, code))
    assert diagnosis.category == "forward_domain"
    assert "input to Log" in diagnosis.explanation
    assert "reached 0 (3 exact zeros)" in diagnosis.explanation
    assert "log of 0 is -inf" in diagnosis.explanation
    assert families(diagnosis) == ["safe_log", "clip_input_domain", "from_logits"]
    assert diagnosis.fixes[0].code == (
        "loss = -tf.reduce_mean(y_true * tf.math.log(tf.maximum(y_pred, 1e-7)))"
    )
    assert "tf.clip_by_value(y_pred, 1e-7, 1.0)" in diagnosis.fixes[1].code
    assert not_fixes(diagnosis) == FORWARD_NOT_FIXES
    assert "invalid input to Log" in diagnosis.not_fixes[0].why


def test_log_of_a_non_probability_suggests_a_positive_activation(
    make_evidence, make_stats, families
):
    inputs = (make_stats(min=-0.25, max=4.0),)
    diagnosis = diagnose(log_evidence(make_evidence, make_stats, "r = K.log(h)", inputs=inputs))
    assert "reached -0.25" in diagnosis.explanation
    assert families(diagnosis) == ["safe_log", "activation_change"]
    assert diagnosis.fixes[0].code == "r = K.log(tf.maximum(h, 1e-7))"


def test_log1p_domain_edge_is_minus_one(make_evidence, make_stats):
    inputs = (make_stats(min=-1.0, max=2.0),)
    evidence = log_evidence(make_evidence, make_stats, "y = tf.math.log1p(v)", "Log1p", inputs)
    diagnosis = diagnose(evidence)
    assert "log1p of -1 is -inf" in diagnosis.explanation
    assert diagnosis.fixes[0].code == "y = tf.math.log1p(tf.maximum(v, -1.0 + 1e-7))"


def test_xlogy_guards_its_second_argument(make_evidence, make_stats):
    inputs = (make_stats(min=0.0, max=1.0), make_stats(min=0.0, max=1.0, zeros=2))
    evidence = log_evidence(make_evidence, make_stats, "h = tf.math.xlogy(p, q)", "Xlogy", inputs)
    diagnosis = diagnose(evidence)
    assert "second argument of Xlogy" in diagnosis.explanation
    assert "2 exact zeros" in diagnosis.explanation
    assert diagnosis.fixes[0].code == "h = tf.math.xlogy(p, tf.maximum(q, 1e-7))"


def test_unparsable_line_gets_a_generic_safe_log(make_evidence, make_stats):
    diagnosis = diagnose(log_evidence(make_evidence, make_stats, None))
    assert diagnosis.fixes[0].code == "y = tf.math.log(tf.maximum(x, 1e-7))"


def test_log_of_a_sigmoid_output_named_anything_gets_binary_from_logits(
    make_evidence, make_stats, families
):
    # Nothing on the line says "prob": the replay saw the Sigmoid two ops upstream.
    code = "d_loss = -tf.reduce_mean(tf.math.log(p_real) + tf.math.log(1.0 - p_fake))"
    evidence = log_evidence(
        make_evidence, make_stats, code, feeding_ops=frozenset({"Sigmoid", "BiasAdd"})
    )
    diagnosis = diagnose(evidence)
    assert "from_logits" in families(diagnosis)
    fix = {f.family: f for f in diagnosis.fixes}["from_logits"]
    assert "BinaryCrossentropy(from_logits=True)" in fix.code
    assert "activation_change" not in families(diagnosis)


def test_a_prediction_above_one_is_not_clipped_as_a_probability(
    make_evidence, make_stats, families
):
    # A Keras loss names its argument y_pred whatever it is: a regression's predictions
    # reach 7.5 here, so a clip into [1e-7, 1] would cap them; only the floor is proposed.
    inputs = (make_stats(min=-0.5, max=7.5),)
    code = "return tf.reduce_mean(tf.math.log(y_pred) - tf.math.log(y_true))"
    diagnosis = diagnose(log_evidence(make_evidence, make_stats, code, inputs=inputs))
    assert families(diagnosis) == ["safe_log", "activation_change"]


def test_log1p_of_a_prediction_gets_its_own_floor_and_no_unit_clip(
    make_evidence, make_stats, families
):
    inputs = (make_stats(min=-1.5, max=0.5),)
    code = "return tf.sqrt(tf.reduce_mean(tf.square(tf.math.log1p(y_pred) - tf.math.log1p(y)))"
    evidence = log_evidence(make_evidence, make_stats, code, "Log1p", inputs)
    diagnosis = diagnose(evidence)
    assert "clip_input_domain" not in families(diagnosis)
    assert "tf.math.log1p(tf.maximum(y_pred, -1.0 + 1e-7))" in diagnosis.fixes[0].code


def test_from_logits_is_spelled_in_the_framework_of_the_users_line(make_evidence, make_stats):
    def from_logits(code):
        diagnosis = diagnose(log_evidence(make_evidence, make_stats, code))
        return next(fix for fix in diagnosis.fixes if fix.family == "from_logits").code

    # The sigmoid's line unknown: the loss written on the logits, in the user's framework.
    torch_code = from_logits("loss = -(y * torch.log(sigmoid_out)).mean()")
    assert "binary_cross_entropy_with_logits" in torch_code and "keras" not in torch_code
    keras_code = from_logits("loss = -tf.reduce_mean(y * tf.math.log(sigmoid_out))")
    assert "BinaryCrossentropy(from_logits=True)" in keras_code
    # The sigmoid on the log's line: that line rewritten with the framework's log_sigmoid.
    torch_code = from_logits("loss = -(y * torch.log(torch.sigmoid(z))).mean()")
    assert torch_code == "loss = -(y * torch.nn.functional.logsigmoid(z)).mean()"
    tf_code = from_logits("loss = -tf.reduce_mean(y * tf.math.log(tf.sigmoid(z)))")
    assert tf_code == "loss = -tf.reduce_mean(y * tf.math.log_sigmoid(z))"


def test_a_likelihood_is_no_probability_to_clip_at_one(make_evidence, make_stats, families):
    # A mixture density network's likelihood is a density: it passes 1 once its
    # variances shrink, so no clip into [1e-7, 1] (and no from_logits) is proposed.
    code = "nll = -tf.reduce_mean(tf.math.log(likelihood))"
    diagnosis = diagnose(log_evidence(make_evidence, make_stats, code))
    assert "clip_input_domain" not in families(diagnosis)
    assert "from_logits" not in families(diagnosis)
    assert (
        diagnosis.fixes[0].code
        == "nll = -tf.reduce_mean(tf.math.log(tf.maximum(likelihood, 1e-7)))"
    )


def test_most_predictions_below_zero_in_a_compiled_loss_ask_for_a_positive_output(
    make_evidence, make_stats, families
):
    # A Poisson loss on a linear Dense head: 47 of 50 predictions below 0 are no signed
    # value by design, they are a rate that nothing keeps positive.
    evidence = make_evidence(
        op="Log",
        code='hist = model.fit([user, item], {"click": clicked, "visits": visits}, epochs=5,',
        layer="compile_loss/poisson",
        inputs=(make_stats(min=-1.655, max=0.88, size=50),),
        outputs=(make_stats(min=-0.5, max=-0.12, nan=47, size=50),),
        weights_upstream=True,
    )
    diagnosis = diagnose(evidence)
    assert "47 of 50 values (94%) were below 0" in diagnosis.explanation
    assert "negative by design" not in diagnosis.explanation
    assert 'activation="softplus"' in diagnosis.explanation
    assert families(diagnosis)[0] == "activation_change"


def test_a_poisson_loss_handed_a_rate_is_told_its_input_is_the_log_rate_first(
    make_evidence, make_stats
):
    # The log is the loss's own: no line of the user's to guard, a keyword to set.
    code = "loss = F.poisson_nll_loss(rate, counts[idx], log_input=False)"
    evidence = make_evidence(
        op="Log",
        code=code,
        inputs=(make_stats(min=-0.08),),
        outputs=(make_stats(nan=1),),
        framework="torch",
    )
    first = diagnose(evidence).fixes[0]
    assert first.family == "from_logits"
    assert first.rewrite == ("loss = F.poisson_nll_loss(rate, counts[idx], log_input=True)",)
    handed_log = make_evidence(op="Log", code=code.replace("False", "True"), framework="torch")
    assert all(fix.rewrite != first.rewrite for fix in diagnose(handed_log).fixes)


def test_a_log_of_a_sum_of_exps_that_underflowed_is_computed_as_logsumexp_first(
    make_evidence, make_stats
):
    # A mixture's likelihood: the sum of exps on one line, its log on the next.
    from dataclasses import replace

    from gradient_doctor.core.evidence import OpCall
    from gradient_doctor.core.findings import SourceLine

    evidence = make_evidence(
        op="Log",
        code="return -ops.mean(ops.log(lik))",
        inputs=(make_stats(min=0.0, zeros=1),),
        outputs=(make_stats(inf=1),),
    )
    summed = SourceLine("train.py", 41, "lik = ops.sum(ops.exp(log_pi + log_comp), axis=-1)")
    evidence = replace(evidence, zeros_began=OpCall("Exp", summed, (make_stats(min=-120.0),)))
    first = diagnose(evidence).fixes[0]
    assert first.family == "stable_logsumexp"
    assert first.rewrite == ("return -ops.mean(log_lik)",)
    (sum_line,) = first.edits
    assert (sum_line.line, sum_line.new_lines) == (
        41,
        ("log_lik = ops.logsumexp(log_pi + log_comp, axis=-1)",),
    )


def test_a_log_of_a_relu_heads_y_pred_is_no_probability(make_evidence, make_stats, families):
    # A hand-written Poisson NLL on a relu rate head: Keras calls every output `y_pred`,
    # and a clip into [1e-7, 1] would cap rates whose targets pass 1.
    code = "return ops.mean(y_pred - y_true * ops.log(y_pred), axis=-1)"
    evidence = replace(
        log_evidence(make_evidence, make_stats, code), feeding_ops=frozenset({"Relu", "MatMul"})
    )
    assert "clip_input_domain" not in families(diagnose(evidence))
    # A sigmoid upstream: a probability, whatever else is there.
    sigmoid = replace(evidence, feeding_ops=frozenset({"Relu", "Sigmoid"}))
    assert "clip_input_domain" in families(diagnose(sigmoid))


def test_a_log_of_data_many_of_whose_values_are_zero_gets_log1p_first(
    make_evidence, make_stats, families
):
    # Targets taken to the log scale in a train_step, 82 of 1024 of them 0 (counts): a
    # clamp would make each log(1e-7) = -16.1, far below the rest.
    code = "y_log = tf.math.log(y)"
    zeros = (make_stats(min=0.0, max=40.0, zeros=82, size=1024),)
    evidence = log_evidence(make_evidence, make_stats, code, inputs=zeros, weights_upstream=False)
    diagnosis = diagnose(evidence)
    assert families(diagnosis)[0] == "log1p"
    assert diagnosis.fixes[0].rewrite == ("y_log = tf.math.log1p(y)",)
    (guard,) = [fix for fix in diagnosis.fixes if fix.family == "safe_log"]
    assert guard.clamped_share == pytest.approx(82 / 1024)
    assert "82 of its 1024 values are exact zeros of your data" in diagnosis.explanation
    # A few zeros (1%) are no design: the guard alone, as before.
    few = (make_stats(min=0.0, max=40.0, zeros=10, size=1024),)
    evidence = log_evidence(make_evidence, make_stats, code, inputs=few, weights_upstream=False)
    assert "log1p" not in families(diagnose(evidence))
