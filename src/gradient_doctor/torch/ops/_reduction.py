"""Dimension handling shared by the ops that reduce over dimensions (norm, logsumexp)."""

from __future__ import annotations

import torch


def check_dims(dim) -> None:
    """Raise unless `dim` is None, an int, or a non-empty tuple or list of ints.

    Raises:
        ValueError: `dim` has another type, or is an empty sequence.
    """

    def is_int(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    valid = (
        dim is None
        or is_int(dim)
        or (isinstance(dim, tuple | list) and len(dim) > 0 and all(map(is_int, dim)))
    )
    if not valid:
        raise ValueError(
            "`dim` must be None (all dimensions), an int, or a non-empty tuple of ints. "
            f"Received: dim={dim!r}"
        )


def reduced_dims(tensor: torch.Tensor, dim) -> tuple[int, ...]:
    """`dim` as the tuple of dimensions a reduction takes (None: every dimension)."""
    if dim is None:
        return tuple(range(tensor.dim()))
    return (dim,) if isinstance(dim, int) else tuple(dim)


def drop_reduced_dims(tensor: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """Remove the size-1 dimensions that a `keepdim=True` reduction over `dims` left.

    Args:
        tensor: torch.Tensor, the result of a reduction with `keepdim=True`.
        dims: tuple of ints, the reduced dimensions (see `reduced_dims`).

    Returns:
        The tensor that the same reduction with `keepdim=False` would have given.
    """
    return tensor.squeeze(dims) if dims else tensor
