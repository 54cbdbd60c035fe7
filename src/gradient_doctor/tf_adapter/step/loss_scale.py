"""Loss scaling (mixed precision): the scale, and the non-finite gradients it handles itself.

Keras wraps the optimizer in a `LossScaleOptimizer` under the "mixed_float16"
policy. Its `train_step` takes the gradient of the scaled loss, so the guard sees
scaled gradients; on a step whose gradients overflow, the optimizer skips the update
and halves the scale by itself. Those steps are normal and the guard lets them
through untouched, until the scale has fallen to the collapse mark
(`COLLAPSED_LOSS_SCALE`): from there on an overflow is not the scale's doing.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from gradient_doctor.core.knowledge.rules.loss_scale_collapse import COLLAPSED_LOSS_SCALE


def is_dynamic(optimizer) -> bool:
    """True for a dynamic loss-scaling optimizer (it skips overflowing steps itself)."""
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def inner_optimizer(optimizer):
    """The optimizer that updates the weights: the wrapped one of a loss-scaling optimizer."""
    return optimizer.inner_optimizer if is_dynamic(optimizer) else optimizer


def scale_tensor(optimizer) -> tf.Tensor | None:
    """The scale the step's loss was multiplied by, as a float32 tensor; None when unscaled.

    A built `LossScaleOptimizer`'s dynamic scale, or a plain optimizer's fixed
    `loss_scale_factor` (Keras's `train_step` multiplies the loss by either).
    Read before the update, which may change it.
    """
    if is_dynamic(optimizer):
        scale = getattr(optimizer, "dynamic_scale", None)  # made when the optimizer is built
        return None if scale is None else tf.cast(tf.convert_to_tensor(scale), tf.float32)
    factor = getattr(optimizer, "loss_scale_factor", None)
    return None if factor is None else tf.constant(float(factor), tf.float32)


def current_scale(optimizer) -> float | None:
    """The dynamic loss scale now, for the report; None without dynamic loss scaling."""
    if not is_dynamic(optimizer) or getattr(optimizer, "dynamic_scale", None) is None:
        return None
    return float(tf.convert_to_tensor(optimizer.dynamic_scale).numpy())


def handles(grads_finite: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
    """True when the gradients are finite, or their overflow is the scale's to handle.

    Args:
        grads_finite: a boolean scalar, all the (scaled) gradients are finite.
        scale: the dynamic loss scale the gradients were computed with.
    """
    return tf.logical_or(grads_finite, scale > COLLAPSED_LOSS_SCALE)
