"""Square roots (Sqrt, Rsqrt) fed a negative value, or a zero for Rsqrt."""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.rules.domain_rule import Domain, diagnose_domain

_TITLE = "Keep the square root's argument positive (this also keeps its gradient finite)"
_DOMAINS = {
    "Sqrt": Domain(
        "the square root of a negative number is NaN", "safe_sqrt", _TITLE, boundary=0, signed=True
    ),
    "Rsqrt": Domain(
        "1 / sqrt(0) is inf and 1 / sqrt of a negative number NaN", "safe_sqrt", _TITLE, boundary=0
    ),
}
OPS = frozenset(_DOMAINS)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a square root that went NaN or inf in the forward pass."""
    if evidence.origin is None:
        return None
    return diagnose_domain(evidence, _DOMAINS[evidence.origin.op])
