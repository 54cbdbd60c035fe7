"""Shared by the PyTorch safe-op tests: dtypes with their tolerances, autograd modes, gradients."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

torch = pytest.importorskip("torch")


@dataclass(frozen=True)
class Precision:
    """A dtype and the tolerances its results are compared with."""

    dtype: torch.dtype
    rtol: float
    atol: float

    def check(self, actual, expected) -> None:
        """Assert that `actual` matches the float64 `expected` within this dtype's tolerance."""
        np.testing.assert_allclose(actual, expected, rtol=self.rtol, atol=self.atol)

    def constant(self, values) -> torch.Tensor:
        """`values` as a tensor of this dtype."""
        return torch.tensor(values, dtype=self.dtype)


# Half precision keeps 11 (float16) or 8 (bfloat16) significant bits.
PRECISIONS = {
    "float16": Precision(torch.float16, rtol=4e-3, atol=1e-3),
    "bfloat16": Precision(torch.bfloat16, rtol=2e-2, atol=1e-2),
    "float32": Precision(torch.float32, rtol=1e-5, atol=1e-6),
    "float64": Precision(torch.float64, rtol=1e-12, atol=1e-12),
}


@pytest.fixture(params=sorted(PRECISIONS))
def precision(request) -> Precision:
    """Each floating dtype the safe ops support, with its tolerances."""
    return PRECISIONS[request.param]


@pytest.fixture
def float32() -> Precision:
    """float32 alone, for the tests that need one dtype."""
    return PRECISIONS["float32"]


@pytest.fixture(params=["autograd", "func"])
def mode(request) -> str:
    """How the gradient is taken: by `backward()`, or by `torch.func.grad`."""
    return request.param


def as_float64(tensor) -> np.ndarray:
    """A tensor's values as float64 numpy (bfloat16 included), exactly as the dtype holds them."""
    return tensor.detach().to(torch.float64).cpu().numpy()


def value_and_gradients(fn, *inputs, mode: str = "autograd"):
    """Run `fn(*inputs)` and the gradients of the sum of its result with respect to each input.

    Args:
        fn: callable, the computation under test.
        *inputs: tensors, its arguments; each is differentiated.
        mode: str, "autograd" (`.backward()` on leaves that require grad) or "func"
            (`torch.func.grad_and_value`, functorch's transforms).

    Returns:
        The value and the list of gradients, as float64 numpy arrays; an input the
        result does not depend on gets zeros.
    """
    if mode == "func":

        def total(*args):
            value = fn(*args)
            return value.sum(), value

        argnums = tuple(range(len(inputs)))
        gradients, (_, value) = torch.func.grad_and_value(total, argnums, has_aux=True)(*inputs)
        return as_float64(value), [as_float64(gradient) for gradient in gradients]
    leaves = [tensor.detach().clone().requires_grad_(True) for tensor in inputs]
    value = fn(*leaves)
    value.sum().backward()
    gradients = [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in leaves]
    return as_float64(value), [as_float64(gradient) for gradient in gradients]


def all_finite(array) -> bool:
    """Whether every entry of a numpy array is finite."""
    return bool(np.isfinite(array).all())
