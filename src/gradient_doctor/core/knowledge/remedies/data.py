"""Fit a diagnosis to the data it ran on: unscaled input features come first.

Rules explain the op that went non-finite; when the batch's features are far from unit
scale (areas in m², prices, raw pixel values), the first layers' outputs and gradients
are that large too, and standardising the features removes the cause the other
remedies only work around. This pass says so and puts that remedy first.
"""

from __future__ import annotations

from dataclasses import replace

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.wording import format_number

# Features past this magnitude are not standardised (standardised ones are a few units).
UNSCALED = 100.0
# Problems unscaled inputs drive: values or gradients too large.
_NUMERIC = frozenset(
    {"forward_overflow", "exploding_gradients", "backward_singularity", "forward_domain"}
)


def unscaled(evidence: Evidence) -> bool:
    """True when the batch's input features reach past `UNSCALED`."""
    return evidence.input_scale is not None and evidence.input_scale[1] > UNSCALED


def fit_to_data(diagnosis: Diagnosis, evidence: Evidence) -> Diagnosis:
    """`diagnosis` with `normalize_input` first (and said why) when the inputs are unscaled.

    Left alone for problems unscaled inputs do not drive, for data the batch itself
    carried as NaN (bad input), and when the rule already ranks the data remedy first.
    """
    if diagnosis.category not in _NUMERIC or not unscaled(evidence):
        return diagnosis
    name, scale = evidence.input_scale
    fixes = [fix for fix in diagnosis.fixes if fix.family != "normalize_input"]
    existing = [fix for fix in diagnosis.fixes if fix.family == "normalize_input"]
    fixes.insert(0, existing[0] if existing else remedies.normalize_input(evidence.setup.framework))
    note = (
        f" The input `{name}` reaches {format_number(scale)}: features that far from unit "
        "scale make the first layers' outputs and gradients that large."
    )
    return replace(diagnosis, fixes=tuple(fixes), explanation=diagnosis.explanation + note)
