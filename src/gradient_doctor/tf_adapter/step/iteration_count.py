"""The optimizer's step counter moves as in a plain run, even on the call that found no batch.

Keras's `Optimizer.apply` ends with `iterations.assign_add(1)`, which depends on no
gradient. In a compiled `fit` step over a dataset of unknown length (`filter`, a
generator), the call after the last batch fails in `get_next` with `OutOfRange`, yet
that increment, needing nothing from the batch, still runs: each epoch ends with the
counter one past the updates (33 after 30 updates in 3 epochs). Adam's bias correction
and every learning-rate schedule read it, so the next epoch's updates depend on it.

The guard's `cond` makes the whole update wait for the batch, so on that call nothing
would run, and from the second epoch on a watched run would train differently. So the
counter is moved before the `cond`, as the plain step moves it, and each branch takes
that back before the optimizer's own update adds it again (which then reads the value a
plain step reads): +1 - 1 + 1 on an update, +1 - 1 on a skipped one, +1 on the call
whose batch never came, as in the plain run.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf

from gradient_doctor.tf_adapter._tf_internals import iteration_counter


def unconditional_counter(optimizer):
    """The optimizer's update counter when its update adds to it whatever the gradients
    (Keras's own `Optimizer.apply`), in a traced step; else None (a loss-scaling or
    multi-optimizer wrapper counts inside its own conditional; eagerly, no step runs
    without its batch)."""
    if tf.executing_eagerly():
        return None
    if getattr(type(optimizer), "apply", None) is not keras.optimizers.Optimizer.apply:
        return None
    return iteration_counter(optimizer)


def counted_first(counter, apply: Callable, skip: Callable) -> tuple[Callable, Callable]:
    """Add 1 to `counter` now (before the `cond`); return the branches, each taking it
    back first."""
    counter.assign_add(1)

    def taken_back(branch: Callable) -> Callable:
        def run():
            with tf.control_dependencies([counter.assign_sub(1)]):
                return branch()

        return run

    return taken_back(apply), taken_back(skip)
