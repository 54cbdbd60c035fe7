"""The smallest usable epsilon of each floating dtype, so that no bound rounds away."""

from __future__ import annotations

import tensorflow as tf

from gradient_doctor.core.dtype_limits import dtype_limits


def smallest_normal(dtype: tf.DType) -> float:
    """The smallest positive normal number of `dtype` (float16: 6.1e-5)."""
    return dtype_limits(dtype.name).smallest_normal


def machine_epsilon(dtype: tf.DType) -> float:
    """The distance from 1 to the next larger number of `dtype` (float16: 2**-10).

    For a binary format with `m` mantissa bits and largest exponent `e`, the largest
    value is `(2 - 2**-m) * 2**(e-1)` and the smallest normal `2**(2-e)`, so their
    product over 2 is `2 - 2**-m`: epsilon follows from the two limits exactly.
    """
    limits = dtype_limits(dtype.name)
    return 2.0 - limits.max * limits.smallest_normal / 2.0


def at_least(eps: float | None, floor: float) -> float:
    """`eps`, raised to `floor` when smaller (None means `floor` itself)."""
    return floor if eps is None else max(eps, floor)
