"""The gradients reset the old way, `p.grad.data.zero_()` after each update (no
`zero_grad()` call, no version counter moved). Expected: healthy."""

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(256, 10)
y = x @ torch.randn(10, 1)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(40):
    i = (step * 32) % 256
    loss = ((model(x[i : i + 32]) - y[i : i + 32]) ** 2).mean()
    loss.backward()
    opt.step()
    for p in model.parameters():
        p.grad.data.zero_()
print(loss.item())
