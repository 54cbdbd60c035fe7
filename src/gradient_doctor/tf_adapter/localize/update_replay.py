"""The updates before a failing step run again from a saved state: which one first wrote inf or NaN.

When the optimizer's own update wrote the non-finite weights a step read, the update
that started it may lie a step or more before: Adam's first update can square a
gradient past float16's range into its `velocity` (inf), and only the next one turns
that inf into NaN weights. The run kept states from before (the snapshot ring); from
the latest one still finite, the steps up to the failing one are run again as the
fix trials run them (`LastGoodState`: the step traced afresh, every variable it
touches put back after), the optimizers' state checked after each update. At the
first update that left it non-finite, the step is run once more from the state
before it, op by op, for the gradients that update applied. Nothing of this runs
per step: only after a failure the guard did not stop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from gradient_doctor.core.evidence import StateValues
from gradient_doctor.core.findings import TensorStats
from gradient_doctor.core.trial_start import TrialStart
from gradient_doctor.tf_adapter.hooks.creation_sites import variable_path
from gradient_doctor.tf_adapter.localize.optimizer_state import (
    array_of,
    finite_flags,
    slot_owners,
    values_of,
)
from gradient_doctor.tf_adapter.localize.replay import replay_step
from gradient_doctor.tf_adapter.localize.step_context import StepCall
from gradient_doctor.tf_adapter.step.guard import gradient_values
from gradient_doctor.tf_adapter.step.tensor_summary import summarize
from gradient_doctor.tf_adapter.trials.fix_trials import LastGoodState, TrialSource
from gradient_doctor.tf_adapter.trials.snapshots import SnapshotRing


@dataclass(frozen=True)
class ReplayedUpdates:
    """What the updates before the failing step did when run again.

    Attributes:
        start: the step whose saved state it started from.
        first_step: the run's step whose update first left the state non-finite.
        first_state: what it left non-finite (the optimizer's slots, then the weights).
        gradients: the gradients it applied to the weights whose state went non-finite
            (`inf`: how many of them square past the weight's dtype).
        squares: for each of `gradients`, the summaries of the gradient and of its
            square in the weight's dtype.
        weights_step: the step whose update first left the weights non-finite, or None.
        replayed_on: the batches it ran on, in words.
        reproduced: the weights it left for the failing step are the run's, bit for bit
            (NaN at the same entries): its updates were the run's, whatever it ran on.
    """

    start: int
    first_step: int
    first_state: tuple[StateValues, ...]
    gradients: tuple[StateValues, ...]
    squares: tuple[tuple[TensorStats, TensorStats], ...]
    weights_step: int | None
    replayed_on: str
    reproduced: bool


def replay_updates(
    call: StepCall,
    failing: int,
    weights: list,
    slots: list,
    guard,
    snapshots: SnapshotRing,
    more_batches=None,
    optimizers=(),
    xla: bool = False,
) -> ReplayedUpdates | None:
    """Run the steps before `failing` again from the latest finite saved state.

    Args:
        call: the failing step, traceable afresh (`StepCall.traceable`).
        failing: the failing step.
        weights: the variables the optimizers train.
        slots: the optimizers' own variables.
        guard: the guard (the step runs guarded, as in the run).
        snapshots: the run's saved states.
        more_batches: fresh iterators over `fit`'s data, or None.
        optimizers: every optimizer of the run.
        xla: the step was compiled with XLA.

    Returns:
        What the first update that left the state non-finite did, or None when no
        saved state from before is finite, or the replayed updates stayed finite.
    """
    snapshot = _latest_finite(snapshots, failing, weights + slots)
    if snapshot is None or call.traceable is None:
        return None
    run_weights = [array_of(w) for w in weights]  # as the failing step read them
    start = TrialStart(snapshot.step, "")
    source = TrialSource(start, snapshot, snapshots, failing, 0)
    seen = _Seen(weights, slots, last=failing - snapshot.step - 1)
    with LastGoodState(call, guard, more_batches, optimizers, xla) as state:
        outcome = state.run(None, source, seen.after_step)
        if seen.first is None:
            return None
        first, (args, kwargs) = seen.first, seen.first_batch
        # The state before that update, and the gradients it applied, op by op.
        state.run(None, TrialSource(start, snapshot, snapshots, snapshot.step + first, 0))
        replayed = replay_step(StepCall(call.fn, args, kwargs), ran=False)
    reproduced = seen.last_weights is not None and all(
        np.array_equal(a, b, equal_nan=True)
        for a, b in zip(seen.last_weights, run_weights, strict=True)
    )
    gradients = _gradients(replayed.updates, seen.first_state)
    return ReplayedUpdates(
        start=snapshot.step,
        first_step=snapshot.step + first,
        first_state=seen.first_state,
        gradients=tuple(values for values, _ in gradients),
        squares=tuple(summaries for _, summaries in gradients),
        weights_step=None if seen.weights_at is None else snapshot.step + seen.weights_at,
        replayed_on=outcome.batches,
        reproduced=reproduced,
    )


class _Seen:
    """The state after each replayed update: the first that was not finite, and the last."""

    def __init__(self, weights: list, slots: list, last: int) -> None:
        self._weights, self._slots, self._last = weights, slots, last
        self._owners = slot_owners(weights)
        self.first: int | None = None
        self.first_batch: tuple[tuple, dict] = ((), {})
        self.first_state: tuple[StateValues, ...] = ()
        self.weights_at: int | None = None
        self.last_weights: list[np.ndarray] | None = None

    def after_step(self, index: int, args: tuple, kwargs: dict, origin: str) -> None:
        if index == self._last:  # the weights the failing step would read
            self.last_weights = [array_of(w) for w in self._weights]
        variables = self._slots + self._weights
        flags = finite_flags(variables)
        if all(flags):
            return
        if self.first is None:
            self.first, self.first_batch = index, (args, kwargs)
            self.first_state = tuple(
                values_of(v, self._owners) for v, ok in zip(variables, flags, strict=True) if not ok
            )
        if self.weights_at is None and not all(flags[len(self._slots) :]):
            self.weights_at = index


def _latest_finite(snapshots: SnapshotRing, failing: int, variables: list):
    """The latest saved state from before `failing` in which `variables` (the weights and
    slots the updates write) were all finite, or None. Other variables a snapshot holds
    (another model's, left NaN in the same process) are not its concern."""
    wanted = {id(getattr(v, "value", v)) for v in variables} | {id(v) for v in variables}
    for snapshot in reversed(snapshots.saved()):
        if snapshot.step >= failing:
            continue
        if all(_finite(value) for v, value in snapshot.values if id(v) in wanted):
            return snapshot
    return None


def _finite(value) -> bool:
    array = np.asarray(value)
    return array.dtype.kind not in "fc" or bool(np.isfinite(array).all())


def _gradients(
    updates, state: tuple[StateValues, ...]
) -> list[tuple[StateValues, tuple[TensorStats, TensorStats]]]:
    """The gradient of each weight whose state went non-finite, summarised (`inf` counts
    the values whose square, in the weight's dtype, overflows it), with the summaries of
    the gradient and of that square."""
    wanted = {values.weight or values.name for values in state}
    found = []
    for grads, variables, _ in updates:
        for gradient, variable in zip(grads, variables, strict=False):
            name = variable_path(variable)
            if gradient is None or name not in wanted:
                continue
            wanted.discard(name)
            dtype = np.dtype(tf.as_dtype(variable.dtype).as_numpy_dtype)
            values = np.asarray(gradient_values(gradient)).astype(dtype)
            with np.errstate(over="ignore", invalid="ignore"):
                squares = np.square(values)
            finite = np.abs(values[np.isfinite(values)].astype(np.float64))
            summary = StateValues(
                name=name,
                dtype=dtype.name,
                size=int(values.size),
                nan=int(np.isnan(values).sum()),
                inf=int((np.isinf(squares) & np.isfinite(values)).sum()),
                largest=float(finite.max()) if finite.size else None,
            )
            found.append((summary, (summarize(values), summarize(squares))))
    return found
