"""The guard: per-step finite checks fused into the compiled step, and the skip."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from gradient_doctor.tf_adapter._tf_internals import keras_backend, updated_variables
from gradient_doctor.tf_adapter.localize import step_context
from gradient_doctor.tf_adapter.step import iteration_count, loss_scale, random_draws, replicas
from gradient_doctor.tf_adapter.step.clipping import clipped_finite, clipping_of
from gradient_doctor.tf_adapter.step.doctor_variables import doctor_variable
from gradient_doctor.tf_adapter.step.headroom_probe import Probe, find_probes
from gradient_doctor.tf_adapter.step.layer_stats import LayerStats
from gradient_doctor.tf_adapter.step.xla_branches import (
    branches_kept,
    compiled_with_xla,
    keep_branch,
)
from gradient_doctor.tf_adapter.step.zero_streaks import ZeroStreaks

# Layout of the guard's one statistics variable, read back once per step.
(
    _TRIPPED,
    _GRAD_NORM,
    _LOSS,
    _ZERO_STREAK,
    _TRIP_AT,
    _XLA,
    _REPLICA,
    _SKIPPED,
    _UPDATES,
    _TRIP_BY,
) = range(10)
_STATS_SIZE = 10
# Set while a guarded update runs: an optimizer applied inside it (the inner optimizer
# of a LossScaleOptimizer) is part of that update, not a step of its own.
_updating = threading.local()


@dataclass(frozen=True)
class StepStats:
    """What the guard saw in the most recent step."""

    tripped: bool
    grad_norm: float
    loss: float
    zero_streak: int = 0
    trip_at: int = -1  # the step counter of the step that tripped, when the step has one
    xla: bool = False  # the step was compiled with XLA
    replica: int = -1  # under tf.distribute, the first replica whose values were not finite
    skipped: int = 0  # updates the guard skipped since the latch was last opened
    updates: int = 0  # updates asked for (applied or skipped) since then
    trip_by: int = 0  # the number of the optimizer whose update tripped (`Guard.numbered`)


@dataclass(frozen=True)
class _Update:
    """One optimizer update the guard is guarding, as `apply` received it."""

    apply: Callable[[], object] | None  # runs the optimizer's own update
    original_apply: Callable | None
    optimizer: object
    grads: list
    trainable_variables: list | None
    variables: list
    float_pairs: list  # (dense values of the gradient, variable), floating point only
    loss: object
    scope: step_context.StepScope | None


@dataclass(frozen=True)
class _Check:
    """What `Guard._check` found: the tensors the later steps of `apply` reuse."""

    squares: tf.Tensor  # each gradient's sum of squares, one float32 vector
    sum_of_squares: tf.Tensor
    finite: tf.Tensor  # loss and gradients finite (or an overflow the loss scale handles)
    loss: tf.Tensor  # the step's loss, a float32 scalar (scaled, as the step computed it)
    scale: tf.Tensor | None  # the loss scale, None when unscaled
    before: tf.Tensor  # the statistics vector before this update
    latch_open: tf.Tensor


def gradient_values(gradient):
    """The dense values of a gradient: an `IndexedSlices`' values are not densified."""
    return gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient


class Guard:
    """A latch and the last step's statistics, shared by every watched optimizer.

    Once a step's loss or gradients are non-finite the latch closes: that update
    and every later one is skipped until `reset`, so the weights stay at the last
    good state however long Python takes to notice.
    """

    def __init__(self, on_missing=None, layer_stats: LayerStats | None = None) -> None:
        self._stats: tf.Variable | None = None
        # Per-layer statistics measured every few steps (None: the cheap mode).
        self.layer_stats = layer_stats
        # How many replicas a `tf.distribute` step runs on (None: no replicas seen).
        self.replicas: int | None = None
        # Where they run (which worker of a cluster holds which replica), or None.
        self.layout: replicas.Layout | None = None
        # Called as on_missing(variables, all_missing, loss, tape_window) when an
        # update is asked for with some gradients None (once per trace in graphs), and
        # with `filled=True` for gradients the tape gave None that the user's code filled
        # in; returns True when the update must be skipped.
        self.on_missing = on_missing
        self.zero_streaks = ZeroStreaks()
        # The optimizers whose updates were asked for (by id): a GAN has two.
        self.optimizers: set[int] = set()
        # Each guarded optimizer, by its number in the statistics (`_number_of`).
        self._numbers: list[weakref.ref] = []
        # Per traced graph, the risky ops already measured; and every measuring site:
        # (probes, variable holding their latest values).
        self._probed: dict[int, set[str]] = {}
        self._sites: dict[tuple[str, ...], tf.Variable] = {}
        self.headroom_sites: list[tuple[list[Probe], tf.Variable]] = []
        # Eagerly: per (optimizer, variables, loss known), the compiled check and record.
        self._compiled: dict[tuple, Callable] = {}
        # While fix trials run (`recording_objectives`): each optimizer's latest loss, by
        # id, in the order of the step's updates (a GAN's two losses); None otherwise.
        self._objective_losses: dict[int, tf.Variable] | None = None

    def _variable(self) -> tf.Variable:
        if self._stats is None:
            with tf.init_scope():
                self._stats = doctor_variable(
                    tf.zeros([_STATS_SIZE], tf.float32), "gradient_doctor_stats"
                )
        return self._stats

    def read(self, fetched=None) -> StepStats:
        """The statistics of the last step.

        Args:
            fetched: the values of `stats_tensor()` when the step already returned
                them (they then ride along with Keras's own per-step copy of its
                logs); otherwise the variable is read back (one small host copy).
        """
        if fetched is None:
            if self._stats is None:
                return StepStats(False, 0.0, 0.0)
            fetched = self._stats.numpy()
        values = np.asarray(fetched)
        return StepStats(
            bool(values[_TRIPPED] > 0),
            float(values[_GRAD_NORM]),
            float(values[_LOSS]),
            int(values[_ZERO_STREAK]),
            int(values[_TRIP_AT]),
            bool(values[_XLA] > 0),
            int(values[_REPLICA]),
            int(values[_SKIPPED]),
            int(values[_UPDATES]),
            int(values[_TRIP_BY]),
        )

    def numbered(self, number: int):
        """The optimizer a step's statistics number (`StepStats.trip_by`), or None: 0, or
        one let go since."""
        if not 0 < number <= len(self._numbers):
            return None
        return self._numbers[number - 1]()

    def _number_of(self, optimizer) -> int:
        """The optimizer's number in the statistics, 1 up, in the order first guarded."""
        for number, ref in enumerate(self._numbers, start=1):
            if ref() is optimizer:
                return number
        self._numbers.append(weakref.ref(optimizer))
        return len(self._numbers)

    @contextmanager
    def recording_objectives(self):
        """Within the block, steps traced in it keep each optimizer's loss and norm apart.

        The statistics hold the loss of the step's last update only: a GAN's
        generator loss. A fix trial judges every objective, so while it traces and
        runs the step, each update also writes its own loss (one scalar variable per
        optimizer, read by `objective_losses`). Nothing is added outside trials.
        """
        self._objective_losses = {}
        try:
            yield
        finally:
            self._objective_losses = None

    def objective_losses(self) -> tuple[tuple[float, float], ...]:
        """Each optimizer's (loss, gradient norm) at the last step run in
        `recording_objectives`, in the order of the step's updates (empty outside it)."""
        if not self._objective_losses:
            return ()
        return tuple(
            (float(loss), float(norm))
            for loss, norm in (v.numpy() for v in self._objective_losses.values())
        )

    def _record_objective(self, optimizer, loss: tf.Tensor, norm: tf.Tensor) -> None:
        """Write the update's loss and gradient norm to its optimizer's variable (in
        trials only)."""
        if self._objective_losses is None:
            return
        holder = self._objective_losses.get(id(optimizer))
        if holder is None:
            with tf.init_scope():
                holder = doctor_variable(tf.zeros([2], tf.float32), "gradient_doctor_objective")
            self._objective_losses[id(optimizer)] = holder
        holder.assign(tf.stack([loss, norm]))

    def stats_tensor(self) -> tf.Tensor:
        """The statistics as a tensor of the step being traced (after its updates)."""
        return self._variable().read_value()

    def close(self) -> None:
        """Close the latch: every update is skipped until `reset` (the step still runs)."""
        variable = self._variable()
        variable.assign(tf.tensor_scatter_nd_update(variable, [[_TRIPPED]], [1.0]))

    def reset(self) -> None:
        """Open the latch again, so that training can go on."""
        if self._stats is not None:
            self._stats.assign(tf.zeros([_STATS_SIZE], tf.float32))

    def apply(self, original_apply, optimizer, grads, trainable_variables=None):
        """Run `original_apply(grads, trainable_variables)` only when the step is finite.

        What the guard adds to every update, step by step (each a method below):

        1. `_prepare`: Python only, nothing in the step: hands a replay's gradients
           to its recorder, diagnoses `None` gradients, builds the optimizer's slots.
        2. `_check`: one fused sum of squares per gradient (their sum is the global
           norm, and it is finite when every gradient is) and the finite test of the
           loss and the latch.
        3. `_update_or_skip`: a `cond` around the optimizer's update; the skip branch
           keeps the first failing batch and random draws (nothing is copied on the
           happy path). Across replicas, every replica takes the same branch.
        4. `_measure`: while tracing only, one reduction per risky op of the user's
           (headroom) and the per-layer statistics (full mode).
        5. `_record`: the zero streaks and the statistics vector read back per step.

        Run eagerly (an inline loop), steps 2 and 5 are one compiled call
        (`_check_and_record_compiled`): one call instead of about 50 eager ops.

        With dynamic loss scaling, non-finite gradients are let through to the
        optimizer (it skips the update and lowers the scale itself) until the scale
        has collapsed; the loss and gradient norm are recorded unscaled.
        """
        if in_guarded_update():  # a wrapped optimizer's inner one: the outer call guards
            return original_apply(grads, trainable_variables)
        update, result = self._prepare(original_apply, optimizer, grads, trainable_variables)
        if update is None:
            return result
        if tf.executing_eagerly() and not replicas.must_cross_replicas():
            finite, latch_open = self._check_and_record_compiled(update)
            self._update_or_skip(update, finite, latch_open)
            return None
        check = self._check(update)
        ok, failed_replica = self._update_or_skip(update, check.finite, check.latch_open)
        self._measure(update, check)
        self._record(update, check, ok, failed_replica)
        return None

    def _prepare(self, original_apply, optimizer, grads, trainable_variables):
        """The update to guard, or (None, what `apply` returns) when there is none.

        Adds nothing to the step: a replay's gradients go to its recorder (nothing is
        applied), `None` gradients are diagnosed (`on_missing`), an update with no
        floating-point gradient runs unguarded, and the optimizer's slots are made
        here since a `cond` branch may not create variables.
        """
        recorder = step_context.current_recorder()
        if recorder is not None:
            recorder.record_gradients(list(grads), trainable_variables)
            if not recorder.live:
                return None, None  # a replay: nothing is applied
        step_context.mark_applied()
        self.optimizers.add(id(optimizer))
        grads = list(grads)
        given_none = step_context.given_none(grads)
        variables = updated_variables(optimizer, trainable_variables)
        filled = step_context.filled_in(grads, variables)
        loss, tape_window = step_context.take_loss(grads)
        missing = [v for g, v in zip(grads, variables) if g is None]
        if missing and self.on_missing is not None:
            if self.on_missing(missing, len(missing) == len(grads), loss, tape_window):
                return None, None  # nothing to update; the step's check stops training
        dropped = _dropped_before_the_update(given_none, variables)
        if dropped and not missing and self.on_missing is not None:
            self.on_missing(dropped, False, loss, tape_window)
        if filled and not missing and not dropped and self.on_missing is not None:
            # Applied as the user's code filled them in (zeros): nothing is skipped.
            self.on_missing(filled, False, loss, tape_window, filled=True)
        float_pairs = [
            (gradient_values(g), v)
            for g, v in zip(grads, variables)
            if g is not None and g.dtype.is_floating
        ]
        if not float_pairs:
            return None, original_apply(grads, trainable_variables)
        _build_optimizer(optimizer, grads, trainable_variables)
        update = _Update(
            apply=lambda: original_apply(grads, trainable_variables),
            original_apply=original_apply,
            optimizer=optimizer,
            grads=grads,
            trainable_variables=trainable_variables,
            variables=variables,
            float_pairs=float_pairs,
            loss=loss,
            scope=step_context.current_scope(),
        )
        return update, None

    def _check(self, update: _Update) -> _Check:
        """Whether the update may run: its loss and gradients finite, the latch open.

        Adds one fused pass per gradient (`l2_loss`, no temporary tensor) into one
        vector of sums of squares, its sum, the finite tests, and one read of the
        statistics variable. A non-finite gradient makes the sum non-finite; so do
        finite gradients whose squares overflow float32, which Adam's second moment
        (and clipping by the norm) would turn into inf or NaN weights: both are skipped.
        An optimizer that clips is judged by the gradients as it clips them
        (`clipped_finite`: value clipping bounds huge finite gradients), while the
        recorded norm stays the one of the gradients as computed.
        """
        halves = tf.stack(
            [
                tf.nn.l2_loss(g if g.dtype == tf.float32 else tf.cast(g, tf.float32))
                for g, _ in update.float_pairs
            ]
        )
        squares = 2.0 * halves  # exact: l2_loss is half the sum of squares
        sum_of_squares = tf.reduce_sum(squares)
        grads_finite = tf.math.is_finite(sum_of_squares)
        # An optimizer that clips applies the clipped gradients: those are judged.
        clipped = clipped_finite(update.optimizer, [g for g, _ in update.float_pairs])
        if clipped is not None:
            grads_finite = clipped
        loss = _scalar_loss(update.loss)
        before = self._variable().read_value()
        scale = loss_scale.scale_tensor(update.optimizer)  # read before the update changes it
        if loss_scale.is_dynamic(update.optimizer) and scale is not None:
            grads_finite = loss_scale.handles(grads_finite, scale)
        finite = tf.logical_and(grads_finite, tf.math.is_finite(loss))
        return _Check(squares, sum_of_squares, finite, loss, scale, before, before[_TRIPPED] <= 0)

    def _check_and_record_compiled(self, update: _Update) -> tuple[tf.Tensor, tf.Tensor]:
        """Eagerly: `_check` and `_record` as one `tf.function` call; (finite, latch open).

        Each op of an eager step costs its own dispatch (about 50 for the guard's check
        and statistics), so they are traced once per optimizer and variable list, with
        the verdict `_record` writes known before the update (the update itself stays
        the optimizer's own eager code, so the weights are bit-identical).
        """
        variables = [v for _, v in update.float_pairs]
        loss = update.loss
        if not isinstance(loss, tf.Tensor | tf.Variable) or not loss.dtype.is_floating:
            loss = None  # recorded as 0, as `_scalar_loss` does
        clipping = tuple(sorted(clipping_of(update.optimizer).items()))  # a trial may set it
        key = (id(update.optimizer), tuple(id(v) for v in variables), loss is None, clipping)
        compiled = self._compiled.get(key)
        if compiled is None:
            optimizer = update.optimizer

            def check_and_record(grads, loss, index):
                traced = _Update(  # the update itself is not traced: its steps only
                    apply=None,
                    original_apply=None,
                    optimizer=optimizer,
                    grads=list(grads),
                    trainable_variables=None,
                    variables=variables,
                    float_pairs=list(zip(grads, variables, strict=True)),
                    loss=loss,
                    scope=step_context.StepScope(step_index=index),
                )
                check = self._check(traced)
                ok = tf.logical_and(check.finite, check.latch_open)
                self._record(traced, check, ok, tf.constant(-1.0))
                return check.finite, check.latch_open

            # Sparse gradients' values change their row count: one trace serves all.
            compiled = self._compiled[key] = tf.function(check_and_record, reduce_retracing=True)
        scope = update.scope
        index = -1.0  # a Python number is part of the trace: no op per call
        if scope is not None and scope.step_index is not None:
            index = tf.cast(scope.step_index, tf.float32)
        return compiled(tuple(g for g, _ in update.float_pairs), loss, index)

    def _update_or_skip(
        self, update: _Update, finite: tf.Tensor, latch_open: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Run the update when the check passed, else keep the failing batch.

        Adds the `cond` (or, with per-layer statistics under XLA on a CPU, a three-way
        `switch_case`, see `_update_if`) around the optimizer's update. Under
        `tf.distribute`, each replica first keeps its own shard of a failing batch,
        then the verdicts are summed across replicas so that all take the same branch.

        Returns:
            (whether the update ran, the first replica that was not finite or -1).
        """
        skip = self._skip_branch(update, latch_open)
        if not replicas.must_cross_replicas():
            ok = tf.logical_and(finite, latch_open)
            taken = self._update_if(ok, update.optimizer, update.float_pairs, update.apply, skip)
            # The statistics read the verdict, not the branch's output, so that they are
            # written beside the update rather than after it (off the step's critical
            # path); only where XLA must see the branch's output used (`keep_branch`).
            return (taken if branches_kept() else ok), tf.constant(-1.0)
        self.replicas = replicas.replica_count()
        self.layout = replicas.layout()
        tf.cond(finite, lambda: tf.constant(False), skip)
        stats = self._variable()

        def update_in_replica(grads, trainable_variables):
            self._update(
                update.optimizer,
                update.float_pairs,
                lambda: update.original_apply(grads, trainable_variables),
            )

        return replicas.update_if_all_finite(
            finite,
            lambda: stats[_TRIPPED] <= 0,
            update_in_replica,
            (update.grads, update.trainable_variables),
        )

    def _skip_branch(self, update: _Update, latch_open: tf.Tensor):
        """The branch taken instead of the update: keeps the first failing batch.

        Adds nothing on the happy path; on the first failing step, copies the batch
        (`BatchStash`) and the step's stateful random draws made so far
        (`RandomDraws`) into variables, for the replay. Later skipped steps keep
        nothing, so that they do not overwrite it before Python has read it.
        """
        scope = update.scope
        drawn = []
        if scope is not None and scope.draws is not None and not tf.executing_eagerly():
            drawn = random_draws.drawing_ops(tf.compat.v1.get_default_graph())
        if scope is None or (scope.stash is None and not drawn):
            return lambda: tf.constant(False)

        def keep_batch():
            kept = [] if scope.stash is None else scope.stash.assign_ops(scope.batch)
            if drawn:
                kept += scope.draws.assign_ops(drawn)
            with tf.control_dependencies(kept):
                return tf.constant(False)

        return lambda: tf.cond(latch_open, keep_batch, lambda: tf.constant(False))

    def _measure(self, update: _Update, check: _Check) -> None:
        """While tracing: the risky ops' headroom and the per-layer statistics.

        Adds one reduction per risky op of the user's (`find_probes`), and in full
        mode the layers' gradient-norm ring every step and their sampled statistics
        every `LayerStats.every` steps (`LayerStats.measure`). Nothing eagerly.
        """
        if tf.executing_eagerly():
            return
        graph = tf.compat.v1.get_default_graph()
        self._measure_headroom(graph)
        if self.layer_stats is not None:
            sparse = {
                id(v)
                for g, v in zip(update.grads, update.variables)
                if isinstance(g, tf.IndexedSlices)
            }
            self.layer_stats.measure(
                graph, [v for _, v in update.float_pairs], check.squares, sparse
            )

    def _record(self, update: _Update, check: _Check, ok, failed_replica) -> None:
        """Write the step's statistics: one vector, read back once per step.

        Adds the zero streaks (from the sums of squares: no pass over the
        gradients) and one `assign` of the latch, the gradient norm and loss
        (unscaled), the longest zero streak, the step that tripped, and the counts
        of skipped and asked-for updates.
        """
        zero_streak = self.zero_streaks.update([v for _, v in update.float_pairs], check.squares)
        # Which step tripped, for steps run several per call (steps_per_execution).
        scope = update.scope
        index = -1.0 if scope is None or scope.step_index is None else scope.step_index
        before = check.before
        newly_tripped = tf.logical_and(tf.logical_not(ok), check.latch_open)
        trip_at = tf.where(newly_tripped, tf.cast(index, tf.float32), before[_TRIP_AT])
        # Which optimizer's update tripped (of an actor's and a critic's, say).
        number = float(self._number_of(update.optimizer))
        trip_by = tf.where(newly_tripped, tf.constant(number), before[_TRIP_BY])
        skipped = before[_SKIPPED] + 1.0 - tf.cast(ok, tf.float32)
        norm, loss = tf.sqrt(check.sum_of_squares), check.loss
        if check.scale is not None:  # the user's loss and gradients, not the scaled ones
            norm, loss = norm / check.scale, loss / check.scale
        self._record_objective(update.optimizer, loss, norm)
        self._variable().assign(
            tf.stack(
                [
                    1.0 - tf.cast(ok, tf.float32),
                    norm,
                    loss,
                    zero_streak,
                    trip_at,
                    tf.constant(1.0 if compiled_with_xla() else 0.0),
                    failed_replica,
                    skipped,
                    before[_UPDATES] + 1.0,
                    trip_by,
                ]
            )
        )

    def _update_if(self, ok, optimizer, float_pairs, apply, skip) -> tf.Tensor:
        """Run the update (`apply`) when `ok`, else `skip`; returns whether it ran.

        The result is `ok` again, as the branch taken: the statistics read it, which
        keeps the update a real conditional under XLA (see `keep_branch`). With
        per-layer statistics on, except under XLA on a GPU (which runs both branches
        of a conditional as selects anyway), the update is traced twice, with and
        without measuring the update norms, as the branches of one three-way
        `switch_case` (skip / update / update and measure): the norms are read from
        the changes the optimizer writes, which XLA would otherwise write out on every
        step instead of fusing them into the weights' update; under XLA a `cond`
        nested in the update would copy every weight and slot per step, and without
        XLA it would end every update with a second branch on the critical path.
        """
        counter = iteration_count.unconditional_counter(optimizer)
        if counter is not None:  # as the plain step counts (see `iteration_count`)
            apply, skip = iteration_count.counted_first(counter, apply, skip)
        sampling = None
        if self.layer_stats is not None and (branches_kept() or not compiled_with_xla()):
            sampling = self.layer_stats.sampling_now()
        if sampling is None:
            return tf.cond(ok, lambda: self._update(optimizer, float_pairs, apply), skip)
        branch = tf.where(ok, tf.where(sampling, 2, 1), 0)
        return tf.switch_case(
            branch,
            [
                skip,
                lambda: self._update(optimizer, float_pairs, apply, measure=False),
                lambda: self._update(optimizer, float_pairs, apply, measure=True),
            ],
        )

    def _update(self, optimizer, float_pairs, apply, measure: bool | None = None) -> tf.Tensor:
        """Run `apply()`, the optimizer's update, marked as guarded; returns True.

        Args:
            measure: whether to measure the layers' update norms (full mode): True
                on a sampled step, False not at all, None behind a `cond` of its own
                on the sampled steps.
        """
        with _guarded_update():
            if self.layer_stats is None or tf.executing_eagerly() or measure is False:
                apply()
            else:
                optimizers = [optimizer, loss_scale.inner_optimizer(optimizer)]
                with self.layer_stats.recording_updates(
                    optimizers, [v for _, v in float_pairs], sampled_only=measure is None
                ):
                    apply()
        return keep_branch(tf.constant(True))

    def _measure_headroom(self, graph) -> None:
        """Add, once per traced graph, the reductions that measure the user's risky ops.

        `tf.function` traces a step again after the trace that created its
        variables, so a site is found again by its ops' names and reused.
        """
        seen = self._probed.setdefault(id(graph), set())
        new = [(probe, value) for probe, value in find_probes(graph) if probe.key not in seen]
        if not new:
            return
        seen.update(probe.key for probe, _ in new)
        keys = tuple(probe.key for probe, _ in new)
        holder = self._sites.get(keys)
        if holder is None:
            try:
                with tf.init_scope():
                    holder = doctor_variable(
                        tf.zeros([len(new)], tf.float32), "gradient_doctor_headroom"
                    )
            except ValueError:  # a retrace may not create variables: go unmeasured
                return
            self._sites[keys] = holder
            self.headroom_sites.append(([probe for probe, _ in new], holder))
        holder.assign(tf.stack([value for _, value in new]))

    def read_headroom(self) -> list[tuple[Probe, float]]:
        """The latest measured values of every risky op (a small host copy per site)."""
        return [
            (probe, value)
            for probes, holder in self.headroom_sites
            for probe, value in zip(probes, holder.numpy())
        ]


def in_guarded_update() -> bool:
    """True while a guarded optimizer update is being run or traced on this thread."""
    return getattr(_updating, "depth", 0) > 0


@contextmanager
def _guarded_update():
    _updating.depth = getattr(_updating, "depth", 0) + 1
    try:
        yield
    finally:
        _updating.depth -= 1


def _build_optimizer(optimizer, grads, trainable_variables) -> None:
    """Create the optimizer's slots now: a `cond` branch may not create variables."""
    if getattr(optimizer, "built", True) or trainable_variables is None:
        return
    with keras_backend.name_scope(  # the same scope Keras builds optimizers in
        optimizer.name, caller=optimizer
    ):
        optimizer.build(list(trainable_variables))
    optimizer.built = True


def _scalar_loss(loss) -> tf.Tensor:
    """The step's loss as one float32 scalar; 0 when unknown or from another graph."""
    if loss is None or not isinstance(loss, tf.Tensor | tf.Variable) or not loss.dtype.is_floating:
        return tf.constant(0.0)
    if (
        not tf.executing_eagerly()
        and getattr(loss, "graph", None) is not tf.compat.v1.get_default_graph()
    ):
        return tf.constant(0.0)
    return tf.reduce_mean(tf.cast(loss, tf.float32))


def _dropped_before_the_update(given_none, variables) -> list:
    """The trainable variables that the step's `tape.gradient` call gave None and that
    the user's code then left out of this update (`[(g, v) for g, v in zip(grads, vs) if g
    is not None]`): they are as disconnected as if handed over with a None gradient."""
    updated = {id(variable) for variable in variables}
    return [
        source
        for source in given_none
        if getattr(source, "trainable", False) is True  # a variable (a tensor has no flag)
        and tf.as_dtype(source.dtype).is_floating
        and id(source) not in updated
    ]
