"""Saturation: most of a layer's sigmoid/tanh units sit in the flat ends of the curve."""

from __future__ import annotations

from gradient_doctor.core.detectors.sustained_fraction import SustainedFractionDetector
from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.remedies import fixes as remedies


class SaturationDetector(SustainedFractionDetector):
    """Warns when a layer's `saturated_fraction` stays above `threshold` for `window` records.

    Args:
        threshold: float in (0, 1), the saturated fraction above which a layer counts.
            Defaults to 0.9.
        window: int, records in a row the fraction must stay above it. Defaults to 20.
        setup: `TrainingSetup` or None, so that the fixes are spelled in the user's
            framework. Defaults to None.

    Raises:
        ValueError: for a `threshold` outside (0, 1) or a `window` below 1.
    """

    FIELD = "saturated_fraction"
    CATEGORY = "saturation"
    UNITS = "sigmoid/tanh units"
    STATE = "sit in the flat ends of the curve for every example"
    CONSEQUENCE = "A saturated unit passes almost no gradient back, so the layers below stall."

    def fixes(self, from_start: bool = False) -> tuple[Fix, ...]:
        """Normalise what feeds the units, or use an activation that does not saturate."""
        framework = self._setup.framework
        return (
            remedies.batch_normalization("the sigmoid/tanh layers", framework),
            remedies.normalize_input(framework),
            remedies.activation_change(
                "relu", "it does not saturate for positive inputs", framework
            ),
        )
