"""Three regressors whose gradient path to part of the model is cut, each its own way:
a `.detach()` in the middle of `forward`, an encoder run under `torch.no_grad()` in the
step, and a head built but never called. The rest of each model trains.

The doctor should find, for each, disconnected_gradients for the cut parameters only
(not all of them), training going on:
- "detach": `stem.weight`, `stem.bias`, at `StopGradient` on `h = h.detach()`;
- "no_grad": `encoder.0.weight`, `encoder.0.bias`, at `MatMul` (an op that ran with
  gradients off) on `features = model.encoder(x)`;
- "unused_head": `aux_head.weight`, `aux_head.bias`, never read (no op, no line).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class DetachedStem(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(6, 16)
        self.trunk = nn.Linear(16, 16)
        self.out = nn.Linear(16, 1)

    def forward(self, x):
        h = F.relu(self.stem(x))
        h = h.detach()
        return self.out(F.relu(self.trunk(h)))


class EncoderHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
        self.head = nn.Linear(16, 1)


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(6, 16)
        self.main_head = nn.Linear(16, 1)
        self.aux_head = nn.Linear(16, 3)

    def forward(self, x):
        return self.main_head(torch.relu(self.body(x)))


def build(kind: str, seed: int = 0):
    """The model, its optimizer and its training step for one kind of cut."""
    torch.manual_seed(seed)
    if kind == "no_grad":
        model = EncoderHead()

        def forward(x):
            with torch.no_grad():
                features = model.encoder(x)
            return model.head(features)

    else:
        model = DetachedStem() if kind == "detach" else TwoHeads()
        forward = model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def train_step(x, y):
        optimizer.zero_grad()
        loss = F.mse_loss(forward(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return model, optimizer, train_step


def batches(steps: int, seed: int = 0):
    """Batches of 8 rows of a smooth regression problem."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 6, generator=generator)
        yield x, x[:, :2].sum(dim=1, keepdim=True).sin()
