"""The per-update decision: one fused finite check of the losses and gradients, one host read."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gradient_doctor.core.findings import TensorStats
from gradient_doctor.core.quick_init import quick_init
from gradient_doctor.torch_adapter.localize.tensor_stats import summarize


@quick_init
@dataclass(frozen=True)
class Check:
    """What one update's check read.

    Attributes:
        finite: every loss and every gradient value was finite.
        loss: the last loss `backward()` was called on before the update (summed
            when it was not a scalar), or None when none was seen.
        grad_norm: the global L2 norm of the gradients (0.0 with none).
        norms: each gradient's L2 norm, in the gradients' order, read with the rest
            and rounded to float32 (kept for the per-module statistics, which read
            every statistic in float32); None after a failure.
    """

    finite: bool
    loss: float | None
    grad_norm: float
    norms: list[float] | None = None
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

    The gradients' norms come from one `torch._foreach_norm`; those norms and each loss
    are stacked and read with one `tolist()`, and the global norm is the root of the
    norms' summed squares, taken on the host in float64 (two device ops fewer a step
    than a norm of the norms on the device). The values are read, never written:
    training computes exactly what it computes unwatched.

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
        parts = list(torch._foreach_norm(grads)) if grads else []
        # A scalar loss is read as it is (a sum of it, less one op); a loss that is not
        # a scalar is summed.
        parts += [loss if loss.dim() == 0 else loss.sum() for loss in losses]
        if not parts:
            return Check(True, None, 0.0)
        stacked = _read(parts, all(loss.is_floating_point() for loss in losses))
        read = stacked.tolist()
    count = len(grads)
    grad_norm = _root_of_squares(read[:count])
    # + 0.0 makes a -0.0 loss 0.0, as summing it on the device did.
    loss = read[-1] + 0.0 if losses else None
    # A sum is finite only when every term is (an infinity or a NaN carries through);
    # one that overflows is confirmed term by term.
    if not (math.isfinite(sum(read)) or all(math.isfinite(value) for value in read)):
        return _confirmed(losses, grads, loss, grad_norm, squares)
    if squares and grad_norm > _FLOAT16_SQUARE_LIMIT:
        overflow = _square_overflow(grads, grad_norm)
        if overflow is not None:
            return Check(False, loss, grad_norm, squares_overflow=overflow)
    norms = read[:count] if grads else None
    if norms and stacked.dtype == torch.float64:
        norms = torch.tensor(norms, dtype=torch.float32).tolist()
    return Check(True, loss, grad_norm, norms)


def _root_of_squares(norms: Sequence[float]) -> float:
    """The global norm of gradients whose own norms these are (inf past float64's range;
    NaN with a NaN among them)."""
    try:
        return math.sqrt(math.fsum(norm * norm for norm in norms))
    except (OverflowError, ValueError):  # an inf, or inf - inf inside the sum: NaN
        return math.inf if all(norm == norm for norm in norms) else math.nan


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


def _read(values: Sequence[torch.Tensor], floating: bool) -> torch.Tensor:
    """0-d tensors stacked for one device-to-host copy, each value exact.

    `torch.stack` promotes floating dtypes to the widest among them, which holds each
    value exactly; with a loss that is not floating (`floating` False), or tensors on
    several devices, they are stacked in float64.
    """
    if floating:
        try:
            return torch.stack(values)
        except RuntimeError:  # tensors on several devices
            pass
    return _in_float64(values)


def _in_float64(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """0-d tensors stacked in float64 on the first one's device."""
    first = values[0]
    return torch.stack([value.to(first.device, torch.float64) for value in values])


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
    return dense_gradients(optimizer)[0]


def dense_grads(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The gradients the optimizer is about to apply (sparse ones are not checked)."""
    return dense_gradients(optimizer)[1]


def dense_gradients(
    optimizer: torch.optim.Optimizer,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The optimizer's parameters holding a dense gradient, and those gradients, in one
    pass over its parameters (each update's check reads them)."""
    params, grads = [], []
    strided = torch.strided
    for group in optimizer.param_groups:
        for param in group["params"]:
            grad = param.grad
            if grad is not None and grad.layout == strided:
                params.append(param)
                grads.append(grad)
    return params, grads
