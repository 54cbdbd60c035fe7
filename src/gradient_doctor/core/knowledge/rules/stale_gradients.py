"""Gradients applied again and again: nothing reset `.grad` between an optimizer's updates."""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix, NotFix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.wording import approximately

_RESET = Fix(
    "reset_gradients",
    "Reset the gradients after each update, so that each one applies only its own batch's",
    "optimizer.step()\noptimizer.zero_grad()  # before the next backward()",
)
_NOT_A_RATE = NotFix(
    "lower_learning_rate",
    "A lower learning rate scales every update down, but each still applies the sum of "
    "every gradient since the last reset, which grows with every step: it delays the "
    "divergence, it does not remove it.",
    structural=False,
)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain an optimizer's stale gradients; decline without them."""
    stale = evidence.stale_gradients
    if stale is None:
        return None
    share = stale.carried / max(stale.carried + stale.fresh, 1e-30)
    explanation = (
        f"The {stale.optimizer} optimizer's gradients were not reset between its updates: "
        f"at its update {stale.update}, `.grad` held the gradients it had applied at its "
        f"update before (norm {approximately(stale.carried)}) plus this step's "
        f"(norm {approximately(stale.fresh)}), so {approximately(100 * share)}% of what it "
        "applied was gradients it had applied already. PyTorch adds each `backward()` "
        "into `.grad`; only `zero_grad()` (or setting `.grad` to None) starts afresh, and "
        "none ran between these updates. Each update applies every gradient since the "
        "last reset again: the steps grow, and training drifts or diverges."
    )
    return Diagnosis(
        category="stale_gradients",
        explanation=explanation,
        not_fixes=(_NOT_A_RATE,),
        fixes=(_RESET,),
    )
