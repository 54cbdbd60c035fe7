"""Health detectors: they read step records and raise early warnings, before any NaN.

The protocol (`Detector`), applied by every detector here:
- A detector is a stateful object built with its thresholds (named constants in its
  module, overridable by constructor arguments that are checked in `__init__`).
- `observe(record: StepRecord) -> None` is called once per record, in step order
  (every step or every k steps); it must stay cheap, and it skips fields that are None
  or non-finite (non-finite values are problems, handled by the localizer).
- `findings() -> list[Finding]` may be called at any time and returns the current
  warnings: one per cause, with `step` = the step at which it was first raised, updated
  in place as records arrive, so that no storm of near-identical warnings can build up.

One module per detector: `headroom`, `exploding_gradients`, `vanishing_gradients`,
`loss_spike`, `dead_units`, `saturation`; `suite` runs them all.
"""

from gradient_doctor.core.detectors.dead_units import DeadUnitsDetector
from gradient_doctor.core.detectors.exploding_gradients import ExplodingGradientsDetector
from gradient_doctor.core.detectors.headroom import HeadroomDetector
from gradient_doctor.core.detectors.loss_spike import LossSpikeDetector
from gradient_doctor.core.detectors.protocol import Detector
from gradient_doctor.core.detectors.saturation import SaturationDetector
from gradient_doctor.core.detectors.suite import DetectorSuite, default_detectors
from gradient_doctor.core.detectors.vanishing_gradients import VanishingGradientsDetector

__all__ = [
    "DeadUnitsDetector",
    "Detector",
    "DetectorSuite",
    "ExplodingGradientsDetector",
    "HeadroomDetector",
    "LossSpikeDetector",
    "SaturationDetector",
    "VanishingGradientsDetector",
    "default_detectors",
]
