"""The tf.where trap: the masked branch's infinite derivative turns the gradient NaN."""

from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.rules.where_trap import safe_where


def trapped(make_evidence, make_stats, gradient_of, code, **kwargs):
    return make_evidence(
        op="Mul",
        code=code,
        phase="backward",
        gradient_of=gradient_of,
        masked_by_select=True,
        inputs=(make_stats(min=0.0, max=2.0, zeros=2),),
        outputs=(make_stats(nan=2),),
        **kwargs,
    )


def test_where_trap_with_pow(make_evidence, make_stats, families, not_fixes):
    code = "r = tf.where(m, d ** 0.5, 0.0)"
    diagnosis = diagnose(trapped(make_evidence, make_stats, "Pow", code))
    assert diagnosis.category == "backward_singularity"
    assert "branch that tf.where did not select" in diagnosis.explanation
    assert "0 * inf = NaN" in diagnosis.explanation
    assert families(diagnosis) == ["safe_where", "safe_sqrt"]
    assert diagnosis.fixes[0].code.splitlines() == [
        "safe_x = tf.where(m, d, tf.ones_like(d))",
        "r = tf.where(m, safe_x ** 0.5, 0.0)",
    ]
    assert not_fixes(diagnosis) == ["gradient_clipping", "lower_learning_rate"]


def test_where_trap_wins_over_growth_and_family(make_evidence, make_stats):
    norms = tuple(2.0**i for i in range(20))
    evidence = trapped(make_evidence, make_stats, "Log", "y = tf.math.log(x)", grad_norms=norms)
    assert diagnose(evidence).fixes[0].family == "safe_where"


def test_risky_call_in_the_false_branch():
    fix = safe_where("y = tf.where(x <= 0, 0.0, tf.math.log(x))", "Log")
    assert fix.code.splitlines() == [
        "safe_x = tf.where(x <= 0, tf.ones_like(x), x)",
        "y = tf.where(x <= 0, 0.0, tf.math.log(safe_x))",
    ]


def test_inverse_trig_uses_zero_as_the_stand_in():
    fix = safe_where("a = tf.where(ok, tf.acos(c), 0.0)", "Acos")
    assert fix.code.splitlines()[0] == "safe_x = tf.where(ok, c, tf.zeros_like(c))"


def test_where_on_another_line():
    fix = safe_where("r = tf.math.log(x)", "Log")
    assert fix.code.splitlines()[:2] == [
        "safe_x = tf.where(cond, x, tf.ones_like(x))  # cond: where the result is used",
        "r = tf.math.log(safe_x)",
    ]


def test_unparsable_line_gets_the_double_where_pattern():
    fix = safe_where("", "Log")
    assert fix.code == (
        "safe_x = tf.where(cond, x, tf.ones_like(x))\ny = tf.where(cond, f(safe_x), fallback)"
    )


def test_not_a_trap_in_the_forward_pass(make_evidence):
    evidence = make_evidence(masked_by_select=True)
    assert diagnose(evidence).category == "forward_overflow"


def test_a_torch_where_is_named_as_torch_spells_it(make_evidence, make_stats):
    import dataclasses

    code = "ll = torch.where(m, torch.log(p), torch.zeros_like(p))"
    evidence = trapped(make_evidence, make_stats, "Log", code)
    evidence = dataclasses.replace(
        evidence, setup=dataclasses.replace(evidence.setup, framework="torch")
    )
    diagnosis = diagnose(evidence)
    assert "branch that torch.where did not select" in diagnosis.explanation
    assert "tf.where" not in diagnosis.explanation
    assert (
        diagnosis.fixes[0].code.splitlines()[0] == "safe_x = torch.where(m, p, torch.ones_like(p))"
    )
