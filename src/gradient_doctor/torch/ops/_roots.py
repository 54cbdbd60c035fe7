"""`safe_sqrt`: a square root whose gradient at 0 is 0 instead of infinite."""

from __future__ import annotations

import torch

from gradient_doctor.torch.ops._arguments import floating_tensor
from gradient_doctor.torch.ops._where import safe_where


def safe_sqrt(x) -> torch.Tensor:
    """Return `sqrt(max(x, 0))`, with gradient 0 wherever `x <= 0`.

    `torch.sqrt`'s gradient `0.5 / sqrt(x)` is infinite at 0, which is where square
    roots of squared distances and variances sit in practice. Here the root is
    taken through `safe_where`, so `x <= 0` gives the value 0 and the gradient 0
    (the subgradient at the boundary), and the value elsewhere is exactly
    `torch.sqrt`'s. Built from differentiable ops only, so second-order gradients
    are finite too.

    Args:
        x: floating tensor (float16, bfloat16, float32 or float64).

    Returns:
        A tensor of `x`'s shape and dtype.

    Raises:
        TypeError: `x` is not a floating tensor.

    Example:
        >>> x = torch.tensor([0.0, 4.0], requires_grad=True)
        >>> y = safe_sqrt(x)
        >>> y.sum().backward()
        >>> y.detach(), x.grad
        (tensor([0., 2.]), tensor([0.0000, 0.2500]))
    """
    x = floating_tensor(x, "x")
    return safe_where(x > 0, torch.sqrt, x, fallback=0.0)
