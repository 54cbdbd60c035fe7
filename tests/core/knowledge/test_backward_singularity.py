"""Gradients infinite where the forward value is finite (the WGAN-GP tf.norm story)."""

from dataclasses import replace

import pytest

from gradient_doctor.core.knowledge import diagnose

WGAN_LINE = "gp = tf.reduce_mean(tf.square(tf.norm(grads, axis=-1) - 1.0))"


def backward(make_evidence, make_stats, gradient_of, code, op="SqrtGrad", zeros=4, **kwargs):
    return make_evidence(
        op=op,
        code=code,
        phase="backward",
        gradient_of=gradient_of,
        inputs=(make_stats(min=0.0, max=3.0, zeros=zeros), make_stats(min=-1.0, max=1.0)),
        outputs=(make_stats(min=-1.0, max=1.0, inf=zeros),),
        **kwargs,
    )


def test_norm_gradient_at_zero_gets_safe_norm(make_evidence, make_stats, families, not_fixes):
    diagnosis = diagnose(backward(make_evidence, make_stats, "Sqrt", WGAN_LINE))
    assert diagnosis.category == "backward_singularity"
    assert "gradient of Sqrt in layer `message_passing` is 0.5 / sqrt(x)" in (diagnosis.explanation)
    assert "infinite at x = 0" in diagnosis.explanation
    assert "4 values sat exactly on that point at step 57" in diagnosis.explanation
    assert "(SqrtGrad) wrote 4 inf values" in diagnosis.explanation
    assert families(diagnosis) == ["safe_norm"]
    assert diagnosis.fixes[0].code == (
        "gp = tf.reduce_mean(tf.square("
        "tf.sqrt(tf.reduce_sum(tf.square(grads), axis=-1) + 1e-12) - 1.0))"
    )
    assert not_fixes(diagnosis) == ["gradient_clipping", "lower_learning_rate"]


def test_not_fixes_explain_that_clipping_a_nan_gives_nan(make_evidence, make_stats):
    evidence = backward(make_evidence, make_stats, "Sqrt", "")
    origin = replace(evidence.origin, outputs=(make_stats(min=-1.0, max=1.0, nan=4),))
    why = {n.remedy: n.why for n in diagnose(replace(evidence, origin=origin)).not_fixes}
    assert "The NaN comes from the derivative of Sqrt" in why["gradient_clipping"]
    assert "Clipping a NaN gives NaN" in why["gradient_clipping"]
    assert "clip_by_global_norm of a NaN norm turns every gradient NaN" in why["gradient_clipping"]
    assert "still NaN" in why["lower_learning_rate"]


@pytest.mark.parametrize(("framework", "clip"), [("tf", "tf."), ("torch", "torch.nn.utils.")])
def test_not_fixes_name_the_inf_the_backward_op_wrote(make_evidence, make_stats, framework, clip):
    evidence = backward(make_evidence, make_stats, "Acos", "", op="Rsqrt")  # inf=4 written
    evidence = replace(evidence, setup=replace(evidence.setup, framework=framework))
    why = {n.remedy: n.why for n in diagnose(evidence).not_fixes}
    assert "The inf comes from the derivative of Acos" in why["gradient_clipping"]
    assert f"{clip}clip_" in why["gradient_clipping"]
    assert "infinite norm scales every gradient by 0" in why["gradient_clipping"]
    assert "an inf times a smaller rate is still inf" in why["lower_learning_rate"]
    assert "NaN comes" not in " ".join(why.values())


@pytest.mark.parametrize(
    ("op", "code", "fixed"),
    [
        (
            "Acos",
            "angle = torch.acos(torch.clamp(cos, -1.0, 1.0))",
            "angle = torch.acos(torch.clamp(cos, -1.0 + 1e-7, 1.0 - 1e-7))",
        ),
        (
            "Asin",
            "a = tf.asin(tf.clip_by_value(s, clip_value_min=-1, clip_value_max=0.5))",
            "a = tf.asin(tf.clip_by_value(s, clip_value_min=-1.0 + 1e-7, clip_value_max=0.5))",
        ),
        (  # a bound not written as a number is kept: the guard goes around the clamp
            "Acos",
            "t = torch.acos(torch.clamp(c, low, 1.0))",
            "t = torch.acos(torch.clamp(torch.clamp(c, low, 1.0), -1.0 + 1e-7, 1.0 - 1e-7))",
        ),
    ],
)
def test_a_clamp_already_written_is_tightened_not_nested(
    make_evidence, make_stats, op, code, fixed
):
    diagnosis = diagnose(backward(make_evidence, make_stats, op, code, op="Rsqrt"))
    assert diagnosis.fixes[0].family == "clip_input_domain"
    assert diagnosis.fixes[0].code == fixed


def test_plain_sqrt_gets_safe_sqrt(make_evidence, make_stats, families):
    diagnosis = diagnose(backward(make_evidence, make_stats, "Sqrt", "d = tf.sqrt(sq)"))
    assert families(diagnosis) == ["safe_sqrt"]
    assert diagnosis.fixes[0].code == "d = tf.sqrt(tf.maximum(sq, 1e-12))"


def test_norm_named_variable_with_explicit_sqrt(make_evidence, make_stats, families):
    code = "grad_norm = tf.sqrt(tf.reduce_sum(g * g, axis=1))"
    diagnosis = diagnose(backward(make_evidence, make_stats, "Sqrt", code))
    assert families(diagnosis) == ["safe_norm"]
    assert diagnosis.fixes[0].code == "grad_norm = tf.sqrt(tf.reduce_sum(g * g, axis=1) + 1e-12)"


@pytest.mark.parametrize(
    ("gradient_of", "code", "family", "fixed", "phrase"),
    [
        (
            "Pow",
            "r = tf.pow(d, 0.5)",
            "safe_sqrt",
            "r = tf.pow(tf.maximum(d, 1e-12), 0.5)",
            "p < 1",
        ),
        ("Pow", "r = d ** 0.5", "safe_sqrt", "r = tf.maximum(d, 1e-12) ** 0.5", "p * x^(p - 1)"),
        (
            "Acos",
            "a = tf.acos(c)",
            "clip_input_domain",
            "a = tf.acos(tf.clip_by_value(c, -1.0 + 1e-7, 1.0 - 1e-7))",
            "x = -1 and x = 1",
        ),
        ("Log", "l = tf.math.log(p)", "safe_log", "l = tf.math.log(tf.maximum(p, 1e-7))", "1 / x"),
        (
            "Rsqrt",
            "s = tf.math.rsqrt(v)",
            "safe_sqrt",
            "s = tf.math.rsqrt(tf.maximum(v, 1e-12))",
            "x^1.5",
        ),
        (
            "RealDiv",
            "q = a / b",
            "safe_div",
            "q = tf.math.divide_no_nan(a, b)",
            "-a / b^2",
        ),
        (
            "Reciprocal",
            "i = tf.math.reciprocal(b)",
            "safe_div",
            "i = tf.math.divide_no_nan(1.0, b)",
            "-1 / x^2",
        ),
    ],
)
def test_each_singular_op(make_evidence, make_stats, gradient_of, code, family, fixed, phrase):
    diagnosis = diagnose(backward(make_evidence, make_stats, gradient_of, code, op="Mul"))
    assert diagnosis.category == "backward_singularity"
    assert phrase in diagnosis.explanation
    assert diagnosis.fixes[0].family == family
    assert diagnosis.fixes[0].code.splitlines()[0] == fixed


def test_near_miss_reports_the_closest_value(make_evidence, make_stats):
    evidence = make_evidence(
        op="SqrtGrad",
        code="d = tf.sqrt(sq)",
        phase="backward",
        gradient_of="Sqrt",
        inputs=(make_stats(min=1e-45, max=2.0, min_abs=1e-45),),
        outputs=(make_stats(inf=1),),
    )
    assert "the smallest |sqrt(x)| was 1e-45" in diagnose(evidence).explanation


def _gradient_op(make_evidence, make_stats, op, gradient_of, inputs):
    return make_evidence(
        op=op,
        code="",
        phase="backward",
        gradient_of=gradient_of,
        inputs=inputs,
        outputs=(make_stats(inf=4),),
    )


def test_zeros_are_counted_in_the_sqrt_output_not_in_the_incoming_gradient(
    make_evidence, make_stats
):
    # SqrtGrad(y, dy): y = sqrt(x) is 0 exactly where x is; dy's zeros (rows a hinge
    # left without gradient) are no values on the point.
    sqrt_output, incoming = make_stats(min=0.0, zeros=4), make_stats(min=-1.0, zeros=24)
    evidence = _gradient_op(make_evidence, make_stats, "SqrtGrad", "Sqrt", (sqrt_output, incoming))
    explanation = diagnose(evidence).explanation
    assert "4 values sat exactly on that point" in explanation
    assert "24" not in explanation


def test_a_division_gradient_counts_its_denominator(make_evidence, make_stats):
    # RealDiv(grad, b): the denominator is the second input.
    numerator, denominator = make_stats(zeros=30), make_stats(min=0.0, zeros=2)
    evidence = _gradient_op(
        make_evidence, make_stats, "RealDiv", "RealDiv", (numerator, denominator)
    )
    explanation = diagnose(evidence).explanation
    assert "2 values sat exactly on that point" in explanation
    assert "30" not in explanation


@pytest.mark.parametrize(
    ("framework", "written_by"),
    [
        ("tf", "the gradient function of a tf.custom_gradient"),
        ("torch", "a custom torch.autograd.Function's backward"),
    ],
)
def test_a_division_in_a_backward_the_user_wrote_is_no_derivative_of_it(
    make_evidence, make_stats, framework, written_by
):
    # `return dy * 0.5 / y` in a custom gradient: the division itself met y = 0.
    from dataclasses import replace

    inputs = (make_stats(zeros=30), make_stats(min=0.0, zeros=2))
    evidence = _gradient_op(make_evidence, make_stats, "RealDiv", None, inputs)
    evidence = replace(evidence, setup=replace(evidence.setup, framework=framework))
    diagnosis = diagnose(evidence)
    assert f"ran in a backward pass you wrote ({written_by})" in diagnosis.explanation
    assert "(2 exact zeros)" in diagnosis.explanation
    assert "The gradient of" not in diagnosis.explanation
    for item in diagnosis.not_fixes:
        assert "in the backward you wrote, at b = 0" in item.why, item.why
        assert "derivative" not in item.why


def test_the_closest_value_is_the_operands_not_the_incoming_gradients(make_evidence, make_stats):
    # Log's gradient is grad * Reciprocal(x): the Reciprocal's only input is x.
    evidence = _gradient_op(
        make_evidence, make_stats, "Reciprocal", "Log", (make_stats(min=1e-30, min_abs=1e-30),)
    )
    assert "the smallest |x| was 1e-30" in diagnose(evidence).explanation
    sqrt_output, incoming = make_stats(min_abs=1e-30), make_stats(min_abs=1e-45)
    evidence = _gradient_op(make_evidence, make_stats, "SqrtGrad", "Sqrt", (sqrt_output, incoming))
    explanation = diagnose(evidence).explanation
    assert "the smallest |sqrt(x)| was 1e-30" in explanation
    assert "1e-45" not in explanation


def test_an_op_whose_inputs_do_not_hold_the_point_quotes_no_count(make_evidence, make_stats):
    inputs = (make_stats(zeros=24), make_stats(zeros=7))
    explanation = diagnose(
        _gradient_op(make_evidence, make_stats, "Mul", "Pow", inputs)
    ).explanation
    assert "its values reached that point" in explanation
    assert "24" not in explanation and "7 values" not in explanation


def test_euclidean_norm_without_a_line_still_gets_safe_norm(make_evidence, make_stats, families):
    diagnosis = diagnose(backward(make_evidence, make_stats, "EuclideanNorm", None, op="RealDiv"))
    assert families(diagnosis) == ["safe_norm"]
    assert "1e-12" in diagnosis.fixes[0].code


def test_singular_gradient_wins_over_a_growing_gradient_norm(make_evidence, make_stats):
    norms = tuple(2.0**i for i in range(20))
    evidence = backward(make_evidence, make_stats, "Sqrt", WGAN_LINE, grad_norms=norms)
    assert diagnose(evidence).category == "backward_singularity"


def test_a_guarded_operator_is_spelled_in_the_users_framework(make_evidence, make_stats):
    # `x ** p` has no call whose namespace the guard could take: a PyTorch script's
    # guard is torch's, where it was tf.maximum (which a patched copy then failed on).
    from dataclasses import replace

    evidence = backward(make_evidence, make_stats, "Pow", "y = x.clamp(min=0) ** p", op="Mul")
    torch_evidence = replace(evidence, setup=replace(evidence.setup, framework="torch"))
    code = diagnose(torch_evidence).fixes[0].code
    assert "tf." not in code and code.startswith("y = torch.clamp_min(x.clamp(min=0), 1e-12) ** p")
    assert diagnose(evidence).fixes[0].code.startswith("y = tf.maximum(x.clamp(min=0), 1e-12) ** p")


def test_an_op_no_rule_knows_gets_generic_fixes_in_the_users_framework(make_evidence, make_stats):
    from dataclasses import replace

    evidence = backward(make_evidence, make_stats, "Digamma", "", op="Polygamma")
    torch_evidence = replace(evidence, setup=replace(evidence.setup, framework="torch"))
    codes = [fix.code for fix in diagnose(torch_evidence).fixes]
    assert codes and not any("tf." in code for code in codes)
    assert any("torch.autograd.Function" in code for code in codes)
    assert any("tf.custom_gradient" in fix.code for fix in diagnose(evidence).fixes)


def test_past_the_first_step_a_lower_rate_is_an_expectation_for_its_trial(
    make_evidence, make_stats
):
    # A rate too high can be what pushed the value to the singular point (a softmax's
    # probability to 1e-42 while the loss climbed): only its trial or copy can tell.
    later = {
        n.remedy: n for n in diagnose(backward(make_evidence, make_stats, "Log", "")).not_fixes
    }
    assert later["lower_learning_rate"].structural is False
    assert "may keep it from" in later["lower_learning_rate"].why
    assert later["gradient_clipping"].structural is True
    first = backward(make_evidence, make_stats, "Log", "", step=0)
    assert {n.remedy: n for n in diagnose(first).not_fixes}["lower_learning_rate"].structural
