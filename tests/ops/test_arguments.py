"""The early argument checks shared by the safe ops."""

import pytest
import tensorflow as tf

from gradient_doctor.ops._arguments import floating_tensor, is_number


def test_python_numbers_become_float32_and_tensors_keep_their_dtype():
    assert floating_tensor([1, 2], "x").dtype == tf.float32
    assert floating_tensor(tf.ones([2], tf.bfloat16), "x").dtype == tf.bfloat16


@pytest.mark.parametrize("dtype", [tf.int32, tf.bool, tf.complex64])
def test_non_floating_dtypes_are_refused_with_the_fix(dtype):
    value = tf.zeros([2], dtype)
    with pytest.raises(TypeError, match=rf"Received: v.dtype={dtype.name}. Cast it first"):
        floating_tensor(value, "v")


def test_is_number_excludes_booleans_and_non_finite_values():
    assert is_number(1) and is_number(0.5)
    assert not any(is_number(v) for v in (True, float("nan"), float("inf"), "1", None))
