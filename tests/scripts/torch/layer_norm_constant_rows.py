"""A PyTorch encoder with its layer norm written by hand, `(x - mean) / std`, over token
rows of which the padded ones are all zeros: their std is exactly 0, 0 / 0 is NaN.

The doctor should find: forward_domain at `RealDiv`, in module `norm`, on the
`return self.gain * (x - mean) / std + self.bias` line, phase forward, at step 0; its
safe-division fix spelled in PyTorch (there is no `divide_no_nan`), which holds.
"""

from __future__ import annotations

import torch
from torch import nn


class HandLayerNorm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.gain * (x - mean) / std + self.bias


class Encoder(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.norm = HandLayerNorm(width)
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        return self.head(self.norm(x)).mean(dim=1)


def build(seed: int = 0):
    """The model, its optimizer and the training step."""
    torch.manual_seed(seed)
    model = Encoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    def train_step(x, y):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return model, optimizer, train_step


def batches(steps: int, seed: int = 0):
    """Batches of 4 sequences of 6 tokens, the last two tokens of each padding (zeros)."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(4, 6, 8, generator=generator)
        x[:, 4:] = 0.0
        yield x, torch.randn(4, 1, generator=generator)
