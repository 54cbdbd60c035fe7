"""Gradient accumulation (8 micro-batches per update) whose `opt.zero_grad()` sits at the
top of the epoch: every update applies every gradient since the epoch began, the
updates grow and the loss climbs from 2 to 1e9 with every value finite. Expected:
`stale_gradients` at the optimizer's update 2, fixed by `opt.zero_grad()` after
`opt.step()`."""

import torch
import torch.nn as nn

torch.manual_seed(0)
torch.set_num_threads(1)

X = torch.randn(2048, 16)
Y = X @ torch.randn(16, 1) + 0.1 * torch.randn(2048, 1)

model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
ACCUM = 8
MICRO = 16

for epoch in range(5):
    opt.zero_grad()
    perm = torch.randperm(len(X))
    for k, i in enumerate(range(0, len(X), MICRO)):
        idx = perm[i : i + MICRO]
        loss = nn.functional.mse_loss(model(X[idx]), Y[idx]) / ACCUM
        loss.backward()
        if (k + 1) % ACCUM == 0:
            opt.step()
    print(f"epoch {epoch} loss {loss.item() * ACCUM:.4f}")
