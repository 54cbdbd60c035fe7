"""A model whose loss is rebuilt from Python numbers: the step reads each prediction's
error with `.item()` and wraps the numbers again with `torch.tensor`, so the loss is a
constant to autograd and no parameter gets a gradient.

The doctor should find: disconnected_gradients for all the parameters, the path leaving
PyTorch at `Item` on the `errors = [(p - t).abs().item() for p, t in zip(pred, y)]` line
and coming back on the `loss = torch.tensor(errors, requires_grad=True).mean()` line.
"""

from __future__ import annotations

import torch
from torch import nn


def build(seed: int = 0):
    """The model, its optimizer and the training step."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    def train_step(x, y):
        optimizer.zero_grad()
        pred = model(x).squeeze(1)
        errors = [(p - t).abs().item() for p, t in zip(pred, y)]
        loss = torch.tensor(errors, requires_grad=True).mean()
        loss.backward()
        optimizer.step()
        return loss.detach()

    return model, optimizer, train_step


def batches(steps: int, seed: int = 0):
    """Batches of 4 rows, targets a linear function of the inputs."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(4, 3, generator=generator)
        yield x, x @ torch.tensor([1.0, -2.0, 0.5])
