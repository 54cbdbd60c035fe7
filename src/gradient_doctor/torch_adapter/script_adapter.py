"""`ScriptAdapter`: the Adapter of `gradient-doctor run` on an unchanged PyTorch script.

The update hooks (`script_hooks`) see every `optimizer.step()`; this adapter groups the
updates into steps and reads each step to the `Session`. A step is one round of the
optimizers: it ends when an optimizer that already stepped in it steps again (a GAN's
two updates are one step; a critic stepping five times per generator step makes five),
or at a skipped update, which is diagnosed at once. The failing step is localized by
the seeded rerun (`step_rerun`): the script run again in a child process, the step
recorded there, its events walked to the origin here by the core's `trace_evidence`.
Each update is also counted for parameters left without a gradient (`CutWatch`); a new
set of them is localized by the same rerun, recording that step under the path
recorder (`gradient_paths.breaks_in` here, on what it hands back): a whole optimizer
cut off is a problem and training stops at the step's end, a part of one is recorded
and training goes on.
With no step function to call again, the fixes are not trialed inside the run: the
front end's confirmation reruns a patched copy of the folder from the start.
"""

from __future__ import annotations

import shutil
import sys
import warnings
import weakref
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from gradient_doctor.cli.script_runner import ScriptEnd
from gradient_doctor.core.evidence import Evidence, StaleGradients, StepHistory, TrainingSetup
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.gradient_paths import OTHER_PARAMETERS, UNLOCATED, PathBreak
from gradient_doctor.core.pipeline import Localized, Session, StepReading
from gradient_doctor.core.trial_plans import TrialPlan
from gradient_doctor.errors import TrainingStopped
from gradient_doctor.torch_adapter.adapter import PyTorchAdapter
from gradient_doctor.torch_adapter.dump.crash_dump import TorchCrashDump
from gradient_doctor.torch_adapter.hooks.anomaly_mode import AnomalyModeLeftOff
from gradient_doctor.torch_adapter.hooks.compile_calls import CompileCalls
from gradient_doctor.torch_adapter.hooks.optimizer_sites import OptimizerSites
from gradient_doctor.torch_adapter.hooks.script_hooks import (
    ManualUpdate,
    Update,
    UpdateHooks,
    UpdateListener,
)
from gradient_doctor.torch_adapter.hooks.warning_lines import WarningLines
from gradient_doctor.torch_adapter.localize.event_evidence import recorded_evidence
from gradient_doctor.torch_adapter.localize.gradient_paths import (
    CutWatch,
    RecordedPaths,
    breaks_in,
    trainable_count,
)
from gradient_doctor.torch_adapter.localize.module_scope import parameter_names
from gradient_doctor.torch_adapter.localize.update_writes import written_by_an_update
from gradient_doctor.torch_adapter.rerun.step_rerun import StepReruns
from gradient_doctor.torch_adapter.step.gradient_resets import GradientResets
from gradient_doctor.torch_adapter.step.module_stats import ModuleStats
from gradient_doctor.torch_adapter.step.sample_schedule import SampleSchedule
from gradient_doctor.torch_adapter.step.step_check import Check, SquareOverflow, combined
from gradient_doctor.torch_adapter.trials.trial_plans import trial_plans

# Why a fix of an unchanged script is not trialed inside the run.
NO_STEP_FUNCTION = (
    "an unchanged PyTorch script has no step function the doctor can call again from the "
    "last good state, so only a copy of your folder with the patch applied, run again from "
    "the start, can judge it (`--confirm always`, `gradient-doctor fix`)"
)
# Reruns spent on where gradient paths break, at most: each new set of parameters left
# without a gradient costs a run of the script up to it (a set that changes every step,
# a branch taken at random, would rerun the script once a step).
MAX_PATH_RERUNS = 3


@dataclass(frozen=True)
class FailedUpdate:
    """Where the failing step lies among the run's updates, for the seeded rerun.

    Attributes:
        window_after: the update after which the failing step began (-1: the first).
        failing: the failing update's index.
        squares_overflow: when its gradients were finite but one's square overflows
            (`SquareOverflow`), that one: no rerun is needed to name it.
    """

    window_after: int
    failing: int
    squares_overflow: SquareOverflow | None = None


@dataclass(frozen=True)
class UntriedFixes:
    """The adapter's `FixTrials` for a script: its plans, none of them runnable here."""

    plans: tuple[TrialPlan, ...]
    untried: str = NO_STEP_FUNCTION
    saved_steps: tuple[int, ...] = ()

    def open(self):
        raise RuntimeError(NO_STEP_FUNCTION)


class ScriptAdapter(PyTorchAdapter, UpdateListener):
    """The PyTorch side of `gradient-doctor run`; it owns the run's `Session`.

    Args:
        script: the script's path as the user gave it.
        args: its arguments.
        dump_dir: the `--dump` folder, or None: the first failing step the rerun
            records is written there (`torch_adapter.dump`).
        sample_every: sample the per-module statistics every so many steps throughout
            (`--sample-every`); None: `SampleSchedule`'s own period, fit to a budget.
        **session: passed to `Session` (stop_on_problem, on_finding, max_steps, ...).
    """

    def __init__(
        self,
        script: str,
        args: list[str],
        dump_dir: str | None = None,
        sample_every: int | None = None,
        **session,
    ) -> None:
        self.script, self.args = script, list(args)
        self.crash_dump = TorchCrashDump(dump_dir, script) if dump_dir else None
        self._tape: str | None = None  # the last failing step's tape, for the dump
        self._no_tape = "the failing step was not recorded"
        self.hooks = UpdateHooks(self)
        self.sites = OptimizerSites()  # the lines that built and stepped each optimizer
        self._failing: weakref.ref | None = None  # the optimizer of the last skipped update
        self.session = Session(self, **session)
        self._optimizers: list[weakref.ref] = []  # in the order they first stepped
        # The last optimizer that first stepped, held: the run's end (a problem found
        # then, its patch of the optimizer's line) still knows it after the script's
        # globals are gone.
        self._latest_optimizer: torch.optim.Optimizer | None = None
        self.reruns: StepReruns | None = None
        self.rerun_seconds: list[float] = []
        self._stepped: set[int] = set()  # ids of the optimizers stepped in this step
        self._checks: list[Check] = []
        self._step_after = -1  # the update after which this step began
        self.cuts = CutWatch()  # parameters left without a gradient
        self.resets = GradientResets()  # `.grad` reset between each optimizer's updates
        self.warning_lines = WarningLines()  # torch's warnings at the user's line
        self._path_reruns = 0
        # The models are found as their forward runs (module_stats' hooks).
        schedule = None if sample_every is None else SampleSchedule.fixed(sample_every)
        self.stats = ModuleStats(
            lambda: self.optimizers,
            schedule=schedule,
            on_loss_input=lambda found: self.session.loss_input_seen(found),
        )
        self.anomaly_mode = AnomalyModeLeftOff()
        self.compile_calls = CompileCalls(self.stats.stop_watching_forwards)

    def install(self) -> None:
        """Anomaly mode left off and `torch.compile` noticed, the start a rerun repeats
        (taken right before the script runs, so that its fork finds them so too), then
        the hooks; the first step's forward is sampled."""
        self.anomaly_mode.install()
        self.compile_calls.install()
        self.reruns = StepReruns(self.script, self.args)
        self.sites.install()
        self.hooks.install()
        self.resets.install()
        self.warning_lines.install()
        self.stats.begin_sample()

    def uninstall(self) -> None:
        self._drop_tape()
        self.stats.close()
        self.hooks.uninstall()
        self.resets.uninstall()
        self.warning_lines.uninstall()
        self.sites.uninstall()
        if self.reruns is not None:
            self.reruns.close()
            self.reruns = None
        self.compile_calls.uninstall()
        self.anomaly_mode.uninstall()

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers that stepped so far and still exist (a script that makes a new
        one per epoch does not keep the old ones' state alive through the doctor; the
        latest is held)."""
        return [o for o in (ref() for ref in self._optimizers) if o is not None]

    def optimizers_stepped(self) -> int:
        """How many optimizers stepped, those the script let go included."""
        return len(self._optimizers)

    def scaler_skipped(self) -> int:
        return self.hooks.scaler_skipped

    def before_update(self, index: int, optimizer: torch.optim.Optimizer) -> None:
        another_model = False
        if all(optimizer is not known for known in self.optimizers):
            known = self.optimizers
            if not isinstance(optimizer, ManualUpdate):  # backward()s before it was built
                known = [o for o in known if not isinstance(o, ManualUpdate)]
            mine = (id(p) for group in optimizer.param_groups for p in group["params"])
            another_model = self.session.trains_another_model(mine)
            self._optimizers = [*(weakref.ref(o) for o in known), weakref.ref(optimizer)]
            self._latest_optimizer = optimizer
        if id(optimizer) in self._stepped or (another_model and self._stepped):
            self._end_step(index - 1)  # a new round of the optimizers: a new step
        if another_model:  # a teacher trained, now its student: the detectors start afresh
            self.session.new_training()
        if not self._stepped:
            self.session.before_step()
        self.stats.update_start(optimizer)

    def after_update(self, update: Update) -> None:
        self._stepped.add(id(update.optimizer))
        if update.check is None:
            return
        self._checks.append(update.check)
        if not update.skipped:
            self.stats.update_end(update.optimizer)
            self.stats.note_grads(update.parameters, update.check.norms)
            if update.closure is None:
                stale = self.resets.observe(update.optimizer, update.parameters)
                if stale is not None:
                    self._stale(update.optimizer, stale)
            # A step ends only when the next one's first update comes: sample the forward
            # that follows an update whenever the step after this one is sampled.
            if self.stats.samples(self.session.steps_watched + 1):
                self.stats.begin_sample()
        if update.present is not None:
            self.cuts.observe(update.optimizer, update.present)
        for optimizer, cut, updates in self.cuts.take():
            self._disconnected(update.index, optimizer, cut, updates)
        if not update.skipped:
            return
        self._failing = weakref.ref(update.optimizer)
        self.stats.forget_step()
        reading = self._reading(failed=True)
        if update.unmade:  # the script stopped itself before it: the doctor skipped nothing
            reading = replace(reading, skipped=0)
        replay = FailedUpdate(self._step_after, update.index, update.check.squares_overflow)
        if update.closure is not None:  # its ops ran inside the step, unrecorded
            reading, replay = replace(reading, unreplayable=_CLOSURE_UNREPLAYABLE), None
        self._stepped.clear()
        self._checks.clear()
        self._step_after = update.index
        finding = self.session.after_step(reading, replay)
        if finding is not None and self.session.stop_on_problem:
            raise TrainingStopped(finding)

    def failing_optimizer(self) -> torch.optim.Optimizer | None:
        failing = self._failing() if self._failing is not None else None
        return failing if failing is not None else super().failing_optimizer()

    def script_ended(self, end: ScriptEnd) -> None:
        """The script ended its own way: check the update it never made (it stopped on
        gradients or a loss it found not finite itself, `UpdateHooks.unmade_update`),
        while its optimizers are alive (a function's, in the frames of its exception)."""
        try:
            self.hooks.unmade_update(end.error, end.held)
        except TrainingStopped:  # a failure found there: the session holds it
            pass

    def finish(self) -> None:
        """Read the last step (its round of the optimizers ended with the script) and
        publish the silent failures."""
        if self._checks:
            try:
                self._end_step(self.hooks.updates - 1)
            except TrainingStopped:  # the step limit, or a cut found in the last step
                pass
        self.session.finish(None)

    def _end_step(self, last: int) -> None:
        """Read the finite step that ended at update `last` to the session."""
        reading = self._reading(failed=False)
        self._stepped.clear()
        self._checks.clear()
        self._step_after = last
        if reading.updates:
            finding = self.session.after_step(reading, None)
            if finding is not None and self.session.stop_on_problem:
                raise TrainingStopped(finding)  # every parameter of an optimizer cut off

    def _stale(self, optimizer: torch.optim.Optimizer, stale: StaleGradients) -> None:
        """Record `optimizer`'s stale gradients, its fix placed after its `step()`."""
        self._failing = weakref.ref(optimizer)
        self.record_stale(stale)

    def _disconnected(
        self, index: int, optimizer: torch.optim.Optimizer, cut: list[torch.Tensor], updates: int
    ) -> None:
        """Record where the paths to `cut`, the parameters update `index` left without a
        gradient (and the `updates - 1` updates of `optimizer` before it), break: the script
        run again, seeded, recording that step's paths. When the break cannot be looked
        for, the parameters are recorded without it. The problem is dated to the step
        they first had none."""
        if len(cut) == trainable_count(optimizer) and self._trained_instead(optimizer, cut):
            return
        step = max(self.session.steps_watched - updates + 1, 0)
        counted = (
            f"{len(cut)} parameters of {type(optimizer).__name__} got no gradient at step {step}"
        )
        if self.reruns is None or self._path_reruns >= MAX_PATH_RERUNS:
            why = f"{MAX_PATH_RERUNS} reruns were spent on such sets already"
            _say(f"{counted}; {why}, so where their path breaks is not looked for")
            self._unlocated(optimizer, cut, why, step)
            return
        self._path_reruns += 1
        _say(
            f"{counted}; running your script again, seeded as it started, to find where their "
            "path to the loss breaks"
        )
        try:
            recorded, seconds = self.reruns.record(self._step_after, index, paths=True)
            self.rerun_seconds.append(seconds)
            paths = recorded.paths
            if not recorded.reached or paths is None:
                why = recorded.why or "the rerun recorded no paths"
                _say(f"{why}; the break is not named")
                self._unlocated(optimizer, cut, why, step)
                return
            if not self.session.disconnected_first_seen(paths.parameters):
                return
            record = RecordedPaths(
                recorded.events,
                recorded.stats,
                paths.grad_enabled,
                paths.carries,
                paths.exits,
                paths.off_at,
            )
            breaks = breaks_in(record, paths.parameters, paths.loss_ids)
            all_cut = len(cut) == trainable_count(optimizer)
            self.session.record_path_breaks(breaks, all_cut, step)
        except Exception as error:  # never let the doctor's analysis break the user's run
            warnings.warn(
                "gradient-doctor could not trace where the gradients of "
                f"{len(cut)} parameters are lost ({type(error).__name__}: {error}).",
                stacklevel=2,
            )
            if not any(p.category == "disconnected_gradients" for p in self.session.problems):
                why = f"the search for the break failed ({type(error).__name__})"
                self._unlocated(optimizer, cut, why, step)

    def _trained_instead(self, optimizer: torch.optim.Optimizer, cut: list[torch.Tensor]) -> bool:
        """Record an optimizer none of whose parameters got a gradient, where the models
        the step ran have parameters that got one and no optimizer updates (the model was
        built again after the optimizer): True when that is so (no rerun is needed)."""
        names = parameter_names(self.stats.models, self.optimizers)
        updated = {id(p) for o in self.optimizers for g in o.param_groups for p in g["params"]}
        instead = tuple(
            names.get(id(parameter), "?")
            for model in self.stats.models
            for parameter in model.parameters()
            if parameter.grad is not None and id(parameter) not in updated
        )
        if not instead:
            return False
        variables = tuple(names.get(id(p), f"param{i}") for i, p in enumerate(cut))
        if self.session.disconnected_first_seen(variables):
            built = self.sites.construction(optimizer)
            elsewhere = PathBreak(
                OTHER_PARAMETERS,
                None,
                variables,
                framework="torch",
                trained_instead=instead,
                optimizer_line=built.source if built is not None else None,
            )
            self.session.record_path_breaks([elsewhere], True)
        return True

    def _unlocated(
        self, optimizer: torch.optim.Optimizer, cut: list[torch.Tensor], why: str, step: int
    ) -> None:
        """Record the parameters left without a gradient, where no rerun named the break:
        the report still says which never train."""
        names = parameter_names(self.stats.models, self.optimizers)
        variables = tuple(names.get(id(p), f"param{i}") for i, p in enumerate(cut))
        if not self.session.disconnected_first_seen(variables):
            return
        unlocated = PathBreak(UNLOCATED, None, variables, framework="torch", why=why)
        self.session.record_path_breaks([unlocated], len(cut) == trainable_count(optimizer), step)

    def _reading(self, failed: bool) -> StepReading:
        """The step's reading: the last checked loss, the global norm over its updates;
        with several optimizers, each update's loss too (each objective's)."""
        loss, norm = combined(self._checks)
        several = len(self._optimizers) > 1
        return StepReading(
            failed=failed,
            loss=loss,
            grad_norm=norm,
            skipped=1 if failed else 0,
            updates=len(self._checks),
            objective_losses=tuple(c.loss for c in self._checks) if several else (),
            zero_streak=self.zero_streak(norm, failed),
        )

    def localize(
        self, replay: FailedUpdate, step: int, history: StepHistory, setup: TrainingSetup
    ) -> Localized:
        """Rerun the script, seeded as it started, recording step `step`; walk its ops. An
        update whose values were all finite, but a gradient's square overflows, needs no
        rerun: its evidence is that gradient's."""
        if replay.squares_overflow is not None:
            evidence = self.overflow_evidence(replay.squares_overflow, step, history, setup)
            return Localized(evidence, rerun=None)
        _say(
            f"step {step} is not finite; running your script again, seeded as it started, to "
            f"record that step op by op"
        )
        tape = self.crash_dump is not None and self.crash_dump.wanted
        recorded, seconds = self.reruns.record(replay.window_after, replay.failing, tape=tape)
        self.rerun_seconds.append(seconds)
        self._drop_tape()
        self._tape, self._no_tape = recorded.tape, recorded.why or self._no_tape
        if not recorded.reached:
            _say(f"{recorded.why}; the step cannot be named op by op")
            evidence = Evidence(
                step, None, None, history=history, setup=setup, reproduced=False, replayed=False
            )
            return Localized(evidence, rerun=None)
        reproduced = bool(recorded.bad_ids)
        if not reproduced:
            _say(
                f"the rerun reached step {step} with every loss and gradient finite: your script "
                "does not repeat itself from the same seeds (the clock, unseeded CUDA draws, "
                "data that changed), so the failure was not reproduced"
            )
        else:
            _say(f"the rerun reproduced step {step} ({seconds:.1f} s)")
        evidence = recorded_evidence(
            recorded.events, recorded.bad_ids, recorded.stats, step, history, setup
        )
        written = written_by_an_update(evidence, self.optimizers, self.sites)
        if written is not evidence:  # the update before wrote it: no rerun of this step helps
            return Localized(written, rerun=None)
        return Localized(self.with_pipeline(evidence), rerun=replay if reproduced else None)

    def write_dump(self, finding: Finding, evidence: Evidence, rerun: FailedUpdate | None) -> None:
        """Write the failing step the rerun recorded to the `--dump` folder (the first only)."""
        if self.crash_dump is not None:
            tape = Path(self._tape) if self._tape is not None else None
            self.crash_dump.write(finding, evidence, tape, self._no_tape)
        self._drop_tape()

    def _drop_tape(self) -> None:
        """Remove the rerun's tape folder (the doctor's own temporary one)."""
        if self._tape is not None:
            shutil.rmtree(self._tape, ignore_errors=True)
            self._tape = None

    def fix_trials(self, finding: Finding, evidence: Evidence, rerun: FailedUpdate):
        """The finding's fixes, reported not tried here (the confirmation reruns judge them)."""
        return UntriedFixes(tuple(trial_plans(finding, evidence, self.optimizers)))


_CLOSURE_UNREPLAYABLE = (
    "it was an optimizer.step(closure), whose losses and gradients are computed inside "
    "the step, where the doctor does not record ops; it checked the step after it ran "
    "and put the weights and the optimizer's state back as they were before it"
)


def _say(text: str) -> None:
    print(f"gradient-doctor: {text}", file=sys.stderr, flush=True)
