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


def test_a_division_by_a_zero_norm_guards_its_twin_line_too():
    x = TensorStats("float32", (64, 32), -3.7, 4.9, nan=0, inf=0, zeros=256)
    norms = TensorStats("float32", (64, 1), 0.0, 10.9, nan=0, inf=0, zeros=8)
    nan = TensorStats("float32", (64, 32), None, None, nan=256, inf=0, zeros=0)
    first = "a = a / a.norm(dim=-1, keepdim=True)"
    second = "b = b / b.norm(dim=-1, keepdim=True)"
    origin = Origin(
        op="RealDiv",
        op_name="div",
        layer=None,
        source=SourceLine("train.py", 20, first, column=4, end_column=len(first)),
        gradient_of=None,
        inputs=(x, norms),
        outputs=(nan,),
    )
    twin_line = SourceLine("train.py", 21, second, column=4, end_column=len(second))
    twin = OpCall("RealDiv", twin_line, (x, norms))
    evidence = Evidence(
        step=0,
        phase="forward",
        origin=origin,
        setup=TrainingSetup(framework="torch"),
        same_op_calls=(twin,),
    )
    guard = next(fix for fix in diagnose(evidence).fixes if fix.family == "safe_div")
    assert guard.rewrite and "a.norm(dim=-1, keepdim=True) == 0" in guard.rewrite[0]
    (edit,) = guard.edits
    assert (edit.line, edit.old_lines) == (21, (second,))
    assert "b.norm(dim=-1, keepdim=True) == 0" in edit.new_lines[0]


def test_a_log_guarded_on_the_line_that_failed_is_guarded_on_its_twin_far_from_zero():
    zeros = TensorStats("float32", (32,), 0.0, 0.9, nan=0, inf=0, zeros=3)
    away = TensorStats("float32", (32,), 0.2, 0.9, nan=0, inf=0, zeros=0)
    out = TensorStats("float32", (32,), None, None, nan=0, inf=3, zeros=0, neg_inf=3)
    first = "log_a = torch.log(p_a)"
    second = "log_b = torch.log(p_b)"
    origin = Origin(
        op="Log",
        op_name="log",
        layer=None,
        source=SourceLine("train.py", 30, first, column=8, end_column=len(first)),
        gradient_of=None,
        inputs=(zeros,),
        outputs=(out,),
    )
    twin = OpCall(
        "Log", SourceLine("train.py", 31, second, column=8, end_column=len(second)), (away,)
    )
    evidence = Evidence(
        step=4,
        phase="forward",
        origin=origin,
        setup=TrainingSetup(framework="torch"),
        same_op_calls=(twin,),
    )
    guard = next(fix for fix in diagnose(evidence).fixes if fix.family == "safe_log")
    (edit,) = guard.edits
    assert edit.line == 31 and "p_b" in edit.new_lines[0] and edit.new_lines[0] != second
