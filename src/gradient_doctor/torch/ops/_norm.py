"""`safe_norm`: the Euclidean norm, with gradient 0 (not NaN) at a zero vector."""

from __future__ import annotations

import torch

from gradient_doctor.torch.ops._arguments import check_bool, floating_tensor
from gradient_doctor.torch.ops._reduction import check_dims, drop_reduced_dims, reduced_dims
from gradient_doctor.torch.ops._where import safe_where


def safe_norm(x, dim=None, keepdim: bool = False) -> torch.Tensor:
    """Return the Euclidean norm of `x` over `dim`, with finite gradients everywhere.

    The hand-written root `torch.sqrt((x ** 2).sum(dim))` has the gradient
    `x / ||x||`, `0/0 = NaN`, at a zero vector, which is where a WGAN-GP penalty or
    an `x / ||x||` normalisation sooner or later lands. Adding an epsilon
    (`sqrt(sum(x**2) + eps)`) would fix the gradient but bias every value and move
    the minimum; instead the norm is taken through `safe_where` (the double-where
    pattern): a zero vector gives the value 0 and the gradient 0 (the subgradient,
    as `torch.linalg.vector_norm` gives), and every other vector its exact norm and
    gradient. The function is built from differentiable ops only (no custom
    `torch.autograd.Function`), so second-order gradients, as in a gradient penalty
    (`create_graph=True`), are finite and exact too.

    The squares are summed after dividing by the largest magnitude, so the value
    does not overflow where the hand-written root does (float16 entries from 256 up)
    nor underflow to 0 for tiny vectors. Away from zero the value equals
    `torch.linalg.vector_norm`'s up to rounding.

    Args:
        x: floating tensor (float16, bfloat16, float32 or float64).
        dim: None, int, or tuple of ints: the dimensions to reduce (a pair gives the
            Frobenius norm). Defaults to None, all dimensions.
        keepdim: bool, keep the reduced dimensions with size 1. Defaults to False.

    Returns:
        A tensor of `x`'s dtype, reduced over `dim`.

    Raises:
        TypeError: `x` is not a floating tensor.
        ValueError: `dim` or `keepdim` is not of a valid type.

    Example:
        >>> x = torch.tensor([[0.0, 0.0], [3.0, 4.0]], requires_grad=True)
        >>> y = safe_norm(x, dim=-1)
        >>> y.sum().backward()
        >>> y.detach(), x.grad
        (tensor([0., 5.]), tensor([[0.0000, 0.0000],
                [0.6000, 0.8000]]))
    """
    check_dims(dim)
    check_bool(keepdim, "keepdim")
    x = floating_tensor(x, "x")
    dims = reduced_dims(x, dim)
    # `!=` rather than `> 0` on the largest magnitude, so that a NaN is not taken
    # for a zero vector and hidden.
    nonzero = torch.any(x != 0, dim=dims, keepdim=True) if dims else x != 0
    norm = safe_where(nonzero, lambda v: _scaled_norm(v, dims), x, fallback=0.0)
    return norm if keepdim else drop_reduced_dims(norm, dims)


def _scaled_norm(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """The norm of vectors that are not zero, as `largest * ||x / largest||`.

    The norm is homogeneous, so holding `largest` constant (`detach`) leaves the
    gradients of every order exact.
    """
    if not dims:  # a 0-d tensor: its norm is its magnitude
        return torch.abs(x)
    largest = torch.amax(torch.abs(x), dim=dims, keepdim=True).detach()
    # An inf or NaN entry is passed through unscaled, so the value is inf or NaN
    # as the plain norm's would be.
    scale = torch.where(torch.isfinite(largest), largest, torch.ones_like(largest))
    return scale * torch.sqrt(torch.sum(torch.square(x / scale), dim=dims, keepdim=True))
