"""The shared shape of forward-domain rules: an op fed a value where it is undefined."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import (
    input_at,
    largest_magnitude,
    source_code,
    source_focus,
)
from gradient_doctor.core.knowledge.remedies.not_fixes import forward_not_fixes
from gradient_doctor.core.knowledge.rewrites.guards import guard_fix
from gradient_doctor.core.knowledge.wording import (
    count,
    explain_input,
    format_number,
    from_data_note,
    rounding_note,
)


@dataclass(frozen=True)
class Domain:
    """Where one op is defined, and how to keep its argument there.

    Attributes:
        rule: what the op does outside its domain, e.g. "log of 0 is -inf ...".
        family: the fix family of the guard, e.g. "safe_log".
        title: the guard fix's title.
        argument: which argument is out of range (0 for log, 1 for xlogy's y).
        extreme: "min" when the smallest value matters, "magnitude" for the largest |x|.
        boundary: the domain's edge, for noting overshoots that come from rounding.
        digits: significant digits to show the value with.
    """

    rule: str
    family: str
    title: str
    argument: int = 0
    extreme: str = "min"
    boundary: float | None = None
    digits: int = 4


def diagnose_domain(
    evidence: Evidence, domain: Domain, extra_fixes: Sequence[Fix] = ()
) -> Diagnosis | None:
    """Explain a forward op that went non-finite outside its domain; decline in backward.

    Args:
        evidence: the failing step's `Evidence`.
        domain: the op's `Domain`.
        extra_fixes: fixes proposed after the guard.

    Returns:
        A `forward_domain` diagnosis, or None for a backward origin.
    """
    origin = evidence.origin
    if origin is None or evidence.phase != "forward":
        return None
    stats = input_at(origin, domain.argument)
    if domain.extreme == "min":
        value = stats.min if stats else None
    else:
        value = largest_magnitude(stats)
    reached = format_number(value, domain.digits)
    if stats and stats.zeros and domain.boundary == 0:
        reached += f" ({count(stats.zeros, 'exact zero')})"
    if value is not None and domain.boundary is not None:
        reached += rounding_note(abs(value - domain.boundary))
    subject = "The input to" if domain.argument == 0 else "The second argument of"
    guard = guard_fix(
        domain.family, domain.title, source_code(evidence), origin.op, focus=source_focus(evidence)
    )
    return Diagnosis(
        category="forward_domain",
        explanation=explain_input(origin, evidence.step, subject, reached, domain.rule)
        + from_data_note(evidence.weights_upstream),
        not_fixes=forward_not_fixes(f"the invalid input to {origin.op}", evidence.weights_upstream),
        fixes=(guard, *extra_fixes),
    )
