"""An op reading a non-finite value that no op made: a literal its dtype cannot hold."""

import dataclasses

from gradient_doctor.core.findings import TensorStats
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.rules.nonfinite_constant import too_large_literal

MASK = TensorStats("float16", (32, 1, 12), 0.0, 1.0, nan=0, inf=0, zeros=318, size=384)
MINUS_INF = TensorStats("float16", (), None, None, nan=0, inf=1, zeros=0, size=1, neg_inf=1)
OUT = TensorStats("float16", (32, 1, 12), None, None, nan=318, inf=66, zeros=0, size=384)


def _mask_evidence(make_evidence, code="scores = scores + (1.0 - mask) * -1e9"):
    return make_evidence(
        op="Mul",
        code=code,
        inputs=(MASK, MINUS_INF),
        outputs=(OUT,),
        layer="masked_self_attention",
        step=0,
        reduction_axis=None,
        nonfinite_constant=True,
    )


def test_a_float16_mask_of_minus_1e9_is_named_with_the_float16_limit(make_evidence, families):
    diagnosis = diagnose(_mask_evidence(make_evidence))
    assert diagnosis.category == "forward_overflow"
    assert "read a float16 input that was already -inf" in diagnosis.explanation
    assert "the number 1e9 on your line does not fit float16" in diagnosis.explanation
    assert "65504" in diagnosis.explanation
    assert families(diagnosis) == ["dtype_safe_constant", "float32_island"]
    assert diagnosis.fixes[0].code.startswith("scores = scores + (1.0 - mask) * -1e4")
    why = {item.remedy: item.why for item in diagnosis.not_fixes}
    assert "whatever the weights are" in why["lower_learning_rate"]


def test_without_a_literal_on_the_line_the_constant_is_still_blamed(make_evidence, families):
    diagnosis = diagnose(_mask_evidence(make_evidence, code="scores = scores + penalty"))
    assert "a constant, or a tensor computed before the step" in diagnosis.explanation
    # No overflow of the step's: a value made before it, as class weights of 1/0 are.
    assert diagnosis.category == "bad_input"
    assert "Make that value finite where it was computed" in diagnosis.explanation
    assert families(diagnosis) == ["float32_island"]


def test_the_rule_declines_an_op_whose_non_finite_input_an_op_made(make_evidence):
    evidence = dataclasses.replace(_mask_evidence(make_evidence), nonfinite_constant=False)
    assert "already -inf before any op" not in diagnose(evidence).explanation


def test_only_numbers_beyond_the_limit_are_picked():
    assert too_large_literal("x * 1e9 + 3", 65504.0) == "1e9"
    assert too_large_literal("x * 1e4 + 3.5", 65504.0) is None
    assert too_large_literal("layer_2e9(x) * 70000.0", 65504.0) == "70000.0"
