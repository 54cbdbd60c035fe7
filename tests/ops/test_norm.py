"""`safe_norm`: tf.norm's value, and finite gradients at a zero vector."""

import numpy as np
import pytest
import tensorflow as tf

from gradient_doctor.ops import safe_norm
from tests.ops.conftest import as_float64, value_and_gradients


def row_norm(v):
    return safe_norm(v, axis=-1)


def test_value_and_gradient_match_tf_norm_away_from_zero(precision):
    x = precision.constant([[3.0, -4.0, 12.0], [0.5, 0.25, -1.0]])
    value, (gradient,) = value_and_gradients(row_norm, x)
    exact = as_float64(x)
    norm = np.linalg.norm(exact, axis=-1)
    precision.check(value, norm)
    precision.check(value, as_float64(tf.norm(x, axis=-1)))
    precision.check(gradient, exact / norm[:, None])
    assert safe_norm(x, axis=-1).dtype == precision.dtype


def test_zero_vector_has_value_and_gradient_zero_where_tf_norm_is_nan(precision):
    x = precision.constant([[0.0, 0.0, 0.0], [1.0, 2.0, -2.0]])
    value, (gradient,) = value_and_gradients(row_norm, x)
    precision.check(value, [0.0, 3.0])
    precision.check(gradient, [[0.0, 0.0, 0.0], [1 / 3, 2 / 3, -2 / 3]])

    _, (raw_gradient,) = value_and_gradients(lambda v: tf.norm(v, axis=-1), x)
    assert np.isnan(raw_gradient[0]).all()


def test_zero_vector_in_every_execution_mode(mode):
    x = tf.zeros([2, 4])
    value, (gradient,) = value_and_gradients(row_norm, x, mode=mode)
    assert (value == 0).all()
    assert (gradient == 0).all()


def test_second_order_gradient_is_exact_and_finite_at_zero(float32):
    # A WGAN-GP penalty differentiates a norm's gradient once more.
    def gradient_sum_gradient(x):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                norm = safe_norm(x)
            gradient_sum = tf.reduce_sum(inner.gradient(norm, x))
        return as_float64(outer.gradient(gradient_sum, x))

    x = tf.constant([1.0, 2.0, 2.0])
    # d/dx_j sum_i x_i/|x| = 1/|x| - (sum_i x_i) x_j / |x|^3
    float32.check(gradient_sum_gradient(x), 1 / 3 - 5 * np.array([1.0, 2.0, 2.0]) / 27)
    assert (gradient_sum_gradient(tf.zeros([3])) == 0).all()


def test_float16_does_not_overflow_where_tf_norm_does():
    x = tf.constant([300.0, 400.0], tf.float16)
    value, (gradient,) = value_and_gradients(safe_norm, x)
    assert value == 500.0
    np.testing.assert_allclose(gradient, [0.6, 0.8], rtol=2e-3)
    assert np.isinf(as_float64(tf.norm(x)))


def test_tiny_vector_does_not_underflow_to_zero(float32):
    x = tf.constant([3e-30, 4e-30])
    value, (gradient,) = value_and_gradients(safe_norm, x)
    float32.check(value, 5e-30)
    float32.check(gradient, [0.6, 0.8])
    assert as_float64(tf.norm(x)) == 0.0


def test_non_finite_entries_propagate_as_tf_norm_does():
    assert np.isinf(as_float64(safe_norm(tf.constant([np.inf, 1.0]))))
    assert np.isnan(as_float64(safe_norm(tf.constant([np.nan, 0.0]))))


@pytest.mark.parametrize(
    ("axis", "keepdims", "shape"),
    [
        (None, False, []),
        (None, True, [1, 1]),
        ((0, 1), False, []),
        (0, True, [1, 2]),
        ([1], False, [3]),
    ],
)
def test_axes_and_keepdims_match_tf_norm(float32, axis, keepdims, shape):
    x = tf.constant([[0.0, 0.0], [3.0, 4.0], [1.0, -1.0]])
    value = safe_norm(x, axis=axis, keepdims=keepdims)
    assert value.shape.as_list() == shape
    # tf.norm takes an int or a pair, not a list.
    reference_axis = axis[0] if isinstance(axis, list) else axis
    expected = tf.norm(x, axis=reference_axis, keepdims=keepdims)
    float32.check(as_float64(value), as_float64(expected))


@pytest.mark.parametrize("axis", ["last", (), 1.0, (0, "1"), True])
def test_invalid_axis_fails_early(axis):
    with pytest.raises(ValueError, match="`axis` must be None .*Received: axis="):
        safe_norm(tf.ones([2, 2]), axis=axis)


def test_invalid_keepdims_and_dtype_fail_early():
    with pytest.raises(ValueError, match="`keepdims` must be a bool. Received: keepdims=1"):
        safe_norm(tf.ones([2]), keepdims=1)
    with pytest.raises(TypeError, match=r"`x` must be a floating-point tensor .*x.dtype=int32"):
        safe_norm(tf.constant([3, 4]))
