"""Two towers trained with a contrastive loss written by hand with tensor methods:
`logits.exp().sum(-1).log()` normalises each row, at a learnable inverse temperature
started at 8: after the first update a row's largest logit passes float32's exp limit
(88.7), and the sum of the row's exps is inf.

The doctor should find: forward_overflow at `Exp` on the `info_nce` line, phase
forward. The patch that holds is `torch.logsumexp(logits, -1)` (the same value, with no
overflow); clamping the exp's input alone lets the cross-entropy fall below zero
without bound, so it must not be verified.
"""

import torch
from torch import nn


def info_nce(logits):
    """The cross-entropy of each row's matching column, the log-sum-exp by hand."""
    return (logits.exp().sum(-1).log() - logits.diagonal()).mean()


class TwoTowers(nn.Module):
    def __init__(self, features=16, width=32):
        super().__init__()
        self.left = nn.Linear(features, width)
        self.right = nn.Linear(features, width)
        self.inverse_temperature = nn.Parameter(torch.tensor(8.0))

    def forward(self, a, b):
        return self.inverse_temperature * self.left(a) @ self.right(b).t()


def train(steps=150):
    torch.manual_seed(1)
    pairs = torch.randn(512, 16)
    model = TwoTowers()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    for step in range(steps):
        rows = torch.randint(0, 512, (48,))
        a = pairs[rows] + 0.1 * torch.randn(48, 16)
        b = pairs[rows] + 0.1 * torch.randn(48, 16)
        loss = info_nce(model(a, b))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 25 == 0:
            print(step, round(loss.item(), 4))


if __name__ == "__main__":
    train()
