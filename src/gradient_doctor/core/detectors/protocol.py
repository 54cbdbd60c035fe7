"""The one interface every detector implements: observe records, report findings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gradient_doctor.core.findings import Finding
from gradient_doctor.core.records import StepRecord


@runtime_checkable
class Detector(Protocol):
    """A stateful watcher of step records.

    `observe` is called once per record, in step order, and must be cheap (amortised
    O(window) at most). `findings` may be called at any time and returns the current
    findings: one per cause, each keeping the step at which it was first raised and
    updated as later records arrive, so that calling it after every record never
    produces a storm of near-identical findings.
    """

    def observe(self, record: StepRecord) -> None:
        """Take in the record of the latest step (fields that are None are skipped)."""
        ...

    def findings(self) -> list[Finding]:
        """The findings so far, in the order they were first raised."""
        ...


@dataclass(frozen=True)
class Standing:
    """A warning whose condition still held at the detector's latest record.

    Detectors of a lasting condition (vanishing gradients, dead or saturated units)
    offer `standing() -> list[Standing]` beside `findings()`: a warning raised once
    stays in `findings()`, but it stands only while its condition holds. At the end
    of a run, a standing warning whose loss did not improve is a silent failure
    (`core/silent_failures.py`).

    Attributes:
        finding: the warning, naming only the layers where the condition still holds.
        since: the first step of the unbroken stretch over which it has held.
        until: the step of the latest record that still showed it.
    """

    finding: Finding
    since: int
    until: int
