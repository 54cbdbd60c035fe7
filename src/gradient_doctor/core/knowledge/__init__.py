"""The framework-neutral knowledge base: from the evidence of a failing step to a diagnosis."""

from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.registry import diagnose

__all__ = [
    "Diagnosis",
    "diagnose",
]
