"""`safe_div`: division that returns a fallback where the divisor is 0, gradient included."""

from __future__ import annotations

import torch

from gradient_doctor.torch.ops._arguments import dtype_name, floating_tensor
from gradient_doctor.torch.ops._where import safe_where


def safe_div(x, y, fallback=0.0) -> torch.Tensor:
    """Return `x / y` where `y != 0` and `fallback` where `y == 0`, with finite gradients.

    `x / y` at `y == 0` is inf or NaN, and so are its gradients with respect to
    both `x` and `y`, even inside `torch.where(y != 0, x / y, 0)`. Here the division
    goes through `safe_where` (the double-where pattern): the divisor is replaced
    by 1 where it is 0 before dividing, so the gradients there are exactly 0.
    Only an exact zero is replaced: no epsilon biases the other quotients, and a
    quotient that overflows the dtype (a tiny `y`) is still inf.

    Args:
        x: floating tensor, the dividend.
        y: floating tensor of `x`'s dtype, the divisor; broadcastable with `x`. A
            Python number takes the other argument's dtype.
        fallback: tensor or float, the result where `y == 0`; a tensor receives the
            gradient there. Defaults to 0.0 (as TensorFlow's `divide_no_nan`, which
            PyTorch lacks).

    Returns:
        A tensor of the broadcast shape of `x` and `y`, in their dtype.

    Raises:
        TypeError: `x` or `y` is not a floating tensor, or their dtypes differ.

    Example:
        >>> x = torch.tensor([1.0, 1.0])
        >>> y = torch.tensor([0.0, 4.0], requires_grad=True)
        >>> z = safe_div(x, y, fallback=0.0)
        >>> z.sum().backward()
        >>> z.detach(), y.grad
        (tensor([0.0000, 0.2500]), tensor([ 0.0000, -0.0625]))
    """
    floating_y = isinstance(y, torch.Tensor) and y.is_floating_point()
    x = floating_tensor(x, "x", like=y if floating_y else None)
    y = floating_tensor(y, "y", like=x)
    if x.dtype != y.dtype:
        raise TypeError(
            "`x` and `y` must have the same dtype. "
            f"Received: x.dtype={dtype_name(x.dtype)}, y.dtype={dtype_name(y.dtype)}. "
            "Cast one of them with `.to(dtype)`."
        )
    return safe_where(y != 0, lambda divisor: x / divisor, y, fallback)
