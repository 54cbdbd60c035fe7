"""Divisions (RealDiv, Div, FloorDiv, Reciprocal, Xdivy, ...) by zero or by a tiny number."""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Origin
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import (
    input_at,
    largest_magnitude,
    limits_of,
    origin_dtype,
    source_code,
    source_focus,
)
from gradient_doctor.core.knowledge.remedies.not_fixes import forward_not_fixes
from gradient_doctor.core.knowledge.rewrites.activation import positive_activation
from gradient_doctor.core.knowledge.rewrites.division import safe_div
from gradient_doctor.core.knowledge.rewrites.norm import safe_norm
from gradient_doctor.core.knowledge.source.twins import twin_calls, with_twins
from gradient_doctor.core.knowledge.wording import (
    count,
    explain_input,
    format_number,
    from_data_note,
)

OPS = frozenset(
    {"RealDiv", "Div", "FloorDiv", "TruncateDiv", "FloorMod", "Reciprocal", "Inv", "Xdivy"}
)
# Ops whose only (or whose first) input is the denominator.
_UNARY = frozenset({"Reciprocal", "Inv"})


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a forward division that went inf or NaN."""
    origin = evidence.origin
    if origin is None or evidence.phase != "forward":
        return None
    code, focus = source_code(evidence), source_focus(evidence)
    framework = evidence.setup.framework
    twins = twin_calls(origin.source, evidence.same_op_calls)
    norm = with_twins(safe_norm(code, focus=focus), twins, lambda c, f: safe_norm(c, focus=f))
    division = with_twins(
        safe_div(code, origin.op, focus, framework),
        twins,
        lambda c, f: safe_div(c, origin.op, f, framework),
    )
    fixes = (norm, division) if norm else (division,)
    # A denominator a relu made is meant to be positive: make it so where it is made.
    softplus = positive_activation(evidence, 0 if origin.op in _UNARY else 1)
    fixes += (softplus,) if softplus is not None else ()
    # What the learning rate could change is the denominator: a count of the batch's own
    # labels, which no weight makes, is the data's, whatever makes the numerator.
    upstream = evidence.weights_upstream
    at = 0 if origin.op in _UNARY else 1
    if at < len(evidence.weights_upstream_of) and evidence.weights_upstream_of[at] is False:
        upstream = False
    return Diagnosis(
        category="forward_domain",
        explanation=explain(origin, evidence.step) + from_data_note(upstream),
        not_fixes=forward_not_fixes(f"the division by zero in {origin.reported_op}", upstream),
        fixes=fixes,
    )


def explain(origin: Origin, step: int | None) -> str:
    """Say how many denominators were zero, or how close to zero they came."""
    denominator = input_at(origin, 0 if origin.op in _UNARY else 1)
    if denominator is not None and denominator.zeros:
        of = f" of {denominator.size}" if denominator.size else ""
        reached = f"0 ({count(denominator.zeros, 'zero')}{of})"
        return explain_input(
            origin, step, "The denominator of", reached, "x / 0 is inf and 0 / 0 is NaN"
        )
    closest = denominator.min_abs if denominator is not None else None
    numerator = largest_magnitude(input_at(origin, 0)) if origin.op not in _UNARY else 1.0
    rule = (
        f"with a numerator up to {format_number(numerator)} the quotient passed "
        f"{origin_dtype(origin)}'s largest value {format_number(limits_of(origin).max)}"
    )
    return explain_input(
        origin, step, "The smallest |denominator| of", format_number(closest), rule
    )
