"""Axis handling shared by the ops that reduce over axes (norm, logsumexp)."""

from __future__ import annotations

import tensorflow as tf


def check_axes(axis) -> None:
    """Raise unless `axis` is None, an int, or a non-empty tuple or list of ints.

    Raises:
        ValueError: `axis` has another type, or is an empty sequence.
    """

    def is_int(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    valid = (
        axis is None
        or is_int(axis)
        or (isinstance(axis, tuple | list) and len(axis) > 0 and all(map(is_int, axis)))
    )
    if not valid:
        raise ValueError(
            "`axis` must be None (all axes), an int, or a non-empty tuple of ints. "
            f"Received: axis={axis!r}"
        )


def drop_reduced_axes(tensor: tf.Tensor, axis) -> tf.Tensor:
    """Remove the size-1 axes that a `keepdims=True` reduction over `axis` left.

    Args:
        tensor: tf.Tensor, the result of a reduction with `keepdims=True`.
        axis: None, int or sequence of ints, the reduced axes (None: all of them).

    Returns:
        The tensor that the same reduction with `keepdims=False` would have given.
    """
    return tf.squeeze(tensor, axis=None if axis is None else axis)
