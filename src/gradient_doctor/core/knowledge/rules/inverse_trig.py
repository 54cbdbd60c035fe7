"""Inverse trigonometric ops (Acos, Asin, Atanh, Acosh) fed a value outside their domain."""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.rules.domain_rule import Domain, diagnose_domain

# Values just past +-1 matter: show nine digits, and say when rounding put them there.
_UNIT = {"extreme": "magnitude", "boundary": 1, "digits": 9}
_TITLE = "Clip the input strictly inside the domain (this also keeps the gradient finite)"
_DOMAINS = {
    "Acos": Domain("acos is defined only on [-1, 1]", "clip_input_domain", _TITLE, **_UNIT),
    "Asin": Domain("asin is defined only on [-1, 1]", "clip_input_domain", _TITLE, **_UNIT),
    "Atanh": Domain(
        "atanh is infinite at -1 and 1 and NaN beyond", "clip_input_domain", _TITLE, **_UNIT
    ),
    "Acosh": Domain(
        "acosh is defined only from 1 up", "clip_input_domain", _TITLE, boundary=1, digits=9
    ),
}
OPS = frozenset(_DOMAINS)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain an inverse trigonometric op that went NaN or inf in the forward pass."""
    if evidence.origin is None:
        return None
    return diagnose_domain(evidence, _DOMAINS[evidence.origin.op])
