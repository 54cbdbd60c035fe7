"""The guard's skip under a `tf.distribute` strategy: every replica agrees, and says who failed.

Inside a replica the optimizer's update crosses to all replicas (`merge_call`: the
gradient all-reduce), which TensorFlow does not allow inside a `cond` branch made in a
replica. So, as Keras's `LossScaleOptimizer` does, the decision is taken in
cross-replica context: each replica says whether its own gradients and loss were
finite; the verdicts of all replicas (of all workers) are summed, the update runs on
every replica only when all were finite, and the first replica that was not is
recorded (the gradient all-reduce would have spread its values to all).

Who failed is said as a replica and, across workers, as the task that ran it
(`Layout`); what that replica kept of its step (its shard, its random draws) is sent
from that task to every other one (`replica_copies`), so that every worker replays
the same shard and reports the same op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tensorflow as tf

from gradient_doctor.tf_adapter.step.doctor_variables import replica_values

# Longest a worker waits for the others to send a failing replica's copies: a worker
# that never comes makes the others give up (a collective timeout), not hang.
SHARE_TIMEOUT_S = 60
# The most dimensions a sent tensor may have (its shape is sent in a fixed-size row).
_MAX_RANK = 8


def must_cross_replicas() -> bool:
    """True inside a replica of a strategy whose updates need a `merge_call` (Mirrored)."""
    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return False
    return not tf.__internal__.distribute.strategy_supports_no_merge_call()


def update_if_all_finite(
    finite_here: tf.Tensor,
    latch_open: Callable[[], tf.Tensor],
    update: Callable[..., object],
    update_args: tuple,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Run `update(*update_args)` on every replica only when every replica was finite.

    The verdicts are summed across all replicas, of every worker (one all-reduce of a
    vector as long as the replica count), so that every worker takes the same branch:
    a worker that skipped while another updated would leave the update's own
    all-reduce waiting forever.

    Args:
        finite_here: this replica's verdict (a bool scalar).
        latch_open: returns the guard's latch (True while open), read in
            cross-replica context.
        update: the optimizer's update, called in each replica.
        update_args: its arguments (per-replica values, e.g. gradients).

    Returns:
        (whether the update ran, the index of the first replica that was not
        finite as float32, or -1), the same in every replica.
    """
    context = tf.distribute.get_replica_context()
    count = context.num_replicas_in_sync
    # This replica's place in a vector of all replicas: 1 where it was not finite.
    mine = tf.one_hot(context.replica_id_in_sync_group, count, dtype=tf.float32)
    bad_here = mine * (1.0 - tf.cast(finite_here, tf.float32))

    def across(distribution, bad_here, *update_args):
        bad = distribution.reduce(tf.distribute.ReduceOp.SUM, bad_here, axis=None) > 0
        ok = tf.logical_and(tf.logical_not(tf.reduce_any(bad)), latch_open())

        def run_update():
            distribution.extended.call_for_each_replica(update, args=update_args)
            return tf.constant(True)

        tf.cond(ok, run_update, lambda: tf.constant(False))
        first_bad = tf.where(
            tf.reduce_any(bad), tf.cast(tf.argmax(tf.cast(bad, tf.int32)), tf.float32), -1.0
        )
        return ok, first_bad

    return context.merge_call(across, args=(bad_here, *update_args))


def replica_count() -> int:
    """How many replicas the current strategy runs (1 without one)."""
    return tf.distribute.get_strategy().num_replicas_in_sync


@dataclass(frozen=True)
class Layout:
    """Where a strategy's replicas run: their count, and the cluster's tasks in their order.

    Attributes:
        replicas: how many replicas run each step, on all workers together.
        tasks: the workers of a multi-worker cluster as (task type, task index), in
            the order of their replicas (MultiWorkerMirroredStrategy numbers the
            chief's replicas first, then worker 0's, and so on); empty on one machine.
        this_task: the task of this process, or None on one machine.
    """

    replicas: int
    tasks: tuple[tuple[str, int], ...] = ()
    this_task: tuple[str, int] | None = None

    def task_of(self, replica: int) -> tuple[str, int] | None:
        """The task whose process ran `replica` (an index in the sync group), or None."""
        if not self.tasks or not 0 <= replica < self.replicas:
            return None
        return self.tasks[replica // max(self.replicas // len(self.tasks), 1)]


def layout(strategy=None) -> Layout:
    """The layout of `strategy` (by default the current one)."""
    strategy = strategy or tf.distribute.get_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    tasks = tuple(
        (kind, index) for kind in ("chief", "worker") for index in range(len(spec.get(kind, ())))
    )
    if len(tasks) < 2:
        return Layout(strategy.num_replicas_in_sync)
    return Layout(strategy.num_replicas_in_sync, tasks, (resolver.task_type, resolver.task_id))


def task_name(task: tuple[str, int]) -> str:
    """A task as TensorFlow's device names write it: "worker:1"."""
    return f"{task[0]}:{task[1]}"


def worker_note(replica: int, where: Layout) -> str:
    """Say on which task `replica` ran, that every task replayed its shard, and who writes."""
    task = where.task_of(replica)
    if task is None or where.this_task is None:
        return ""
    return (
        f"That replica ran on task {task_name(task)} (worker {where.tasks.index(task)} of "
        f"{len(where.tasks)}); its shard of the batch was sent to every worker and replayed "
        f"there, so each worker's report names the same op. This report is task "
        f"{task_name(where.this_task)}'s."
    )


def local_replica_ids(strategy) -> tuple[int, ...]:
    """The sync-group indices of the replicas that run in this process, in local order."""
    ids = strategy.experimental_distribute_values_from_function(
        lambda context: context.replica_id_in_sync_group
    )
    return tuple(int(i) for i in strategy.experimental_local_results(ids))


def replica_copies(variables: list, replica: int) -> list | None:
    """The copy of each per-replica variable that `replica` holds, as tensors in this process.

    On one machine this reads the local copies (the first replica's when `replica`
    is not one of them). Across workers the copies are sent from the worker that
    ran `replica` to every other one, exactly (their bytes are summed with zeros):
    every worker must then call this at the same point with the same variables,
    which a failing step guarantees (every worker skipped it, see
    `update_if_all_finite`). A worker that does not come within `SHARE_TIMEOUT_S`
    makes the others give up (TensorFlow's collective timeout) instead of waiting
    forever.

    Returns:
        The tensors, or None when they cannot be sent (a dtype that is not numeric,
        a tensor of more than `_MAX_RANK` dimensions).
    """
    strategy = getattr(variables[0], "distribute_strategy", None)
    if strategy is None:
        return list(variables)
    ids = local_replica_ids(strategy)
    if len(layout(strategy).tasks) < 2:
        local = ids.index(replica) if replica in ids else 0
        return [replica_values(v)[local] for v in variables]
    if not all(_sendable(v.dtype) for v in variables):
        return None  # the same on every worker: none of them sends anything
    held = [replica_values(v)[ids.index(replica)] for v in variables] if replica in ids else None
    # First the shapes (rank, then the dimensions), so that every worker can take part.
    rows = (
        [_shape_row(t) for t in held]
        if held
        else [tf.zeros([_MAX_RANK + 1], tf.int64)] * len(variables)
    )
    rows = [row.numpy() for row in _sum_from(strategy, replica, rows)]
    if any(row[0] < 0 for row in rows):
        return None
    shapes = [[int(d) for d in row[1 : 1 + row[0]]] for row in rows]
    sizes = [v.dtype.size for v in variables]
    if held:
        sent = [_as_bytes(t) for t in held]
    else:
        sent = [tf.zeros([*shape, size], tf.int32) for shape, size in zip(shapes, sizes)]
    received = _sum_from(strategy, replica, sent)
    return [_from_bytes(b, v.dtype) for b, v in zip(received, variables)]


def _sendable(dtype) -> bool:
    return dtype.is_bool or dtype.is_floating or dtype.is_integer or dtype.is_complex


def _shape_row(tensor) -> tf.Tensor:
    """[rank, dimensions..., 0...] as int64 of fixed length; rank -1 when too many."""
    shape = tf.shape(tensor, out_type=tf.int64)
    rank = int(shape.shape[0])
    if rank > _MAX_RANK:
        return tf.concat([[-1], tf.zeros([_MAX_RANK], tf.int64)], 0)
    return tf.concat([[rank], shape, tf.zeros([_MAX_RANK - rank], tf.int64)], 0)


def _as_bytes(tensor) -> tf.Tensor:
    """The tensor's bytes as int32 (a last axis of its item size), for an exact sum."""
    if tensor.dtype.is_bool:
        raw = tf.cast(tensor, tf.uint8)
    else:
        raw = tf.bitcast(tensor, tf.uint8)
    if tensor.dtype.size == 1:
        raw = raw[..., None]
    return tf.cast(raw, tf.int32)


def _from_bytes(summed, dtype) -> tf.Tensor:
    raw = tf.cast(summed, tf.uint8)
    if dtype.size == 1:
        raw = raw[..., 0]
        return tf.cast(raw, dtype) if dtype.is_bool else tf.bitcast(raw, dtype)
    return tf.bitcast(raw, dtype)


def _sum_from(strategy, replica: int, tensors: list) -> list:
    """Sum over all replicas of `tensors` on `replica` and zeros like them elsewhere.

    Every replica of every worker must pass tensors of the same shapes (the zeros
    of the workers that do not hold `replica` stand for theirs).
    """
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=SHARE_TIMEOUT_S)
    pairs = []
    for tensor in tensors:
        value = strategy.experimental_distribute_values_from_function(
            lambda context, t=tensor: (
                t if context.replica_id_in_sync_group == replica else tf.zeros_like(t)
            )
        )
        pairs.append((value, value))
    summed = strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM, pairs, options=options)
    return [strategy.experimental_local_results(s)[0] for s in summed]
