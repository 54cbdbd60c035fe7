"""An affine normalising flow fitted by maximum likelihood, with a plain loop over
minibatches. Its scale is made with `torch.zeros`, so the log-determinant is a log of 0
in the very first step: nothing about the learning rate or the data can change that;
the scale must start elsewhere (at 1, the identity)."""

import torch
from torch import nn

torch.manual_seed(11)


class AffineFlow(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.zeros(dim))
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        z = (x - self.shift) * self.scale
        log_det = torch.log(torch.abs(self.scale)).sum()
        return z, log_det


samples = torch.randn(1024, 3) * torch.tensor([2.0, 0.5, 4.0]) + 1.5
flow = AffineFlow(3)
optimizer = torch.optim.Adam(flow.parameters(), lr=5e-2)
for epoch in range(4):
    for batch in samples.split(64):
        z, log_det = flow(batch)
        nll = 0.5 * (z**2).sum(dim=1).mean() - log_det
        optimizer.zero_grad()
        nll.backward()
        optimizer.step()
    print(f"epoch {epoch} nll {nll.item():.4f}")
