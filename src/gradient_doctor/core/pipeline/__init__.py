"""The framework-neutral pipeline: step records -> detectors -> finding -> localize -> diagnose
-> place fixes -> trials -> report, driven through one adapter protocol.

`Session` is the run; `Adapter` is what a framework provides (see `adapter.py`).
"""

from gradient_doctor.core.pipeline.adapter import (
    Adapter,
    FixTrials,
    Localized,
    ReplicaPlace,
    StepReading,
    TrialPlan,
    TrialRunner,
)
from gradient_doctor.core.pipeline.explain import at_replica, diagnosed
from gradient_doctor.core.pipeline.session import HISTORY_SIZE, Session
from gradient_doctor.core.pipeline.trials import DEFAULT_TRIAL_STEPS, announce_trials, try_fixes

__all__ = [
    "DEFAULT_TRIAL_STEPS",
    "HISTORY_SIZE",
    "Adapter",
    "FixTrials",
    "Localized",
    "ReplicaPlace",
    "Session",
    "StepReading",
    "TrialPlan",
    "TrialRunner",
    "announce_trials",
    "at_replica",
    "diagnosed",
    "try_fixes",
]
