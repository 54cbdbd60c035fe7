"""`safe_acos` and `safe_asin`: inverse sines and cosines with finite gradients at +-1."""

from __future__ import annotations

import tensorflow as tf

from gradient_doctor.ops._arguments import floating_tensor, is_number
from gradient_doctor.ops._precision import at_least, machine_epsilon


def safe_acos(x, eps: float | None = None) -> tf.Tensor:
    """Return `acos(clip(x, -1 + eps, 1 - eps))`, with finite gradients at exactly +-1.

    `tf.acos`'s gradient `-1 / sqrt(1 - x**2)` is infinite at +-1, where the
    cosine of the angle between two identical (or opposite) unit vectors sits,
    and a cosine rounded just past 1 gives a NaN value. Clipping into the open
    interval keeps both finite; outside it the gradient is 0. The price is a
    bias of about `sqrt(2 * eps)` radians at +-1 only.

    Args:
        x: floating tensor (float16, bfloat16, float32 or float64).
        eps: float in (0, 1), the margin kept from +-1. A value below the dtype's
            machine epsilon (for which `1 - eps` would round to 1) is raised to it.
            Defaults to None, the machine epsilon (float32: 1.2e-7, float16: 9.8e-4).

    Returns:
        A tensor of `x`'s shape and dtype, in radians.

    Raises:
        TypeError: `x` is not a floating tensor.
        ValueError: `eps` is not a float in (0, 1).

    Example:
        >>> x = tf.constant([1.0, 0.0])
        >>> with tf.GradientTape() as tape:
        ...     tape.watch(x)
        ...     y = safe_acos(x)
        >>> tape.gradient(y, x).numpy()
        array([ 0., -1.], dtype=float32)
    """
    return tf.acos(_clip_inside_unit(x, eps))


def safe_asin(x, eps: float | None = None) -> tf.Tensor:
    """Return `asin(clip(x, -1 + eps, 1 - eps))`, with finite gradients at exactly +-1.

    The same clipping as `safe_acos`, for `tf.asin`, whose gradient
    `1 / sqrt(1 - x**2)` is infinite at +-1.

    Args:
        x: floating tensor (float16, bfloat16, float32 or float64).
        eps: float in (0, 1), the margin kept from +-1, raised to the dtype's
            machine epsilon when smaller. Defaults to None, the machine epsilon.

    Returns:
        A tensor of `x`'s shape and dtype, in radians.

    Raises:
        TypeError: `x` is not a floating tensor.
        ValueError: `eps` is not a float in (0, 1).

    Example:
        >>> x = tf.constant([-1.0, 0.0])
        >>> with tf.GradientTape() as tape:
        ...     tape.watch(x)
        ...     y = safe_asin(x)
        >>> tape.gradient(y, x).numpy()
        array([0., 1.], dtype=float32)
    """
    return tf.asin(_clip_inside_unit(x, eps))


def _clip_inside_unit(x, eps: float | None) -> tf.Tensor:
    """Check the arguments and clip `x` into `[-1 + eps, 1 - eps]`."""
    if eps is not None and not (is_number(eps) and 0 < eps < 1):
        raise ValueError(f"`eps` must be a float in (0, 1). Received: eps={eps!r}")
    x = floating_tensor(x, "x")
    bound = 1.0 - at_least(eps, machine_epsilon(x.dtype))
    return tf.clip_by_value(x, tf.constant(-bound, x.dtype), tf.constant(bound, x.dtype))
