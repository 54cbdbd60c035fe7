"""One watched run, framework-neutral: step records -> detectors -> finding -> report.

The session counts steps, keeps the recent history and the run's series, feeds the
early-warning detectors, and turns a failing step into a finding: the adapter
localizes it, the knowledge base diagnoses it, its fixes are placed as patches and
tried through the adapter, and the finding is published. At the end, warnings that
still stand while the loss never improved become problems (silent failures), and
the report is built. The framework's side is the `Adapter` it is given.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from gradient_doctor.core.detectors.suite import DetectorSuite, default_detectors
from gradient_doctor.core.divergence import find_divergence
from gradient_doctor.core.evidence import Evidence, LossInput, StepHistory
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.fix_placement import place_fixes
from gradient_doctor.core.gradient_paths import ZERO_GRADIENT, PathBreak
from gradient_doctor.core.pipeline.adapter import Adapter, StepReading
from gradient_doctor.core.pipeline.explain import at_replica, diagnosed
from gradient_doctor.core.pipeline.trials import DEFAULT_TRIAL_STEPS, try_fixes
from gradient_doctor.core.records import StepRecord
from gradient_doctor.core.report import Report
from gradient_doctor.core.run_series import RunSeries
from gradient_doctor.core.silent_failures import silent_failures
from gradient_doctor.core.source_frames import display_root
from gradient_doctor.core.stuck_units import StuckUnits, find_stuck_units
from gradient_doctor.errors import StepLimitReached

# Steps of loss and gradient norm kept for the diagnosis (where the trouble began).
HISTORY_SIZE = 256
# The steps' records reach the detectors and the run's series in batches of at most this
# many steps (a step whose records carry per-layer statistics ends its batch), and before
# anything reads them: a failure, a finding, the warnings, the series, the report, the end.
FEED_EVERY = 10
# Under --keep-going, at most this many failing steps are diagnosed (each replays its
# step, runs its trials and reruns): the later ones are counted, not diagnosed again.
KEEP_GOING_DIAGNOSES = 5


class Session:
    """Counts steps, keeps recent statistics and turns a failing step into a finding.

    Args:
        adapter: the framework's side (`Adapter`).
        stop_on_problem: bool. Stop training at the first problem (the update is
            skipped either way). Defaults to True.
        on_finding: called with each new finding (the terminal prints it).
        zero_gradient_window: int. Report a variable whose gradient is exactly zero on
            this many steps in a row. Defaults to 50.
        on_warning: called with each new early warning (the terminal prints it).
        trial_steps: int. After a non-finite step, try each proposed fix from a saved
            good state for this many steps past it (0 turns fix trials off). Defaults
            to `DEFAULT_TRIAL_STEPS`.
        on_record: called with each finite step's own record (the progress line).
        max_steps: int or None. Stop training (healthy) once this many steps were
            watched, by raising `StepLimitReached`; None never stops. Defaults to None.
        on_trials: told `(count, steps, failing step)` before fix trials run.

    Raises:
        ValueError: for a `max_steps`, `zero_gradient_window` or `trial_steps` out of range.
    """

    def __init__(
        self,
        adapter: Adapter,
        stop_on_problem: bool = True,
        on_finding: Callable[[Finding], None] | None = None,
        zero_gradient_window: int = 50,
        on_warning: Callable[[Finding], None] | None = None,
        trial_steps: int = DEFAULT_TRIAL_STEPS,
        on_record: Callable[[StepRecord], None] | None = None,
        max_steps: int | None = None,
        on_trials: Callable[[int, int, int | None], None] | None = None,
    ) -> None:
        if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(
                f"`max_steps` must be an int >= 1 or None. Received: max_steps={max_steps!r}"
            )
        if not isinstance(zero_gradient_window, int) or zero_gradient_window < 2:
            raise ValueError(
                "`zero_gradient_window` must be an int of at least 2. "
                f"Received: zero_gradient_window={zero_gradient_window!r}"
            )
        if not isinstance(trial_steps, int) or trial_steps < 0:
            raise ValueError(
                "`trial_steps` must be an int >= 0 (0 turns fix trials off). "
                f"Received: trial_steps={trial_steps!r}"
            )
        self.adapter = adapter
        self.stop_on_problem = stop_on_problem
        self.on_finding = on_finding
        self.zero_gradient_window = zero_gradient_window
        self.on_warning = on_warning
        self.trial_steps = trial_steps
        self.on_record = on_record
        self.max_steps = max_steps
        self.on_trials = on_trials
        self.steps_watched = 0
        self.problems: list[Finding] = []
        self._series = RunSeries()
        # The records of the finite steps since the last feed, one tuple a step.
        self._unfed: list[Sequence[StepRecord]] = []
        self._history: deque[tuple[int, float | None, float | None]] = deque(maxlen=HISTORY_SIZE)
        # Built at the first record, with the training setup then known (their fixes
        # name the learning rate and clipping).
        self._detectors: DetectorSuite | None = None
        self._warned: set[tuple] = set()
        self._warnings_seen_at: int | None = None  # the detectors' revision last looked at
        # Groups of variables already reported without gradients (missing or zero).
        self._disconnected_seen: set[frozenset[str]] = set()
        # Layers already reported with every unit stuck (dead or saturated), by kind.
        self._stuck_seen: set[tuple] = set()
        self._pending_stop: Finding | None = None
        # True while the failure that stopped updates was diagnosed here; one that no
        # hook read skips every later update unseen (`finish`).
        self._failure_diagnosed = False
        self._said_stopped_again = False
        self._last_failed: int | None = None  # the latest failing step (--keep-going)
        self._undiagnosed = 0  # failing steps --keep-going counted without a diagnosis
        # Probability losses handed raw outputs, seen as the loss was computed (each
        # with the step it was in), diagnosed when that step is over.
        self._loss_inputs: list[tuple[int, LossInput]] = []
        # The warnings of the models trained before the current one (`new_training`),
        # and the step the current one began at.
        self._retired: list[Finding] = []
        self._training_began = 0
        self._parameters_seen: set[int] = set()  # ids (`trains_another_model`)

    def before_step(self) -> None:
        """Called by the hooks before each step runs."""
        self.adapter.keep_start_state()

    def after_step(
        self, reading: StepReading, replay: object | None, batch: object | None = None
    ) -> Finding | None:
        """Take in one call of the step; diagnose it when it failed.

        Args:
            reading: what the adapter measured.
            replay: what the adapter needs to run the step again (handed back to
                `Adapter.localize`), or None when it cannot be.
            batch: the step's inputs when the hook has them (a custom loop), kept by
                the adapter for fix trials from an earlier state.

        Returns:
            The new finding, or None when the call was finite (a finding of missing
            gradients made while it ran, when training is to stop for it).

        Raises:
            StepLimitReached: `max_steps` steps were watched.
        """
        self._diagnose_loss_inputs()
        step = self.steps_watched + reading.steps - 1
        self.steps_watched += reading.steps
        pending, self._pending_stop = self._pending_stop, None
        if reading.failed and reading.failed_at is not None:
            step = step - (reading.steps - 1) + reading.failed_at
            self.steps_watched = step + 1  # the steps after it in this call were not applied
        if not reading.failed:
            self.adapter.keep_state(step, batch)
            self._history.append((step, reading.loss, reading.grad_norm))
            if reading.zero_streak >= self.zero_gradient_window:
                self._zero_gradients(step)
            self._look_ahead(step, reading)
            if pending is None and self.max_steps is not None:
                if self.steps_watched >= self.max_steps:
                    raise StepLimitReached(self.steps_watched)
            return pending
        self._feed()  # the warnings of the steps before it come first, as they were raised
        if self.stop_on_problem and self._failure_diagnosed and self.problems:
            return self._stopped_again(step)
        after, self._last_failed = self._last_failed, step
        if not self.stop_on_problem and self.problems and self._diagnosed_enough(step, after):
            self.adapter.resume()
            return self.problems[-1]
        finding = self._failed(step, reading, replay)
        self._failure_diagnosed = self.stop_on_problem
        if not self.stop_on_problem:
            self.adapter.resume()
        return finding

    def _diagnosed_enough(self, step: int, after: int | None) -> bool:
        """Under --keep-going, whether the failing `step` is only counted: it follows a
        failing step at once (the same trouble, still there: its update skipped as the one
        before, whose diagnosis holds), or `KEEP_GOING_DIAGNOSES` were made. Said once."""
        if after != step - 1 and len(self.problems) < KEEP_GOING_DIAGNOSES:
            return False
        self._undiagnosed += 1
        if self._undiagnosed == 1:
            warnings.warn(
                f"gradient-doctor: step {step} failed too, under --keep-going; its update is "
                "skipped, and a failure right after another, or past "
                f"{KEEP_GOING_DIAGNOSES} diagnosed ones, is counted, not diagnosed again "
                "(each diagnosis replays its step and reruns your script).",
                stacklevel=3,
            )
        return True

    @property
    def undiagnosed_failures(self) -> int:
        """How many failing steps --keep-going counted without diagnosing them."""
        return self._undiagnosed

    def _stopped_again(self, step: int) -> Finding:
        """A failed step after training was stopped at a problem (a script that calls
        `fit` again in a loop): its update stays skipped, as every one after the problem,
        and it is not diagnosed again (each would rerun the same trials and
        confirmations); said once. The problem is returned, so the adapter stops again."""
        first = self.problems[0]
        if not self._said_stopped_again:
            self._said_stopped_again = True
            warnings.warn(
                f"gradient-doctor: training went on after the doctor stopped it at step "
                f"{first.step} ({first.category}), and step {step} failed too; its updates "
                "stay skipped, so the weights stay those from before that problem, and the "
                "later failures are not diagnosed again.",
                stacklevel=3,
            )
        return first

    def _failed(self, step: int, reading: StepReading, replay: object | None) -> Finding:
        """Localize, diagnose, fix and publish the failing `step`."""
        history = self.step_history()
        setup = replace(self.adapter.training_setup(), xla=reading.xla)
        evidence, rerun = None, None
        if replay is not None:
            try:
                localized = self.adapter.localize(replay, step, history, setup)
                evidence, rerun = localized.evidence, localized.rerun
            except Exception as error:  # never let the doctor's analysis break the user's run
                warnings.warn(
                    f"gradient-doctor could not replay step {step} "
                    f"({type(error).__name__}: {error}); reporting it without the op.",
                    stacklevel=3,
                )
        if evidence is None:
            evidence = Evidence(
                step,
                None,
                None,
                history=history,
                setup=setup,
                reproduced=False,
                replayed=False,
                unreplayable=reading.unreplayable,
            )
        evidence = replace(evidence, skipped_updates=reading.skipped, step_loss=reading.loss)
        finding = self.record(evidence, rerun, reading.replica)
        self.adapter.write_dump(finding, evidence, rerun)
        return finding

    def record(
        self, evidence: Evidence, rerun: object | None = None, replica: int | None = None
    ) -> Finding:
        """Diagnose `evidence`, place its fixes, try them when the step can run again,
        and publish the finding.

        Args:
            evidence: the problem's evidence.
            rerun: the failing step as the adapter can run it again (`Localized.rerun`).
            replica: the first replica of a data-parallel step whose values were not
                finite (None without replicas).
        """
        self._feed()
        finding = diagnosed(evidence)
        if replica is not None:
            finding = at_replica(finding, replica, self.adapter.replica_place(replica))
        finding = place_fixes(
            finding,
            root=display_root(),
            sites=self.adapter.fix_sites(evidence),
            history=evidence.history,
            user_file=self.adapter.is_user_file,
        )
        # A step with no op to blame is tried only when its batch was bad (its data
        # remedies run on other data).
        blamed = finding.origin is not None or bool(evidence.bad_inputs)
        if rerun is not None and self.trial_steps > 0 and blamed:
            trials = self.adapter.fix_trials(finding, evidence, rerun)
            if trials is not None:
                first_warning = min(
                    (w.step for w in self.warnings if w.step is not None), default=None
                )
                finding = try_fixes(
                    finding, evidence, trials, self.trial_steps, first_warning, self.on_trials
                )
        self.problems.append(finding)
        if self.on_finding is not None:
            self.on_finding(finding)
        return finding

    def trains_another_model(self, parameter_ids: Iterable[int]) -> bool:
        """Note the parameters a newly seen optimizer or model trains (their ids), and say
        whether they are another model's, whose training begins now: none of them was
        trained before, and training had begun (a teacher's done, its student begins).
        The adapter then ends the step in progress and calls `new_training`."""
        mine = set(parameter_ids)
        seen, self._parameters_seen = self._parameters_seen, self._parameters_seen | mine
        return self.steps_watched > 0 and bool(seen) and bool(mine) and not mine & seen

    def new_training(self) -> None:
        """Another model starts training where one finished (a teacher, then its
        student): the detectors start afresh, so that the new model's first losses and
        gradients are not judged against the last model's. The warnings raised so far
        stay in the report."""
        self._feed()
        if self._detectors is not None:
            self._retired.extend(self._detectors.findings())
        self._detectors = None
        self._warnings_seen_at = None
        self._history.clear()
        self._training_began = self.steps_watched

    def loss_input_seen(self, found: LossInput) -> None:
        """A loss that reads probabilities was handed values that are not (the adapter
        saw it as the loss was computed, maybe while the framework traced the step): it
        is diagnosed once that step is over, outside the trace."""
        self._loss_inputs.append((self.steps_watched, found))

    def _diagnose_loss_inputs(self) -> None:
        pending, self._loss_inputs = self._loss_inputs, []
        for step, found in pending:
            self.record(
                Evidence(
                    step=step,
                    phase=None,
                    origin=None,
                    loss_input=found,
                    setup=self.adapter.training_setup(),
                )
            )

    def disconnected_first_seen(self, names: Iterable[str]) -> bool:
        """True the first time this group of variables is reported without gradients
        (missing or exactly zero); later reports of the same group are dropped."""
        key = frozenset(names)
        if key in self._disconnected_seen:
            return False
        self._disconnected_seen.add(key)
        return True

    def record_path_breaks(
        self, breaks: Iterable[PathBreak], all_missing: bool, step: int | None = None
    ) -> bool:
        """Record where the gradient paths to some variables break (missing gradients).

        Args:
            breaks: one break per group of variables cut off at the same place.
            all_missing: no variable handed to the optimizer has a gradient; training
                then stops at the next step's end (when `stop_on_problem`).
            step: the step they first had none, when the adapter noted them later (after
                a few updates in a row); None: the step now.

        Returns:
            True when anything was recorded.
        """
        breaks = list(breaks)
        findings = [
            self.record(
                Evidence(
                    step=self.steps_watched if step is None else step,
                    phase=None,
                    origin=None,
                    path_break=path_break,
                    all_disconnected=all_missing,
                    path_breaks=len(breaks),
                )
            )
            for path_break in breaks
        ]
        if all_missing and findings and self.stop_on_problem:
            self._pending_stop = findings[0]
        return bool(findings)

    def finish(self, reading: StepReading | None = None) -> None:
        """End the run: diagnose a failure no hook read, publish silent failures.

        A failure that closed the adapter's skip where no hook read it (a library's
        compiled step) left every update from then on skipped: the finding says how
        many, at the step of the first one (one update per step).

        Args:
            reading: what the adapter measures now, or None when it measures nothing.
        """
        self._feed()
        self._diagnose_loss_inputs()
        if reading is not None and reading.failed and not self._failure_diagnosed:
            self.steps_watched = max(reading.updates - reading.skipped, 0)
            self.after_step(replace(reading, steps=1, failed_at=None), None)
        self._diagnose_divergence()
        if self.on_finding is not None:
            for finding in self.silent_failures():
                self.on_finding(finding)

    def _diagnose_divergence(self) -> None:
        """A run that failed nowhere but whose loss diverged (`core/divergence.py`): a
        problem, dated to where the loss rose, with the optimizer's line as the fix."""
        if self.problems:
            return
        began = self._training_began  # the current model's losses: its start is its own
        by_layer: dict[str, dict[str, tuple]] = {"weight_norm": {}, "update_ratio": {}}
        loss = None
        for series in self.series.snapshot():
            kind = series.name.split("/", 1)[0]
            if series.name == "loss":
                loss = series
            elif kind in by_layer and series.about is not None:
                by_layer[kind][series.about] = (series.steps, series.values)
        if loss is None:
            return
        points = [(s, v) for s, v in zip(loss.steps, loss.values, strict=True) if s >= began]
        divergence = find_divergence(
            [s for s, _ in points],
            [v for _, v in points],
            by_layer["weight_norm"],
            by_layer["update_ratio"],
            self.adapter.objectives() > 1,
        )
        if divergence is not None:
            setup = self.adapter.training_setup()
            history = self.step_history()
            evidence = Evidence(
                divergence.rose_at, None, None, history=history, setup=setup, divergence=divergence
            )
            self.record(evidence)

    def silent_failures(self) -> tuple[Finding, ...]:
        """Warnings still standing whose loss never improved, as problems (none of a
        category already among the problems); see `core/silent_failures.py`."""
        self._feed()
        standing = self._detectors.standing() if self._detectors is not None else []
        loss = next((s for s in self.series.snapshot() if s.name == "loss"), None)
        if not standing or loss is None:
            return ()
        several = self.adapter.objectives() > 1
        began = self._training_began  # the current model's losses: its start is its own
        points = [(s, v) for s, v in zip(loss.steps, loss.values, strict=True) if s >= began]
        found = silent_failures(
            standing,
            [s for s, _ in points],
            [v for _, v in points],
            self.steps_watched - began,
            several,
        )
        known = {problem.category for problem in self.problems}
        return tuple(finding for finding in found if finding.category not in known)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        """Early warnings raised while the run was finite, each updated to its latest."""
        self._feed()
        current = tuple(self._detectors.findings()) if self._detectors is not None else ()
        return (*self._retired, *current)

    @property
    def series(self) -> RunSeries:
        """The run's series, every finite step's records in."""
        self._feed()
        return self._series

    def _look_ahead(self, step: int, reading: StepReading) -> None:
        """Take the step's records, for the detectors and the run's series (`_feed`)."""
        records = self.adapter.step_records(step, reading)
        if self._detectors is None:
            self._detectors = DetectorSuite(default_detectors(self.adapter.training_setup()))
        if self.on_record is not None and records:
            self.on_record(records[-1])
        self._unfed.append(records)
        if len(self._unfed) >= FEED_EVERY or len(records) > 1 or (records and records[0].layers):
            self._feed()

    def _feed(self) -> None:
        """Hand the detectors and the run's series the records not fed yet, a step at a
        time, and publish each step's new warnings after it, as if it had just run.

        Fed one step at a time, the records of a short step cost several times what
        they cost a few steps later in a row: the training step in between has taken
        the detectors' state out of the processor's caches. The detectors see the
        same records in the same order and publish the same warnings, in the same
        order, each as it stood after its step, at most `FEED_EVERY` steps later.
        """
        if not self._unfed:
            return
        unfed, self._unfed = self._unfed, []
        detectors, series = self._detectors, self._series
        for index, records in enumerate(unfed):
            try:
                for record in records:
                    detectors.observe(record)
                    series.observe(record)
                self._publish_warnings()
            except BaseException:  # an `on_warning` that raised: the later steps stay unfed
                self._unfed[:0] = unfed[index + 1 :]
                raise

    def _publish_warnings(self) -> None:
        """Hand `on_warning` each warning not published yet (one per category and op)."""
        revision = self._detectors.revision
        if revision is not None and revision == self._warnings_seen_at:
            return  # no detector's findings changed since the last look
        self._warnings_seen_at = revision
        for warning in self._detectors.findings():
            key = (warning.category, warning.origin.op_name if warning.origin else None)
            if key not in self._warned:
                self._warned.add(key)
                if self.on_warning is not None:
                    self.on_warning(warning)

    def _zero_gradients(self, step: int) -> None:
        """Report variables whose gradient was exactly zero for a whole window (once each)."""
        names = self.adapter.zero_gradients(self.zero_gradient_window)
        if not names:
            return
        since = step - self.zero_gradient_window + 1
        if self._loss_was_zero(since):
            return
        stuck = self._stuck_units(names, since)
        # Units stuck in the same layers are one problem, though more variables behind
        # them reach a zero gradient later (a dead layer's next layer's kernel, then bias).
        seen = ("stuck", stuck.kind, frozenset(stuck.layers)) if stuck is not None else None
        if seen is not None and seen in self._stuck_seen:
            return
        if not self.disconnected_first_seen(names):
            return
        if seen is not None:
            self._stuck_seen.add(seen)
        setup = self.adapter.training_setup()
        zero = PathBreak(ZERO_GRADIENT, None, names, framework=setup.framework)
        self.record(
            Evidence(
                step=since,
                phase=None,
                origin=None,
                path_break=None if stuck else zero,
                history=self.step_history(),
                setup=setup,
                stuck_units=stuck,
            )
        )

    def _loss_was_zero(self, since: int) -> bool:
        """Every loss read since step `since` was exactly 0: the loss sat at its floor (a
        hinge loss once every point is past the margin), where zero gradients are the
        optimum, not a broken path."""
        losses = [loss for step, loss, _ in self._history if step >= since]
        return bool(losses) and all(loss == 0.0 for loss in losses)

    def _stuck_units(self, names: tuple[str, ...], since: int) -> StuckUnits | None:
        """The layers whose units all died or saturated behind these zero gradients (known
        only with per-layer statistics), with the largest update sampled before."""
        layers = self.adapter.layer_records()
        if layers is None:
            return None
        ratios = {
            series.about: (series.steps, series.values)
            for series in self.series.snapshot()
            if series.name.startswith("update_ratio/")
        }
        return find_stuck_units(names, layers, since, ratios)

    def step_history(self) -> StepHistory:
        """The recent steps' loss and gradient norm, oldest first."""
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
        # A warning of what a problem already reported, raised after it (the dead units a
        # zero-gradient problem named at step 0, warned of again at step 190), says nothing new.
        reported = {finding.category: finding.step or 0 for finding in reversed(self.problems)}
        return Report(
            script=script,
            steps_watched=self.steps_watched,
            problems=(*self.problems, *silent),
            warnings=tuple(
                w
                for w in self.warnings
                if w.category not in promoted
                and not (w.category in reported and (w.step or 0) >= reported[w.category])
            ),
            script_error=script_error,
            series=self.series.snapshot(),
            failures_counted=self._undiagnosed,
        )
