"""Early checks of the safe ops' arguments, with Keras-style error messages."""

from __future__ import annotations

import math

import tensorflow as tf

FLOATING_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)

_FLOATING_NAMES = ", ".join(dtype.name for dtype in FLOATING_DTYPES)


def floating_tensor(value, name: str) -> tf.Tensor:
    """Convert `value` to a tensor and check that its dtype is a real floating one.

    Python numbers and lists become float32, as in `tf.constant(value, tf.float32)`.

    Args:
        value: tensor-like, the argument to check.
        name: str, the argument's name, used in the error message.

    Returns:
        The argument as a `tf.Tensor`, its dtype unchanged.

    Raises:
        TypeError: the dtype is not float16, bfloat16, float32 or float64.
    """
    tensor = tf.convert_to_tensor(value, dtype_hint=tf.float32)
    if tensor.dtype not in FLOATING_DTYPES:
        raise TypeError(
            f"`{name}` must be a floating-point tensor ({_FLOATING_NAMES}). "
            f"Received: {name}.dtype={tensor.dtype.name}. "
            f"Cast it first, e.g. `tf.cast({name}, tf.float32)`."
        )
    return tensor


def is_number(value) -> bool:
    """Whether `value` is a finite real Python number (booleans excluded)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_positive(value, name: str) -> None:
    """Raise unless `value` is a finite Python number above 0.

    Raises:
        ValueError: `value` is not a positive float.
    """
    if not (is_number(value) and value > 0):
        raise ValueError(f"`{name}` must be a positive float. Received: {name}={value!r}")


def check_bool(value, name: str) -> None:
    """Raise unless `value` is a Python bool.

    Raises:
        ValueError: `value` is not `True` or `False`.
    """
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be a bool. Received: {name}={value!r}")


def check_int_axis(axis) -> None:
    """Raise unless `axis` is a Python int, as `tf.nn.softmax` requires.

    Raises:
        ValueError: `axis` is not an int.
    """
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ValueError(f"`axis` must be an int, e.g. -1. Received: axis={axis!r}")
