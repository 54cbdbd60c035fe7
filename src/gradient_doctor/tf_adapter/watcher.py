"""One watching session: the guard, the per-step history, and what was found."""

from __future__ import annotations

import sys
import warnings
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from gradient_doctor.core.detectors.dead_units import DeadUnitsDetector
from gradient_doctor.core.detectors.exploding_gradients import ExplodingGradientsDetector
from gradient_doctor.core.detectors.headroom import HeadroomDetector
from gradient_doctor.core.detectors.loss_spike import LossSpikeDetector
from gradient_doctor.core.detectors.saturation import SaturationDetector
from gradient_doctor.core.detectors.vanishing_gradients import VanishingGradientsDetector
from gradient_doctor.core.evidence import Evidence, StepHistory, TrainingSetup
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.fix_placement import place_fixes
from gradient_doctor.core.gradient_paths import ZERO_GRADIENT, PathBreak
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.rules import default as default_rule
from gradient_doctor.core.knowledge.wording import replica_note
from gradient_doctor.core.records import StepRecord
from gradient_doctor.core.report import Report
from gradient_doctor.core.run_series import RunSeries
from gradient_doctor.core.silent_failures import silent_failures
from gradient_doctor.core.stuck_units import StuckUnits, find_stuck_units
from gradient_doctor.errors import StepLimitReached
from gradient_doctor.tf_adapter import loss_scale, replicas
from gradient_doctor.tf_adapter.fix_sites import fix_sites
from gradient_doctor.tf_adapter.fix_trials import DEFAULT_TRIAL_STEPS, try_fixes
from gradient_doctor.tf_adapter.guard import Guard
from gradient_doctor.tf_adapter.headroom_probe import samples
from gradient_doctor.tf_adapter.input_scan import input_scale
from gradient_doctor.tf_adapter.layer_stats import LayerStats
from gradient_doctor.tf_adapter.localize import localize
from gradient_doctor.tf_adapter.missing_gradients import (
    find_missing_gradient_breaks,
    variable_name,
)
from gradient_doctor.tf_adapter.snapshots import SnapshotRing, live_variables, optimizer_state
from gradient_doctor.tf_adapter.step_context import StepCall
from gradient_doctor.tf_adapter.tape_hook import install_tape_hook

HISTORY_SIZE = 256
# Risky ops' headroom is read back every this many steps (a trend needs no more).
HEADROOM_EVERY = 10


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
    clipping = ", ".join(
        f"{name}={value}"
        for name in ("clipnorm", "clipvalue", "global_clipnorm")
        if (value := getattr(clipped, name, None)) is not None
    )
    return TrainingSetup(
        learning_rate=learning_rate,
        clipping=clipping or None,
        loss_scale=loss_scale.current_scale(optimizer),
        xla=xla,
    )


class Watcher:
    """Counts steps, keeps recent statistics and turns a tripped guard into a finding.

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
        if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(
                f"`max_steps` must be an int >= 1 or None. Received: max_steps={max_steps!r}"
            )
        self.max_steps = max_steps
        if not isinstance(zero_gradient_window, int) or zero_gradient_window < 2:
            raise ValueError(
                "`zero_gradient_window` must be an int of at least 2. "
                f"Received: zero_gradient_window={zero_gradient_window!r}"
            )
        self.zero_gradient_window = zero_gradient_window
        if not isinstance(trial_steps, int) or trial_steps < 0:
            raise ValueError(
                "`trial_steps` must be an int >= 0 (0 turns fix trials off). "
                f"Received: trial_steps={trial_steps!r}"
            )
        self.trial_steps = trial_steps
        # Fresh iterators over the training data of the `fit` being watched, for the
        # fix trials (set by `gradient-doctor run` around each fit), or None.
        self.trial_batches = None
        # The `fit` call being watched (its line and data), set by `gradient-doctor run`.
        self.fit_call = None
        install_tape_hook()
        if not isinstance(layer_stats, bool):
            raise TypeError(f"`layer_stats` must be a bool. Received: layer_stats={layer_stats!r}")
        self.guard = Guard(
            on_missing=self.on_missing_gradients,
            layer_stats=LayerStats(every=HEADROOM_EVERY) if layer_stats else None,
        )
        self.stop_on_problem = stop_on_problem
        self.on_finding = on_finding
        self.steps_watched = 0
        self.problems: list[Finding] = []
        self._disconnected_seen: set[frozenset[str]] = set()
        self._pending_stop: Finding | None = None
        self._history: deque[tuple[int, float, float]] = deque(maxlen=HISTORY_SIZE)
        self._optimizer = None
        self._optimizers: list[weakref.ref] = []  # every optimizer seen, for the snapshots
        # Earlier good states, for fix trials that must start before the trouble.
        self.snapshots = SnapshotRing()
        self.on_warning = on_warning
        self._warned: set[tuple] = set()
        # Every early-warning detector, fed the same records (headroom and per-layer
        # statistics only every HEADROOM_EVERY steps, the rest every step).
        self._detectors = (
            HeadroomDetector(),
            ExplodingGradientsDetector(),
            VanishingGradientsDetector(),
            LossSpikeDetector(),
            DeadUnitsDetector(),
            SaturationDetector(),
        )
        self.on_record = on_record
        self.on_problem = on_problem
        self.series = RunSeries()
        # True while the guard's latch is closed by a step this watcher diagnosed; a latch
        # closed where no step wrapper read it skips every later update unseen (`finish`).
        self._latch_diagnosed = False

    def after_step(
        self,
        replay_call: Callable[[], StepCall | None],
        named_inputs: Callable[[], list[tuple[str, object]]],
        fetched_stats=None,
        steps: int = 1,
        step_base: int | None = None,
        batch: tuple[tuple, dict] | None = None,
    ) -> Finding | None:
        """Read the guard after one step; diagnose the step when it tripped.

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
        stats = self.guard.read(fetched_stats)
        step = self.steps_watched + steps - 1
        self.steps_watched += steps
        pending, self._pending_stop = self._pending_stop, None
        if stats.tripped and step_base is not None and 0 <= stats.trip_at - step_base < steps:
            step = step - (steps - 1) + (stats.trip_at - step_base)
            self.steps_watched = step + 1  # the steps after it in this call were not applied
        if not stats.tripped:
            self.snapshots.after_finite_step(step, self._state_variables, batch)
            self._history.append((step, stats.loss, stats.grad_norm))
            if stats.zero_streak >= self.zero_gradient_window:
                self._zero_gradients(step)
            self._look_ahead(step, stats)
            if pending is None and self.max_steps is not None:
                if self.steps_watched >= self.max_steps:
                    raise StepLimitReached(self.steps_watched)
            return pending
        history, setup = self._step_history(), training_setup(self.optimizer, stats.xla)
        call, named = None, []
        try:
            call = replay_call()
            named = named_inputs()
            evidence = localize(call, step, named, history, setup)
        except Exception as error:  # never let the doctor's analysis break the user's run
            warnings.warn(
                f"gradient-doctor could not replay step {step} "
                f"({type(error).__name__}: {error}); reporting it without the op.",
                stacklevel=2,
            )
            evidence = localize(None, step, [], history, setup)
        evidence = replace(evidence, skipped_updates=stats.skipped, input_scale=input_scale(named))
        # Which replica failed first matters only where there are several.
        several = (self.guard.replicas or 1) > 1
        replica = stats.replica if stats.replica >= 0 and several else None
        finding = self._record(evidence, call, replica)
        if self.on_problem is not None:
            self.on_problem(finding, evidence, call, named)
        self._latch_diagnosed = self.stop_on_problem
        if not self.stop_on_problem:
            self.guard.reset()
        return finding

    def on_missing_gradients(self, variables, all_missing: bool, loss, tape_window) -> bool:
        """Diagnose an update asked for with `None` gradients (once per group of variables).

        Returns:
            True when the update must be skipped: no variable has a gradient
            (Keras would raise "No gradients provided for any variable"); the
            step's check then stops training with this diagnosis instead.
        """
        key = frozenset(variable_name(v) for v in variables)
        if key in self._disconnected_seen:
            return all_missing
        self._disconnected_seen.add(key)
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

        def record(breaks) -> bool:
            findings = [
                self._record(
                    Evidence(
                        step=self.steps_watched,
                        phase=None,
                        origin=None,
                        path_break=path_break,
                        all_disconnected=all_missing,
                    )
                )
                for path_break in breaks
            ]
            if all_missing and findings and self.stop_on_problem:
                self._pending_stop = findings[0]
            return bool(findings)

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

    def _record(
        self, evidence: Evidence, call: StepCall | None = None, replica: int | None = None
    ) -> Finding:
        """Diagnose `evidence`, try the fixes when the step can run again, publish it.

        `replica` is the first replica of a `tf.distribute` run whose values were not
        finite (None without replicas).
        """
        try:
            diagnosis = diagnose(evidence)
        except Exception as error:  # a gap in the knowledge base must not end the user's run
            warnings.warn(
                f"gradient-doctor could not explain step {evidence.step} "
                f"({type(error).__name__}: {error}); giving the generic diagnosis.",
                stacklevel=2,
            )
            diagnosis = default_rule.diagnose(evidence)
        finding = diagnosis.finding(evidence)
        if replica is not None:
            where = self.guard.layout or replicas.Layout(self.guard.replicas or 1)
            notes = (
                replica_note(replica, self.guard.replicas),
                replicas.worker_note(replica, where),
            )
            note = " ".join(filter(None, notes))
            finding = replace(
                finding,
                explanation=f"{finding.explanation} {note}",
                replica=replica,
                worker=where.task_of(replica),
            )
        finding = place_fixes(
            finding,
            sites=fix_sites(self.optimizer, evidence, self.fit_call),
            history=evidence.history,
        )
        if call is not None:
            finding = try_fixes(
                finding,
                evidence,
                call,
                self.optimizer,
                self.guard,
                self.trial_steps,
                self.trial_batches,
                announce=_announce_trials if self.on_finding is not None else None,
                snapshots=self.snapshots,
                fit_call=self.fit_call,
                optimizer_variables=[
                    v for ref in self._optimizers if ref() is not None for v in ref().variables
                ],
                first_warning=min(
                    (w.step for w in self.warnings if w.step is not None), default=None
                ),
            )
        self.problems.append(finding)
        if self.on_finding is not None:
            self.on_finding(finding)
        return finding

    @property
    def optimizer(self):
        """The optimizer of the latest update (its settings go into the diagnosis)."""
        return self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer) -> None:
        self._optimizer = optimizer
        if optimizer is not None and all(ref() is not optimizer for ref in self._optimizers):
            self._optimizers.append(weakref.ref(optimizer))

    def before_step(self) -> None:
        """Called by the hooks before each step runs: the first one copies the state
        training starts from, for fix trials from the start."""
        self.snapshots.before_first_step(live_variables)

    def _state_variables(self) -> list:
        """What a snapshot copies: every optimizer's variables and the variables it trains."""
        return optimizer_state(self._optimizers)

    def finish(self) -> None:
        """Diagnose a latch that closed where no step wrapper read it (a library's step).

        Every update from then on was skipped: the finding says how many, at the step
        of the first one (counting one optimizer update per step, as the guard did).
        """
        stats = self.guard.read()
        if stats.tripped and not self._latch_diagnosed:
            self.steps_watched = max(stats.updates - stats.skipped, 0)
            self.after_step(lambda: None, list)
        if self.on_finding is not None:
            for finding in self.silent_failures():
                self.on_finding(finding)

    def silent_failures(self) -> tuple[Finding, ...]:
        """Warnings still standing whose loss never improved, as problems (none of a
        category already among the problems); see `core/silent_failures.py`."""
        standing = [s for d in self._detectors if hasattr(d, "standing") for s in d.standing()]
        loss = next((s for s in self.series.snapshot() if s.name == "loss"), None)
        if not standing or loss is None:
            return ()
        several = len(self.guard.optimizers) > 1
        found = silent_failures(standing, loss.steps, loss.values, self.steps_watched, several)
        known = {problem.category for problem in self.problems}
        return tuple(finding for finding in found if finding.category not in known)

    def _look_ahead(self, step: int, stats) -> None:
        """Feed the early-warning detectors and the run's series: gradient norms every step,
        headroom every few."""
        record = StepRecord(step, loss=stats.loss, grad_norm=stats.grad_norm)
        if step % HEADROOM_EVERY == 0:
            if self.guard.headroom_sites:
                record = replace(record, headroom=samples(self.guard.read_headroom()))
            if self.guard.layer_stats is not None:
                record = replace(record, layers=self.guard.layer_stats.read())
                self._observe_layer_gradients(step)
        for detector in self._detectors:
            detector.observe(record)
        self.series.observe(record)
        if self.on_record is not None:
            self.on_record(record)
        for warning in self.warnings:
            key = (warning.category, warning.origin.op_name if warning.origin else None)
            if key not in self._warned:
                self._warned.add(key)
                if self.on_warning is not None:
                    self.on_warning(warning)

    def _observe_layer_gradients(self, step: int) -> None:
        """Feed each step's per-layer gradient norms since the last read (kept in the step)."""
        history = self.guard.layer_stats.read_grad_norms()
        for offset, layers in enumerate(history):
            record = StepRecord(step - len(history) + 1 + offset, layers=layers)
            for detector in self._detectors:
                detector.observe(record)
            self.series.observe(record)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        """Early warnings raised while the run was finite, each updated to its latest."""
        return tuple(w for detector in self._detectors for w in detector.findings())

    def _zero_gradients(self, step: int) -> None:
        """Report variables whose gradient was exactly zero for a whole window (once each)."""
        streaks = self.guard.zero_streaks
        variables = streaks.variables_at_least(self.zero_gradient_window)
        streaks.reset()
        key = frozenset(variable_name(v) for v in variables)
        if not variables or key in self._disconnected_seen:
            return
        self._disconnected_seen.add(key)
        names = tuple(variable_name(v) for v in variables)
        since = step - self.zero_gradient_window + 1
        stuck = self._stuck_units(names, since)
        self._record(
            Evidence(
                step=since,
                phase=None,
                origin=None,
                path_break=None if stuck else PathBreak(ZERO_GRADIENT, None, names),
                history=self._step_history(),
                setup=training_setup(self.optimizer),
                stuck_units=stuck,
            )
        )

    def _stuck_units(self, names: tuple[str, ...], since: int) -> StuckUnits | None:
        """The layers whose units all died or saturated behind these zero gradients (known
        only with the per-layer statistics), with the largest update sampled before."""
        if self.guard.layer_stats is None:
            return None
        ratios = {
            series.about: (series.steps, series.values)
            for series in self.series.snapshot()
            if series.name.startswith("update_ratio/")
        }
        return find_stuck_units(names, self.guard.layer_stats.read(), since, ratios)

    def _step_history(self) -> StepHistory:
        rows = list(self._history)
        return StepHistory(
            steps=tuple(r[0] for r in rows),
            losses=tuple(r[1] for r in rows),
            grad_norms=tuple(r[2] for r in rows),
        )

    def report(self, script: str | None = None, script_error: str | None = None) -> Report:
        """The session's report so far (silent failures among the problems)."""
        silent = self.silent_failures()
        promoted = {finding.category for finding in silent}
        return Report(
            script=script,
            steps_watched=self.steps_watched,
            problems=(*self.problems, *silent),
            warnings=tuple(w for w in self.warnings if w.category not in promoted),
            script_error=script_error,
            series=self.series.snapshot(),
        )


def _is_floating(variable) -> bool:
    dtype = getattr(variable, "dtype", None)
    return getattr(dtype, "is_floating", None) or str(dtype).startswith(("float", "bfloat"))


def _announce_trials(count: int, steps: int, step: int | None) -> None:
    """Say on stderr that trials are starting (each runs to `steps` steps past `step`)."""
    print(
        f"gradient-doctor: step {step} is not finite; trying {count} remedies, each from a "
        f"saved good state through step {step} and {steps} steps beyond (--trial-steps N "
        "to change, 0 to skip)",
        file=sys.stderr,
        flush=True,
    )


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
