"""The doctor's exceptions: one base class, one subclass per kind of problem."""

from __future__ import annotations


class DoctorError(Exception):
    """Base class of every error the doctor raises."""


class UsageError(DoctorError):
    """The doctor was called with arguments it cannot use."""


class TrainingStopped(BaseException):
    """Training was stopped because the doctor diagnosed a numerical problem.

    A `BaseException`, like `KeyboardInterrupt`, not a `DoctorError`: a script's own
    `except Exception:` around its step (to skip a bad batch and go on) must not swallow
    the stop, or the script trains on past the step the doctor stopped, and a rerun that
    records the step never ends. Catch it by name.

    Attributes:
        finding: the diagnosis (a `Finding`).
    """

    def __init__(self, finding) -> None:
        self.finding = finding
        where = ""
        if finding.origin is not None and finding.origin.source is not None:
            where = f" at {finding.origin.source.file}:{finding.origin.source.line}"
        super().__init__(
            f"gradient-doctor stopped training at step {finding.step}: "
            f"{finding.category}{where}. The weights are still those of the last good step."
        )


class StepLimitReached(TrainingStopped):
    """Training was stopped, healthy, after the number of steps the run was limited to
    (`gradient-doctor run --stop-after N`; `gradient-doctor fix` reruns a patched script
    only as far as it needs).

    Attributes:
        steps: how many steps were watched.
    """

    def __init__(self, steps: int) -> None:
        self.finding = None
        self.steps = steps
        BaseException.__init__(self, f"gradient-doctor stopped training after {steps} steps")
