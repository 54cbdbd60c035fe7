"""A plain function loop whose step draws its own noise, `torch.randn`, and takes
`torch.sqrt(scale + noise)` with a learned scale: at the first draw deep enough below
-scale the root of a negative number is NaN. Which step fails depends on the draws alone.

The doctor should find: forward_domain at `Sqrt` on the `spread = torch.sqrt(...)` line,
phase forward, the replay drawing the same noise as the failing call (its input's minimum
is that call's), and the generator left where the unwatched run leaves it.
"""

from __future__ import annotations

import torch


def make(seed: int = 0):
    """A learned scale, its optimizer and the step."""
    torch.manual_seed(seed)
    scale = torch.nn.Parameter(torch.tensor(3.0))
    optimizer = torch.optim.SGD([scale], lr=0.01)
    seen = []

    def step(target):
        optimizer.zero_grad()
        noise = torch.randn(16)
        seen.append(noise.min())
        spread = torch.sqrt(scale + noise)
        loss = (spread.mean() - target) ** 2
        loss.backward()
        optimizer.step()
        return loss.detach()

    return scale, optimizer, step, seen
