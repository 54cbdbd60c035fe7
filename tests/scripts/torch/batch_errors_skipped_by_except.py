"""A loop that skips any batch whose step raises (`except Exception: continue`), as people
write around flaky data. The model's raw output goes into a square root: NaN at the first
step. The doctor's stop must not be swallowed by the handler: the step is diagnosed."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
features, targets = torch.randn(256, 4), torch.randn(256, 1)
for epoch in range(3):
    for batch, target in zip(features.split(32), targets.split(32)):
        try:
            spread = torch.sqrt(model(batch) - 0.5)
            loss = ((spread - target) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        except Exception as error:  # a bad batch: skip it
            print("skipped a batch:", type(error).__name__)
            continue
    print("epoch", epoch)
