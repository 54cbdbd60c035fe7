"""A regression of log-counts written without a link: the network's raw output goes
straight into torch.log, and the first batch already has negative outputs. The batch is
drawn inside the loop, after the seed, and the net has dropout: a replay of step 0 must
draw the same batch and the same masks."""

import torch
from torch import nn

torch.manual_seed(7)
net = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)

for step in range(30):
    features = torch.randn(48, 6)
    counts = torch.poisson(torch.full((48, 1), 3.0))
    rate = net(features)
    loss = (rate - counts * torch.log(rate)).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f}")
