"""A subclassed model with a parameter of its own, not of a layer: `self.scale` multiplies
the body's output inside `torch.exp`, and a high learning rate drives it up until the exp
overflows (step 1).

The doctor should find: forward_overflow at `Exp`, and a constrain_weights fix worded for
the parameter `scale` (`model.scale.clamp_(...)`, no patch: no layer's line builds it),
never for a layer named after the model's class.
"""

from __future__ import annotations

import torch
from torch import nn


class ScaledExp(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.scale = nn.Parameter(torch.ones(8))

    def forward(self, x):
        h = self.body(x)
        return torch.exp(self.scale * h).sum(dim=1, keepdim=True)


def build(seed: int = 0):
    """The model, its optimizer and the training step."""
    torch.manual_seed(seed)
    model = ScaledExp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)

    def train_step(x, y):
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        return loss.detach()

    return model, optimizer, train_step


def batches(steps: int, seed: int = 0):
    """Batches of 16 rows of large features, targets 0."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        yield torch.randn(16, 4, generator=generator) * 3, torch.zeros(16, 1)
