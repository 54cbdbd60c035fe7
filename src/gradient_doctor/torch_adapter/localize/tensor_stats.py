"""The core's `TensorStats` of a torch tensor, read back to the host in one transfer."""

from __future__ import annotations

import torch

from gradient_doctor.core.findings import TensorStats

# Input values quoted per tensor in the report.
QUOTED_VALUES = 3


def summarize(tensor: torch.Tensor) -> TensorStats:
    """Counts of NaN, +inf, -inf and zeros, and the range of the finite values.

    Floating-point tensors are reduced on their device and read back with one
    `tolist()`; other dtypes cannot hold NaN or infinity. Complex, sparse and
    meta tensors are summarized by dtype and shape alone.

    Args:
        tensor: the tensor (never modified; autograd does not see the reductions).
    """
    shape = tuple(tensor.shape)
    dtype = str(tensor.dtype).removeprefix("torch.")
    size = tensor.numel()
    if size == 0 or tensor.is_complex() or tensor.layout != torch.strided or tensor.is_meta:
        return TensorStats(dtype, shape, None, None, 0, 0, 0, size)
    with torch.no_grad():
        flat = tensor.detach().reshape(-1)
        if not flat.is_floating_point():
            low, high, zeros = torch.stack(
                [flat.min().long(), flat.max().long(), (flat == 0).sum()]
            ).tolist()
            return TensorStats(
                dtype, shape, float(low), float(high), 0, 0, zeros, size, min_abs=None
            )
        values = flat.double()
        finite = torch.isfinite(values)
        magnitude = values.abs()
        inf = torch.tensor(float("inf"), dtype=torch.float64, device=values.device)
        low, high, small, nan, pos, neg, zeros, count = torch.stack(
            [
                torch.where(finite, values, inf).min(),
                torch.where(finite, values, -inf).max(),
                torch.where(finite, magnitude, inf).min(),
                torch.isnan(values).sum(),
                torch.isposinf(values).sum(),
                torch.isneginf(values).sum(),
                (values == 0).sum(),
                finite.sum(),
            ]
        ).tolist()
    if not count:
        low = high = small = None
    return TensorStats(
        dtype,
        shape,
        low,
        high,
        int(nan),
        int(pos + neg),
        int(zeros),
        size,
        pos_inf=int(pos),
        neg_inf=int(neg),
        min_abs=small,
    )


def first_values(tensor: torch.Tensor) -> tuple[float, ...]:
    """The first few values of a tensor, for the report (() for complex or sparse)."""
    if tensor.is_complex() or tensor.layout != torch.strided or tensor.is_meta:
        return ()
    with torch.no_grad():
        return tuple(float(v) for v in tensor.detach().reshape(-1)[:QUOTED_VALUES].tolist())
