"""`safe_acos` and `safe_asin`: inverse sines and cosines with finite gradients at +-1."""

from __future__ import annotations

import torch

from gradient_doctor.core.arguments import check_float
from gradient_doctor.torch.ops._arguments import floating_tensor
from gradient_doctor.torch.ops._precision import at_least, machine_epsilon


def safe_acos(x, eps: float | None = None) -> torch.Tensor:
    """Return `acos(clamp(x, -1 + eps, 1 - eps))`, with finite gradients at exactly +-1.

    `torch.acos`'s gradient `-1 / sqrt(1 - x**2)` is infinite at +-1, where the
    cosine of the angle between two identical (or opposite) unit vectors sits,
    and a cosine rounded just past 1 gives a NaN value. Clamping into the open
    interval keeps both finite; outside it the gradient is 0. The price is a
    bias of about `sqrt(2 * eps)` radians at +-1 only.

    Args:
        x: floating tensor (float16, bfloat16, float32 or float64).
        eps: float in (0, 1), the margin kept from +-1. A value below the dtype's
            machine epsilon (for which `1 - eps` would round to 1) is raised to it.
            Defaults to None, the machine epsilon (float32: 1.2e-7, float16: 9.8e-4).

    Returns:
        A tensor of `x`'s shape and dtype, in radians.

    Raises:
        TypeError: `x` is not a floating tensor.
        ValueError: `eps` is not a float in (0, 1).

    Example:
        >>> x = torch.tensor([1.0, 0.0], requires_grad=True)
        >>> safe_acos(x).sum().backward()
        >>> x.grad
        tensor([ 0., -1.])
    """
    return torch.acos(_clamp_inside_unit(x, eps))


def safe_asin(x, eps: float | None = None) -> torch.Tensor:
    """Return `asin(clamp(x, -1 + eps, 1 - eps))`, with finite gradients at exactly +-1.

    The same clamping as `safe_acos`, for `torch.asin`, whose gradient
    `1 / sqrt(1 - x**2)` is infinite at +-1.

    Args:
        x: floating tensor (float16, bfloat16, float32 or float64).
        eps: float in (0, 1), the margin kept from +-1, raised to the dtype's
            machine epsilon when smaller. Defaults to None, the machine epsilon.

    Returns:
        A tensor of `x`'s shape and dtype, in radians.

    Raises:
        TypeError: `x` is not a floating tensor.
        ValueError: `eps` is not a float in (0, 1).

    Example:
        >>> x = torch.tensor([-1.0, 0.0], requires_grad=True)
        >>> safe_asin(x).sum().backward()
        >>> x.grad
        tensor([0., 1.])
    """
    return torch.asin(_clamp_inside_unit(x, eps))


def _clamp_inside_unit(x, eps: float | None) -> torch.Tensor:
    """Check the arguments and clamp `x` into `[-1 + eps, 1 - eps]`."""
    if eps is not None:
        check_float(eps, "eps", low=0.0, high=1.0)
    x = floating_tensor(x, "x")
    bound = 1.0 - at_least(eps, machine_epsilon(x.dtype))
    return torch.clamp(x, -bound, bound)
