"""The per-update decision: one fused finite check of the losses and gradients, one host read."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gradient_doctor.core.findings import TensorStats
from gradient_doctor.torch_adapter.localize.tensor_stats import summarize


@dataclass(frozen=True)
class Check:
    """What one update's check read.

    Attributes:
        finite: every loss and every gradient value was finite.
        loss: the last loss `backward()` was called on before the update (summed
            when it was not a scalar), or None when none was seen.
        grad_norm: the global L2 norm of the gradients (0.0 with none).
        norms: each gradient's L2 norm, a device vector in the gradients' order (kept
            for the per-module statistics, read with them); None after a failure.
    """

    finite: bool
    loss: float | None
    grad_norm: float
    norms: torch.Tensor | None = None
    squares_overflow: SquareOverflow | None = None


@dataclass(frozen=True)
class SquareOverflow:
    """Finite gradients a value of which squares past its dtype's largest value.

    Adam, AdamW, RMSprop and Adagrad keep the squares of the gradients: such a square
    is inf there, and every later step of that parameter `m / (sqrt(inf) + eps)` is 0,
    so it stops training for good with every value finite. Such an update is not
    finite either, and is skipped.

    Attributes:
        gradient: the gradient holding the largest such value (the tensor itself).
        stats: its summary, taken when it was checked.
        largest: that value's magnitude.
        dtype: its dtype's name ("float32").
    """

    gradient: torch.Tensor
    stats: TensorStats
    largest: float
    dtype: str


# Optimizers that keep a running average of the gradients' squares (Adamax keeps the
# largest magnitude instead; SGD and LBFGS keep no square).
_SQUARING = (
    torch.optim.Adam,
    torch.optim.AdamW,
    torch.optim.NAdam,
    torch.optim.RAdam,
    torch.optim.RMSprop,
    torch.optim.Adagrad,
    torch.optim.Adadelta,
)


def keeps_squares(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer` keeps the squares of the gradients (Adam's second moment)."""
    return isinstance(optimizer, _SQUARING)


def check(
    losses: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], squares: bool = False
) -> Check:
    """Check the update's losses and gradients with one device-to-host read.

    The gradients' norms come from one `torch._foreach_norm`; their global norm, and
    each loss summed, are stacked and read with one `tolist()`. The values are read,
    never written: training computes exactly what it computes unwatched.

    A global norm that is not finite is confirmed value by value before the update
    is called non-finite: finite gradients whose norm's square overflows the dtype
    are finite (their norm is then measured in float64). A finite global norm past
    the square root of the smallest dtype's largest value (256 in float16) is looked
    at value by value too, for an optimizer that keeps the gradients' squares
    (`squares`): a value whose own square overflows is a `SquareOverflow`, and the
    update is not finite.

    Args:
        losses: the tensors `backward()` was called on since the last update.
        grads: the dense gradients the optimizer is about to apply.
        squares: the optimizer keeps the squares of the gradients (`keeps_squares`).
    """
    with torch.no_grad():
        parts, norms = [], None
        if grads:
            norms = _stacked(torch._foreach_norm(list(grads)))
            parts.append(torch.linalg.vector_norm(norms))
        parts += [loss.detach().sum() for loss in losses]
        if not parts:
            return Check(True, None, 0.0)
        read = _stacked(parts).tolist()
    grad_norm = read[0] if grads else 0.0
    loss = read[-1] if losses else None
    if not all(math.isfinite(value) for value in read):
        return _confirmed(losses, grads, loss, grad_norm, squares)
    if squares and grad_norm > _FLOAT16_SQUARE_LIMIT:
        overflow = _square_overflow(grads, grad_norm)
        if overflow is not None:
            return Check(False, loss, grad_norm, squares_overflow=overflow)
    return Check(True, loss, grad_norm, norms)


def _square_limit(dtype: torch.dtype) -> float:
    """The largest magnitude whose square `dtype` holds."""
    return math.sqrt(torch.finfo(dtype).max)


_FLOAT16_SQUARE_LIMIT = _square_limit(torch.float16)  # the smallest of the float types'


def _square_overflow(grads: Sequence[torch.Tensor], grad_norm: float) -> SquareOverflow | None:
    """The gradient holding a value whose square overflows its dtype, or None; looked
    for value by value only where the global norm could hold one."""
    if grad_norm <= min(_square_limit(g.dtype) for g in grads):
        return None
    with torch.no_grad():
        largest = [float(g.detach().abs().max()) if g.numel() else 0.0 for g in grads]
    over = [i for i, (g, value) in enumerate(zip(grads, largest)) if value > _square_limit(g.dtype)]
    if not over:
        return None
    index = max(over, key=lambda i: largest[i])
    gradient = grads[index]
    dtype = str(gradient.dtype).removeprefix("torch.")
    return SquareOverflow(gradient, summarize(gradient), largest[index], dtype)


def combined(checks: Sequence[Check]) -> tuple[float | None, float | None]:
    """What several updates' checks (a GAN's two in one step) read together: the last
    loss seen, and the global gradient norm over all of them (None with no check)."""
    losses = [c.loss for c in checks if c.loss is not None]
    norm = math.sqrt(sum(c.grad_norm**2 for c in checks)) if checks else None
    return (losses[-1] if losses else None), norm


def _stacked(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """0-d tensors stacked on the first one's device, in float64 when dtypes differ."""
    first = values[0]
    if all(v.dtype == first.dtype and v.device == first.device for v in values):
        return torch.stack(list(values))
    return torch.stack([v.to(first.device, torch.float64) for v in values])


def _confirmed(losses, grads, loss: float | None, grad_norm: float, squares: bool) -> Check:
    """The slow check, on a failure only: each value, and the norm in float64."""
    with torch.no_grad():
        finite = all(bool(torch.isfinite(t).all()) for t in (*losses, *grads))
        if finite and grads:
            grad_norm = math.sqrt(sum(float(g.double().square().sum()) for g in grads))
    overflow = _square_overflow(grads, grad_norm) if squares and finite and grads else None
    if overflow is not None:
        return Check(False, loss, grad_norm, squares_overflow=overflow)
    return Check(finite, loss, grad_norm)


def parameters_with_grads(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's parameters that hold a gradient now."""
    return [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]


def dense_parameters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's parameters holding a dense gradient (sparse ones are not checked)."""
    return [p for p in parameters_with_grads(optimizer) if p.grad.layout == torch.strided]


def dense_grads(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The gradients the optimizer is about to apply (sparse ones are not checked)."""
    return [p.grad for p in dense_parameters(optimizer)]
