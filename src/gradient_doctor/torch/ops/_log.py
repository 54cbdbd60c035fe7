"""`safe_log`: a logarithm floored at a small epsilon, finite in value and gradient."""

from __future__ import annotations

import torch

from gradient_doctor.core.arguments import check_float
from gradient_doctor.torch.ops._arguments import floating_tensor
from gradient_doctor.torch.ops._precision import at_least, smallest_normal


def safe_log(x, eps: float | None = None) -> torch.Tensor:
    """Return `log(max(x, eps))`, finite in value and gradient for every `x >= 0`.

    `torch.log(0)` is `-inf` and its gradient `1/x` infinite; a negative input
    gives NaN. Below `eps` the value here is the constant `log(eps)` and the
    gradient 0; at and above it the value and gradient are exactly `log(x)` and `1/x`.
    The default `eps` is the dtype's smallest normal number, so no value a normal
    number can hold is biased. A NaN input stays NaN.

    Args:
        x: floating tensor (float16, bfloat16, float32 or float64).
        eps: float, the floor. A value below the dtype's smallest normal number
            (which would round to 0 in float16) is raised to it. Defaults to None,
            the dtype's smallest normal number (float32: 1.2e-38, float16: 6.1e-5).

    Returns:
        A tensor of `x`'s shape and dtype.

    Raises:
        TypeError: `x` is not a floating tensor.
        ValueError: `eps` is not a positive float.

    Example:
        >>> x = torch.tensor([0.0, 1.0], requires_grad=True)
        >>> y = safe_log(x, eps=1e-6)
        >>> y.sum().backward()
        >>> y.detach(), x.grad
        (tensor([-13.8155,   0.0000]), tensor([0., 1.]))
    """
    if eps is not None:
        check_float(eps, "eps")
    x = floating_tensor(x, "x")
    return torch.log(torch.clamp_min(x, at_least(eps, smallest_normal(x.dtype))))
