"""TensorFlow's finiteness tests and an eager tensor compared with itself, followed while
the doctor watches: only an eager scalar from the user's code found not finite is handed
on; TensorFlow's own methods are given back after."""

import math

import numpy
import tensorflow as tf

from gradient_doctor.core.finiteness_tests import FinitenessTests
from gradient_doctor.tf_adapter.hooks.run_patches import _FINITENESS_TESTS


def test_an_eager_loss_compared_with_itself_or_tested_by_numpy_is_handed_on():
    found = []
    not_equal, is_nan = tf.Tensor.__ne__, tf.math.is_nan
    tests = FinitenessTests(found.append, _FINITENESS_TESTS)
    tests.install()
    try:
        healthy, broken = tf.constant(1.5), tf.constant(math.nan)
        assert not bool(healthy != healthy) and not bool(tf.math.is_nan(healthy))
        assert bool(tf.reduce_any(tf.constant([1.0, math.nan]) != tf.constant([1.0, 2.0])))
        assert found == []
        assert bool(broken != broken)
        assert found == [[broken]]
        assert numpy.isnan(broken.numpy())
        assert any(held is broken for held in found[1])
    finally:
        tests.uninstall()
    assert (tf.Tensor.__ne__, tf.math.is_nan) == (not_equal, is_nan)
    assert isinstance(numpy.isnan, numpy.ufunc)
