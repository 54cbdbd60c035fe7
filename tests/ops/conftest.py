"""Shared by the safe-op tests: dtypes with their tolerances, execution modes, gradients."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import tensorflow as tf


@dataclass(frozen=True)
class Precision:
    """A dtype and the tolerances its results are compared with."""

    dtype: tf.DType
    rtol: float
    atol: float

    def check(self, actual, expected) -> None:
        """Assert that `actual` matches the float64 `expected` within this dtype's tolerance."""
        np.testing.assert_allclose(actual, expected, rtol=self.rtol, atol=self.atol)

    def constant(self, values) -> tf.Tensor:
        """`values` as a tensor of this dtype."""
        return tf.constant(values, self.dtype)


# Half precision keeps 11 (float16) or 8 (bfloat16) significant bits.
PRECISIONS = {
    "float16": Precision(tf.float16, rtol=4e-3, atol=1e-3),
    "bfloat16": Precision(tf.bfloat16, rtol=2e-2, atol=1e-2),
    "float32": Precision(tf.float32, rtol=1e-5, atol=1e-6),
    "float64": Precision(tf.float64, rtol=1e-12, atol=1e-12),
}


@pytest.fixture(params=sorted(PRECISIONS))
def precision(request) -> Precision:
    """Each floating dtype the safe ops support, with its tolerances."""
    return PRECISIONS[request.param]


@pytest.fixture
def float32() -> Precision:
    """float32 alone, for the tests that need one dtype."""
    return PRECISIONS["float32"]


@pytest.fixture(params=["eager", "function", "xla"])
def mode(request) -> str:
    """How the op and its gradient run: eagerly, in `tf.function`, or compiled by XLA."""
    return request.param


def as_float64(tensor) -> np.ndarray:
    """A tensor's values as float64 numpy (bfloat16 included), exactly as the dtype holds them."""
    return tf.cast(tensor, tf.float64).numpy()


def value_and_gradients(fn, *inputs, mode: str = "eager"):
    """Run `fn(*inputs)` and the gradients of the sum of its result with respect to each input.

    Args:
        fn: callable, the computation under test.
        *inputs: tensors, its arguments, all watched.
        mode: str, "eager", "function" or "xla" (`tf.function(jit_compile=True)`).

    Returns:
        The value and the list of gradients, as float64 numpy arrays; an input the
        result does not depend on gets zeros.
    """

    def compute(*args):
        with tf.GradientTape() as tape:
            tape.watch(args)
            value = fn(*args)
            total = tf.reduce_sum(value)
        gradients = tape.gradient(total, args, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return value, gradients

    if mode != "eager":
        compute = tf.function(compute, jit_compile=mode == "xla")
    value, gradients = compute(*inputs)
    return as_float64(value), [as_float64(gradient) for gradient in gradients]


def all_finite(array) -> bool:
    """Whether every entry of a numpy array is finite."""
    return bool(np.isfinite(array).all())
