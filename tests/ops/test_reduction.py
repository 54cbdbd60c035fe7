"""Axis handling shared by the reducing ops."""

import pytest
import tensorflow as tf

from gradient_doctor.ops._reduction import check_axes, drop_reduced_axes


def test_drop_reduced_axes_undoes_keepdims():
    kept = tf.zeros([2, 1, 3, 1])
    assert drop_reduced_axes(kept, -1).shape == [2, 1, 3]
    assert drop_reduced_axes(kept, [1, 3]).shape == [2, 3]
    assert drop_reduced_axes(tf.zeros([1, 1]), None).shape == []


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1), [2]])
def test_valid_axes_pass(axis):
    check_axes(axis)
