"""`safe_where`: the double-where pattern, so the branch not taken cannot poison gradients."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf


def safe_where(
    condition,
    fn: Callable[[tf.Tensor], tf.Tensor],
    x,
    fallback=0.0,
    *,
    safe_value=1.0,
) -> tf.Tensor:
    """Return `fn(x)` where `condition` holds and `fallback` elsewhere, with finite gradients.

    `tf.where(condition, fn(x), fallback)` has the right value but not the right
    gradient: `fn` still runs on the entries where `condition` is False, and if its
    gradient there is infinite (log, pow with p < 1, 1/x at 0), `0 * inf` makes the
    gradient NaN although the branch was never taken. This function computes

        tf.where(condition, fn(tf.where(condition, x, safe_value)), fallback)

    so `fn` only ever sees `x` where its result is used and `safe_value` elsewhere.

    Args:
        condition: bool tensor, where to use `fn(x)`; broadcastable with `x`.
        fn: callable taking one tensor (shaped like `tf.where(condition, x, ...)`)
            and returning a tensor broadcastable with `condition`. Other tensors
            may enter it through a closure, as long as they are finite.
        x: tensor, the input to protect.
        fallback: tensor or float, the result where `condition` is False; it receives
            the gradient there. Defaults to 0.0.
        safe_value: tensor or float, what `fn` receives instead of `x` where
            `condition` is False. The gradient with respect to `x` is 0 there
            whatever it is, but `fn` and its gradient must be finite at it, or the
            NaN reaches the tensors `fn` closes over or mixes entries with (a
            reduction, a matmul): e.g. 1.0 for a divisor, 0.0 for `tf.acos`.
            Defaults to 1.0.

    Returns:
        A tensor of `fn`'s dtype; its gradient with respect to `x` is 0 wherever
        `condition` is False.

    Raises:
        TypeError: `fn` is not callable, or `condition` is not a bool tensor.

    Example:
        >>> x = tf.constant([0.0, 2.0])
        >>> with tf.GradientTape() as tape:
        ...     tape.watch(x)
        ...     y = safe_where(x > 0, tf.math.log, x, fallback=0.0)
        >>> y.numpy(), tape.gradient(y, x).numpy()
        (array([0.       , 0.6931472], dtype=float32), array([0. , 0.5], dtype=float32))
    """
    if not callable(fn):
        raise TypeError(
            f"`fn` must be a callable taking one tensor, e.g. `tf.math.log`. Received: fn={fn!r}"
        )
    condition = tf.convert_to_tensor(condition)
    if condition.dtype != tf.bool:
        raise TypeError(
            "`condition` must be a bool tensor, e.g. `x > 0`. "
            f"Received: condition.dtype={condition.dtype.name}"
        )
    x = tf.convert_to_tensor(x, dtype_hint=tf.float32)
    guarded = tf.where(condition, x, tf.cast(safe_value, x.dtype))
    result = fn(guarded)
    return tf.where(condition, result, tf.cast(fallback, result.dtype))
