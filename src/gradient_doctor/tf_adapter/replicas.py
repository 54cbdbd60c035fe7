"""The guard's skip under a `tf.distribute` strategy: every replica agrees, and says who failed.

Inside a replica the optimizer's update crosses to all replicas (`merge_call`: the
gradient all-reduce), which TensorFlow does not allow inside a `cond` branch made in a
replica. So, as Keras's `LossScaleOptimizer` does, the decision is taken in
cross-replica context: each replica says whether its own gradients and loss were
finite; the verdicts of all replicas (of all workers) are summed, the update runs on
every replica only when all were finite, and the first replica that was not is
recorded (the gradient all-reduce would have spread its values to all).
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf


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
