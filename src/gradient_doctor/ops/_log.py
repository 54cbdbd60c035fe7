"""`safe_log`: a logarithm floored at a small epsilon, finite in value and gradient."""

from __future__ import annotations

import tensorflow as tf

from gradient_doctor.ops._arguments import check_positive, floating_tensor
from gradient_doctor.ops._precision import at_least, smallest_normal


def safe_log(x, eps: float | None = None) -> tf.Tensor:
    """Return `log(max(x, eps))`, finite in value and gradient for every `x >= 0`.

    `tf.math.log(0)` is `-inf` and its gradient `1/x` infinite; a negative input
    gives NaN. Below `eps` the value here is the constant `log(eps)` and the
    gradient 0; at and above it the value and gradient are exactly `log(x)` and `1/x`.
    The default `eps` is the dtype's smallest normal number, so no value a normal
    number can hold is biased.

    Args:
        x: floating tensor (float16, bfloat16, float32 or float64).
        eps: float, the floor. A value below the dtype's smallest normal number
            (which would round to 0 in float16) is raised to it. Defaults to None,
            the dtype's smallest normal number (float32: 1.2e-38, float16: 6.1e-5).

    Returns:
        A tensor of `x`'s shape and dtype.

    Raises:
        TypeError: `x` is not a floating tensor.
        ValueError: `eps` is not a positive float.

    Example:
        >>> x = tf.constant([0.0, 1.0])
        >>> with tf.GradientTape() as tape:
        ...     tape.watch(x)
        ...     y = safe_log(x, eps=1e-6)
        >>> y.numpy(), tape.gradient(y, x).numpy()
        (array([-13.815511,   0.      ], dtype=float32), array([0., 1.], dtype=float32))
    """
    if eps is not None:
        check_positive(eps, "eps")
    x = floating_tensor(x, "x")
    floor = at_least(eps, smallest_normal(x.dtype))
    return tf.math.log(tf.maximum(x, tf.constant(floor, x.dtype)))
