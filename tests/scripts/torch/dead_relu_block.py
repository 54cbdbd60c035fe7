"""A regression MLP whose middle block's ReLUs all die: its bias starts far below zero.

The middle `nn.Linear` of `Regressor.trunk` is initialised with a bias of -30 while
its inputs stay small, so every one of its ReLU units outputs 0 for every example from
the first step; no gradient reaches it, it never recovers, and the loss still goes
down a little through the skip path. Nothing ever becomes NaN.

The doctor should find: no problem, and a dead-units warning naming `trunk.2`
(100% of its ReLU units), its fixes spelled in PyTorch (nn.LeakyReLU, kaiming_normal_).
"""

import torch
from torch import nn
from torch.nn import functional as F


class Regressor(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(3, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU()
        )
        self.skip = nn.Linear(3, width)
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        return self.out(self.trunk(x) + F.relu(self.skip(x)))


def train(steps=230):
    torch.manual_seed(3)
    model = Regressor()
    with torch.no_grad():
        model.trunk[2].bias.fill_(-30.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(4)
    for step in range(steps):
        x = torch.randn(32, 3, generator=generator)
        y = x.sum(dim=1, keepdim=True).sin()
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    train()
