"""A classifier trained with a cross-entropy written by hand over three lines: softmax,
the target's probability gathered, its log. One label in ten is noise, so the model
grows confident against those: their probability underflows, and the gradient of the
log, 1 / p, overflows. log_softmax computes the same values exactly."""

import torch
from torch import nn

torch.manual_seed(0)
centres = torch.randn(5, 20) * 10
y = torch.randint(0, 5, (512,))
x = centres[y] + torch.randn(512, 20)
flip = torch.rand(512) < 0.1
y = torch.where(flip, torch.randint(0, 5, (512,)), y)  # label noise

model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=0.05)
for step in range(150):
    logits = model(x)
    probs = torch.softmax(logits, dim=1)
    picked = probs.gather(1, y[:, None]).squeeze(1)
    loss = -torch.log(picked).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(step, loss.item())
