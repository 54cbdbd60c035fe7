"""torch's random generators' state before a call, so its replay draws the same masks and noise."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradient_doctor.core.quick_init import quick_init


@quick_init
@dataclass(frozen=True)
class RngState:
    """The default generators' states: the CPU one and each initialized CUDA device's.

    Python's `random` and NumPy's global generator are not kept: saving them costs
    ~16 and ~78 us a step here (torch's CPU state: ~2 us), and dropout and `torch.randn`
    noise draw from torch's. A step that draws from them replays with other draws.
    """

    cpu: torch.Tensor
    cuda: tuple[torch.Tensor, ...]


def save() -> RngState:
    """The generators' states now (a few kilobytes copied; no draw is consumed)."""
    cuda = tuple(torch.cuda.get_rng_state_all()) if torch.cuda.is_initialized() else ()
    return RngState(cpu=torch.get_rng_state(), cuda=cuda)


def restore(state: RngState) -> None:
    """Put the generators back to `state`: the next draws repeat those made after it."""
    torch.set_rng_state(state.cpu)
    if state.cuda:
        torch.cuda.set_rng_state_all(list(state.cuda))
