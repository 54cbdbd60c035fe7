"""A model compiled with `torch.compile`, as PyTorch 2 tutorials advise: its forward
scales each row of features to unit norm by hand, and a block of all-zero rows (missing
readings) divides 0 by 0. The optimizer, its update and the check stay outside the
compiled code."""

import torch
from torch import nn

torch.manual_seed(0)


class UnitNormRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x):
        return self.body(x / x.norm(dim=1, keepdim=True))


model = UnitNormRegressor()
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(64, 8), torch.randn(64, 1)
x[32:40] = 0
for epoch in range(3):
    for i in range(0, 64, 8):
        loss = nn.functional.mse_loss(compiled(x[i : i + 8]), y[i : i + 8])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
