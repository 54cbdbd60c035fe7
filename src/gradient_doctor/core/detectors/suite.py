"""All the health detectors behind the one `Detector` interface, fed by the same records."""

from __future__ import annotations

from collections.abc import Sequence

from gradient_doctor.core.detectors.dead_units import DeadUnitsDetector
from gradient_doctor.core.detectors.exploding_gradients import ExplodingGradientsDetector
from gradient_doctor.core.detectors.headroom import HeadroomDetector
from gradient_doctor.core.detectors.loss_spike import LossSpikeDetector
from gradient_doctor.core.detectors.protocol import Detector, Standing
from gradient_doctor.core.detectors.saturation import SaturationDetector
from gradient_doctor.core.detectors.vanishing_gradients import VanishingGradientsDetector
from gradient_doctor.core.evidence import TrainingSetup
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.records import StepRecord


def default_detectors(setup: TrainingSetup | None = None) -> tuple[Detector, ...]:
    """One of each detector, with its default thresholds.

    Args:
        setup: `TrainingSetup` or None, the user's optimizer settings, handed to the
            detectors whose fixes name them. Defaults to None (unknown).
    """
    return (
        HeadroomDetector(setup=setup),
        ExplodingGradientsDetector(setup=setup),
        VanishingGradientsDetector(setup=setup),
        LossSpikeDetector(setup=setup),
        DeadUnitsDetector(setup=setup),
        SaturationDetector(setup=setup),
    )


class DetectorSuite:
    """Feeds every record to several detectors and gathers their findings.

    Args:
        detectors: the detectors, each implementing `Detector`. Defaults to
            `default_detectors()`.

    Raises:
        TypeError: when an item lacks `observe` or `findings`.
    """

    def __init__(self, detectors: Sequence[Detector] | None = None) -> None:
        chosen = tuple(default_detectors() if detectors is None else detectors)
        for index, detector in enumerate(chosen):
            if not isinstance(detector, Detector):
                raise TypeError(
                    "Every item of `detectors` must have `observe(record)` and `findings()`. "
                    f"Received: detectors[{index}]={detector!r}"
                )
        self._detectors = chosen
        # Whether every detector counts its changes (`CountedFindings.revision`).
        self._counted = all(hasattr(detector, "revision") for detector in chosen)
        self._found: tuple[Finding, ...] = ()
        self._found_at: int | None = None  # the revision `_found` was gathered at

    def observe(self, record: StepRecord) -> None:
        """Hand the record to every detector."""
        for detector in self._detectors:
            detector.observe(record)

    @property
    def revision(self) -> int | None:
        """A count that moves whenever any detector's findings may have changed; None
        when some detector does not count its changes (its findings may change at any
        record)."""
        if not self._counted:
            return None
        return sum([detector.revision for detector in self._detectors])

    def findings(self) -> list[Finding]:
        """Every detector's findings, ordered by the step at which they were first raised."""
        revision = self.revision
        if revision is None or revision != self._found_at:
            found = [finding for detector in self._detectors for finding in detector.findings()]
            found.sort(key=lambda finding: -1 if finding.step is None else finding.step)
            self._found, self._found_at = tuple(found), revision
        return list(self._found)

    def standing(self) -> list[Standing]:
        """The standing warnings of the detectors of lasting conditions (`Standing`)."""
        return [
            standing
            for detector in self._detectors
            if hasattr(detector, "standing")
            for standing in detector.standing()
        ]
