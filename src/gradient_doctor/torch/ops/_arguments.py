"""Early checks of the PyTorch safe ops' arguments, with Keras-style error messages."""

from __future__ import annotations

import torch

FLOATING_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

_FLOATING_NAMES = "float16, bfloat16, float32, float64"


def dtype_name(dtype: torch.dtype) -> str:
    """A torch dtype's short name, e.g. "float16" for `torch.float16`."""
    return str(dtype).removeprefix("torch.")


def floating_tensor(value, name: str, like: torch.Tensor | None = None) -> torch.Tensor:
    """Return `value` as a tensor and check that its dtype is a real floating one.

    A tensor is returned as it is (no copy, its autograd history kept). Python numbers
    and lists take the dtype and device of `like`, or else the default dtype
    (float32), as `torch.tensor(value, dtype=torch.get_default_dtype())`; an array
    with a dtype (numpy) keeps it.

    Args:
        value: tensor-like, the argument to check.
        name: str, the argument's name, used in the error message.
        like: the tensor a Python number is combined with, whose dtype and device it
            takes. Defaults to None (the default dtype, on the CPU).

    Returns:
        The argument as a `torch.Tensor`.

    Raises:
        TypeError: the dtype is not float16, bfloat16, float32 or float64.
    """
    if not isinstance(value, torch.Tensor):
        if like is not None:
            value = torch.as_tensor(value, dtype=like.dtype, device=like.device)
        elif hasattr(value, "dtype"):
            value = torch.as_tensor(value)
        else:
            value = torch.as_tensor(value, dtype=torch.get_default_dtype())
    if value.dtype not in FLOATING_DTYPES:
        raise TypeError(
            f"`{name}` must be a floating-point tensor ({_FLOATING_NAMES}). "
            f"Received: {name}.dtype={dtype_name(value.dtype)}. "
            f"Cast it first, e.g. `{name}.float()`."
        )
    return value


def check_bool(value, name: str) -> None:
    """Raise unless `value` is a Python bool.

    Raises:
        ValueError: `value` is not `True` or `False`.
    """
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be a bool. Received: {name}={value!r}")


def check_int_dim(dim) -> None:
    """Raise unless `dim` is a Python int, as `torch.softmax` requires.

    Raises:
        ValueError: `dim` is not an int.
    """
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise ValueError(f"`dim` must be an int, e.g. -1. Received: dim={dim!r}")
