"""Gradients that are infinite where the forward value is finite: sqrt, pow, acos, log at 0."""

from __future__ import annotations

from dataclasses import dataclass

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix, Origin
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.division_rewrite import safe_div
from gradient_doctor.core.knowledge.facts import source_code
from gradient_doctor.core.knowledge.guards import guard_fix
from gradient_doctor.core.knowledge.norm_rewrite import mentions_norm, safe_norm
from gradient_doctor.core.knowledge.not_fixes import nan_gradient_not_fixes
from gradient_doctor.core.knowledge.wording import (
    at_step,
    count,
    format_number,
    nonfinite_counts,
    op_place,
)


@dataclass(frozen=True)
class Singularity:
    """Where a forward op's derivative blows up.

    Attributes:
        derivative: the derivative, in plain notation.
        point: where it is infinite or undefined.
        family: the fix family that keeps the op off that point.
    """

    derivative: str
    point: str
    family: str


_UNIT = "x = -1 and x = 1"
_DIVISION = Singularity("-a / b^2 (for the denominator b)", "b = 0", "safe_div")
SINGULARITIES = {
    "Sqrt": Singularity("0.5 / sqrt(x)", "x = 0", "safe_sqrt"),
    "Rsqrt": Singularity("-0.5 / x^1.5", "x = 0", "safe_sqrt"),
    "Pow": Singularity("p * x^(p - 1)", "x = 0 when p < 1", "safe_sqrt"),
    "Log": Singularity("1 / x", "x = 0", "safe_log"),
    "Log1p": Singularity("1 / (1 + x)", "x = -1", "safe_log"),
    "Acos": Singularity("-1 / sqrt(1 - x^2)", _UNIT, "clip_input_domain"),
    "Asin": Singularity("1 / sqrt(1 - x^2)", _UNIT, "clip_input_domain"),
    "Atanh": Singularity("1 / (1 - x^2)", _UNIT, "clip_input_domain"),
    "Acosh": Singularity("1 / sqrt(x^2 - 1)", "x = 1", "clip_input_domain"),
    "Reciprocal": Singularity("-1 / x^2", "x = 0", "safe_div"),
    "Inv": Singularity("-1 / x^2", "x = 0", "safe_div"),
    "RealDiv": _DIVISION,
    "Div": _DIVISION,
    "EuclideanNorm": Singularity("x / ||x||", "the zero vector", "safe_norm"),
}
GRADIENT_OF = frozenset(SINGULARITIES)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a backward op that went non-finite at a singular point of its forward op."""
    origin = evidence.origin
    if origin is None or evidence.phase != "backward":
        return None
    forward = origin.gradient_of or origin.op
    singularity = SINGULARITIES[forward]
    return Diagnosis(
        category="backward_singularity",
        explanation=explain(origin, forward, evidence.step),
        not_fixes=nan_gradient_not_fixes(
            f"the derivative of {forward} itself, evaluated at {singularity.point}"
        ),
        fixes=guard_fixes(forward, source_code(evidence)),
    )


def explain(origin: Origin, forward: str, step: int | None) -> str:
    """Name the derivative, its singular point, and how many values sat on it."""
    singularity = SINGULARITIES[forward]
    zeros = max((stats.zeros for stats in origin.inputs), default=0)
    closest = [stats.min_abs for stats in origin.inputs if stats.min_abs is not None]
    if zeros:
        hits = f"{count(zeros, 'value')} sat exactly on that point"
    elif closest:
        hits = f"its values came within {format_number(min(closest))} of that point"
    else:
        hits = "its values reached that point"
    return (
        f"The gradient of {op_place(origin, forward)} is {singularity.derivative}, "
        f"infinite at {singularity.point}, and {hits}{at_step(step)}. The forward value "
        f"was finite, but the backward pass ({origin.op}) wrote {nonfinite_counts(origin)}."
    )


def guard_fixes(forward: str, code: str) -> tuple[Fix, ...]:
    """The fixes that keep the forward op off its singular point, for the user's line.

    Args:
        forward: str, the forward op type, e.g. "Sqrt".
        code: str, the user's line ("" when unknown).

    Returns:
        safe_norm for a line that computes a norm, else the op's own guard.
    """
    singularity = SINGULARITIES[forward]
    if mentions_norm(code) or forward == "EuclideanNorm":
        norm = safe_norm(code, required=forward == "EuclideanNorm")
        if norm is not None:
            return (norm,)
    if singularity.family == "safe_div":
        return (safe_div(code, forward),)
    title = f"Keep the input of {forward} off {singularity.point}"
    return (guard_fix(singularity.family, title, code, forward),)
