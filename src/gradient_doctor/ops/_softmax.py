"""`stable_softmax`, `stable_segment_softmax`, `stable_logsumexp`: exp-normalisation shifted by
the max of each group it normalises, never overflowing."""

from __future__ import annotations

import tensorflow as tf

from gradient_doctor.ops._arguments import check_bool, check_int_axis, floating_tensor
from gradient_doctor.ops._division import safe_div
from gradient_doctor.ops._reduction import check_axes, drop_reduced_axes


def stable_softmax(logits, axis: int = -1, mask=None) -> tf.Tensor:
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
        mask: None, or a bool or numeric tensor broadcastable with `logits`: the
            entries where it is False (or 0) get weight exactly 0 and gradient 0,
            whatever their logits hold (a padding position's garbage, inf, NaN),
            and the shift is the largest kept logit. A fully masked row gives all
            zeros. Defaults to None (every entry counts).

    Returns:
        A tensor of `logits`' shape and dtype; each slice along `axis` with a kept
        entry sums to 1.

    Raises:
        TypeError: `logits` is not a floating tensor.
        ValueError: `axis` is not an int.

    Example:
        >>> stable_softmax(tf.constant([1000.0, 1000.0])).numpy()
        array([0.5, 0.5], dtype=float32)
        >>> stable_softmax(tf.constant([1000.0, 5.0]), mask=tf.constant([0.0, 1.0])).numpy()
        array([0., 1.], dtype=float32)
    """
    check_int_axis(axis)
    logits = floating_tensor(logits, "logits")
    if mask is None:
        exps = tf.exp(logits - _finite_max(logits, axis))
    else:
        keep = tf.broadcast_to(_kept(mask), tf.shape(logits))
        lowest = tf.constant(-float("inf"), logits.dtype)
        shift = _finite_max(tf.where(keep, logits, lowest), axis)
        # Masked entries never reach exp: their logits may be anything.
        exps = tf.exp(tf.where(keep, logits - shift, lowest))
    return safe_div(exps, tf.reduce_sum(exps, axis=axis, keepdims=True))


def stable_segment_softmax(logits, segment_ids, num_segments) -> tf.Tensor:
    """Return `exp(logits)` normalised over each segment, computed without overflow.

    A graph network's edge attention written by hand,
    `e = tf.exp(s); e / tf.gather(tf.math.unsorted_segment_sum(e, ids, n), ids)`,
    overflows as soon as one score passes the dtype's exp limit. Each segment's
    softmax is unchanged by subtracting a constant per segment, so each score is
    shifted by its own segment's maximum (held constant), gathered back to it.

    Entries of `-inf` give exact zeros; a segment of only `-inf` gives zeros, with
    gradient 0. Empty segments take no part (no entry gathers them).

    Args:
        logits: floating tensor (float16, bfloat16, float32 or float64) whose first
            axis runs over the entries (edges); further axes (heads) are normalised
            separately.
        segment_ids: int32 or int64 tensor of shape [logits.shape[0]], the segment
            (receiving node) of each entry, in [0, num_segments); any order.
        num_segments: int or scalar int tensor, the number of segments.

    Returns:
        A tensor of `logits`' shape and dtype; the entries of each segment sum to 1.

    Raises:
        TypeError: `logits` is not a floating tensor, or `segment_ids` not integer.

    Example:
        >>> stable_segment_softmax(tf.constant([1000.0, 1000.0, 3.0]), [0, 0, 1], 2).numpy()
        array([0.5, 0.5, 1. ], dtype=float32)
    """
    logits = floating_tensor(logits, "logits")
    segment_ids = tf.convert_to_tensor(segment_ids)
    if segment_ids.dtype not in (tf.int32, tf.int64):
        raise TypeError(
            "`segment_ids` must be an int32 or int64 tensor. "
            f"Received: segment_ids.dtype={segment_ids.dtype.name}. "
            "Cast it first, e.g. `tf.cast(segment_ids, tf.int32)`."
        )
    # Never -inf: a segment of only -inf has the dtype's lowest value as its max.
    largest = tf.math.unsorted_segment_max(logits, segment_ids, num_segments)
    exps = tf.exp(logits - tf.gather(tf.stop_gradient(largest), segment_ids))
    totals = tf.math.unsorted_segment_sum(exps, segment_ids, num_segments)
    return safe_div(exps, tf.gather(totals, segment_ids))


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


def _kept(mask) -> tf.Tensor:
    """Where a mask keeps its entries, as bools: True, or any value but 0."""
    mask = tf.convert_to_tensor(mask)
    return mask if mask.dtype == tf.bool else tf.not_equal(mask, tf.zeros([], mask.dtype))


def _finite_max(x: tf.Tensor, axis) -> tf.Tensor:
    """The maximum over `axis` (kept), held constant; 0 where it is not finite.

    A slice of all `-inf` would otherwise be shifted by `-inf` into `-inf - -inf = NaN`.
    """
    largest = tf.stop_gradient(tf.reduce_max(x, axis=axis, keepdims=True))
    return tf.where(tf.math.is_finite(largest), largest, tf.zeros_like(largest))
