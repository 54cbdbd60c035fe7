"""Fit a diagnosis's remedies to the user's setup: clipping or loss scaling that was already on.

Rules explain the op; this pass says what the user's own settings already tried, so
the report never proposes a remedy that is on, and says it did not prevent the problem.
"""

from __future__ import annotations

from dataclasses import replace

from gradient_doctor.core.dtype_limits import HALF_PRECISION
from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import NotFix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import origin_dtype
from gradient_doctor.core.knowledge.rules.loss_scale_collapse import collapsed
from gradient_doctor.core.knowledge.wording import format_number


def fit_to_setup(diagnosis: Diagnosis, evidence: Evidence) -> Diagnosis:
    """Return `diagnosis` with its remedies worded for the clipping and loss scaling in use.

    Args:
        diagnosis: a rule's diagnosis of `evidence`.
        evidence: the failing step, with the user's `TrainingSetup`.

    Returns:
        The diagnosis with: the gradient-clipping not-fix saying which clipping was
        already on (or one added when the rule had none, unless it proposes a
        stronger clipping as a fix, whose title says so); no loss-scaling fix when a
        loss-scaling optimizer is already on; and a loss-scaling not-fix for problems
        that loss scaling cannot reach.
    """
    if evidence.path_break is not None:
        return diagnosis  # missing gradients: clipping and scaling have nothing to act on
    fixes = diagnosis.fixes
    not_fixes = diagnosis.not_fixes
    if not any(fix.family == "gradient_clipping" for fix in fixes):  # its title says so
        not_fixes = _with_clipping(not_fixes, evidence)
    if evidence.setup.loss_scale is not None:
        fixes = tuple(fix for fix in fixes if fix.family != "loss_scaling")
    scaling = _loss_scaling_not_fix(evidence)
    if scaling is not None and not any(item.remedy == "loss_scaling" for item in not_fixes):
        not_fixes = (*not_fixes, scaling)
    return replace(diagnosis, fixes=fixes, not_fixes=not_fixes)


def _with_clipping(not_fixes: tuple[NotFix, ...], evidence: Evidence) -> tuple[NotFix, ...]:
    """Say in the clipping not-fix that the user's clipping was on and did not prevent this."""
    clipping = evidence.setup.clipping
    if not clipping:
        return not_fixes
    already = f"Clipping ({clipping}) was already on and did not prevent this."
    if not any(item.remedy == "gradient_clipping" for item in not_fixes):
        return (*not_fixes, NotFix("gradient_clipping", already))
    return tuple(
        replace(item, why=f"{already} {item.why}") if item.remedy == "gradient_clipping" else item
        for item in not_fixes
    )


def _loss_scaling_not_fix(evidence: Evidence) -> NotFix | None:
    """Why loss scaling cannot help here, or None when it might (or is beside the point)."""
    scale = evidence.setup.loss_scale
    forward = evidence.phase == "forward"
    if scale is not None:
        on = f"Loss scaling was already on (loss scale {format_number(scale)})"
        if collapsed(evidence.setup) and not forward:
            return NotFix(
                "loss_scaling",
                f"{on}; it skipped these steps and lowered the scale, and the gradients stayed "
                "non-finite.",
            )
        # Above the collapse mark the guard lets the optimizer handle non-finite
        # gradients: what tripped it was the loss itself.
        return NotFix(
            "loss_scaling",
            f"{on}; it multiplies the loss after the forward pass, so it cannot prevent a "
            "non-finite value computed in the forward pass.",
        )
    origin = evidence.origin
    if forward and origin is not None and origin_dtype(origin) in HALF_PRECISION:
        return NotFix(
            "loss_scaling",
            "Loss scaling multiplies the loss after the forward pass to keep the gradients "
            f"in {origin_dtype(origin)}'s range; this overflow happens in the forward pass.",
        )
    return None
