"""The whole outcome of a watched run: the model that every renderer draws from."""

from __future__ import annotations

from dataclasses import dataclass

from gradient_doctor.core.findings import Finding
from gradient_doctor.core.run_series import Series

SCHEMA = "gradient-doctor/report/v1"


@dataclass(frozen=True)
class Report:
    """What the doctor found in one run.

    Attributes:
        script: the training script as the user named it (None for API use).
        steps_watched: optimizer steps the doctor saw.
        problems: findings that stopped (or would have stopped) training.
        warnings: findings raised while the run was still finite.
        script_error: a non-numeric exception the script raised, as text.
        series: what was watched over the run (loss, gradient norms, headroom of
            risky ops), bounded; empty when nothing was recorded.
        interrupted: the signal that stopped the run before it ended on its own
            ("SIGTERM", "SIGINT"), or None.
        framework: the framework the run trained with ("tensorflow", "torch"): the
            adapter that watched it.
        optimizers: how many optimizers stepped (2 for a GAN), when the adapter counts
            them; None otherwise. A rerun judges a single loss only with one.
        scaler_skipped: updates a dynamic loss scaler (PyTorch's `GradScaler`) skipped
            itself because its scaled gradients overflowed: its normal back-off, which
            never reached the weights, counted where the adapter sees it (0 otherwise).
        failures_counted: failing steps `--keep-going` counted without diagnosing them
            (one right after another, or past its diagnoses' limit): each one's update
            was skipped, as a diagnosed one's was.
    """

    script: str | None
    steps_watched: int
    problems: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()
    script_error: str | None = None
    series: tuple[Series, ...] = ()
    interrupted: str | None = None
    framework: str = "tensorflow"
    optimizers: int | None = None
    scaler_skipped: int = 0
    failures_counted: int = 0

    @property
    def status(self) -> str:
        """ "problem" when anything went wrong; else "interrupted" when a signal stopped the
        run (nothing was found before it, which says nothing about the steps never run);
        else "healthy"."""
        if self.problems or self.script_error:
            return "problem"
        return "interrupted" if self.interrupted else "healthy"
