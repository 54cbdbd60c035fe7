"""The early argument checks shared by the PyTorch safe ops, and the dimension handling of
the reducing ones."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch.ops._arguments import floating_tensor  # noqa: E402
from gradient_doctor.torch.ops._reduction import (  # noqa: E402
    check_dims,
    drop_reduced_dims,
    reduced_dims,
)


def test_python_numbers_become_the_default_dtype_and_tensors_keep_theirs():
    assert floating_tensor([1, 2], "x").dtype == torch.float32
    half = torch.ones(2, dtype=torch.bfloat16)
    assert floating_tensor(half, "x") is half
    assert floating_tensor(3, "x", like=half).dtype == torch.bfloat16
    assert floating_tensor(np.ones(2), "x").dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.complex64], ids=str)
def test_non_floating_dtypes_are_refused_with_the_fix(dtype):
    name = str(dtype).removeprefix("torch.")
    with pytest.raises(TypeError, match=rf"Received: v.dtype={name}. Cast it first"):
        floating_tensor(torch.zeros(2, dtype=dtype), "v")


def test_drop_reduced_dims_undoes_keepdim():
    kept = torch.zeros(2, 1, 3, 1)
    assert drop_reduced_dims(kept, (-1,)).shape == (2, 1, 3)
    assert drop_reduced_dims(kept, (1, 3)).shape == (2, 3)
    ones = torch.zeros(1, 1)
    assert drop_reduced_dims(ones, reduced_dims(ones, None)).shape == ()


@pytest.mark.parametrize("dim", [None, 0, -1, (0, 1), [2]])
def test_valid_dims_pass(dim):
    check_dims(dim)
