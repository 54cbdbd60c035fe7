"""`stable_softmax`, `stable_segment_softmax`, `stable_logsumexp`: exp-normalisation shifted by
the max of each group it normalises, never overflowing."""

from __future__ import annotations

import torch

from gradient_doctor.torch.ops._arguments import (
    check_bool,
    check_int_dim,
    dtype_name,
    floating_tensor,
)
from gradient_doctor.torch.ops._division import safe_div
from gradient_doctor.torch.ops._reduction import check_dims, drop_reduced_dims, reduced_dims
from gradient_doctor.torch.ops._where import safe_where

_MINUS_INF = float("-inf")


def stable_softmax(logits, dim: int = -1, mask=None) -> torch.Tensor:
    """Return `exp(logits) / sum(exp(logits))` over `dim`, computed without overflow.

    The hand-written `torch.exp(x) / torch.exp(x).sum(dim, keepdim=True)` overflows
    as soon as a logit passes the dtype's exp limit (88.7 in float32, 11.1 in
    float16) and returns `inf / inf = NaN`. Softmax is unchanged by subtracting a
    constant, so the logits are shifted by their maximum first: every exponent is
    then <= 0. The maximum is held constant (`detach`), which leaves the gradient exact.

    Entries of `-inf` (attention masks) give exact zeros. A row whose entries are
    all `-inf` gives all zeros, with gradient 0, where `torch.softmax` gives NaN.

    Args:
        logits: floating tensor (float16, bfloat16, float32 or float64).
        dim: int, the dimension to normalise over. Defaults to -1.
        mask: None, or a bool or numeric tensor broadcastable to `logits`' shape:
            the entries where it is False (or 0) get weight exactly 0 and gradient
            0, whatever their logits hold (a padding position's garbage, inf, NaN),
            and the shift is the largest kept logit. A fully masked row gives all
            zeros. Defaults to None (every entry counts).

    Returns:
        A tensor of `logits`' shape and dtype; each slice along `dim` with a kept
        entry sums to 1.

    Raises:
        TypeError: `logits` is not a floating tensor.
        ValueError: `dim` is not an int.

    Example:
        >>> stable_softmax(torch.tensor([1000.0, 1000.0]))
        tensor([0.5000, 0.5000])
        >>> stable_softmax(torch.tensor([1000.0, 5.0]), mask=torch.tensor([0.0, 1.0]))
        tensor([0., 1.])
    """
    check_int_dim(dim)
    logits = floating_tensor(logits, "logits")
    if mask is None:
        exps = torch.exp(logits - _finite_max(logits, (dim,)))
    else:
        keep = torch.broadcast_to(_kept(mask, logits.device), logits.shape)
        shift = _finite_max(torch.where(keep, logits, _MINUS_INF), (dim,))
        # Masked entries never reach exp: their logits may be anything.
        exps = torch.exp(torch.where(keep, logits - shift, _MINUS_INF))
    return safe_div(exps, torch.sum(exps, dim=dim, keepdim=True))


def stable_segment_softmax(logits, segment_ids, num_segments) -> torch.Tensor:
    """Return `exp(logits)` normalised over each segment, computed without overflow.

    A graph network's edge attention written by hand,
    `e = s.exp(); e / torch.zeros(n).index_add(0, ids, e)[ids]` (or `scatter_add`,
    or torch_scatter's `scatter(..., reduce="sum")`), overflows as soon as one
    score passes the dtype's exp limit. Each segment's softmax is unchanged by
    subtracting a constant per segment, so each score is shifted by its own
    segment's maximum (`scatter_reduce(..., "amax")`, held constant), gathered
    back to it. Only core torch ops are used (no torch_scatter).

    Entries of `-inf` give exact zeros; a segment of only `-inf` gives zeros, with
    gradient 0. Empty segments take no part (no entry gathers them).

    Args:
        logits: floating tensor (float16, bfloat16, float32 or float64) whose first
            dimension runs over the entries (edges); further dimensions (heads) are
            normalised separately.
        segment_ids: int32 or int64 tensor of shape [logits.shape[0]], the segment
            (receiving node) of each entry, in [0, num_segments); any order.
        num_segments: int, the number of segments (nodes).

    Returns:
        A tensor of `logits`' shape and dtype; the entries of each segment sum to 1.

    Raises:
        TypeError: `logits` is not a floating tensor, or `segment_ids` not integer.
        ValueError: `num_segments` is not a positive int, or `segment_ids` is not
            one-dimensional with one id per entry.

    Example:
        >>> ids = torch.tensor([0, 0, 1])
        >>> stable_segment_softmax(torch.tensor([1000.0, 1000.0, 3.0]), ids, 2)
        tensor([0.5000, 0.5000, 1.0000])
    """
    logits = floating_tensor(logits, "logits")
    ids = _segment_ids(segment_ids, logits)
    count = _segment_count(num_segments)
    rest = logits.shape[1:]
    scatter_index = ids.reshape(-1, *[1] * len(rest)).expand_as(logits)
    # Starting from the dtype's lowest value, a segment of only -inf has a finite max.
    lowest = torch.full(
        (count, *rest), torch.finfo(logits.dtype).min, dtype=logits.dtype, device=logits.device
    )
    largest = lowest.scatter_reduce(0, scatter_index, logits.detach(), "amax")
    exps = torch.exp(logits - largest.index_select(0, ids))
    totals = torch.zeros_like(lowest).index_add(0, ids, exps)
    return safe_div(exps, totals.index_select(0, ids))


def stable_logsumexp(x, dim=-1, keepdim: bool = False) -> torch.Tensor:
    """Return `log(sum(exp(x)))` over `dim`, computed without overflow.

    Uses `logsumexp(x) = m + log(sum(exp(x - m)))` with `m` the maximum. For any
    constant `m` the identity holds, so holding `m` constant (`detach`) in both
    places keeps the gradient exact: it is `stable_softmax(x, dim)`.

    Args:
        x: floating tensor (float16, bfloat16, float32 or float64).
        dim: None, int, or tuple of ints: the dimensions to reduce. Defaults to -1.
        keepdim: bool, keep the reduced dimensions with size 1. Defaults to False.

    Returns:
        A tensor of `x`'s dtype, reduced over `dim`. A slice of all `-inf` gives
        `-inf`, with gradient 0 (`torch.logsumexp`'s is NaN there).

    Raises:
        TypeError: `x` is not a floating tensor.
        ValueError: `dim` or `keepdim` is not of a valid type.

    Example:
        >>> round(float(stable_logsumexp(torch.tensor([1000.0, 1000.0]))), 3)
        1000.693
    """
    check_dims(dim)
    check_bool(keepdim, "keepdim")
    x = floating_tensor(x, "x")
    dims = reduced_dims(x, dim)
    shift = _finite_max(x, dims)
    total = torch.sum(torch.exp(x - shift), dim=dims, keepdim=True) if dims else torch.exp(x)
    # The sum is 0 only for a slice of only -inf; `!=`, not `>`, keeps a NaN a NaN.
    result = safe_where(total != 0, torch.log, total, fallback=_MINUS_INF) + shift
    return result if keepdim else drop_reduced_dims(result, dims)


def _kept(mask, device: torch.device) -> torch.Tensor:
    """Where a mask keeps its entries, as bools: True, or any value but 0."""
    mask = torch.as_tensor(mask, device=device)
    return mask if mask.dtype == torch.bool else mask != 0


def _finite_max(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """The maximum over `dims` (kept), held constant; 0 where it is not finite.

    A slice of all `-inf` would otherwise be shifted by `-inf` into `-inf - -inf = NaN`.
    """
    largest = (torch.amax(x, dim=dims, keepdim=True) if dims else x).detach()
    return torch.where(torch.isfinite(largest), largest, torch.zeros_like(largest))


def _segment_ids(segment_ids, logits: torch.Tensor) -> torch.Tensor:
    """The segment ids as an int64 tensor on `logits`' device, one per entry."""
    ids = torch.as_tensor(segment_ids, device=logits.device)
    if ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(
            "`segment_ids` must be an int32 or int64 tensor. "
            f"Received: segment_ids.dtype={dtype_name(ids.dtype)}. "
            "Cast it first, e.g. `segment_ids.long()`."
        )
    if ids.dim() != 1 or logits.dim() == 0 or ids.shape[0] != logits.shape[0]:
        raise ValueError(
            "`segment_ids` must hold one id per entry of `logits`' first dimension. "
            f"Received: segment_ids.shape={tuple(ids.shape)}, logits.shape={tuple(logits.shape)}"
        )
    # scatter_reduce takes int64 indices only.
    return ids.long()


def _segment_count(num_segments) -> int:
    """`num_segments` as a Python int (a scalar integer tensor is read once)."""
    if isinstance(num_segments, torch.Tensor) and num_segments.dim() == 0:
        if not num_segments.is_floating_point():
            num_segments = int(num_segments)
    if not isinstance(num_segments, int) or isinstance(num_segments, bool) or num_segments < 1:
        raise ValueError(
            "`num_segments` must be a positive int, the number of segments. "
            f"Received: num_segments={num_segments!r}"
        )
    return num_segments
