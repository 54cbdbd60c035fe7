"""A subclassed model whose forward sends the encoder's output through NumPy and back:
`torch.from_numpy(self.encoder(x).detach().numpy())` is a new tensor with no autograd
history, so the head trains and the encoder never gets a gradient.

The doctor should find: disconnected_gradients for `encoder.0.weight` and
`encoder.0.bias` (not all), the path leaving PyTorch for NumPy on the `from_numpy` line,
and a `stay_in_framework` fix that rewrites that line as `h = self.encoder(x)`, worded
with the `torch.from_numpy` the line calls (no TensorFlow anywhere).
"""

from __future__ import annotations

import torch
from torch import nn


class EncoderHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = torch.from_numpy(self.encoder(x).detach().numpy())
        return self.head(h)


def build(seed: int = 0):
    """The model, its optimizer and the training step."""
    torch.manual_seed(seed)
    model = EncoderHead()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(x, y):
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        return loss.detach()

    return model, optimizer, train_step


def batches(steps: int, seed: int = 0):
    """Batches of 16 rows, targets the sum of the features."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, 4, generator=generator)
        yield x, x.sum(dim=1, keepdim=True)
