"""A one-pass variance rewritten as the framework's own, with the reduction as written."""

import pytest

from gradient_doctor.core.evidence import OpCall
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.rewrites.variance import two_pass_variance


def _call(line: int, code: str, expression: str) -> OpCall:
    start = code.index(expression)
    return OpCall("Sub", SourceLine("train.py", line, code, start, start + len(expression)), ())


@pytest.mark.parametrize(
    ("mean_of_squares", "framework", "variance"),
    [
        (
            "tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)",
            "tf",
            "tf.math.reduce_variance(x, axis=-1, keepdims=True)",
        ),
        ("ops.mean(ops.square(h), axis=1)", "tf", "ops.var(h, axis=1)"),
        ("(x ** 2).mean(-1, keepdim=True)", "torch", "x.var(-1, keepdim=True, correction=0)"),
        ("x.pow(2).mean(dim=0)", "torch", "x.var(dim=0, correction=0)"),
        ("torch.mean(z * z, 1)", "torch", "torch.var(z, 1, correction=0)"),
    ],
)
def test_the_subtraction_becomes_the_frameworks_variance_of_the_same_tensor(
    mean_of_squares, framework, variance
):
    line = f"var = {mean_of_squares} - m ** 2  # one pass"
    sub = _call(5, line, f"{mean_of_squares} - m ** 2")
    fix = two_pass_variance(sub, _call(5, line, mean_of_squares), framework)
    (edit,) = fix.edits
    assert edit.new_lines == (f"var = {variance}  # one pass",)
    assert (edit.line, edit.old_lines) == (5, (line,))


def test_a_mean_of_squares_it_cannot_read_gets_code_to_read_and_no_patch():
    line = "var = moments(x)[1] - m ** 2"
    sub = _call(5, line, "moments(x)[1] - m ** 2")
    fix = two_pass_variance(sub, _call(5, line, "moments(x)[1]"), "torch")
    assert fix.edits == () and "x.var(dim=-1, correction=0" in fix.code
