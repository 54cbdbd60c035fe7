"""A regression loop that skips a batch whose loss is not finite and trains on, as many
GAN and RL scripts do (`if torch.isnan(loss): continue`): the run ends "healthy", with a
count of skipped batches the author may never read. Inputs are scaled to unit norm by
hand; a batch of all-zero rows (missing features filled with 0) divides 0 by 0."""

import torch
from torch import nn


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, features):
        norms = features.norm(dim=1, keepdim=True)
        return self.body(features / norms)


torch.manual_seed(0)
model = Regressor()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
inputs, targets = torch.randn(80, 4), torch.randn(80, 1)
inputs[40:50] = 0.0
skipped = 0
for epoch in range(3):
    for start in range(0, 80, 10):
        loss = nn.functional.mse_loss(
            model(inputs[start : start + 10]), targets[start : start + 10]
        )
        if torch.isnan(loss):
            skipped += 1
            continue
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f} skipped {skipped}")
