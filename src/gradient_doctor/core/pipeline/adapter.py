"""The adapter protocol: what a framework hands the neutral pipeline, and what it is asked for.

A framework adapter does two things. Its hooks (a callback, a step wrapper, patches
of the framework) call the `Session` as training runs: `before_step()` before each
step, `after_step(reading, replay, batch)` after each, and `finish(reading)` at the
end, each with a `StepReading` of what it measured. In return the session asks the
adapter, through the `Adapter` methods below, for what only the framework can do:
replay a failing step into neutral op events (`localize`), read the training setup,
place and try fixes, keep earlier states. Three methods are required; every other one
has a default that says "this framework cannot" and the pipeline goes on without it.

An adapter subclasses `Adapter` explicitly to inherit the defaults (Keras's trainer
split: the neutral loop lives once, each backend overrides a few named steps).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from gradient_doctor.core.evidence import Evidence, StepHistory, TrainingSetup
from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.fix_placement import FixSites
from gradient_doctor.core.fix_trials import TrialOutcome
from gradient_doctor.core.quick_init import quick_init
from gradient_doctor.core.records import LayerRecord, StepRecord
from gradient_doctor.core.trial_start import TrialStart


@quick_init
@dataclass(frozen=True)
class StepReading:
    """What an adapter measured after one call of the training step.

    Attributes:
        failed: a loss or gradient of the call was not finite (its update was skipped).
        loss: the step's loss (read only when the call was finite).
        grad_norm: the global L2 norm of the step's gradients (likewise).
        steps: how many steps the call ran (Keras's `steps_per_execution`).
        failed_at: which of them failed, 0-based, when the adapter knows; None: the
            last one.
        zero_streak: the longest run of steps, up to this one, over which some
            variable's gradient was exactly zero (0 when not counted).
        skipped: updates the adapter skipped since training last went on (the failing
            one, and any after it that ran before the step was read).
        updates: updates asked for over that time, applied or skipped.
        replica: under data parallelism, the first replica whose values were not
            finite; None with a single replica.
        xla: the step was compiled with XLA (a replay without it may differ).
        unreplayable: why a failed step cannot be run again op by op, in words (said in
            the diagnosis), or None.
        objective_losses: with several optimizers, each update's loss in the step, in
            the order of the step's updates (a GAN's critic, then its generator): the
            step's `loss` is the last of them, one objective of several. Empty with one.
    """

    failed: bool
    loss: float | None = None
    grad_norm: float | None = None
    steps: int = 1
    failed_at: int | None = None
    zero_streak: int = 0
    skipped: int = 0
    updates: int = 0
    replica: int | None = None
    xla: bool = False
    unreplayable: str | None = None
    objective_losses: tuple[float | None, ...] = ()


@dataclass(frozen=True)
class Localized:
    """A failing step, localized: the evidence, and the step as it can run again.

    Attributes:
        evidence: what the replay found (the origin op, its line, what fed it, the
            batch's bad values), with the history and setup the session passed.
        rerun: the failing step as the adapter can run it again from the last good
            state (for fix trials and the crash dump), opaque to the pipeline; None
            when it cannot be run again.
    """

    evidence: Evidence
    rerun: object | None = None


@dataclass(frozen=True)
class ReplicaPlace:
    """Where a replica of a data-parallel step ran.

    Attributes:
        replicas: how many replicas ran each step, when known.
        worker: the worker task that ran it, as (task type, index), in a cluster.
        note: a sentence for the explanation about that worker, or "".
    """

    replicas: int | None = None
    worker: tuple[str, int] | None = None
    note: str = ""


class TrialPlan(Protocol):
    """One remedy a trial puts in place (the adapter says how)."""

    @property
    def remedy(self) -> str:
        """The fix family tried (`FIX_FAMILIES`)."""

    @property
    def setting(self) -> str:
        """What the trial changes, in words (e.g. "global_clipnorm=0.41")."""

    @property
    def replacement(self) -> object:
        """The patch's text, or None: two remedies with the same patch are run once."""


class TrialRunner(Protocol):
    """Runs the failing step again from a saved state, with a remedy in place or none."""

    def run(
        self, plan: TrialPlan | None, start: TrialStart, failing: int, beyond: int
    ) -> TrialOutcome:
        """Run from the state saved before `start.step` through step `failing` and `beyond`
        steps more, with `plan` in place (None: the unchanged step, the baseline)."""


class FixTrials(Protocol):
    """What the adapter can try of one finding's fixes."""

    @property
    def plans(self) -> Sequence[TrialPlan]:
        """The remedies of the finding that can be tried, in the finding's order."""

    @property
    def untried(self) -> str | None:
        """Why no trial can run in this run at all (each plan is then reported untried),
        or None."""

    @property
    def saved_steps(self) -> Sequence[int]:
        """The steps from whose starting state a trial can run (the kept snapshots)."""

    def open(self) -> AbstractContextManager[TrialRunner]:
        """Save the state the run is in; the runner it yields runs trials; on exit the
        run's own state is put back, so training goes on as it would have."""

    def plan_for(self, remedy: str, fix: Fix) -> TrialPlan | None:
        """The plan that tries `remedy` as `fix` writes it: a fix's `stronger` patch,
        tried when the plan in `plans` failed; None when it cannot be tried."""


class Adapter(Protocol):
    """What the pipeline asks of a framework; see the module docstring for the hooks' side.

    Required: `localize`, `training_setup` and `is_user_file` (the source-frame
    filter). Optional, each with a default that leaves that stage out: the hooks
    (`install`, `uninstall`), the per-step records beyond loss and gradient norm,
    zero-gradient counts and layer statistics, replicas, fix sites, fix trials,
    snapshots, resuming after a failure, and the crash dump.
    """

    @abstractmethod
    def localize(
        self, replay: object, step: int, history: StepHistory, setup: TrainingSetup
    ) -> Localized:
        """Replay the failing step into neutral op events and walk them to the origin.

        Called once per failing step, right after `Session.after_step` was told of it,
        while the model still holds the last good state. Most adapters end in
        `core.origin_search.trace_evidence`. Exceptions are caught by the session,
        which then reports the step without an op.

        Args:
            replay: what the hook passed to `Session.after_step` to run the step again.
            step: the failing step's 0-based index.
            history: the recent steps' loss and gradient norms.
            setup: the training setup (`training_setup`, with the reading's XLA flag).
        """

    @abstractmethod
    def training_setup(self) -> TrainingSetup:
        """The optimizer's settings (learning rate, clipping, loss scale) as they are now.

        Called when the first record reaches the detectors (their fixes name the
        settings) and for each finding.
        """

    def install(self) -> None:
        """Put the hooks in place (called by the front end before the user's code runs)."""

    def uninstall(self) -> None:
        """Take the hooks out again (after the user's code, even when it raised)."""

    def step_records(self, step: int, reading: StepReading) -> Sequence[StepRecord]:
        """The records of a finite step for the detectors and the run's series.

        Called after every finite step. Records of earlier steps sampled since the
        last call (per-layer statistics kept inside the step) come first, the step's
        own record last (the progress line reads that one). Defaults to the step's
        loss and gradient norm alone.
        """
        return (
            StepRecord(
                step,
                loss=reading.loss,
                grad_norm=reading.grad_norm,
                objective_losses=reading.objective_losses,
            ),
        )

    def zero_gradients(self, window: int) -> tuple[str, ...]:
        """The variables whose gradient was exactly zero for `window` steps in a row, by
        name; their counts start again. Called when `StepReading.zero_streak` reaches
        `window`. Defaults to none."""
        return ()

    def layer_records(self) -> tuple[LayerRecord, ...] | None:
        """The latest per-layer statistics (dead and saturated units), or None when they
        are not measured. Called for a zero-gradient finding. Defaults to None."""
        return None

    def objectives(self) -> int:
        """How many optimizers the run trains (a GAN's two): with several, the loss the
        adapter reports is one objective of several, and silent failures are not judged
        by it. Defaults to 1."""
        return 1

    def replica_place(self, replica: int) -> ReplicaPlace:
        """Where `replica` ran, for a finding whose reading named it. Defaults to unknown."""
        return ReplicaPlace()

    def fix_sites(self, evidence: Evidence) -> FixSites:
        """The user's lines that fixes other than the origin's line rewrite (the
        optimizer's, the layers', the `fit` call). Called for each finding. Defaults
        to none (those fixes keep their code to read, without a patch)."""
        return FixSites()

    def fix_trials(self, finding: Finding, evidence: Evidence, rerun: object) -> FixTrials | None:
        """The trials of a finding's fixes, or None when the step cannot be run again
        with a remedy in place. Called for a finding with an origin and a `rerun`, when
        trials are on. Defaults to None (every fix stays untried)."""
        return None

    def keep_start_state(self) -> None:
        """Copy the state training starts from (called before every step; only the
        first call copies), for trials from the start."""

    def keep_state(self, step: int, batch: object | None) -> None:
        """Note a finite step and keep a copy of the state every few steps, and the
        step's batch when the hook handed it over (`Session.after_step(batch=...)`)."""

    def resume(self) -> None:
        """Let updates through again after a failing step when training goes on
        (`stop_on_problem=False`)."""

    def write_dump(self, finding: Finding, evidence: Evidence, rerun: object | None) -> None:
        """Save a failing step for `gradient-doctor replay` (its reader replays the dump
        into evidence for `diagnosed`). Called after each finding of a failing step,
        while the model holds the last good state. Defaults to no dump."""

    @abstractmethod
    def is_user_file(self, filename: str) -> bool:
        """Whether `filename` is the user's code, not the framework's or the doctor's.

        The adapter's own localizer names only such lines; the pipeline writes patches
        of such files only (a fix is never a patch of a library).
        """
