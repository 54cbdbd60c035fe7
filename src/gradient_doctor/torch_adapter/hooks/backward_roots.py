"""The tensors `backward()` is called on during a watched call: the losses its updates check."""

from __future__ import annotations

import functools

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


class backward_roots:  # a context manager named as the function it replaced
    """Collect the tensors `backward()` is called on while the block runs.

    Entering it gives the list they are appended to, in call order; the update's
    check takes and clears it (`take`). A class rather than a generator's context
    manager: it is entered around every watched call, and its own `__enter__` and
    `__exit__` cost a fraction of a generator's.
    """

    __slots__ = ("roots",)

    def __enter__(self) -> list[torch.Tensor]:
        global _original
        if not _open:
            _original = torch.autograd.backward
            if getattr(_recording_backward, "__wrapped__", None) is not _original:
                functools.update_wrapper(_recording_backward, _original)
            torch.autograd.backward = _recording_backward
        self.roots: list[torch.Tensor] = []
        _open.append(self.roots)
        return self.roots

    def __exit__(self, *exc_info) -> None:
        _open.remove(self.roots)
        if not _open:
            torch.autograd.backward = _original


def take() -> list[torch.Tensor]:
    """The roots noted since the last call, in the innermost open block (then cleared)."""
    if not _open:
        return []
    roots = list(_open[-1])
    _open[-1].clear()
    return roots
