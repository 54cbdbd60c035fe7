"""Dead units: most of a layer's ReLU units output 0 for every example, step after step."""

from __future__ import annotations

from gradient_doctor.core.detectors.sustained_fraction import SustainedFractionDetector
from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.remedies import fixes as remedies


class DeadUnitsDetector(SustainedFractionDetector):
    """Warns when a layer's `dead_fraction` stays above `threshold` for `window` records.

    Args:
        threshold: float in (0, 1), the dead fraction above which a layer counts.
            Defaults to 0.9.
        window: int, records in a row the fraction must stay above it. Defaults to 20.
        setup: `TrainingSetup` or None, the user's optimizer settings, so that the
            fixes name the actual learning rate. Defaults to None.

    Raises:
        ValueError: for a `threshold` outside (0, 1) or a `window` below 1.
    """

    FIELD = "dead_fraction"
    CATEGORY = "dead_units"
    UNITS = "ReLU units"
    STATE = "output 0 for every example"
    CONSEQUENCE = "A dead unit gets no gradient, so it never recovers."
    FROM_START = (
        "They were dead at the first record, before any update could kill them: how the "
        "layers start puts their units' inputs below 0 for every example (a negative "
        "constant bias, or weights drawn far too small or too large for the inputs), so "
        "a lower learning rate cannot help."
    )

    def fixes(self, from_start: bool = False) -> tuple[Fix, ...]:
        """A leaky activation, a lower learning rate (large updates kill units), He init;
        for units dead from the start, the initialisation first and no lower rate."""
        framework = self._setup.framework
        leaky = remedies.activation_change(
            "leaky_relu",
            "its units keep a small gradient when inactive and can recover",
            framework,
        )
        if from_start:
            return (remedies.better_init(framework, zero_biases=True), leaky)
        return (leaky, remedies.lower_learning_rate(self._setup), remedies.better_init(framework))
