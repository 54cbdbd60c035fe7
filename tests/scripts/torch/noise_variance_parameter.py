"""Learn a regression and its output noise variance by maximum likelihood: the variance
is an nn.Parameter fed straight into torch.sqrt, with nothing keeping it positive, and
SGD with momentum carries it below zero.

The doctor should find: forward_domain at sqrt on the `sigma = torch.sqrt(...)` line,
the parameter `noise_var` named as the root's input itself, and a softplus
reparameterisation of it on that line that holds when rerun.
"""

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(2048, 4)
y = x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0]]) + 0.01 * torch.randn(2048, 1)


class NoisyLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 1)
        self.noise_var = nn.Parameter(torch.tensor(1.0))

    def forward(self, inputs):
        return self.linear(inputs)


model = NoisyLinear()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(20):
    for i in range(0, 2048, 64):
        xb, yb = x[i : i + 64], y[i : i + 64]
        sigma = torch.sqrt(model.noise_var)
        loss = (torch.log(sigma) + 0.5 * ((yb - model(xb)) / sigma) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, loss.item())
