"""A trained variable made with the value its op is undefined at (a temperature or a scale
made with zeros): the first step fails by construction, and the fix starts the variable
at 1 where the user's code makes it."""

import ast
import dataclasses

import pytest

from gradient_doctor.core.evidence import ConstantVariable
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.fix_placement import place_fixes
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.rewrites.variable_start import made_at, started_at


def _rewritten(source: str, name: str, value: float = 0.0) -> str | None:
    lines = source.splitlines()
    tree = ast.parse(source)
    statement = made_at(tree, name)
    if statement is None:
        return None
    edit = started_at(lines, statement, value, 1.0, "train.py")
    return None if edit is None else "\n".join(edit.new_lines)


@pytest.mark.parametrize(
    ("source", "name", "value", "expected"),
    [
        (
            'self.t = self.add_weight(shape=(), initializer="zeros", name="t")',
            "t",
            0.0,
            'self.t = self.add_weight(shape=(), initializer="ones", name="t")',
        ),
        (
            "w = self.add_weight(shape=(3,), initializer='zeros', name='log_scale')",
            "log_scale",
            0.0,
            "w = self.add_weight(shape=(3,), initializer='ones', name='log_scale')",
        ),
        (
            "self.s = self.add_weight(shape=(4,), initializer=keras.initializers.Zeros())",
            "s",
            0.0,
            'self.s = self.add_weight(shape=(4,), initializer="ones")',
        ),
        (
            "self.scale = nn.Parameter(torch.zeros(dim))",
            "scale",
            0.0,
            "self.scale = nn.Parameter(torch.ones(dim))",
        ),
        ("sigma = tf.Variable(0.0)", "sigma", 0.0, "sigma = tf.Variable(1.0)"),
        ("sigma = tf.Variable(-1.0)", "sigma", -1.0, "sigma = tf.Variable(1.0)"),
        (
            "sigma = torch.tensor([0.0, 0.0], requires_grad=True)",
            "sigma",
            0.0,
            "sigma = torch.tensor([1.0, 1.0], requires_grad=True)",
        ),
        (
            "self.tau = nn.Parameter(torch.full((1,), 0.0))",
            "tau",
            0.0,
            "self.tau = nn.Parameter(torch.full((1,), 1.0))",
        ),
        (
            "self.b = nn.Parameter(torch.zeros_like(template))",
            "b",
            0.0,
            "self.b = nn.Parameter(torch.ones_like(template))",
        ),
    ],
)
def test_the_statement_making_the_variable_starts_it_at_one(source, name, value, expected):
    assert _rewritten(source, name, value) == expected


def test_an_ambiguous_or_missing_statement_is_not_rewritten():
    # Two places write zeros in one statement: which one makes the variable is unclear.
    assert _rewritten("self.s = nn.Parameter(torch.zeros(3) + torch.zeros(3))", "s") is None
    # Two statements assign the name.
    assert _rewritten("s = tf.Variable(0.0)\ns = tf.Variable(0.0)", "s") is None
    # The value the variable is made with is not the one that failed.
    assert _rewritten("s = tf.Variable(0.5)", "s") is None
    # Made by an init function after construction: nothing to rewrite on its line.
    assert _rewritten("self.s = nn.Parameter(torch.empty(3))", "s") is None


def _temperature_evidence(make_evidence, make_stats, step=0, input=1, value=0.0):
    evidence = make_evidence(
        op="RealDiv",
        code="return self.logits(h) / self.temperature",
        inputs=(make_stats(min=-2.0, max=5.0), make_stats(min=value, max=value, zeros=1)),
        outputs=(make_stats(inf=64),),
        step=step,
    )
    constant = ConstantVariable("model/temperature", value, input)
    return dataclasses.replace(evidence, constant_variable=constant)


def test_a_denominator_made_at_zero_is_started_at_one(make_evidence, make_stats, families):
    diagnosis = diagnose(_temperature_evidence(make_evidence, make_stats))
    assert diagnosis.category == "forward_domain"
    assert families(diagnosis)[:2] == ["initial_value", "safe_div"]
    assert "the trained variable `model/temperature` itself" in diagnosis.explanation
    assert "no update has moved" in diagnosis.explanation
    fix = diagnosis.fixes[0]
    assert fix.trial_setting == ("initial_value", 1.0)
    assert (fix.variable_start.made_at, fix.variable_start.start) == (0.0, 1.0)


def test_only_the_first_steps_value_and_the_failing_input_count(
    make_evidence, make_stats, families
):
    # Past the first update a scalar holds one value the updates wrote, not its start.
    later = diagnose(_temperature_evidence(make_evidence, make_stats, step=40))
    assert "initial_value" not in families(later)
    # A numerator made at 0 is not what a division by 0 fails on.
    numerator = diagnose(_temperature_evidence(make_evidence, make_stats, input=0))
    assert "initial_value" not in families(numerator)


def test_the_fix_is_placed_on_the_line_that_makes_the_variable(make_evidence, make_stats, tmp_path):
    (tmp_path / "train.py").write_text(
        "class Model(keras.Model):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        '        self.temperature = self.add_weight(shape=(), initializer="zeros")\n'
        "\n"
        "    def call(self, h):\n"
        "        return self.logits(h) / self.temperature\n"
    )
    evidence = _temperature_evidence(make_evidence, make_stats)
    diagnosis = diagnose(evidence)
    origin = dataclasses.replace(
        evidence.origin, source=dataclasses.replace(evidence.origin.source, line=7)
    )
    finding = Finding(
        diagnosis.category, 0, "forward", origin, diagnosis.explanation, fixes=diagnosis.fixes
    )
    placed = place_fixes(finding, root=str(tmp_path)).fixes[0]
    assert placed.family == "initial_value"
    assert '+        self.temperature = self.add_weight(shape=(), initializer="ones")' in (
        placed.patch
    )
    assert placed.code == 'self.temperature = self.add_weight(shape=(), initializer="ones")'
