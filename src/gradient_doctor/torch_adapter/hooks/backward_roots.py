"""The tensors `backward()` is called on during a watched call: the losses its updates check."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch

# One list per watched call in progress (innermost last); `torch.autograd.backward` is
# patched while any is open.
_open: list[list[torch.Tensor]] = []
_original = None


def _recording_backward(tensors, *args, **kwargs):
    """`torch.autograd.backward`, noting its roots first (`Tensor.backward` calls it)."""
    if _open:
        roots = (tensors,) if isinstance(tensors, torch.Tensor) else tuple(tensors)
        _open[-1].extend(t for t in roots if isinstance(t, torch.Tensor))
    return _original(tensors, *args, **kwargs)


@contextlib.contextmanager
def backward_roots() -> Iterator[list[torch.Tensor]]:
    """Collect the tensors `backward()` is called on while the block runs.

    Yields:
        The list they are appended to, in call order; the update's check takes
        and clears it (`take`).
    """
    global _original
    if not _open:
        _original = torch.autograd.backward
        torch.autograd.backward = functools.wraps(_original)(_recording_backward)
    roots: list[torch.Tensor] = []
    _open.append(roots)
    try:
        yield roots
    finally:
        _open.remove(roots)
        if not _open:
            torch.autograd.backward = _original


def take() -> list[torch.Tensor]:
    """The roots noted since the last call, in the innermost open block (then cleared)."""
    if not _open:
        return []
    roots = list(_open[-1])
    _open[-1].clear()
    return roots
