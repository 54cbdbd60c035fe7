"""Try the proposed fixes: run the failing step again, from the last good state, with each one.

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
import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import keras
import tensorflow as tf

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.fix_placement import CLIP_VALUE, clipping_threshold
from gradient_doctor.core.fix_trials import TrialOutcome, judge
from gradient_doctor.core.patches import PatchError
from gradient_doctor.core.trial_start import TrialStart, trial_start, trouble_began
from gradient_doctor.tf_adapter import loss_scale
from gradient_doctor.tf_adapter.fix_sites import layers_built_at
from gradient_doctor.tf_adapter.patched_source import (
    NotPatchable,
    PatchedSource,
    patched_functions,
)
from gradient_doctor.tf_adapter.snapshots import Snapshot, SnapshotRing
from gradient_doctor.tf_adapter.step_context import StepCall

# Steps each trial runs unless told otherwise.
DEFAULT_TRIAL_STEPS = 200
# A trial's learning rate is the user's divided by this.
LEARNING_RATE_DIVISOR = 10.0


@dataclass(frozen=True)
class TrialPlan:
    """One remedy to try: its family, what it changes, and how to put it in place.

    `apply` is a context manager factory that holds the remedy in place while the
    step is traced and run; for a patch it yields the `PatchedSource`, so a patch
    whose line the new trace never reached is reported as not tried.
    `replacement` is the patch's text (None for other remedies); two families with
    the same patch are run once. `batches`, when set, makes fresh iterators over the
    data as the remedy changes it; the trial runs on those alone.
    """

    remedy: str
    setting: str
    apply: Callable[[], object]
    replacement: object = None
    batches: Callable[[], Iterator] | None = None


def try_fixes(
    finding: Finding,
    evidence: Evidence,
    call: StepCall | None,
    optimizer,
    guard,
    steps: int = DEFAULT_TRIAL_STEPS,
    more_batches=None,
    announce=None,
    snapshots: SnapshotRing | None = None,
    first_warning: int | None = None,
    optimizer_variables=(),
    fit_call=None,
) -> Finding:
    """The finding with its fixes (and not-fixes) tried, each from the state it needs.

    A fix that rewrites the op's line is tried from the last good state; a remedy
    that acts on the updates from a saved state from before the trouble began, and
    one that acts from the start from the first saved state (`core/trial_start.py`).
    A trial from step S runs through the failing step and `steps` steps beyond
    (`optimizer_variables` that a saved state does not hold, the slots an optimizer
    makes at its first update, start at zero from it). It
    runs the batches the run saw from S on where they were kept (a custom loop's),
    else the failing batch, then batches from `more_batches()` (a fresh iterator over
    `fit`'s training data, when it can be read again), else the failing batch again.
    The unchanged step is run from each start too (the baseline), and a fix counts
    only where its baseline failed. `announce(count, steps, step)` is told before
    trials run.

    Returns `finding` unchanged when nothing can be tried: trials are off
    (`steps` 0), no non-finite origin was found, or the step cannot be traced
    again (a plain eager step).
    """
    if steps <= 0 or call is None or call.traceable is None or finding.origin is None:
        return finding
    plans = trial_plans(finding, evidence, optimizer, fit_call)
    if not plans:
        return finding
    if _distributed(optimizer):
        reason = "the step runs under a tf.distribute strategy, where trials are not run yet"
        untried = [TrialOutcome(p.remedy, p.setting, steps, 0, None, skipped=reason) for p in plans]
        return judge(finding, TrialOutcome(None, "", steps, 0, None, skipped=reason), untried)
    failing = finding.step or 0
    saved = {failing: None, **({s.step: s for s in snapshots.saved()} if snapshots else {})}
    began = trouble_began(evidence.history, failing, first_warning)
    starts = {
        plan.remedy: trial_start(plan.remedy, finding, began, sorted(saved)) for plan in plans
    }
    if announce is not None:
        announce(len(plans), steps, finding.step)
    try:
        with _LastGoodState(call, guard, more_batches, optimizer_variables) as runner:
            baselines: dict[int | None, TrialOutcome] = {}
            outcomes, done = [], {}
            for plan in plans:
                start = starts[plan.remedy]
                if start is None:
                    outcomes.append(
                        TrialOutcome(plan.remedy, plan.setting, steps, 0, None, skipped=_TOO_LONG)
                    )
                    continue
                source = _TrialSource(start, saved.get(start.step), snapshots, failing, steps)
                key = None if start.step == failing else start.step
                if key not in baselines:
                    baselines[key] = runner.run(None, source)
                outcome = done.get((plan.replacement, key)) or runner.run(plan, source)
                if plan.replacement is not None:
                    done[(plan.replacement, key)] = outcome
                outcomes.append(dataclasses.replace(outcome, remedy=plan.remedy))
    except Exception as error:  # the trials are extra evidence: never end the user's run
        warnings.warn(
            f"gradient-doctor could not try the fixes ({type(error).__name__}: {error}); "
            "they are reported untried.",
            stacklevel=2,
        )
        return finding
    if not baselines:
        baselines[None] = TrialOutcome(None, "", steps, 0, None, skipped=_TOO_LONG)
    return judge(finding, baselines, outcomes, _loss_before(evidence.history, began))


_TOO_LONG = (
    "this remedy acts from the start of training, and the run failed too far from it to "
    "run it all again here; `gradient-doctor fix` reruns the patched script"
)


def _loss_before(history, began: int) -> float | None:
    """The median loss of the recorded steps before the trouble began, or None."""
    losses = sorted(
        loss
        for step, loss in zip(history.steps, history.losses)
        if step < began and loss is not None and math.isfinite(loss)
    )
    return losses[len(losses) // 2] if losses else None


@dataclass(frozen=True)
class _TrialSource:
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

    def kept_batches(self) -> tuple[list[tuple[tuple, dict]], bool]:
        """The run's own batches from the start step on, and whether all were kept."""
        if self.snapshot is None or self.ring is None:
            return [], False
        return self.ring.batches_from(self.start.step)


def _distributed(optimizer) -> bool:
    """True when the optimizer's variables are spread over replicas (tf.distribute)."""
    from tensorflow.python.distribute.values import DistributedValues

    variables = getattr(optimizer, "variables", None) or []
    return any(isinstance(getattr(v, "value", v), DistributedValues) for v in variables)


def trial_plans(finding: Finding, evidence: Evidence, optimizer, fit_call=None) -> list[TrialPlan]:
    """The remedies of `finding` (fixes and not-fixes) that can be tried, in its order.

    A fix with a patch is tried as the patch is written: a patch of the optimizer's
    line by the setting it writes (`Fix.trial_setting`: the same learning rate, the
    same clipping norm); any other by running the user's functions from the patched
    copy of their file (`patched_functions`). A remedy with no patch is still tried,
    for the evidence (it cannot be marked verified). Two fixes with the same patch
    are run once.
    """
    # A loss-scaling optimizer's own learning rate and clipping are not the ones used.
    optimizer = loss_scale.inner_optimizer(optimizer) if optimizer is not None else None
    plans: list[TrialPlan] = []
    fixes = {fix.family: fix for fix in finding.fixes}
    fixes.update({n.remedy: n.fix for n in finding.not_fixes if n.fix is not None})
    remedies = [fix.family for fix in finding.fixes] + [n.remedy for n in finding.not_fixes]
    for remedy in dict.fromkeys(remedies):
        fix = fixes.get(remedy)
        setting = fix.trial_setting if fix is not None else None
        if setting is None and remedy in _SETTINGS:
            setting = _SETTINGS[remedy](evidence)
        if setting is not None and setting[0] == "standardise_x":
            plans.append(_standardised(remedy, fit_call, setting[1]))
        elif setting is not None:
            edits = fix.edits if fix is not None else ()
            plans.append(_with_setting(remedy, optimizer, *setting, edits=edits))
        elif fix is not None and fix.patch:
            files = ", ".join(sorted({e.file for e in fix.edits}))
            plans.append(
                TrialPlan(
                    remedy,
                    f"the patch of {files}",
                    lambda edits=fix.edits: _patched(edits),
                    replacement=fix.patch,
                )
            )
    return plans


# The settings a remedy without a patch is tried with (what its patch would write).
_SETTINGS: dict[str, Callable[[Evidence], tuple[str, float]]] = {
    "lower_learning_rate": lambda evidence: ("learning_rate_scale", 1 / LEARNING_RATE_DIVISOR),
    "gradient_clipping": lambda evidence: ("global_clipnorm", clipping_threshold(evidence.history)),
    "clip_by_value": lambda evidence: ("clipvalue", CLIP_VALUE),
}


@contextmanager
def _patched(edits) -> Iterator[PatchedSource]:
    """The patch in place, or `_NotTried` saying why it cannot be run again in-process."""
    try:
        with patched_functions(edits) as placed:
            yield placed
    except (NotPatchable, PatchError) as reason:
        raise _NotTried(str(reason)) from None


def _with_setting(remedy: str, optimizer, name: str, value, edits=()) -> TrialPlan:
    """A trial plan that sets the optimizer, or the layers, as a patch of the lines that
    built them would build them."""
    if optimizer is None:
        return TrialPlan(remedy, "", _not_possible("no optimizer was seen"))
    if name in ("learning_rate", "learning_rate_scale"):
        return _learning_rate_plan(remedy, optimizer, name, value)
    if name in ("kernel_constraint", "kernel_initializer"):
        return _layer_plan(remedy, layers_built_at(optimizer, edits), name, value)
    already = [
        f"{clip}={current}"
        for clip in ("clipnorm", "clipvalue", "global_clipnorm")
        if (current := getattr(optimizer, clip, None)) and clip != name
    ]
    if already:
        reason = "clipping is already on: " + ", ".join(already)
        return TrialPlan(remedy, reason, _not_possible(reason))
    before = getattr(optimizer, name, None)

    @contextmanager
    def apply() -> Iterator[None]:
        setattr(optimizer, name, value)
        try:
            yield
        finally:
            setattr(optimizer, name, before)

    return TrialPlan(remedy, f"{name}={value:.4g}", apply)


def _standardised(remedy: str, fit_call, epsilon: float) -> TrialPlan:
    """Run on `fit`'s data with the features standardised as the patched fit line does."""
    batches = fit_call.standardised_batches(epsilon) if fit_call is not None else None
    if batches is None:
        return TrialPlan(remedy, "", _not_possible("fit's features are not one NumPy array"))
    return TrialPlan(remedy, "the features standardised", nullcontext, batches=batches)


def _layer_plan(remedy: str, layers: list, name: str, value) -> TrialPlan:
    """Bound the kernels of `layers` (`kernel_constraint`), or draw them afresh with He's
    initialisation at the trial's start (`kernel_initializer`), as the patch builds them."""
    kernels = [layer.kernel for layer in layers if getattr(layer, "kernel", None) is not None]
    if not kernels:
        return TrialPlan(remedy, "", _not_possible("the layers the patch changes were not found"))
    names = ", ".join(f"`{layer.name}`" for layer in layers)

    @contextmanager
    def apply() -> Iterator[None]:
        before = [kernel.constraint for kernel in kernels]
        for index, kernel in enumerate(kernels):
            if name == "kernel_constraint":
                kernel.constraint = keras.constraints.MaxNorm(max_value=float(value))
            else:  # the patch draws these kernels at construction; the trial at its start
                draw = keras.initializers.get({"class_name": str(value), "config": {"seed": index}})
                kernel.assign(draw(tuple(kernel.shape), dtype=kernel.dtype))
        try:
            yield
        finally:
            for kernel, constraint in zip(kernels, before):
                kernel.constraint = constraint

    what = f"MaxNorm({value:g})" if name == "kernel_constraint" else f'"{value}"'
    return TrialPlan(remedy, f"{name}={what} on {names}", apply)


def _learning_rate_plan(remedy: str, optimizer, name: str, value: float) -> TrialPlan:
    """Set the learning rate to `value`, or scale a schedule's output by it."""
    current = getattr(optimizer, "_learning_rate", None)
    if current is None:
        return TrialPlan(remedy, "", _not_possible("the optimizer has no learning rate"))
    fixed = hasattr(current, "assign") and hasattr(current, "numpy")
    if fixed:
        # A fixed learning rate lives in a variable (a Keras variable wraps a tf.Variable):
        # it is set in place and restored with the rest of the saved state.
        was = float(current.numpy())
        lower = value if name == "learning_rate" else was * value

        @contextmanager
        def lower_value() -> Iterator[None]:
            current.assign(lower)
            yield

        return TrialPlan(remedy, f"learning rate {lower:.4g} (was {was:.4g})", lower_value)
    if name == "learning_rate":  # a schedule the patch replaced by a number
        scaled = lambda: tf.constant(value, tf.float32)  # noqa: E731
    elif isinstance(current, keras.optimizers.schedules.LearningRateSchedule):
        scaled = lambda: current(optimizer.iterations) * value  # noqa: E731
    else:
        scaled = lambda: current() * value  # noqa: E731

    @contextmanager
    def lower_schedule() -> Iterator[None]:
        optimizer._learning_rate = scaled  # read while the step is traced
        try:
            yield
        finally:
            optimizer._learning_rate = current

    what = f"{value:.4g}" if name == "learning_rate" else f"multiplied by {value:g}"
    return TrialPlan(remedy, f"the learning-rate schedule {what}", lower_schedule)


def _not_possible(reason: str) -> Callable[[], object]:
    def apply():
        raise _NotTried(reason)

    return apply


class _NotTried(Exception):
    """A remedy that cannot be put in place here (the reason is its message)."""


class _LastGoodState:
    """Saves every variable the step touches; runs trials, each from that state.

    Args:
        call: the failing step with its batch.
        guard: the guard, read after each trial step.
        more_batches: makes a fresh iterator over the training data (batches shaped
            like the step's one argument), or None to repeat the failing batch.
    """

    def __init__(self, call: StepCall, guard, more_batches=None, optimizer_variables=()) -> None:
        self._optimizer_variables = list(optimizer_variables)
        self._call = call
        self._guard = guard
        self._more_batches = more_batches
        # The state as the user's run left it (put back at the end), and the state
        # each trial starts from (the same, with the random state stepped back).
        self._saved: list[tuple[tf.Variable, tf.Tensor]] = []
        self._start: list[tuple[tf.Variable, tf.Tensor]] = []
        self._function = None

    def __enter__(self) -> _LastGoodState:
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

    def _restore(self) -> None:
        """Back to the state a trial starts from."""
        self._put_back(self._start)

    @staticmethod
    def _put_back(values) -> None:
        for variable, value in values:
            variable.assign(value)

    def _trace(self):
        """Trace the step afresh (with whatever remedy is in place now)."""
        self._function = tf.function(self._call.traceable)
        return self._function.get_concrete_function(*self._call.args, **self._call.kwargs)

    def run(self, plan: TrialPlan | None, source: _TrialSource) -> TrialOutcome:
        """Run the step from `source`'s start through the failing step and beyond,
        with `plan` in place (None: the unchanged step, the baseline)."""
        remedy = None if plan is None else plan.remedy
        setting = "" if plan is None else plan.setting
        steps = source.steps
        self._restore()
        if source.snapshot is not None:
            self._put_back(source.snapshot.values)
            held = {id(variable) for variable, _ in source.snapshot.values}
            for variable in self._optimizer_variables:  # slots made after the copy
                inner = getattr(variable, "value", variable)
                if id(inner) not in held and id(variable) not in held:
                    variable.assign(tf.zeros_like(variable))
        self._guard.reset()
        try:
            with plan.apply() if plan is not None else nullcontext() as placed:
                concrete = self._trace()
                if isinstance(placed, PatchedSource) and not placed.met:
                    raise _NotTried("the patched line was not reached when the step was traced")
                batches = (
                    self._data_only(plan.batches, source)
                    if plan is not None and plan.batches is not None
                    else self._batches(source)
                )
                outcome = self._steps(concrete, remedy, setting, source, batches)
        except _NotTried as reason:
            outcome = TrialOutcome(remedy, setting, steps, 0, None, skipped=str(reason))
        start = None if source.snapshot is None else source.start.step
        return dataclasses.replace(outcome, start=start, start_reason=source.reason)

    def _batches(self, source: _TrialSource) -> Iterator[tuple[tuple, dict, str]]:
        """(args, kwargs, where it came from) for each step of a trial.

        From the last good state: the failing batch, then `fit`'s data read anew.
        From an earlier state: the batches the run saw from there on where they were
        kept, else `fit`'s data from the start state's place in its epoch; in both
        cases the failing batch, repeated, where nothing else is left.
        """
        steps = source.steps
        count = 0
        if source.snapshot is None:
            yield self._call.args, self._call.kwargs, "failing"
            count = 1
        else:
            kept, _ = source.kept_batches()
            for args, kwargs in kept[:steps]:
                yield args, kwargs, "kept"
                count += 1
        skip = 0
        if source.snapshot is not None and not count and self._more_batches is not None:
            epoch = sum(1 for _ in self._more_batches())  # the start's place in its epoch
            skip = source.start.step % epoch if epoch else 0
        while self._more_batches is not None and count < steps:
            before = count
            for batch in itertools.islice(self._more_batches(), skip, None):
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

    def _data_only(self, make, source: _TrialSource) -> Iterator[tuple[tuple, dict, str]]:
        """A remedy's own data (`TrialPlan.batches`), read again and again for the trial."""
        count = 0
        while count < source.steps:
            before = count
            for batch in itertools.islice(make(), source.steps - count):
                yield (batch,), {}, "changed data"
                count += 1
            if count == before:
                return

    def _steps(self, concrete, remedy, setting: str, source: _TrialSource, batches) -> TrialOutcome:
        losses = []
        origins: dict[str, int] = {}
        steps = source.steps
        signature = _signature(self._call.args, self._call.kwargs)
        for index, (args, kwargs, origin) in enumerate(batches):
            if _signature(args, kwargs) != signature:  # e.g. the last, smaller batch
                signature = _signature(args, kwargs)
                concrete = self._function.get_concrete_function(*args, **kwargs)
            with _quiet():
                concrete(*args, **kwargs)
            origins[origin] = origins.get(origin, 0) + 1
            stats = self._guard.read()
            if stats.tripped:
                return TrialOutcome(
                    remedy, setting, steps, index + 1, index, tuple(losses), _described(origins)
                )
            losses.append(stats.loss)
        return TrialOutcome(remedy, setting, steps, steps, None, tuple(losses), _described(origins))


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
        "kept": "{n} batches the run saw",
        "data": "{n} batches of the training data",
        "changed data": "{n} batches of the training data as the patch changes it",
    }
    parts = []
    for origin, n in origins.items():
        text = words[origin].format(n=n)
        if origin == "failing" and n > 1:
            text += f" ({n} times)"
        parts.append(text)
    return ", then ".join(parts) if parts else "no batch"


@contextmanager
def _quiet() -> Iterator[None]:
    """Hide what the user's step prints while a trial runs it (it ran once already)."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield
