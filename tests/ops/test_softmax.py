"""`stable_softmax` and `stable_logsumexp`: exact values and gradients, no overflow."""

import numpy as np
import pytest
import tensorflow as tf

from gradient_doctor.ops import stable_logsumexp, stable_segment_softmax, stable_softmax
from tests.ops.conftest import all_finite, as_float64, value_and_gradients

# Where the hand-written versions overflow: exp(1000) in float32, exp(20) in float16.
LARGE = {tf.float16: 20.0, tf.bfloat16: 1000.0, tf.float32: 1000.0, tf.float64: 1000.0}
WEIGHTS = np.array([0.5, -1.0, 2.0])


def softmax64(x):
    shifted = np.exp(x - x.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def logsumexp64(x):
    largest = x.max(axis=-1)
    return largest + np.log(np.exp(x - largest[..., None]).sum(axis=-1))


def weighted_softmax(logits):
    # The plain sum of a softmax is 1 whatever the logits: weight it to test the gradient.
    return stable_softmax(logits) * tf.constant(WEIGHTS, logits.dtype)


def check_softmax(precision, logits):
    value, (gradient,) = value_and_gradients(weighted_softmax, logits)
    probabilities = softmax64(as_float64(logits))
    precision.check(value, probabilities * WEIGHTS)
    # d/dx_j sum_i w_i s_i = s_j (w_j - sum_i w_i s_i)
    expected = probabilities * (WEIGHTS - (probabilities * WEIGHTS).sum(-1, keepdims=True))
    precision.check(gradient, expected)


def test_softmax_value_and_gradient_match_the_analytic_ones(precision):
    check_softmax(precision, precision.constant([[1.0, -0.5, 2.0], [0.0, 0.0, 0.0]]))
    assert stable_softmax(precision.constant([1.0, 2.0])).dtype == precision.dtype


def test_softmax_of_large_logits_is_exact_where_the_hand_written_one_is_nan(precision):
    large = LARGE[precision.dtype]
    logits = precision.constant([[large, 0.0, -large], [large, large, large - 1.0]])
    check_softmax(precision, logits)

    def hand_written(x):
        return tf.exp(x) / tf.reduce_sum(tf.exp(x), axis=-1, keepdims=True)

    raw_value, (raw_gradient,) = value_and_gradients(hand_written, logits)
    assert not all_finite(raw_value)
    assert not all_finite(raw_gradient)


def test_masked_entries_are_zero_and_a_fully_masked_row_is_zero_not_nan(float32):
    logits = tf.constant([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]])
    value, (gradient,) = value_and_gradients(weighted_softmax, logits)
    float32.check(value[0], softmax64(np.array([0.0, -np.inf, 1.0])) * WEIGHTS)
    np.testing.assert_array_equal(value[1], [0.0, 0.0, 0.0])
    assert all_finite(gradient)
    assert np.isnan(tf.nn.softmax(logits)[1].numpy()).all()


def test_logsumexp_value_matches_and_gradient_is_the_softmax(precision):
    large = LARGE[precision.dtype]
    x = precision.constant([[1.0, -0.5, 2.0], [large, large - 1.0, 0.0]])
    value, (gradient,) = value_and_gradients(stable_logsumexp, x)
    exact = as_float64(x)
    precision.check(value, logsumexp64(exact))
    precision.check(gradient, softmax64(exact))
    assert stable_logsumexp(x).dtype == precision.dtype

    def hand_written(v):
        return tf.math.log(tf.reduce_sum(tf.exp(v), axis=-1))

    raw_value, (raw_gradient,) = value_and_gradients(hand_written, x)
    assert np.isinf(raw_value[1])
    assert not all_finite(raw_gradient)


def test_logsumexp_second_order_gradient_is_exact(float32):
    x = tf.constant([1.0, -0.5, 2.0])
    weights = tf.constant(WEIGHTS, tf.float32)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            value = stable_logsumexp(x)
        weighted = tf.reduce_sum(inner.gradient(value, x) * weights)
    s = softmax64(as_float64(x))
    # Hessian (diag(s) - s s^T) times the weights.
    float32.check(as_float64(outer.gradient(weighted, x)), s * WEIGHTS - s * (s @ WEIGHTS))


@pytest.mark.parametrize(
    ("axis", "keepdims"), [(None, False), ((0, 1), True), (0, False), (-1, True)]
)
def test_logsumexp_axes_match_tf(float32, axis, keepdims):
    x = tf.constant([[1.0, 2.0, 3.0], [-1.0, 0.0, 500.0]])
    value = stable_logsumexp(x, axis=axis, keepdims=keepdims)
    expected = tf.reduce_logsumexp(x, axis=axis, keepdims=keepdims)
    assert value.shape == expected.shape
    float32.check(value.numpy(), expected.numpy())


def test_large_inputs_in_every_execution_mode(mode):
    x = tf.constant([1000.0, 1000.0])
    value, (gradient,) = value_and_gradients(stable_logsumexp, x, mode=mode)
    np.testing.assert_allclose(value, 1000.0 + np.log(2.0), rtol=1e-6)
    np.testing.assert_allclose(gradient, [0.5, 0.5], rtol=1e-6)
    probabilities, _ = value_and_gradients(stable_softmax, x, mode=mode)
    np.testing.assert_allclose(probabilities, [0.5, 0.5], rtol=1e-6)


def test_invalid_arguments_fail_early():
    with pytest.raises(ValueError, match=r"`axis` must be an int, e.g. -1. Received: axis=\(0,\)"):
        stable_softmax(tf.ones([2, 2]), axis=(0,))
    with pytest.raises(ValueError, match="`keepdims` must be a bool. Received: keepdims='no'"):
        stable_logsumexp(tf.ones([2]), keepdims="no")
    with pytest.raises(TypeError, match=r"`logits` must be a floating-point tensor"):
        stable_softmax(tf.constant([1, 2]))


def test_masked_softmax_normalises_over_the_kept_entries_only(float32):
    # The masked position holds garbage far above the others: it takes no part.
    logits = tf.constant([[1.0, 900.0, 2.0], [1000.0, 1000.0, -5.0]])
    mask = tf.constant([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    value, (gradient,) = value_and_gradients(
        lambda x: stable_softmax(x, mask=mask) * tf.constant(WEIGHTS, tf.float32), logits
    )
    float32.check(value[0], softmax64(np.array([1.0, -np.inf, 2.0])) * WEIGHTS)
    float32.check(value[1], np.array([0.5, 0.5, 0.0]) * WEIGHTS)
    assert gradient[0, 1] == 0.0 and gradient[1, 2] == 0.0
    assert all_finite(gradient)


def test_a_fully_masked_row_is_zero_with_finite_gradients_whatever_its_logits(float32):
    logits = tf.constant([[np.nan, np.inf, 3.0], [0.5, 1.0, 1.5]])
    keep = tf.constant([[False, False, False], [True, True, True]])
    value, (gradient,) = value_and_gradients(lambda x: weighted(x, keep), logits)
    np.testing.assert_array_equal(value[0], [0.0, 0.0, 0.0])
    float32.check(value[1], softmax64(np.array([0.5, 1.0, 1.5])) * WEIGHTS)
    np.testing.assert_array_equal(gradient[0], [0.0, 0.0, 0.0])
    assert all_finite(gradient)


def weighted(logits, mask):
    return stable_softmax(logits, mask=mask) * tf.constant(WEIGHTS, logits.dtype)


def test_a_broadcast_mask_keeps_the_same_keys_in_every_row(precision):
    logits = precision.constant([[[3.0, 1.0, 2.0], [0.0, -1.0, 4.0]]])  # (1, 2, 3)
    keys = precision.constant([[[1.0, 1.0, 0.0]]])  # one mask for every query row
    value = stable_softmax(logits, mask=keys)
    assert value.dtype == precision.dtype
    exact = as_float64(logits)[0, :, :2]
    precision.check(as_float64(value)[0], np.pad(softmax64(exact), ((0, 0), (0, 1))))


def segment_softmax64(logits, ids, count):
    """Each segment's softmax of float64 logits (first axis over the entries)."""
    result = np.zeros_like(logits)
    for segment in range(count):
        rows = ids == segment
        if rows.any():
            result[rows] = softmax_over_rows(logits[rows])
    return result


def softmax_over_rows(x):
    shifted = np.exp(x - x.max(axis=0, keepdims=True))
    return shifted / shifted.sum(axis=0, keepdims=True)


IDS = np.array([2, 0, 2, 2, 0])  # segment 1 is empty


def test_segment_softmax_value_and_gradient_match_the_analytic_ones(precision):
    large = LARGE[precision.dtype]
    logits = precision.constant([large, 0.5, large - 1.0, -1.0, 0.25])
    edge_weights = np.array([0.5, -1.0, 2.0, 1.5, 3.0])

    def weighted_segments(x):
        return stable_segment_softmax(x, IDS, 3) * tf.constant(edge_weights, x.dtype)

    value, (gradient,) = value_and_gradients(weighted_segments, logits)
    s = segment_softmax64(as_float64(logits), IDS, 3)
    precision.check(value, s * edge_weights)
    # d/dx_j sum_i w_i s_i = s_j (w_j - sum over j's segment of w_i s_i)
    segment_mean = np.array([(s * edge_weights)[IDS == i].sum() for i in IDS])
    precision.check(gradient, s * (edge_weights - segment_mean))

    def hand_written(x):
        e = tf.exp(x)
        return e / tf.gather(tf.math.unsorted_segment_sum(e, IDS, 3), IDS)

    assert not all_finite(value_and_gradients(hand_written, logits)[0])


def test_segment_softmax_of_minus_infinity_is_zero_and_a_segment_of_it_too(float32):
    logits = tf.constant([-np.inf, 1.0, -np.inf, -np.inf, 2.0])
    value, (gradient,) = value_and_gradients(lambda x: stable_segment_softmax(x, IDS, 3), logits)
    # Segment 2 holds only -inf; segment 0 holds 1.0 and 2.0.
    np.testing.assert_array_equal(value[[0, 2, 3]], [0.0, 0.0, 0.0])
    float32.check(value[[1, 4]], softmax64(np.array([1.0, 2.0])))
    assert all_finite(gradient)


def test_segment_softmax_normalises_each_head_apart_in_every_mode(mode):
    logits = tf.constant([[1000.0, 1.0], [1000.0, 2.0], [5.0, -3.0]])  # (edges, heads)
    ids = tf.constant([0, 0, 1])
    value, (gradient,) = value_and_gradients(
        lambda x: stable_segment_softmax(x, ids, 2), logits, mode=mode
    )
    expected = segment_softmax64(as_float64(logits), ids.numpy(), 2)
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    np.testing.assert_allclose(gradient, np.zeros_like(expected), atol=1e-6)  # sums are 1


def test_segment_softmax_refuses_float_segment_ids():
    with pytest.raises(TypeError, match=r"Received: segment_ids.dtype=float32. Cast it first"):
        stable_segment_softmax(tf.ones([2]), tf.constant([0.0, 1.0]), 2)
