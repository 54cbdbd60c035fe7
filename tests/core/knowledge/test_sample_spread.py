"""A std or variance of one value per result: PyTorch's unbiased estimate is 0 / 0. The
diagnosis names the batch of one example, rules out what cannot help (no weight decides
how many values are reduced), and rewrites the call with correction=0."""

import pytest

from gradient_doctor.core.findings import TensorStats
from gradient_doctor.core.knowledge import diagnose

ONE_ROW = TensorStats("float32", (1, 6), -17.1, 11.1, nan=0, inf=0, zeros=0, size=6)
NAN = TensorStats("float32", (6,), None, None, nan=6, inf=0, zeros=0, size=6)
ROWS = TensorStats("float32", (64, 6), -17.1, 11.1, nan=0, inf=0, zeros=0, size=384)


def _evidence(make_evidence, code, op="Std", inputs=(ONE_ROW,)):
    return make_evidence(
        op=op,
        code=code,
        inputs=inputs,
        outputs=(NAN,),
        layer="Net",
        step=16,
        weights_upstream=False,
        reduction_axis=None,
        framework="torch",
    )


@pytest.mark.parametrize(
    ("code", "rewritten"),
    [
        (
            "x = (x - x.mean(0)) / x.std(0)",
            "x = (x - x.mean(0)) / (x.std(0, correction=0) + 1e-5)",
        ),
        (
            "scale = torch.std(h, dim=0, keepdim=True)",
            "scale = (torch.std(h, correction=0, dim=0, keepdim=True) + 1e-5)",
        ),
    ],
)
def test_a_batch_of_one_example_is_named_and_the_spread_taken_with_correction_zero(
    make_evidence, families, code, rewritten
):
    diagnosis = diagnose(_evidence(make_evidence, code))
    assert diagnosis.category == "forward_domain"
    assert "divides by n - 1 = 0: 0 / 0" in diagnosis.explanation
    assert "which held a single example" in diagnosis.explanation
    assert families(diagnosis) == ["biased_spread", "drop_last_batch"]
    assert diagnosis.fixes[0].rewrite == (rewritten,)
    # A larger batch is no "will not help" here: the batch's size is the cause.
    assert {item.remedy for item in diagnosis.not_fixes} == {
        "lower_learning_rate",
        "gradient_clipping",
    }


def test_a_variance_gets_correction_zero_and_no_eps(make_evidence):
    diagnosis = diagnose(_evidence(make_evidence, "v = feats.var(dim=0)", op="Var"))
    assert diagnosis.fixes[0].rewrite == ("v = feats.var(correction=0, dim=0)",)


def test_a_spread_over_several_values_is_left_to_other_rules(make_evidence):
    diagnosis = diagnose(_evidence(make_evidence, "x = x / x.std(0)", inputs=(ROWS,)))
    assert "n - 1 = 0" not in diagnosis.explanation
