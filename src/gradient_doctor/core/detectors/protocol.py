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


class CountedFindings:
    """A base for detectors whose findings change at few records: they are built once
    per change, and the changes are counted.

    `findings()` is called after every step (to publish new warnings), while a
    detector's findings change only when it raises or updates one. A subclass calls
    `_changed()` whenever what `_build_findings()` reads changes; `revision` counts
    those calls, so a suite (and the session) can tell nothing new was found without
    asking. A detector without `revision` is asked after every record.
    """

    revision = 0  # how many times the findings changed
    _built: tuple[Finding, ...] = ()
    _built_at = 0  # the revision `_built` was built at

    def _changed(self) -> None:
        """Note that the findings may differ from the last ones built."""
        self.revision += 1

    def findings(self) -> list[Finding]:
        """The findings so far (built again only after a change)."""
        if self._built_at != self.revision:
            self._built, self._built_at = tuple(self._build_findings()), self.revision
        return list(self._built)

    def _build_findings(self) -> list[Finding]:
        """The findings as the detector's state stands."""
        raise NotImplementedError


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
