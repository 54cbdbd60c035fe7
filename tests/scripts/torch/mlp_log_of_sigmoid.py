"""A PyTorch MLP classifier whose head returns log-probabilities written by hand,
`torch.log(1 - p)` of a sigmoid's `p`: trained with a learning rate this high on data it
separates, its logits pass ~17, float32 rounds `p` to exactly 1, and that log is -inf.

The doctor should find: forward_domain at `Log`, in module `head`, on the
`log_q = torch.log(1 - p)` line, phase forward, at the first step whose loss is not
finite; the update of that step skipped. Dropout in the body makes the replay depend on
the step's random draws.
"""

from __future__ import annotations

import torch
from torch import nn


class LogProbHead(nn.Module):
    """A linear unit and the log-probabilities of both classes."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, 1)

    def forward(self, h):
        p = torch.sigmoid(self.linear(h))
        log_p = torch.log(p)
        log_q = torch.log(1 - p)
        return log_p, log_q


class Classifier(nn.Module):
    def __init__(self, inputs: int = 4, hidden: int = 16) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Dropout(0.1))
        self.head = LogProbHead(hidden)

    def forward(self, x):
        return self.head(self.body(x))


def build(seed: int = 0, learning_rate: float = 0.3):
    """The model, its optimizer and the training step (forward, backward, update)."""
    torch.manual_seed(seed)
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate, momentum=0.9)

    def train_step(x, y):
        optimizer.zero_grad()
        log_p, log_q = model(x)
        loss = -(y * log_p + (1 - y) * log_q).mean()
        loss.backward()
        optimizer.step()
        return loss.detach()

    return model, optimizer, train_step


def batches(steps: int, seed: int = 0):
    """Batches of 16 of a linearly separable problem, in a fixed order."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 4, generator=generator) * 3
    y = (x[:, :1] + x[:, 1:2] > 0).float()
    for step in range(steps):
        rows = slice(16 * (step % 4), 16 * (step % 4 + 1))
        yield x[rows], y[rows]


if __name__ == "__main__":
    import gradient_doctor.torch

    model, optimizer, train_step = build()
    train_step = gradient_doctor.torch.watch(train_step, model=model, optimizer=optimizer)
    for x, y in batches(300):
        train_step(x, y)
