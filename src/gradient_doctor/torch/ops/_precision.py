"""The smallest usable epsilon of each torch floating dtype, so that no bound rounds away."""

from __future__ import annotations

import torch


def smallest_normal(dtype: torch.dtype) -> float:
    """The smallest positive normal number of `dtype` (float16: 6.1e-5)."""
    return torch.finfo(dtype).tiny


def machine_epsilon(dtype: torch.dtype) -> float:
    """The distance from 1 to the next larger number of `dtype` (float16: 2**-10)."""
    return torch.finfo(dtype).eps


def at_least(eps: float | None, floor: float) -> float:
    """`eps`, raised to `floor` when smaller (None means `floor` itself)."""
    return floor if eps is None else max(eps, floor)
