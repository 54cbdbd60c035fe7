"""Exploding gradients: the gradient norm grew over many steps until it overflowed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

from gradient_doctor.core.evidence import Evidence, StepHistory
from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.wording import at_step, format_number, op_place

# Growth that marks an explosion rather than noise: a factor of GROWTH_FACTOR across the
# window, or STEADY_FACTOR when at least STEADY_SHARE of the steps rose.
GROWTH_FACTOR = 100.0
STEADY_FACTOR = 10.0
STEADY_SHARE = 2 / 3
MIN_POINTS = 3


@dataclass(frozen=True)
class Growth:
    """How the gradient norm grew: from its low point to its peak."""

    low_step: int
    low: float
    peak_step: int
    peak: float

    @property
    def factor(self) -> float:
        """How many times larger the peak is than the low point."""
        return self.peak / self.low


def norm_growth(history: StepHistory) -> Growth | None:
    """Find an explosive growth of the finite gradient norms, or None.

    Args:
        history: the recent steps, oldest first.

    Returns:
        The growth from the smallest norm before the peak to the peak, when it is at
        least `GROWTH_FACTOR`, or `STEADY_FACTOR` with most steps (`STEADY_SHARE`) rising.
    """
    steps = history.steps if len(history.steps) == len(history.grad_norms) else None
    points = [
        (steps[index] if steps else index, norm)
        for index, norm in enumerate(history.grad_norms)
        if norm is not None and math.isfinite(norm) and norm > 0
    ]
    if len(points) < MIN_POINTS:
        return None
    peak_index = max(range(len(points)), key=lambda index: points[index][1])
    low_step, low = min(points[: peak_index + 1], key=lambda point: point[1])
    growth = Growth(low_step, low, *points[peak_index])
    rising = sum(later > earlier for (_, earlier), (_, later) in pairwise(points))
    steady = rising >= STEADY_SHARE * (len(points) - 1)
    if growth.factor >= GROWTH_FACTOR or (steady and growth.factor >= STEADY_FACTOR):
        return growth
    return None


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Diagnose exploding gradients from the history; decline when the norm did not grow."""
    growth = norm_growth(evidence.history)
    if growth is None:
        return None
    explanation = (
        f"The gradient norm grew from {format_number(growth.low)} at step {growth.low_step} "
        f"to {format_number(growth.peak)} at step {growth.peak_step} "
        f"(a factor of {format_number(growth.factor)}) before the values became non-finite"
        f"{at_step(evidence.step)}"
    )
    origin = evidence.origin
    if origin is not None and origin.gradient_of:
        explanation += f", first in the gradient of {op_place(origin, origin.gradient_of)}"
    elif origin is not None:
        explanation += f", first in {op_place(origin)}"
    explanation += "."
    if evidence.setup.clipping:
        explanation += (
            f" Clipping was already on ({evidence.setup.clipping}): it bounds each update, "
            "not the growth that drives it."
        )
    return Diagnosis("exploding_gradients", explanation, (), exploding_fixes(evidence))


def exploding_fixes(evidence: Evidence) -> tuple[Fix, ...]:
    """The remedies for gradients that grow step after step, most direct first."""
    clipping = remedies.gradient_clipping(evidence.setup)
    fixes = (
        remedies.lower_learning_rate(evidence.setup),
        remedies.better_init(evidence.setup.framework),
        remedies.batch_normalization("each hidden layer", evidence.setup.framework),
    )
    if evidence.setup.clipping:
        return (*fixes, clipping)
    return (fixes[0], clipping, *fixes[1:])
