"""The random generators' state before a call, so its replay draws the same masks and noise."""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RngState:
    """The default generators' states: torch's CPU one, each initialized CUDA device's,
    Python's `random`, and NumPy's global one when NumPy is loaded."""

    cpu: torch.Tensor
    cuda: tuple[torch.Tensor, ...]
    python: object
    numpy: object | None


def save() -> RngState:
    """The generators' states now (a few kilobytes copied; no draw is consumed)."""
    cuda = tuple(torch.cuda.get_rng_state_all()) if torch.cuda.is_initialized() else ()
    numpy = sys.modules.get("numpy")
    return RngState(
        cpu=torch.get_rng_state(),
        cuda=cuda,
        python=random.getstate(),
        numpy=numpy.random.get_state() if numpy is not None else None,
    )


def restore(state: RngState) -> None:
    """Put the generators back to `state`: the next draws repeat those made after it."""
    torch.set_rng_state(state.cpu)
    if state.cuda:
        torch.cuda.set_rng_state_all(list(state.cuda))
    random.setstate(state.python)
    numpy = sys.modules.get("numpy")
    if state.numpy is not None and numpy is not None:
        numpy.random.set_state(state.numpy)
