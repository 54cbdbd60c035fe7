"""`safe_div`: division that returns a fallback where the divisor is 0, gradient included."""

from __future__ import annotations

import tensorflow as tf

from gradient_doctor.ops._arguments import floating_tensor
from gradient_doctor.ops._where import safe_where


def safe_div(x, y, fallback=0.0) -> tf.Tensor:
    """Return `x / y` where `y != 0` and `fallback` where `y == 0`, with finite gradients.

    `x / y` at `y == 0` is inf or NaN, and so are its gradients with respect to
    both `x` and `y`, even inside `tf.where(y != 0, x / y, 0)`. Here the division
    goes through `safe_where` (the double-where pattern): the divisor is replaced
    by 1 where it is 0 before dividing, so the gradients there are exactly 0.
    Only an exact zero is replaced: no epsilon biases the other quotients, and a
    quotient that overflows the dtype (a tiny `y`) is still inf.

    Args:
        x: floating tensor, the dividend.
        y: floating tensor of `x`'s dtype, the divisor; broadcastable with `x`.
        fallback: tensor or float, the result where `y == 0`; a tensor receives the
            gradient there. Defaults to 0.0 (as `tf.math.divide_no_nan`).

    Returns:
        A tensor of the broadcast shape of `x` and `y`, in their dtype.

    Raises:
        TypeError: `x` or `y` is not a floating tensor, or their dtypes differ.

    Example:
        >>> x, y = tf.constant([1.0, 1.0]), tf.constant([0.0, 4.0])
        >>> with tf.GradientTape() as tape:
        ...     tape.watch(y)
        ...     z = safe_div(x, y, fallback=0.0)
        >>> z.numpy(), tape.gradient(z, y).numpy()
        (array([0.  , 0.25], dtype=float32), array([ 0.    , -0.0625], dtype=float32))
    """
    x = floating_tensor(x, "x")
    y = floating_tensor(y, "y")
    if x.dtype != y.dtype:
        raise TypeError(
            "`x` and `y` must have the same dtype. "
            f"Received: x.dtype={x.dtype.name}, y.dtype={y.dtype.name}. "
            "Cast one of them with `tf.cast`."
        )
    return safe_where(tf.not_equal(y, 0), lambda divisor: x / divisor, y, fallback)
