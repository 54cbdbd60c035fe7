"""Exp, Expm1, Cosh, Sinh and Pow overflowing in the forward pass (the GNN softmax story)."""

import dataclasses

from gradient_doctor.core.evidence import OpCall
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.rewrites.exp import stable_logsumexp

FORWARD_NOT_FIXES = ["gradient_clipping", "lower_learning_rate", "larger_batch"]


def test_exp_overflow_states_the_value_and_the_limit(make_evidence, families, not_fixes):
    diagnosis = diagnose(make_evidence())
    assert diagnosis.category == "forward_overflow"
    assert "input to Exp in layer `message_passing` at step 57 reached 712.4" in (
        diagnosis.explanation
    )
    assert "float32 exp overflows above 88.72" in diagnosis.explanation
    assert "17 inf values" in diagnosis.explanation
    assert families(diagnosis)[:3] == ["stable_softmax", "constrain_weights", "normalize_input"]
    assert not_fixes(diagnosis) == FORWARD_NOT_FIXES


def test_forward_not_fixes_say_clipping_acts_too_late(make_evidence):
    why = {item.remedy: item.why for item in diagnose(make_evidence()).not_fixes}
    assert "before any gradient exists" in why["gradient_clipping"]
    assert "expected to delay it" in why["lower_learning_rate"]
    assert "delay" in why["larger_batch"]


def test_stable_softmax_fits_the_user_line(make_evidence):
    fixes = {fix.family: fix for fix in diagnose(make_evidence()).fixes}
    assert fixes["stable_softmax"].code == (
        "w = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))"
    )
    assert fixes["stable_softmax"].rewrite == (fixes["stable_softmax"].code,)
    assert fixes["clip_input_domain"].code == "w = tf.exp(tf.minimum(scores, 79.0))"


def test_an_expression_argument_is_shifted_in_place_reassigning_no_name(make_evidence):
    fixes = {fix.family: fix for fix in diagnose(make_evidence(code="e = K.exp(x - 1)")).fixes}
    assert fixes["stable_softmax"].code == (
        "e = K.exp((x - 1) - tf.reduce_max(x - 1, axis=-1, keepdims=True))"
    )


def test_hand_written_softmax_gets_the_library_softmax(make_evidence, families):
    code = "p = tf.exp(s) / tf.reduce_sum(tf.exp(s), axis=-1, keepdims=True)"
    diagnosis = diagnose(make_evidence(code=code))
    assert "clip_input_domain" not in families(diagnosis)
    softmax = diagnosis.fixes[0]
    assert softmax.family == "stable_softmax"
    shift = "s - tf.reduce_max(s, axis=-1, keepdims=True)"
    # Both exps are shifted alike, or the softmax would change.
    assert softmax.rewrite == (
        f"p = tf.exp({shift}) / tf.reduce_sum(tf.exp({shift}), axis=-1, keepdims=True)",
    )
    assert softmax.code.splitlines()[-1] == "p = tf.nn.softmax(s, axis=-1)"


def test_log_sum_exp_line_gets_logsumexp_first(make_evidence):
    code = "lse = tf.math.log(tf.reduce_sum(tf.exp(z), axis=1))"
    fix = diagnose(make_evidence(code=code)).fixes[0]
    assert (fix.family, fix.code) == ("stable_logsumexp", "lse = tf.reduce_logsumexp(z, axis=1)")


def test_constrain_weights_names_the_layer(make_evidence):
    fixes = {fix.family: fix for fix in diagnose(make_evidence()).fixes}
    assert "`message_passing`" in fixes["constrain_weights"].title
    assert "kernel_constraint=keras.constraints.MaxNorm" in fixes["constrain_weights"].code


def test_a_bare_variable_is_bounded_only_when_it_lay_past_the_bound(make_evidence, families):
    # `w` of `tf.exp(x @ w + b)`, a variable no layer owns: a clamp to |x| <= 3 of
    # values that reached 0.03 changes none of them, so the step would compute the same.
    def bare(largest: float):
        variable = {"weights_variable": "w", "weights_variable_largest": largest}
        return diagnose(dataclasses.replace(make_evidence(), **variable))

    small = bare(0.03)
    assert "constrain_weights" not in families(small)
    grown = bare(40.0)
    bound = next(fix for fix in grown.fixes if fix.family == "constrain_weights")
    assert bound.title == "Bound the variable `w`, whose values feed Exp"


def test_unparsable_line_gets_generic_snippets(make_evidence, families):
    diagnosis = diagnose(make_evidence(code=None))
    assert families(diagnosis) == ["stable_softmax", "constrain_weights", "normalize_input"]
    assert "tf.nn.softmax(x, axis=-1)" in diagnosis.fixes[0].code


def test_float16_exp_uses_float16_limit_and_float32_island(make_evidence, make_stats, families):
    evidence = make_evidence(
        code="y = keras.ops.exp(h)",
        inputs=(make_stats("float16", max=12.5),),
        outputs=(make_stats("float16", inf=3),),
    )
    diagnosis = diagnose(evidence)
    assert "float16 exp overflows above 11.09" in diagnosis.explanation
    assert families(diagnosis)[:2] == ["float32_island", "stable_softmax"]
    assert diagnosis.fixes[0].code.startswith('y = keras.ops.exp(keras.ops.cast(h, "float32"))')
    assert "keras.ops.max(h, axis=-1, keepdims=True)" in diagnosis.fixes[1].code


def test_cosh_limit_is_log_max_plus_log_two(make_evidence, make_stats, families):
    evidence = make_evidence(
        op="Cosh", code="c = tf.cosh(t)", inputs=(make_stats(min=-95.0, max=3.0),)
    )
    diagnosis = diagnose(evidence)
    assert "magnitude of the input to Cosh" in diagnosis.explanation
    assert "reached 95" in diagnosis.explanation and "above 89.42" in diagnosis.explanation
    assert "stable_softmax" not in families(diagnosis)
    assert diagnosis.fixes[-1].code == "c = tf.cosh(tf.clip_by_value(t, -79.0, 79.0))"


def test_pow_overflow_names_base_and_exponent(make_evidence, make_stats, not_fixes):
    evidence = make_evidence(
        op="Pow",
        code="y = tf.pow(x, 3.0)",
        inputs=(make_stats(min=-1.0, max=1e13), make_stats(min=3.0, max=3.0)),
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_overflow"
    assert "base of Pow" in diagnosis.explanation and "1e+13 with exponent up to 3" in (
        diagnosis.explanation
    )
    assert "3.4e+38" in diagnosis.explanation
    assert not_fixes(diagnosis) == FORWARD_NOT_FIXES


def test_exp_overflow_wins_over_a_growing_gradient_norm(make_evidence):
    norms = tuple(0.8 * 2.0**i for i in range(20))
    assert diagnose(make_evidence(grad_norms=norms)).category == "forward_overflow"


def test_max_shift_is_taken_along_the_axis_the_softmax_sums_over(make_evidence):
    evidence = dataclasses.replace(make_evidence(), reduction_axis=2)
    stable = {fix.family: fix for fix in diagnose(evidence).fixes}["stable_softmax"]
    assert "tf.reduce_max(scores, axis=2, keepdims=True)" in stable.code


def test_an_exp_not_normalised_by_its_sum_gets_no_max_shift(make_evidence, families):
    # exp(t) * w is not a softmax: subtracting the max would change the result.
    diagnosis = diagnose(make_evidence(code="y = tf.exp(t) * w", reduction_axis=None))
    assert "stable_softmax" not in families(diagnosis)
    assert families(diagnosis) == ["constrain_weights", "normalize_input", "clip_input_domain"]


def test_a_hand_written_sigmoid_gets_the_library_sigmoid(make_evidence, families):
    code = 'h = keras.layers.Lambda(lambda t: ops.exp(t) / (1.0 + ops.exp(t)), name="s")(x)'
    diagnosis = diagnose(make_evidence(code=code, reduction_axis=None))
    fix = diagnosis.fixes[0]
    assert fix.family == "library_function"
    assert fix.code == 'h = keras.layers.Lambda(lambda t: ops.sigmoid(t), name="s")(x)'
    # The library's sigmoid is exact: no clip that would bend the curve is offered.
    assert "clip_input_domain" not in families(diagnosis)
    assert "stable_softmax" not in families(diagnosis)


def test_other_hand_written_forms_get_their_library_function(make_evidence):
    rewrites = {
        "p = 1 / (1 + tf.exp(-logits))": "p = tf.math.sigmoid(logits)",
        "p = 1.0/(1.0+tf.math.exp(-(a + b)))": "p = tf.math.sigmoid(a + b)",
        "y = tf.math.log(1.0 + tf.exp(z))": "y = tf.math.softplus(z)",
        "y = np.log1p(np.exp(z))": "y = np.logaddexp(0.0, z)",
    }
    for code, expected in rewrites.items():
        fixes = {f.family: f for f in diagnose(make_evidence(code=code, reduction_axis=None)).fixes}
        assert fixes["library_function"].code == expected, code


def test_an_exp_fed_by_the_batch_alone_blames_the_data(make_evidence, families):
    diagnosis = diagnose(make_evidence(code="y = tf.exp(t) * w", weights_upstream=False))
    assert "comes from the batch alone" in diagnosis.explanation
    assert "constrain_weights" not in families(diagnosis)
    assert families(diagnosis)[1] == "normalize_input"
    why = {item.remedy: item.why for item in diagnosis.not_fixes}
    assert "cannot change it at all" in why["lower_learning_rate"]


def test_a_negative_base_to_a_fractional_power_is_pow_s_domain(make_evidence, make_stats):
    evidence = make_evidence(
        op="Pow",
        code="y = tf.pow(h, 0.5)",
        inputs=(make_stats(min=-2.0, max=3.0), make_stats(min=0.5, max=0.5)),
        outputs=(make_stats(min=0.0, max=1.7, nan=4),),  # a few: an edge case, not by design
        reduction_axis=None,
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_domain"
    assert "reached -2; a negative base raised to a non-integer power is NaN" in (
        diagnosis.explanation
    )
    assert diagnosis.fixes[0].code == "y = tf.pow(tf.maximum(h, 1e-12), 0.5)"


def test_a_sum_of_exp_the_replay_saw_logged_on_another_line_gets_logsumexp_on_both(
    make_evidence, families
):
    # A max-shift of the exp alone would drop the max from log(sum): no stable_softmax.
    log_line = "return tf.reduce_mean(-pos + tf.math.log(denom))"
    start = log_line.index("tf.math.log(")
    log = OpCall(
        "Log",
        SourceLine("train.py", 44, log_line, column=start, end_column=start + 21),
        (),
    )
    evidence = dataclasses.replace(
        make_evidence(code="denom = tf.reduce_sum(tf.exp(sim), axis=1)"), log_of_sum=log
    )
    diagnosis = diagnose(evidence)
    fix = diagnosis.fixes[0]
    assert fix.family == "stable_logsumexp" and "stable_softmax" not in families(diagnosis)
    assert fix.rewrite == ("log_denom = tf.reduce_logsumexp(sim, axis=1)",)
    assert fix.edits[0].new_lines == ("return tf.reduce_mean(-pos + log_denom)",)
    assert fix.edits[0].line == 44


def test_a_torch_sum_method_inside_the_log_is_one_logsumexp():
    code = "loss = (-sim.diag() + torch.log(torch.exp(sim).sum(dim=1))).mean()"
    fix = stable_logsumexp(code)
    assert fix.code == "loss = (-sim.diag() + torch.logsumexp(sim, dim=1)).mean()"
    assert stable_logsumexp("l = torch.log(torch.exp(s).sum(dim=1) + w)") is None


def test_an_exp_input_a_temperature_scaled_past_the_limit_says_the_least_divisor(make_evidence):
    from gradient_doctor.core.findings import TensorStats

    cosines = TensorStats("float32", (128, 128), -1.0, 0.9997, nan=0, inf=0, zeros=0)
    division = OpCall("RealDiv", SourceLine("train.py", 23, "sim = z1 @ z2.t() / tau"), (cosines,))
    evidence = dataclasses.replace(make_evidence(), scaled_up=(division, 200.0, 0.9997))
    diagnosis = diagnose(evidence)
    explanation = diagnosis.explanation
    assert "Its input was divided by 0.005 at train.py:23 (a temperature)" in explanation
    assert "a divisor of at least 0.01127 keeps the exp finite" in explanation
    # Cosines at most 1 went in: bounding the weights or standardising the data would not
    # keep them there, the temperature took them past the limit.
    families = [fix.family for fix in diagnosis.fixes]
    assert "constrain_weights" not in families and "normalize_input" not in families


def test_a_clip_of_the_exp_clips_its_twin_on_another_line_that_went_past_the_limit(make_evidence):
    # A hand-written NT-Xent: `exp(diag(sim))` failed first, `exp(sim)` on the next line
    # went past the limit too; a copy with one clipped fails at the other.
    from gradient_doctor.core.findings import TensorStats

    numerator = "numerator = torch.exp(torch.diag(sim))"
    past = TensorStats("float32", (64, 64), -40.0, 99.7, nan=0, inf=0, zeros=0)
    inside = TensorStats("float32", (64,), -40.0, 12.0, nan=0, inf=0, zeros=0)
    twin = OpCall(
        "Exp", SourceLine("train.py", 43, "denominator = torch.exp(sim).sum(dim=1)"), (past,)
    )
    calm = OpCall("Exp", SourceLine("train.py", 50, "w = torch.exp(bias)"), (inside,))
    evidence = make_evidence(code=numerator, reduction_axis=None, framework="torch")
    evidence = dataclasses.replace(evidence, same_op_calls=(twin, calm))
    clip = next(f for f in diagnose(evidence).fixes if f.family == "clip_input_domain")
    assert clip.rewrite == ("numerator = torch.exp(torch.clamp_max(torch.diag(sim), 79.0))",)
    assert [(e.line, e.new_lines) for e in clip.edits] == [
        (43, ("denominator = torch.exp(torch.clamp_max(sim, 79.0)).sum(dim=1)",))
    ]
    assert clip.title.endswith("; and at train.py:43, where it went past the limit too")


def test_a_clip_of_an_exp_most_of_whose_values_overflowed_says_how_many_it_holds(
    make_evidence, make_stats
):
    # A hand-written InfoNCE's exp of its positive pairs: every one of the 64 past the
    # limit. Clipped at 79, each has gradient 0: the pairs stop attracting.
    code = "numer = torch.exp(torch.diagonal(sim))"
    overflowed = make_stats(min=0.0, max=1.0, inf=64, size=64)
    evidence = make_evidence(code=code, outputs=(overflowed,), reduction_axis=None)
    (clip,) = [fix for fix in diagnose(evidence).fixes if fix.family == "clip_input_domain"]
    assert clip.clamped_share == 1.0
    # A few overflowed values of many (17 of 256 is 6.6%, 3 of 256 1.2%): only past 5%.
    few = make_stats(min=0.0, max=1.0, inf=3, size=256)
    evidence = make_evidence(code=code, outputs=(few,), reduction_axis=None)
    (clip,) = [fix for fix in diagnose(evidence).fixes if fix.family == "clip_input_domain"]
    assert clip.clamped_share is None
