"""The TensorFlow adapter's session side: the guard, the hooks' entry points, the adapter protocol.

The hooks (`callback`, `custom_loop`, `model_hooks`, `run_patches`) call a `Watcher`
before and after each step; it reads the guard into a `StepReading` and hands it to
the framework-neutral `Session` (`core/pipeline`), which decides, records, diagnoses
and reports. The session asks back, through the `Adapter` methods, for what only
TensorFlow can do: replay the failing step, read the optimizer, place and try fixes,
keep snapshots, write the crash dump.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace

from gradient_doctor.core import source_frames
from gradient_doctor.core.evidence import Evidence, StepHistory, TrainingSetup
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.fix_placement import FixSites
from gradient_doctor.core.gradient_paths import FROZEN, PathBreak, cancelled_biases
from gradient_doctor.core.pipeline import (
    DEFAULT_TRIAL_STEPS,
    Adapter,
    Localized,
    ReplicaPlace,
    Session,
    StepReading,
    announce_trials,
)
from gradient_doctor.core.records import LAYER_STATS_EVERY, LayerRecord, StepRecord
from gradient_doctor.core.report import Report
from gradient_doctor.errors import TrainingStopped
from gradient_doctor.tf_adapter.hooks.compile_sites import compiled_line
from gradient_doctor.tf_adapter.hooks.tape_hook import install_tape_hook, uninstall_tape_hook
from gradient_doctor.tf_adapter.localize.input_scan import input_scale, target_scale
from gradient_doctor.tf_adapter.localize.missing_gradients import (
    find_missing_gradient_breaks,
    variable_name,
)
from gradient_doctor.tf_adapter.localize.pipeline_scan import datasets_in_reach, pipeline_origin
from gradient_doctor.tf_adapter.localize.step_context import StepCall
from gradient_doctor.tf_adapter.localize.step_origin import localize
from gradient_doctor.tf_adapter.localize.update_writes import with_update_overflow
from gradient_doctor.tf_adapter.step import loss_scale, replicas
from gradient_doctor.tf_adapter.step.guard import Guard, StepStats
from gradient_doctor.tf_adapter.step.headroom_probe import samples
from gradient_doctor.tf_adapter.step.layer_stats import LayerStats
from gradient_doctor.tf_adapter.trials.fix_sites import fix_sites
from gradient_doctor.tf_adapter.trials.fix_trials import TensorFlowTrials
from gradient_doctor.tf_adapter.trials.snapshots import (
    SnapshotRing,
    live_variables,
    optimizer_state,
)
from gradient_doctor.tf_adapter.trials.trial_plans import clipping_of

# Risky ops' headroom and the per-layer statistics are read back every this many steps.
HEADROOM_EVERY = LAYER_STATS_EVERY


def training_setup(optimizer, xla: bool = False) -> TrainingSetup:
    """Read the learning rate, any clipping and the loss scale from a Keras optimizer.

    Args:
        optimizer: the Keras optimizer that applied the step, or None.
        xla: bool, the step was compiled with XLA. Defaults to False.
    """
    if optimizer is None:
        return TrainingSetup(xla=xla)
    try:
        learning_rate = float(optimizer.learning_rate)
    except (TypeError, ValueError, AttributeError):
        learning_rate = None
    clipped = loss_scale.inner_optimizer(optimizer)  # a LossScaleOptimizer's wrapped one clips
    clipping = ", ".join(f"{name}={value}" for name, value in clipping_of(clipped).items())
    return TrainingSetup(
        learning_rate=learning_rate,
        clipping=clipping or None,
        loss_scale=loss_scale.current_scale(optimizer),
        xla=xla,
        optimizer=type(clipped).__name__,
    )


@dataclass(frozen=True)
class _Replay:
    """How a hook can run the step again: both are called only when the step failed."""

    call: Callable[[], StepCall | None]
    named_inputs: Callable[[], list[tuple[str, object]]]


@dataclass(frozen=True)
class FailedStep:
    """The failing step as it runs again (`Localized.rerun`).

    Attributes:
        call: the step with its batch, or None when it cannot run again.
        named_inputs: the step's input tensors with readable names.
    """

    call: StepCall | None
    named_inputs: list[tuple[str, object]]


class Watcher(Adapter):
    """The TensorFlow side of one watched run: the guard, the hooks' entry points, and
    TensorFlow's answers to the pipeline (`Session`), which keeps what was found.

    Args:
        stop_on_problem: bool. Stop training at the first problem (the update
            is skipped either way). Defaults to True.
        on_finding: called with each new finding (the terminal prints it).
        zero_gradient_window: int. Report a variable whose gradient is exactly
            zero on this many steps in a row. Defaults to 50.
        on_warning: called with each new early warning (the terminal prints it).
        trial_steps: int. After a non-finite step, try each proposed fix from the
            last good state for this many steps (0 turns fix trials off).
            Defaults to `DEFAULT_TRIAL_STEPS`.
        layer_stats: bool. Measure per-layer gradient and weight norms, activations,
            dead and saturated units inside the step every `HEADROOM_EVERY` steps
            (full monitoring); False keeps only the global checks (the cheap mode).
            Defaults to True.
        on_record: called with each step's record (loss and gradient norm every
            step, headroom every `HEADROOM_EVERY` steps); the progress line reads it.
        max_steps: int or None. Stop training (healthy) once this many steps were
            watched, by raising `StepLimitReached`; None never stops. Defaults to None.
        on_problem: called as `on_problem(finding, evidence, call, named_inputs)`
            after each finding from a non-finite step, while the variables still
            hold the last good state (`call` is the failing step, None when it
            cannot run again); `--dump` writes the crash dump here.
    """

    def __init__(
        self,
        stop_on_problem: bool = True,
        on_finding: Callable[[Finding], None] | None = None,
        zero_gradient_window: int = 50,
        on_warning: Callable[[Finding], None] | None = None,
        trial_steps: int = DEFAULT_TRIAL_STEPS,
        layer_stats: bool = True,
        on_record: Callable[[StepRecord], None] | None = None,
        on_problem: Callable[[Finding, Evidence, StepCall | None, list], None] | None = None,
        max_steps: int | None = None,
    ) -> None:
        self.session = Session(
            self,
            stop_on_problem=stop_on_problem,
            on_finding=on_finding,
            zero_gradient_window=zero_gradient_window,
            on_warning=on_warning,
            trial_steps=trial_steps,
            on_record=on_record,
            max_steps=max_steps,
            on_trials=announce_trials if on_finding is not None else None,
        )
        # Fresh iterators over the training data of the `fit` being watched, for the
        # fix trials (set by `gradient-doctor run` around each fit), or None.
        self.trial_batches = None
        # The `fit` call being watched (its line and data), set by `gradient-doctor run`.
        self.fit_call = None
        # What compiled the latest step watched: its Keras model, or a custom loop's
        # step function (`compile_sites.compiled_line` finds the line that did it).
        self.compiled_by = None
        install_tape_hook()
        self._holds_tape_hook = True
        if not isinstance(layer_stats, bool):
            raise TypeError(f"`layer_stats` must be a bool. Received: layer_stats={layer_stats!r}")
        self.guard = Guard(
            on_missing=self.on_missing_gradients,
            layer_stats=LayerStats(every=HEADROOM_EVERY) if layer_stats else None,
        )
        self._optimizer = None
        self._optimizers: list[weakref.ref] = []  # every optimizer seen, for the snapshots
        # The optimizer whose update failed, until training goes on (`diagnosed`).
        self._failing = None
        # Earlier good states, for fix trials that must start before the trouble.
        self.snapshots = SnapshotRing()
        self.on_problem = on_problem
        self._patches = None  # the `gradient-doctor run` patches, while installed
        # The Keras models trained so far (`model_seen`), and those found frozen.
        self._models_seen: weakref.WeakSet = weakref.WeakSet()
        self._frozen_seen: weakref.WeakSet = weakref.WeakSet()

    # The hooks' entry points.

    def before_step(self) -> None:
        """Called by the hooks before each step runs: the first one copies the state
        training starts from, for fix trials from the start."""
        self.session.before_step()

    def after_step(
        self,
        replay_call: Callable[[], StepCall | None],
        named_inputs: Callable[[], list[tuple[str, object]]],
        fetched_stats=None,
        steps: int = 1,
        step_base: int | None = None,
        batch: tuple[tuple, dict] | None = None,
    ) -> Finding | None:
        """Read the guard after one step; the session diagnoses the step when it tripped.

        Args:
            replay_call: returns how to run the step again (None when it cannot
                be); only called when the step failed.
            named_inputs: returns the step's inputs with readable names; only
                called when the step failed.
            fetched_stats: the guard's statistics when the step returned them.
            steps: how many steps the call ran (Keras's steps_per_execution).
            step_base: the caller's own count of steps before this call, to place
                the step that tripped among them; None when `steps` is 1.
            batch: the step's (args, kwargs) when the caller has them (a custom
                loop), kept for fix trials from an earlier state.

        Returns:
            The new finding, or None when the step was finite.
        """
        reading = self._reading(self.guard.read(fetched_stats), steps, step_base)
        replay = _Replay(replay_call, named_inputs) if reading.failed else None
        return self.session.after_step(reading, replay, batch)

    def stopped_by_own_check(
        self,
        replay_call: Callable[[], StepCall | None],
        named_inputs: Callable[[], list[tuple[str, object]]],
    ) -> Finding | None:
        """The script's own check stopped the step (a loss it found not finite, its
        `check_numerics` raising), before its update: that step failed, and no update was
        skipped (the script made none)."""
        reading = StepReading(failed=True, steps=1, skipped=0, updates=0)
        return self.session.after_step(reading, _Replay(replay_call, named_inputs))

    def script_ended(self, end) -> None:
        """The script ended its own way (`run_script`'s `at_end`, given a `ScriptEnd`):
        the step it stopped on, when it stopped on a loss it found not finite."""
        if self._patches is not None:
            try:
                self._patches.script_ended(end.held)
            except TrainingStopped:  # a failure found there: the session holds it
                pass

    def model_seen(self, model) -> None:
        """A Keras model is trained by `fit` or `train_on_batch`: one seen for the first
        time after training began, none of whose variables a model before it trained, is
        another model's training (a teacher's done, its student begins): the detectors
        start afresh (`Session.new_training`)."""
        if model in self._models_seen:
            return
        self._models_seen.add(model)
        if self.session.trains_another_model(id(v) for v in model.trainable_variables):
            self.session.new_training()

    def model_trains_nothing(self, model, trained_at=None) -> bool:
        """Whether a Keras model about to be trained on its own (`fit`, `train_on_batch`)
        has weights but none trainable; the first time, a problem: its own step moves
        nothing (a GAN's discriminator frozen for the combined model before its own step
        was built). Training goes on: the script's other models may train.

        Args:
            model: the Keras model.
            trained_at: the user's line that trains it, when known.
        """
        if model.trainable_weights or not model.weights:
            return False
        if model not in self._frozen_seen:
            self._frozen_seen.add(model)
            names = tuple(variable_name(weight) for weight in model.weights)
            frozen = PathBreak(FROZEN, None, names, model=model.name, trained_at=trained_at)
            self.session.record_path_breaks([frozen], all_missing=False)
        return True

    def on_missing_gradients(
        self, variables, all_missing: bool, loss, tape_window, filled: bool = False
    ) -> bool:
        """Diagnose an update asked for with `None` gradients (once per group of variables);
        `filled`: the tape gave them None and the user's code filled in tensors of its own
        (zeros), which the update applies.

        Returns:
            True when the update must be skipped: no variable has a gradient
            (Keras would raise "No gradients provided for any variable"); the
            step's check then stops training with this diagnosis instead.
        """
        if not self.session.disconnected_first_seen(variable_name(v) for v in variables):
            return all_missing
        integers = [v for v in variables if not _is_floating(v)]
        if integers:
            warnings.warn(
                f"gradient-doctor: {len(integers)} variable(s) handed to the optimizer are not "
                f"floating point ({', '.join(f'{variable_name(v)}: {v.dtype}' for v in integers)}"
                "). TensorFlow does not differentiate integer variables, so they never get a "
                "gradient. Make them float32, or do not pass them to the optimizer.",
                stacklevel=2,
            )
            variables = [v for v in variables if _is_floating(v)]
            if not variables:
                return False

        # Where the path breaks may be seen only at the step's next run (an eager step,
        # recorded then): the finding is of this step, the first without gradients.
        first_step = self.session.steps_watched

        def record(breaks) -> bool:
            if filled:
                breaks = [replace(found, filled_in=True) for found in breaks]
            return self.session.record_path_breaks(breaks, all_missing, step=first_step)

        try:
            breaks = find_missing_gradient_breaks(variables, loss, tape_window, record)
        except Exception as error:  # never let the doctor's analysis break the user's run
            warnings.warn(
                f"gradient-doctor could not trace where the gradients of {len(variables)} "
                f"variables are lost ({type(error).__name__}: {error}).",
                stacklevel=2,
            )
            return False
        if breaks is None:  # the next run of the step is recorded; `record` runs then
            return all_missing
        return record(breaks) and all_missing

    def finish(self) -> None:
        """Diagnose a latch that closed where no step wrapper read it (a library's step),
        and publish the silent failures. Every update from then on was skipped: the
        finding says how many, at the step of the first one (counting one optimizer
        update per step, as the guard did)."""
        self.session.finish(self._reading(self.guard.read()))

    def _reading(self, stats: StepStats, steps: int = 1, step_base: int | None = None):
        """The guard's statistics as the session reads them. After a failure, the
        optimizer whose update failed is the one the diagnosis and trials are of (an
        actor's, though the critic's update ran after it)."""
        if stats.tripped and self._failing is None:
            self._failing = self.guard.numbered(stats.trip_by)
        failed_at = None
        if stats.tripped and step_base is not None and 0 <= stats.trip_at - step_base < steps:
            failed_at = stats.trip_at - step_base
        # Which replica failed first matters only where there are several.
        several = (self.guard.replicas or 1) > 1
        return StepReading(
            failed=stats.tripped,
            loss=stats.loss,
            grad_norm=stats.grad_norm,
            steps=steps,
            failed_at=failed_at,
            zero_streak=stats.zero_streak,
            skipped=stats.skipped,
            updates=stats.updates,
            replica=stats.replica if stats.replica >= 0 and several else None,
            xla=stats.xla,
        )

    # What the session keeps, as the hooks and the API read it.

    @property
    def stop_on_problem(self) -> bool:
        """Training stops at the first problem."""
        return self.session.stop_on_problem

    @property
    def problems(self) -> list[Finding]:
        """The findings so far."""
        return self.session.problems

    @property
    def steps_watched(self) -> int:
        """Optimizer steps watched so far."""
        return self.session.steps_watched

    @property
    def warnings(self) -> tuple[Finding, ...]:
        """Early warnings raised while the run was finite, each updated to its latest."""
        return self.session.warnings

    def silent_failures(self) -> tuple[Finding, ...]:
        """Warnings still standing whose loss never improved, as problems."""
        return self.session.silent_failures()

    def report(self, script: str | None = None, script_error: str | None = None) -> Report:
        """The session's report so far (silent failures among the problems), with how
        many optimizers asked for updates (a GAN's two: its loss is one objective of
        several, which a patched copy's judgement must know)."""
        report = self.session.report(script, script_error)
        return replace(report, optimizers=self.objectives() or None)

    @property
    def optimizer(self):
        """The optimizer of the latest update (its settings go into the diagnosis)."""
        return self._optimizer

    @property
    def diagnosed(self):
        """The optimizer the diagnosis and trials are of: the one whose update failed
        (a replay of the step applies the others after it), else the latest update's."""
        return self._failing if self._failing is not None else self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer) -> None:
        self._optimizer = optimizer
        if optimizer is not None and all(ref() is not optimizer for ref in self._optimizers):
            self._optimizers.append(weakref.ref(optimizer))

    # The adapter protocol (`core/pipeline/adapter.py`).

    def localize(
        self, replay: _Replay, step: int, history: StepHistory, setup: TrainingSetup
    ) -> Localized:
        """Replay the failing step op by op (see `localize.py`); when it read weights
        that no call of the user's wrote non-finite, name the optimizer's update that did
        (`update_writes.py`)."""
        call = replay.call()
        named = replay.named_inputs()
        evidence = localize(call, step, named, history, setup)
        if evidence.bad_inputs and evidence.broken_state is None:
            fit_data = self.fit_call.x if self.fit_call is not None else None
            evidence = replace(evidence, pipeline=pipeline_origin(datasets_in_reach(fit_data)))
        evidence = with_update_overflow(
            evidence,
            [ref() for ref in self._optimizers if ref() is not None],
            call,
            self.guard,
            self.snapshots,
            self.trial_batches,
        )
        scale = input_scale(named)
        written = self.fit_call.argument_text("x") if self.fit_call is not None else None
        if scale is not None and scale[0] == "x" and written is not None:
            scale = (written, scale[1])  # as the user's fit line names it
        scales = {"input_scale": scale, "target_scale": target_scale(named)}
        return Localized(replace(evidence, **scales), FailedStep(call, named))

    def training_setup(self) -> TrainingSetup:
        """The latest optimizer's learning rate, clipping and loss scale."""
        return training_setup(self.diagnosed)

    def is_user_file(self, filename: str) -> bool:
        """Not the standard library's, an installed package's (TensorFlow, Keras) or the
        doctor's (`source_frames.py`)."""
        return source_frames.is_user_file(filename)

    def install(self) -> None:
        """Patch TensorFlow and Keras to watch an unchanged script (`gradient-doctor run`)."""
        from gradient_doctor.tf_adapter.hooks.run_patches import (
            RunPatches,  # it imports this module
        )

        if self._patches is None:
            self._patches = RunPatches(self)
            self._patches.install()

    def uninstall(self) -> None:
        """Remove the patches `install` made, and this watcher's hold on the tape hooks."""
        if self._patches is not None:
            self._patches.uninstall()
            self._patches = None
        if self._holds_tape_hook:
            uninstall_tape_hook()
            self._holds_tape_hook = False

    def step_records(self, step: int, reading: StepReading) -> tuple[StepRecord, ...]:
        """The step's loss and gradient norm; every `HEADROOM_EVERY` steps also the risky
        ops' headroom and the per-layer statistics, after the per-layer gradient norms of
        each step since the last read (kept inside the step)."""
        if step % HEADROOM_EVERY:
            return (StepRecord(step, loss=reading.loss, grad_norm=reading.grad_norm),)
        guard = self.guard
        headroom = samples(guard.read_headroom()) if guard.headroom_sites else ()
        if guard.layer_stats is None:
            return (StepRecord(step, reading.loss, reading.grad_norm, headroom=headroom),)
        layers = guard.layer_stats.read()
        history = guard.layer_stats.read_grad_norms()
        return (
            *(
                StepRecord(step - len(history) + 1 + offset, layers=norms)
                for offset, norms in enumerate(history)
            ),
            StepRecord(step, reading.loss, reading.grad_norm, layers, headroom),
        )

    def zero_gradients(self, window: int) -> tuple[str, ...]:
        """The variables the guard counted exactly zero for `window` steps (counts
        restart), but for the biases of layers that train, whose zero is a sum that
        cancels (`cancelled_biases`)."""
        streaks = self.guard.zero_streaks
        zero = [variable_name(v) for v in streaks.variables_at_least(window)]
        trained = [name for v in streaks.tracked() if (name := variable_name(v)) not in zero]
        streaks.reset()
        cancelled = cancelled_biases(zero, trained)
        return tuple(name for name in zero if name not in cancelled)

    def layer_records(self) -> tuple[LayerRecord, ...] | None:
        """The latest per-layer statistics, None in the cheap mode."""
        layers = self.guard.layer_stats
        return layers.read() if layers is not None else None

    def objectives(self) -> int:
        """How many optimizers asked for updates."""
        return len(self.guard.optimizers)

    def replica_place(self, replica: int) -> ReplicaPlace:
        """The strategy's replica count and the worker task that ran `replica`."""
        where = self.guard.layout or replicas.Layout(self.guard.replicas or 1)
        return ReplicaPlace(
            self.guard.replicas, where.task_of(replica), replicas.worker_note(replica, where)
        )

    def fix_sites(self, evidence: Evidence) -> FixSites:
        """The lines that built the optimizer and the layers, and the `fit` line."""
        compiled = compiled_line(self.compiled_by) if evidence.setup.xla else None
        return fix_sites(self.diagnosed, evidence, self.fit_call, compiled)

    def fix_trials(
        self, finding: Finding, evidence: Evidence, rerun: FailedStep
    ) -> TensorFlowTrials | None:
        """The fixes traced into the step afresh; None for a plain eager step, and for
        values the input pipeline made (the step's trial cannot run the patched
        pipeline: a rerun of the patched copy from the start judges its fixes)."""
        call = rerun.call
        if call is None or call.traceable is None or evidence.pipeline is not None:
            return None
        return TensorFlowTrials(
            finding,
            evidence,
            call,
            self.diagnosed,
            self.guard,
            more_batches=self.trial_batches,
            snapshots=self.snapshots,
            optimizers=[ref() for ref in self._optimizers if ref() is not None],
            fit_call=self.fit_call,
        )

    def keep_start_state(self) -> None:
        """Copy every variable before the first step (`SnapshotRing.before_first_step`)."""
        self.snapshots.before_first_step(live_variables)

    def keep_state(self, step: int, batch: tuple[tuple, dict] | None) -> None:
        """Copy the optimizers' state every few steps, and keep a custom loop's batch."""
        self.snapshots.after_finite_step(step, self._state_variables, batch)

    def _state_variables(self) -> list:
        """What a snapshot copies: every optimizer's variables and the variables it trains."""
        return optimizer_state(self._optimizers)

    def resume(self) -> None:
        """Open the guard's latch again."""
        self.guard.reset()
        self._failing = None

    def write_dump(self, finding: Finding, evidence: Evidence, rerun: FailedStep | None) -> None:
        """Hand the failing step to `on_problem` (the crash dump of `--dump`)."""
        if self.on_problem is not None:
            call, named = (rerun.call, rerun.named_inputs) if rerun is not None else (None, [])
            self.on_problem(finding, evidence, call, named)


def make_watcher(
    stop_on_problem: bool = True,
    verbose: bool = True,
    trial_steps: int = DEFAULT_TRIAL_STEPS,
    layer_stats: bool = True,
    on_record: Callable[[StepRecord], None] | None = None,
    on_problem: Callable[[Finding, Evidence, StepCall | None, list], None] | None = None,
    max_steps: int | None = None,
    on_finding: Callable[[Finding], None] | None = None,
) -> Watcher:
    """A `Watcher` that prints each finding and early warning on stderr as it is made.

    The one way the callback, `watch()` and `gradient-doctor run` make theirs.

    Args:
        stop_on_problem: bool. Stop training at the first problem. Defaults to True.
        verbose: bool. Print findings and warnings as they come. Defaults to True.
        trial_steps: int, see `Watcher`. Defaults to `DEFAULT_TRIAL_STEPS`.
        layer_stats: bool, see `Watcher`. Defaults to True.
        on_record: see `Watcher`. Defaults to None.
        on_problem: see `Watcher`. Defaults to None.
        max_steps: see `Watcher`. Defaults to None.
        on_finding: prints a finding instead of `print_finding` (when verbose).
    """
    return Watcher(
        stop_on_problem,
        (on_finding or print_finding) if verbose else None,
        on_warning=print_warning if verbose else None,
        trial_steps=trial_steps,
        layer_stats=layer_stats,
        on_record=on_record,
        on_problem=on_problem,
        max_steps=max_steps,
    )


def _is_floating(variable) -> bool:
    dtype = getattr(variable, "dtype", None)
    return getattr(dtype, "is_floating", None) or str(dtype).startswith(("float", "bfloat"))


def print_finding(finding: Finding) -> None:
    """Print one finding to stderr as soon as it is made."""
    from gradient_doctor.render.terminal import render_finding

    render_finding(finding)
    sys.stderr.flush()


def print_warning(finding: Finding) -> None:
    """Print one early warning to stderr when it is first raised."""
    from gradient_doctor.render.terminal import render_warning

    render_warning(finding)
    sys.stderr.flush()
