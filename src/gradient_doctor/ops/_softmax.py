"""`stable_softmax`, `stable_logsumexp`: exp-normalisation shifted by the max, never overflowing."""

from __future__ import annotations

import tensorflow as tf

from gradient_doctor.ops._arguments import check_bool, check_int_axis, floating_tensor
from gradient_doctor.ops._division import safe_div
from gradient_doctor.ops._reduction import check_axes, drop_reduced_axes


def stable_softmax(logits, axis: int = -1) -> tf.Tensor:
    """Return `exp(logits) / sum(exp(logits))` over `axis`, computed without overflow.

    The hand-written `tf.exp(x) / tf.reduce_sum(tf.exp(x))` overflows as soon as a
    logit passes the dtype's exp limit (88.7 in float32, 11.1 in float16) and
    returns `inf / inf = NaN`. Softmax is unchanged by subtracting a constant, so
    the logits are shifted by their maximum first: every exponent is then <= 0.
    The maximum is held constant (`stop_gradient`), which leaves the gradient exact.

    Entries of `-inf` (attention masks) give exact zeros. A row whose entries are
    all `-inf` gives all zeros, with gradient 0, where `tf.nn.softmax` gives NaN.

    Args:
        logits: floating tensor (float16, bfloat16, float32 or float64).
        axis: int, the axis to normalise over. Defaults to -1.

    Returns:
        A tensor of `logits`' shape and dtype; each slice along `axis` sums to 1.

    Raises:
        TypeError: `logits` is not a floating tensor.
        ValueError: `axis` is not an int.

    Example:
        >>> stable_softmax(tf.constant([1000.0, 1000.0])).numpy()
        array([0.5, 0.5], dtype=float32)
    """
    check_int_axis(axis)
    logits = floating_tensor(logits, "logits")
    exps = tf.exp(logits - _finite_max(logits, axis))
    return safe_div(exps, tf.reduce_sum(exps, axis=axis, keepdims=True))


def stable_logsumexp(x, axis=-1, keepdims: bool = False) -> tf.Tensor:
    """Return `log(sum(exp(x)))` over `axis`, computed without overflow.

    Uses `logsumexp(x) = m + log(sum(exp(x - m)))` with `m` the maximum. For any
    constant `m` the identity holds, so holding `m` constant (`stop_gradient`) in
    both places keeps the gradient exact: it is `stable_softmax(x, axis)`.

    Args:
        x: floating tensor (float16, bfloat16, float32 or float64).
        axis: None, int, or tuple of ints: the axes to reduce. Defaults to -1.
        keepdims: bool, keep the reduced axes with size 1. Defaults to False.

    Returns:
        A tensor of `x`'s dtype, reduced over `axis`. A slice of all `-inf` gives `-inf`.

    Raises:
        TypeError: `x` is not a floating tensor.
        ValueError: `axis` or `keepdims` is not of a valid type.

    Example:
        >>> round(float(stable_logsumexp(tf.constant([1000.0, 1000.0]))), 3)
        1000.693
    """
    check_axes(axis)
    check_bool(keepdims, "keepdims")
    x = floating_tensor(x, "x")
    shift = _finite_max(x, axis)
    result = tf.math.log(tf.reduce_sum(tf.exp(x - shift), axis=axis, keepdims=True)) + shift
    return result if keepdims else drop_reduced_axes(result, axis)


def _finite_max(x: tf.Tensor, axis) -> tf.Tensor:
    """The maximum over `axis` (kept), held constant; 0 where it is not finite.

    A slice of all `-inf` would otherwise be shifted by `-inf` into `-inf - -inf = NaN`.
    """
    largest = tf.stop_gradient(tf.reduce_max(x, axis=axis, keepdims=True))
    return tf.where(tf.math.is_finite(largest), largest, tf.zeros_like(largest))
