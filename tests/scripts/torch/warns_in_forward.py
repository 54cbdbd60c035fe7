"""A loop whose step reads a loss that requires grad as a Python float (`float(loss)`),
which PyTorch warns about from C++ at the user's line, at every step: the plain run
shows the warning once, at this file's line; watched, it must be the same, though the
doctor's hooks sit between the line and the op on sampled steps."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 4), torch.randn(64, 1)
logged = []
for _ in range(30):
    loss = ((model(x) - y) ** 2).mean()
    logged.append(float(loss))
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {logged[-1]:.4f}")
