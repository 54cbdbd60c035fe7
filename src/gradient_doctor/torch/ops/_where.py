"""`safe_where`: the double-where pattern, so the branch not taken cannot poison gradients."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gradient_doctor.torch.ops._arguments import dtype_name


def safe_where(
    condition,
    fn: Callable[[torch.Tensor], torch.Tensor],
    x,
    fallback=0.0,
    *,
    safe_value=1.0,
) -> torch.Tensor:
    """Return `fn(x)` where `condition` holds and `fallback` elsewhere, with finite gradients.

    `torch.where(condition, fn(x), fallback)` has the right value but not the right
    gradient: `fn` still runs on the entries where `condition` is False, and if its
    gradient there is infinite (log, pow with p < 1, 1/x at 0), `0 * inf` makes the
    gradient NaN although the branch was never taken. This function computes

        torch.where(condition, fn(torch.where(condition, x, safe_value)), fallback)

    so `fn` only ever sees `x` where its result is used and `safe_value` elsewhere.

    Args:
        condition: bool tensor, where to use `fn(x)`; broadcastable with `x`.
        fn: callable taking one tensor (shaped like `torch.where(condition, x, ...)`)
            and returning a tensor broadcastable with `condition`. Other tensors
            may enter it through a closure, as long as they are finite.
        x: tensor, the input to protect.
        fallback: tensor or float, the result where `condition` is False; a tensor
            receives the gradient there. Defaults to 0.0.
        safe_value: tensor or float, what `fn` receives instead of `x` where
            `condition` is False. The gradient with respect to `x` is 0 there
            whatever it is, but `fn` and its gradient must be finite at it, or the
            NaN reaches the tensors `fn` closes over or mixes entries with (a
            reduction, a matmul): e.g. 1.0 for a divisor, 0.0 for `torch.acos`.
            Defaults to 1.0.

    Returns:
        A tensor of `fn`'s dtype; its gradient with respect to `x` is 0 wherever
        `condition` is False.

    Raises:
        TypeError: `fn` is not callable, or `condition` is not a bool tensor.

    Example:
        >>> x = torch.tensor([0.0, 2.0], requires_grad=True)
        >>> y = safe_where(x > 0, torch.log, x, fallback=0.0)
        >>> y.sum().backward()
        >>> y.detach(), x.grad
        (tensor([0.0000, 0.6931]), tensor([0.0000, 0.5000]))
    """
    if not callable(fn):
        raise TypeError(
            f"`fn` must be a callable taking one tensor, e.g. `torch.log`. Received: fn={fn!r}"
        )
    x = torch.as_tensor(x, dtype=None if hasattr(x, "dtype") else torch.get_default_dtype())
    condition = torch.as_tensor(condition, device=x.device)
    if condition.dtype != torch.bool:
        raise TypeError(
            "`condition` must be a bool tensor, e.g. `x > 0`. "
            f"Received: condition.dtype={dtype_name(condition.dtype)}"
        )
    result = fn(torch.where(condition, x, _like(safe_value, x)))
    return torch.where(condition, result, _like(fallback, result))


def _like(value, tensor: torch.Tensor):
    """A tensor `value` cast to `tensor`'s dtype (differentiably); a Python number as it is.

    `torch.where` would otherwise promote a float16 result to a float32 fallback's dtype.
    """
    if isinstance(value, torch.Tensor):
        return value.to(dtype=tensor.dtype, device=tensor.device)
    return value
