"""Twin lines, written alike but for their variables' names, get the same guard: the
other half of a cosine similarity is patched with the half that failed."""

import pytest

from gradient_doctor.core.evidence import Evidence, OpCall, TrainingSetup
from gradient_doctor.core.findings import Origin, SourceLine, TensorStats
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.source.twins import are_twins


@pytest.mark.parametrize(
    ("first", "second", "twins"),
    [
        ("a = a / a.norm(dim=-1, keepdim=True)", "b = b / b.norm(dim=-1, keepdim=True)", True),
        ("za = enc(xa) / tau", "zb = enc(xb) / tau", True),
        ("a = a / a.norm(dim=-1)", "a = a / a.norm(dim=-1)", False),  # the same line
        ("a = a / a.norm(dim=-1)", "b = b / b.sum(dim=-1)", False),  # another method
        ("a = a / a.norm(dim=-1)", "b = a / b.norm(dim=-1)", False),  # not one for one
        ("a = f(x, dim=1)", "a = f(x, axis=1)", False),  # a keyword's name is no variable
        ("a = a / a.norm(dim=-1)", "b = b / b.norm(dim=-2)", False),  # another number
    ],
)
def test_twins_differ_only_in_variables_renamed_one_for_one(first, second, twins):
    assert are_twins(first, second) is twins


def _guarded(op: str, lines: tuple[str, str], column: int, inputs, twin_inputs, outputs, family):
    """The `family` fix of a forward `op` that failed on the first of two twin `lines`
    (20 and 21 of train.py, each call from `column` to the line's end)."""
    first, second = (
        SourceLine("train.py", 20 + index, code, column=column, end_column=len(code))
        for index, code in enumerate(lines)
    )
    origin = Origin(
        op=op,
        op_name=op.lower(),
        layer=None,
        source=first,
        gradient_of=None,
        inputs=inputs,
        outputs=outputs,
    )
    evidence = Evidence(
        step=4,
        phase="forward",
        origin=origin,
        setup=TrainingSetup(framework="torch"),
        same_op_calls=(OpCall(op, second, twin_inputs),),
    )
    return next(fix for fix in diagnose(evidence).fixes if fix.family == family)


def test_a_division_by_a_zero_norm_guards_its_twin_line_too():
    x = TensorStats("float32", (64, 32), -3.7, 4.9, nan=0, inf=0, zeros=256)
    norms = TensorStats("float32", (64, 1), 0.0, 10.9, nan=0, inf=0, zeros=8)
    nan = TensorStats("float32", (64, 32), None, None, nan=256, inf=0, zeros=0)
    second = "b = b / b.norm(dim=-1, keepdim=True)"
    lines = ("a = a / a.norm(dim=-1, keepdim=True)", second)
    guard = _guarded("RealDiv", lines, 4, (x, norms), (x, norms), (nan,), "safe_div")
    assert guard.rewrite and "a.norm(dim=-1, keepdim=True) == 0" in guard.rewrite[0]
    (edit,) = guard.edits
    assert (edit.line, edit.old_lines) == (21, (second,))
    assert "b.norm(dim=-1, keepdim=True) == 0" in edit.new_lines[0]


def test_a_log_guarded_on_the_line_that_failed_is_guarded_on_its_twin_far_from_zero():
    zeros = TensorStats("float32", (32,), 0.0, 0.9, nan=0, inf=0, zeros=3)
    away = TensorStats("float32", (32,), 0.2, 0.9, nan=0, inf=0, zeros=0)
    out = TensorStats("float32", (32,), None, None, nan=0, inf=3, zeros=0, neg_inf=3)
    second = "log_b = torch.log(p_b)"
    lines = ("log_a = torch.log(p_a)", second)
    guard = _guarded("Log", lines, 8, (zeros,), (away,), (out,), "safe_log")
    (edit,) = guard.edits
    assert edit.line == 21 and "p_b" in edit.new_lines[0] and edit.new_lines[0] != second
