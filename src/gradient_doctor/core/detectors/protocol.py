"""The one interface every detector implements: observe records, report findings."""

from __future__ import annotations

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
