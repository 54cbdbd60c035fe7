"""`stable_softmax` and `stable_logsumexp`: exact values and gradients, no overflow."""

import numpy as np
import pytest
import tensorflow as tf

from gradient_doctor.ops import stable_logsumexp, stable_softmax
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
