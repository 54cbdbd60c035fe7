"""A trained variable made with a value its op is undefined at: start it elsewhere.

A learned temperature made with `initializer="zeros"` that divides the logits, a
flow's scale made with `torch.zeros` whose log is its log-determinant: when the first
step's op fails, every element of the variable holds the one value it was made with,
before any update, so the step fails by construction, whatever the learning rate or the
data. (Past the first update a scalar holds one value too, one the updates wrote: not
judged here.) A clamp of the op's input does not help it: it holds the value at the
domain's edge, where the clamp's gradient is 0, so the variable never moves off it.
The fix is where the variable is made: start it at 1, inside every domain these ops
have, the neutral value of a scale or a temperature.
"""

from __future__ import annotations

from dataclasses import replace

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix, VariableStart
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.wording import format_number

# The value a fix starts the variable at.
START = 1.0
# For each op, the input whose value it is undefined at, and the test of that value:
# a denominator at 0; a log's, root's or gamma's argument at or below 0.
_DIVISIONS = ("RealDiv", "Div", "FloorDiv", "TruncateDiv", "Xdivy")
_NON_POSITIVE = ("Log", "Sqrt", "Rsqrt", "Reciprocal", "Pow", "Lgamma", "Digamma", "Xlogy")
_UNDEFINED_AT: dict[str, tuple[int, object]] = {
    **{op: (1, lambda value: value == 0) for op in _DIVISIONS},
    **{op: (0, lambda value: value <= 0) for op in _NON_POSITIVE},
}
_TORCH_CODE = "{name} = torch.nn.Parameter(torch.ones(shape))  # not torch.zeros: start at 1"
_KERAS_CODE = 'self.{name} = self.add_weight(shape=shape, initializer="ones")  # not "zeros"'


def fit_to_initial_value(diagnosis: Diagnosis, evidence: Evidence) -> Diagnosis:
    """`diagnosis` with, first among its fixes, the variable's start moved to 1 and the
    explanation saying why, when the first step's forward pass failed on a trained
    variable that holds one value everywhere, the value the op is undefined at; else
    `diagnosis` unchanged."""
    constant = evidence.constant_variable
    origin = evidence.origin
    if constant is None or origin is None or evidence.phase != "forward" or evidence.step != 0:
        return diagnosis  # after the first update, one value may be one the updates wrote
    undefined = _UNDEFINED_AT.get(origin.op)
    if undefined is None or undefined[0] != constant.input or not undefined[1](constant.value):
        return diagnosis
    value = format_number(constant.value)
    op = origin.reported_op
    attribute = constant.name.replace("/", ".").rpartition(".")[2]
    note = (
        f" That value is the trained variable `{constant.name}` itself, every element of it "
        f"{value}: the value it was made with, which no update has moved, so {op} fails on "
        "it by construction. A clamp would hold it at the domain's edge, where its gradient "
        "is 0, and it would never move off it; start it inside the domain instead."
    )
    torch = evidence.setup.framework == "torch"
    fix = Fix(
        "initial_value",
        f"Start `{constant.name}` at {format_number(START)}, where {op} is defined (it is "
        f"made at {value})",
        (_TORCH_CODE if torch else _KERAS_CODE).format(name=attribute),
        trial_setting=("initial_value", START),
        variable_start=VariableStart(constant.name, constant.value, START),
    )
    return replace(
        diagnosis,
        explanation=diagnosis.explanation + note,
        fixes=(fix, *(f for f in diagnosis.fixes if f.family != "initial_value")),
    )
