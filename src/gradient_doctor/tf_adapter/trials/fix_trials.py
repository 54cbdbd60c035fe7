"""Run fix trials in TensorFlow: the failing step again, from a saved good state, with a remedy.

When the guard trips, the update is skipped, so the model's variables still hold
the last good state. Each trial traces the user's step afresh as a `tf.function`
with one remedy in place (the origin op swapped for its safe version, a lower
learning rate, gradient clipping), runs it for a number of steps (the failing batch
first, then `fit`'s training data read anew when it can be) and reads the guard after
each step. Every variable the step touches (weights, optimizer slots and counters,
metrics, seeds, the guard's own latch) is saved before the trials; each trial starts
from it (with the seed counters stepped back to the failing step's) and the saved
state is put back at the end, so the user's run goes on (or stops) exactly as it
would have.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import tensorflow as tf

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.fix_trials import TrialOutcome
from gradient_doctor.core.knowledge.wording import line_ref
from gradient_doctor.core.trial_plans import NotTried, TrialPlan
from gradient_doctor.core.trial_start import TrialStart
from gradient_doctor.tf_adapter._tf_internals import DistributedValues
from gradient_doctor.tf_adapter.hooks.creation_sites import creation_line
from gradient_doctor.tf_adapter.hooks.numerics_checks import numerics_checks_passed_through
from gradient_doctor.tf_adapter.localize.step_context import StepCall
from gradient_doctor.tf_adapter.step import loss_scale
from gradient_doctor.tf_adapter.step.random_draws import replaying
from gradient_doctor.tf_adapter.trials import fresh_slots
from gradient_doctor.tf_adapter.trials.patched_source import PatchedSource
from gradient_doctor.tf_adapter.trials.snapshots import Snapshot, SnapshotRing
from gradient_doctor.tf_adapter.trials.trial_plans import plan_for, trial_plans, xla_turned_off


class TensorFlowTrials:
    """The trials of one finding's fixes in TensorFlow (the adapter's `FixTrials`).

    The core decides where each trial starts and judges it (`core/pipeline/trials.py`);
    this puts each remedy in place (`trial_plans`), and runs the step traced afresh
    from the last good state or a snapshot (`LastGoodState`).

    Args:
        finding: the diagnosed problem, its fixes placed.
        evidence: its evidence.
        call: the failing step, which can be traced again.
        optimizer: the optimizer of the failing update.
        guard: the guard, read after each trial step.
        more_batches: makes a fresh iterator over `fit`'s training data, or None.
        snapshots: the run's snapshot ring, or None.
        optimizers: every optimizer of the run (the slots a snapshot taken before the
            first update does not hold start from it as a fresh optimizer's would).
        fit_call: the `fit` call being watched, or None.
    """

    def __init__(
        self,
        finding: Finding,
        evidence: Evidence,
        call: StepCall,
        optimizer,
        guard,
        more_batches=None,
        snapshots: SnapshotRing | None = None,
        optimizers=(),
        fit_call=None,
    ) -> None:
        self.plans = _naming_the_optimizer(
            trial_plans(finding, evidence, optimizer, fit_call), optimizer, optimizers
        )
        self._planned = (evidence, optimizer, fit_call)
        self.untried = _UNDER_STRATEGY if self.plans and _distributed(optimizer) else None
        self.saved_steps = [s.step for s in snapshots.saved()] if snapshots is not None else []
        self._call = call
        self._guard = guard
        self._more_batches = more_batches
        self._snapshots = snapshots
        self._optimizers = optimizers
        self._xla = evidence.setup.xla
        self._state: LastGoodState | None = None

    def plan_for(self, remedy: str, fix: Fix) -> TrialPlan | None:
        """The plan that tries `remedy` as `fix` writes it (a fix's `stronger` one)."""
        return plan_for(remedy, fix, *self._planned)

    @contextmanager
    def open(self) -> Iterator[TensorFlowTrials]:
        """Save every variable the step touches; put them back at the end. The trials
        trace the step with its numerics checks handing their tensor on, as the watched
        step was: the guard, not the check, reads a trial's non-finite step."""
        with (
            numerics_checks_passed_through(),
            self._guard.recording_objectives(),
            LastGoodState(
                self._call, self._guard, self._more_batches, self._optimizers, self._xla
            ) as state,
        ):
            self._state = state
            try:
                yield self
            finally:
                self._state = None

    def run(
        self, plan: TrialPlan | None, start: TrialStart, failing: int, beyond: int
    ) -> TrialOutcome:
        """One trial from `start` (the snapshot kept there, else the last good state)."""
        ring = self._snapshots
        snapshot = ring.at(start.step) if ring is not None else None
        return self._state.run(plan, TrialSource(start, snapshot, ring, failing, beyond))


_UNDER_STRATEGY = "the step runs under a tf.distribute strategy, where trials are not run yet"


@dataclass(frozen=True)
class TrialSource:
    """Where one trial starts and what it runs on.

    Attributes:
        start: the step the trial starts from, and why.
        snapshot: the saved state it starts from (None: the last good state).
        ring: the snapshot ring, for the batches the run saw from `start` on.
        failing: the failing step.
        beyond: steps to run past the failing step (the trial runs through it).
    """

    start: TrialStart
    snapshot: Snapshot | None
    ring: SnapshotRing | None
    failing: int
    beyond: int

    @property
    def steps(self) -> int:
        """How many steps the trial runs: through the failing step, then `beyond` more."""
        return max(self.failing - self.start.step, 0) + self.beyond

    @property
    def reason(self) -> str:
        """Why the trial starts where it does ("" for the last good state)."""
        return "" if self.snapshot is None else self.start.reason

    def kept_batches(self, function: object = None) -> tuple[list[tuple[tuple, dict]], bool]:
        """The run's own batches of step function `function` from the start step on, and
        whether all were kept (none when another step function ran in between)."""
        if self.snapshot is None or self.ring is None:
            return [], False
        return self.ring.batches_from(self.start.step, function)


# Remedies whose trial sets one optimizer (its rate, its clipping).
_ON_ONE_OPTIMIZER = frozenset({"lower_learning_rate", "gradient_clipping", "clip_by_value"})


def _naming_the_optimizer(plans: list[TrialPlan], optimizer, optimizers) -> list[TrialPlan]:
    """`plans`, each that sets one optimizer saying which, when the run has several (a
    GAN's): a lower rate of the generator's optimizer is not a lower rate of the
    discriminator's, and the evidence must not read as if it were."""
    if len(optimizers) < 2 or optimizer is None:
        return plans
    built = creation_line(loss_scale.inner_optimizer(optimizer))
    which = f"the optimizer built at {line_ref(built)}" if built else "the last optimizer"
    return [
        dataclasses.replace(plan, setting=f"{plan.setting} on {which} (of {len(optimizers)})")
        if plan.remedy in _ON_ONE_OPTIMIZER and plan.setting
        else plan
        for plan in plans
    ]


def _distributed(optimizer) -> bool:
    """True when the optimizer's variables are spread over replicas (tf.distribute)."""
    variables = getattr(optimizer, "variables", None) or []
    return any(isinstance(getattr(v, "value", v), DistributedValues) for v in variables)


class LastGoodState:
    """Saves every variable the step touches; runs trials, each from that state.

    Args:
        call: the failing step with its batch.
        guard: the guard, read after each trial step.
        more_batches: makes a fresh iterator over the training data (batches shaped
            like the step's one argument), or None to repeat the failing batch.
        optimizers: every optimizer of the run (see `TensorFlowTrials`).
        xla: the failing step was compiled with XLA: each trial compiles it so too
            (a step that only fails as XLA computes it must fail in the trial), unless
            its plan turns XLA off (`without_xla`).
    """

    def __init__(
        self, call: StepCall, guard, more_batches=None, optimizers=(), xla: bool = False
    ) -> None:
        self._xla = xla
        self._optimizers = list(optimizers)
        self._fresh_slots: dict[int, list[tuple[tf.Variable, tf.Tensor]]] = {}
        self._call = call
        self._guard = guard
        self._more_batches = more_batches
        # The state as the user's run left it (put back at the end), and the state
        # each trial starts from (the same, with the random state stepped back).
        self._saved: list[tuple[tf.Variable, tf.Tensor]] = []
        self._start: list[tuple[tf.Variable, tf.Tensor]] = []
        self._function = None

    def __enter__(self) -> LastGoodState:
        concrete = self._trace()
        self._saved = [(v, tf.identity(v.read_value())) for v in concrete.graph.variables]
        self._start = self._saved
        try:
            self._rewind_random_state(concrete)
        except BaseException:
            self._put_back(self._saved)
            raise
        return self

    def _rewind_random_state(self, concrete) -> None:
        """Start from the random state the failing step began with (its dropout masks).

        The failing step ran in full (only its update was skipped), so it advanced the
        integer state it keeps: Keras's seed generators, the user's counters. One run of
        the step with every update skipped measures by how much; the saved state is
        stepped back by that, as the op-by-op replay does.
        """
        self._guard.close()
        concrete(*self._call.args, **self._call.kwargs)
        rewound = []
        for variable, before in self._saved:
            if variable.dtype.is_integer:
                delta = variable.read_value() - before
                before = before - delta
            rewound.append((variable, before))
        self._start = rewound
        self._restore()

    def __exit__(self, *exc_info) -> None:
        self._put_back(self._saved)  # the user's run goes on exactly as it would have

    def _slots_made_after(self, snapshot) -> list[tuple[tf.Variable, tf.Tensor]]:
        """The optimizer variables made after `snapshot` was copied, each with the value
        a fresh optimizer starts it at (found once per snapshot)."""
        key = id(snapshot)
        if key not in self._fresh_slots:
            held = {id(variable) for variable, _ in snapshot.values}
            self._fresh_slots[key] = fresh_slots.start_values(self._optimizers, held)
        return self._fresh_slots[key]

    def _restore(self) -> None:
        """Back to the state a trial starts from."""
        self._put_back(self._start)

    @staticmethod
    def _put_back(values) -> None:
        for variable, value in values:
            variable.assign(value)

    def _trace(self):
        """Trace the step afresh (with whatever remedy is in place now), with XLA when
        the user's step ran with it and no remedy turned it off."""
        xla = self._xla and not xla_turned_off.get()
        self._function = tf.function(self._call.traceable, jit_compile=True if xla else None)
        return self._function.get_concrete_function(*self._call.args, **self._call.kwargs)

    def _trace_failing(self, concrete):
        """The step as it runs the failing batch: traced again with the failing step's
        stateful random draws in place of fresh ones (a GAN's noise, a dropout mask), so
        that each trial meets the draw the run failed on there; `concrete` when the
        step made none. The other batches draw afresh."""
        if not self._call.draws:
            return concrete
        xla = self._xla and not xla_turned_off.get()
        with replaying(self._call.draws):
            function = tf.function(self._call.traceable, jit_compile=True if xla else None)
            return function.get_concrete_function(*self._call.args, **self._call.kwargs)

    def _traced(self, plan: TrialPlan | None):
        """The step traced with `plan` in place, for any batch and for the failing one.

        Raises:
            NotTried: the step, traced with the remedy in place, raised (a patch that
                mixes float16 and float32 in a mixed-precision model): that remedy is
                not tried, the others are, and its patched copy, rerun, judges it.
        """
        try:
            concrete = self._trace()
            return concrete, self._trace_failing(concrete)
        except Exception as error:
            if plan is None:
                raise
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            # TensorFlow wraps the cause in "in user code:" and a frame or two: the line
            # saying what did not match, else the first naming an error.
            why = next((line for line in lines if "does not match" in line), None)
            why = why or next((line for line in lines if "Error" in line), "")
            raise NotTried(
                f"the step, traced with it in place, raised {type(error).__name__}"
                + (f" ({why[:200]})" if why else "")
            ) from None

    def run(
        self,
        plan: TrialPlan | None,
        source: TrialSource,
        after_step: Callable[[int, tuple, dict, str], None] | None = None,
    ) -> TrialOutcome:
        """Run the step from `source`'s start through the failing step and beyond,
        with `plan` in place (None: the unchanged step, the baseline).

        Args:
            plan: the remedy in place, or None.
            source: where the run starts and what it runs on.
            after_step: called after each step as `after_step(index, args, kwargs,
                origin)` (the 0-based step of the run, its batch, where the batch came
                from), while the state is the one that step left; None for a trial.
        """
        remedy = None if plan is None else plan.remedy
        setting = "" if plan is None else plan.setting
        steps = source.steps
        self._restore()
        if source.snapshot is not None:
            self._put_back(source.snapshot.values)
            self._put_back(self._slots_made_after(source.snapshot))
        self._guard.reset()
        try:
            with plan.apply() if plan is not None else nullcontext() as placed:
                concrete, failing = self._traced(plan)
                if isinstance(placed, PatchedSource) and not placed.met:
                    raise NotTried("the patched line was not reached when the step was traced")
                batches = (
                    self._data_only(plan.batches, source)
                    if plan is not None and plan.batches is not None
                    else self._batches(source)
                )
                traced = (concrete, failing)
                outcome = self._steps(traced, remedy, setting, source, batches, after_step)
        except NotTried as reason:
            outcome = TrialOutcome(remedy, setting, steps, 0, None, skipped=str(reason))
        start = None if source.snapshot is None else source.start.step
        return dataclasses.replace(outcome, start=start, start_reason=source.reason)

    def _batches(self, source: TrialSource) -> Iterator[tuple[tuple, dict, str]]:
        """(args, kwargs, where it came from) for each step of a trial.

        From the last good state: the failing batch, then `fit`'s data read anew.
        From an earlier state: the batches the run saw from there on where they were
        kept, else `fit`'s data from the start state's place in its epoch, with the
        failing batch at the failing step's place (`fit` shuffles: read anew, its
        batches come in another order than the run's, and a trial that never met the
        failing batch would prove nothing); in both cases the failing batch, repeated,
        where nothing else is left.
        """
        steps = source.steps
        count = 0
        failing_at = None  # the trial step at which the failing batch is still to come
        if source.snapshot is None:
            yield self._call.args, self._call.kwargs, "failing"
            count = 1
        else:
            kept, _ = source.kept_batches(self._call.traceable)
            for args, kwargs in kept[:steps]:
                yield args, kwargs, "kept"
                count += 1
            failing_at = source.failing - source.start.step
        skip = 0
        if source.snapshot is not None and not count and self._more_batches is not None:
            epoch = sum(1 for _ in self._more_batches())  # the start's place in its epoch
            skip = source.start.step % epoch if epoch else 0
        while self._more_batches is not None and count < steps:
            before = count
            for batch in itertools.islice(self._more_batches(), skip, None):
                if count >= steps:
                    return
                if count == failing_at:  # not kept: the run's batch there is this one
                    yield self._call.args, self._call.kwargs, "failing"
                    count += 1
                    if count >= steps:
                        return
                yield (batch,), {}, "data"
                count += 1
            skip = 0
            if count == before:  # no data at all
                break
        # Past what the run saw: the batch it failed on, again and again (the hardest
        # one known; the run's own later batches do not exist yet).
        for _ in range(count, steps):
            yield self._call.args, self._call.kwargs, "failing"

    def _data_only(self, make, source: TrialSource) -> Iterator[tuple[tuple, dict, str]]:
        """A remedy's own data (`TrialPlan.batches`), read again and again for the trial."""
        count = 0
        while count < source.steps:
            before = count
            for batch in itertools.islice(make(), source.steps - count):
                yield (batch,), {}, "changed data"
                count += 1
            if count == before:
                return

    def _steps(
        self, traced, remedy, setting: str, source: TrialSource, batches, after_step=None
    ) -> TrialOutcome:
        """Run the trial's steps (`traced`: the step for any batch, and for the failing
        one); the outcome holds each finite step's loss, every objective's loss and the
        largest gradient norm of its updates."""
        concrete, failing = traced
        losses, norms, objectives = [], [], []
        origins: dict[str, int] = {}
        repeated_from = None  # the trial step from which only the failing batch ran
        steps = source.steps
        signature = _signature(self._call.args, self._call.kwargs)
        for index, (args, kwargs, origin) in enumerate(batches):
            if _signature(args, kwargs) != signature:  # e.g. the last, smaller batch
                signature = _signature(args, kwargs)
                concrete = self._function.get_concrete_function(*args, **kwargs)
            with _quiet():
                (failing if origin == "failing" else concrete)(*args, **kwargs)
            if after_step is not None:
                after_step(index, args, kwargs, origin)
            origins[origin] = origins.get(origin, 0) + 1
            if origin != "failing":
                repeated_from = None
            elif repeated_from is None:
                repeated_from = index
            stats = self._guard.read()
            if stats.tripped:
                failed_at = index
                break
            losses.append(stats.loss)
            readings = self._guard.objective_losses()
            objectives.append(tuple(loss for loss, _ in readings))
            norms.append(max((norm for _, norm in readings), default=stats.grad_norm))
        else:
            failed_at = None
        return TrialOutcome(
            remedy,
            setting,
            steps,
            steps if failed_at is None else failed_at + 1,
            failed_at,
            tuple(losses),
            _described(origins),
            grad_norms=tuple(norms),
            objective_losses=tuple(zip(*objectives)) if objectives else (),
            repeated_from=repeated_from,
        )


def _signature(args: tuple, kwargs: dict) -> tuple:
    """The shapes and dtypes of a call's tensors (a new one needs its own trace)."""
    return tuple(
        (tuple(t.shape), t.dtype) if hasattr(t, "shape") and hasattr(t, "dtype") else repr(t)
        for t in tf.nest.flatten((args, kwargs))
    )


def _described(origins: dict[str, int]) -> str:
    """Which batches a trial ran on, in words, in the order they came."""
    words = {
        "failing": "the failing batch",
        "kept": "{batches} the run saw",
        "data": "{batches} of the training data",
        "changed data": "{batches} of the training data as the patch changes it",
    }
    parts = []
    for origin, n in origins.items():
        text = words[origin].format(batches=f"{n} batch" if n == 1 else f"{n} batches")
        if origin == "failing" and n > 1:
            text += f" ({n} times)"
        parts.append(text)
    return ", then ".join(parts) if parts else "no batch"


@contextmanager
def _quiet() -> Iterator[None]:
    """Hide what the user's step prints while a trial runs it (it ran once already)."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield
