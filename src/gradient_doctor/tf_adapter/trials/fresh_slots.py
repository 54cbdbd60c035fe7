"""What an optimizer's variables hold when it is freshly built: where a trial starts them.

A snapshot taken before the first step holds the weights, but not the optimizer's
slots, which Keras makes when the optimizer is built (at the first step). A trial from
that snapshot starts each slot as a fresh optimizer would. That is not always zero: a
loss-scaling optimizer's `dynamic_scale` starts at its `initial_scale` (32768), Adagrad's
accumulators at `initial_accumulator_value` (0.1); zero there would divide the loss
scale's gradients by 0, or make Adagrad's first step a division by sqrt(0).

The values come from a clone built the public way (`from_config`, `build`): Keras makes
the variables of an optimizer of one class and configuration in the same order.
"""

from __future__ import annotations

import tensorflow as tf

from gradient_doctor.tf_adapter._tf_internals import trainable_variables_of


def fresh_values(optimizer) -> list[tuple[tf.Variable, tf.Tensor]]:
    """Each of `optimizer`'s variables with the value a freshly built copy gives it.

    Empty when the optimizer cannot be cloned or its clone's variables do not line up
    with its own (then the caller's fallback, zeros, stands).
    """
    built_for = trainable_variables_of(optimizer)
    if not built_for:
        return []
    try:
        clone = type(optimizer).from_config(optimizer.get_config())
        clone.build(built_for)
    except Exception:  # noqa: BLE001 - a custom optimizer may not round-trip its config
        return []
    own, fresh = list(optimizer.variables), list(clone.variables)
    if len(own) != len(fresh) or any(
        tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype for a, b in zip(own, fresh)
    ):
        return []
    return [(variable, tf.identity(start)) for variable, start in zip(own, fresh)]


def start_values(optimizers, held: set[int]) -> list[tuple[tf.Variable, tf.Tensor]]:
    """The start value of every variable of `optimizers` that a snapshot does not hold.

    Args:
        optimizers: the run's optimizers.
        held: ids of the variables (or their inner values) the snapshot holds.

    Returns:
        (variable, value): a fresh optimizer's value where known, else zeros.
    """

    def is_held(variable) -> bool:
        return id(variable) in held or id(getattr(variable, "value", variable)) in held

    starts = []
    for optimizer in optimizers:
        missing = [v for v in optimizer.variables if not is_held(v)]
        if not missing:
            continue
        known = {id(variable): value for variable, value in fresh_values(optimizer)}
        starts.extend(
            (variable, known.get(id(variable), tf.zeros_like(variable))) for variable in missing
        )
    return starts
