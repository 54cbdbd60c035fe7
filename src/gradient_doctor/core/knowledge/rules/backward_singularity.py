"""Gradients that are infinite where the forward value is finite: sqrt, pow, acos, log at 0."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix, NotFix, Origin
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import input_at, source_code, source_focus
from gradient_doctor.core.knowledge.remedies.not_fixes import nan_gradient_not_fixes
from gradient_doctor.core.knowledge.rewrites.division import safe_div
from gradient_doctor.core.knowledge.rewrites.guards import guard_fix
from gradient_doctor.core.knowledge.rewrites.log_softmax import (
    log_softmax,
    log_softmax_moved,
    logged_softmax_fix,
)
from gradient_doctor.core.knowledge.rewrites.norm import mentions_norm, safe_norm
from gradient_doctor.core.knowledge.wording import (
    at_step,
    count,
    format_number,
    nonfinite_counts,
    nonfinite_kind,
    op_place,
)


@dataclass(frozen=True)
class Singularity:
    """Where a forward op's derivative blows up.

    Attributes:
        derivative: the derivative, in plain notation.
        point: where it is infinite or undefined.
        family: the fix family that keeps the op off that point.
        operand: what the derivative divides by (or takes a negative power of):
            exactly 0 where the forward op's input sits on `point`.
    """

    derivative: str
    point: str
    family: str
    operand: str = "x"


_UNIT = "x = -1 and x = 1"
_DIVISION = Singularity("-a / b^2 (for the denominator b)", "b = 0", "safe_div", "b")
SINGULARITIES = {
    "Sqrt": Singularity("0.5 / sqrt(x)", "x = 0", "safe_sqrt", "sqrt(x)"),
    "Rsqrt": Singularity("-0.5 / x^1.5", "x = 0", "safe_sqrt"),
    "Pow": Singularity("p * x^(p - 1)", "x = 0 when p < 1", "safe_sqrt"),
    "Log": Singularity("1 / x", "x = 0", "safe_log"),
    "Log1p": Singularity("1 / (1 + x)", "x = -1", "safe_log", "1 + x"),
    "Acos": Singularity("-1 / sqrt(1 - x^2)", _UNIT, "clip_input_domain", "sqrt(1 - x^2)"),
    "Asin": Singularity("1 / sqrt(1 - x^2)", _UNIT, "clip_input_domain", "sqrt(1 - x^2)"),
    "Atanh": Singularity("1 / (1 - x^2)", _UNIT, "clip_input_domain", "1 - x^2"),
    "Acosh": Singularity("1 / sqrt(x^2 - 1)", "x = 1", "clip_input_domain", "sqrt(x^2 - 1)"),
    "Reciprocal": Singularity("-1 / x^2", "x = 0", "safe_div"),
    "Inv": Singularity("-1 / x^2", "x = 0", "safe_div"),
    "RealDiv": _DIVISION,
    "Div": _DIVISION,
    "EuclideanNorm": Singularity("x / ||x||", "the zero vector", "safe_norm", "||x||"),
}
# Which input of the backward op holds the `operand`, for the ops TensorFlow's gradients
# use: SqrtGrad(y, dy) reads y = sqrt(x); Log's, Log1p's, Acos's, Asin's and Atanh's
# gradients take a Reciprocal (or Rsqrt) of it; Pow's raises x to p - 1; divisions
# (RealDiv's, Acosh's, EuclideanNorm's gradients) divide by it. The other inputs (the
# incoming gradient above all) say nothing about the point: their counts are not quoted.
OPERAND_INPUT = {
    "SqrtGrad": 0,
    "Reciprocal": 0,
    "Inv": 0,
    "Rsqrt": 0,
    "Pow": 0,
    "RealDiv": 1,
    "Div": 1,
    "DivNoNan": 1,
}
GRADIENT_OF = frozenset(SINGULARITIES)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a backward op that went non-finite at a singular point of its forward op."""
    origin = evidence.origin
    if origin is None or evidence.phase != "backward":
        return None
    forward = origin.gradient_of or origin.op
    singularity = SINGULARITIES[forward]
    # A backward op names the forward op it differentiates, unless the user's own code
    # ran it: a custom autograd Function's backward, a `tf.custom_gradient`'s gradient.
    written = origin.gradient_of is None
    framework = evidence.setup.framework
    if written:
        cause = f"{origin.reported_op} in the backward you wrote, at {singularity.point}"
    else:
        cause = (
            f"the derivative of {origin.reported_gradient_of or forward} itself, evaluated "
            f"at {singularity.point}"
        )
    fixes = guard_fixes(
        forward, source_code(evidence), source_focus(evidence), evidence.setup.framework
    )
    # A log of probabilities picked from a softmax: the same values exact, first.
    moved = None
    if not written:
        moved = log_softmax_moved(evidence.picked_softmax, origin.source) or logged_softmax_fix(
            evidence.logged_softmax, origin.source
        )
    return Diagnosis(
        category="backward_singularity",
        explanation=(
            explain_written(origin, evidence.step, framework)
            if written
            else explain(origin, forward, evidence.step)
        ),
        not_fixes=_after_updates(
            nan_gradient_not_fixes(cause, framework, nonfinite_kind(origin)), evidence
        ),
        fixes=fixes if moved is None else (moved, *fixes),
    )


def _after_updates(not_fixes: tuple[NotFix, ...], evidence: Evidence) -> tuple[NotFix, ...]:
    """Past the first step, a lower learning rate is an expectation, not a fact: it cannot
    make this step's gradient finite, but the updates before may be what brought the
    value to the singular point (a rate too high, its loss climbing, pushing a softmax's
    probability to 1e-42), which a lower rate would not have done; its trial or its
    patched copy judges it."""
    if not evidence.step:
        return not_fixes
    return tuple(
        replace(
            item,
            why=f"{item.why} Expected: it cannot make this gradient finite, but the updates "
            "before this step may have brought the value to that point, which a lower rate "
            "may keep it from.",
            structural=False,
        )
        if item.remedy == "lower_learning_rate"
        else item
        for item in not_fixes
    )


# Where a framework runs a backward the user wrote.
_WRITTEN_BACKWARD = {
    "torch": "a custom torch.autograd.Function's backward",
    "tf": "the gradient function of a tf.custom_gradient",
}


def explain_written(origin: Origin, step: int | None, framework: str = "torch") -> str:
    """An op of the user's own backward (a custom autograd Function's, a
    `tf.custom_gradient`'s) at its own singular point: the op itself, not a derivative
    of it, left the finite range."""
    singularity = SINGULARITIES[origin.op]
    index = OPERAND_INPUT.get(origin.op)
    operand = input_at(origin, index) if index is not None else None
    hits = f" ({count(operand.zeros, 'exact zero')})" if operand and operand.zeros else ""
    return (
        f"{op_place(origin)}{at_step(step)} ran in a backward pass you wrote "
        f"({_WRITTEN_BACKWARD.get(framework, _WRITTEN_BACKWARD['tf'])}) and reached "
        f"{singularity.point}{hits}, where "
        f"it wrote {nonfinite_counts(origin)}. The forward value was finite; the fix "
        "belongs in that backward."
    )


def explain(origin: Origin, forward: str, step: int | None) -> str:
    """Name the derivative, its singular point, and how many values sat on it.

    The count is of the tensor the derivative divides by (`OPERAND_INPUT`), never of
    another input: the incoming gradient's zeros are no values on the point.
    """
    singularity = SINGULARITIES[forward]
    index = OPERAND_INPUT.get(origin.op)
    operand = input_at(origin, index) if index is not None else None
    if operand is not None and operand.zeros:
        hits = f"{count(operand.zeros, 'value')} sat exactly on that point"
    elif operand is not None and operand.min_abs is not None:
        hits = f"the smallest |{singularity.operand}| was {format_number(operand.min_abs)}"
    else:
        hits = "its values reached that point"
    return (
        f"The gradient of {op_place(origin, origin.reported_gradient_of or forward)} is "
        f"{singularity.derivative}, "
        f"infinite at {singularity.point}, and {hits}{at_step(step)}. The forward value "
        f"was finite, but the backward pass ({origin.reported_op}) wrote "
        f"{nonfinite_counts(origin)}."
    )


def guard_fixes(
    forward: str, code: str, focus: tuple[int, int] | None = None, framework: str = "tf"
) -> tuple[Fix, ...]:
    """The fixes that keep the forward op off its singular point, for the user's line.

    Args:
        forward: str, the forward op type, e.g. "Sqrt".
        code: str, the user's line ("" when unknown).
        focus: where on the line the forward op was made (`SourceLine.span`).
        framework: the framework the user trains with, which spells a division.

    Returns:
        safe_norm for a line that computes a norm, else the op's own guard (after the
        exact log_softmax, for a log of a softmax).
    """
    singularity = SINGULARITIES[forward]
    if mentions_norm(code) or forward == "EuclideanNorm":
        norm = safe_norm(code, required=forward == "EuclideanNorm", focus=focus)
        if norm is not None:
            return (norm,)
    if singularity.family == "safe_div":
        return (safe_div(code, forward, focus, framework),)
    title = f"Keep the input of {forward} off {singularity.point}"
    guard = guard_fix(singularity.family, title, code, forward, focus=focus, framework=framework)
    exact = log_softmax(code, forward, focus)
    return (guard,) if exact is None else (exact, guard)
