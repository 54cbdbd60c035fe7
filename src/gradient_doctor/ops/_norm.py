"""`safe_norm`: the Euclidean norm, with gradient 0 (not NaN) at a zero vector."""

from __future__ import annotations

import tensorflow as tf

from gradient_doctor.ops._arguments import check_bool, floating_tensor
from gradient_doctor.ops._reduction import check_axes, drop_reduced_axes
from gradient_doctor.ops._where import safe_where


def safe_norm(x, axis=None, keepdims: bool = False) -> tf.Tensor:
    """Return the Euclidean norm of `x` over `axis`, with finite gradients everywhere.

    `tf.norm`'s gradient `x / ||x||` is `0/0 = NaN` at a zero vector, which is where
    a WGAN-GP penalty or an `x / ||x||` normalisation sooner or later lands. Adding
    an epsilon (`sqrt(sum(x**2) + eps)`) would fix the gradient but bias every value
    and move the minimum; instead the norm is taken through `safe_where` (the
    double-where pattern): a zero vector gives the value 0 and the gradient 0 (the
    subgradient), and every other vector its exact norm and gradient. The function
    is built from differentiable ops only (no `tf.custom_gradient`), so
    second-order gradients, as in a gradient penalty, are finite too.

    The squares are summed after dividing by the largest magnitude, so the value
    does not overflow where `tf.norm` does (float16 entries from 256 up) nor
    underflow to 0 for tiny vectors. Away from zero the value equals `tf.norm`'s
    up to rounding.

    Args:
        x: floating tensor (float16, bfloat16, float32 or float64).
        axis: None, int, or tuple of ints: the axes to reduce (a pair gives the
            Frobenius norm, as `tf.norm` does). Defaults to None, all axes.
        keepdims: bool, keep the reduced axes with size 1. Defaults to False.

    Returns:
        A tensor of `x`'s dtype, reduced over `axis`.

    Raises:
        TypeError: `x` is not a floating tensor.
        ValueError: `axis` or `keepdims` is not of a valid type.

    Example:
        >>> x = tf.constant([[0.0, 0.0], [3.0, 4.0]])
        >>> with tf.GradientTape() as tape:
        ...     tape.watch(x)
        ...     y = safe_norm(x, axis=-1)
        >>> y.numpy(), tape.gradient(y, x).numpy()
        (array([0., 5.], dtype=float32), array([[0. , 0. ],
               [0.6, 0.8]], dtype=float32))
    """
    check_axes(axis)
    check_bool(keepdims, "keepdims")
    x = floating_tensor(x, "x")
    # `!=` rather than `> 0` on the largest magnitude, so that a NaN is not taken
    # for a zero vector and hidden.
    nonzero = tf.reduce_any(tf.not_equal(x, 0), axis=axis, keepdims=True)
    norm = safe_where(nonzero, lambda v: _scaled_norm(v, axis), x, fallback=0.0)
    return norm if keepdims else drop_reduced_axes(norm, axis)


def _scaled_norm(x: tf.Tensor, axis) -> tf.Tensor:
    """The norm of vectors that are not zero, as `largest * ||x / largest||`.

    The norm is homogeneous, so holding `largest` constant (`stop_gradient`) leaves
    the gradients of every order exact.
    """
    largest = tf.stop_gradient(tf.reduce_max(tf.abs(x), axis=axis, keepdims=True))
    # An inf or NaN entry is passed through unscaled, so the value is inf or NaN
    # as `tf.norm`'s would be.
    scale = tf.where(tf.math.is_finite(largest), largest, tf.ones_like(largest))
    return scale * tf.sqrt(tf.reduce_sum(tf.square(x / scale), axis=axis, keepdims=True))
