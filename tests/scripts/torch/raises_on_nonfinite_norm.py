"""A robust regression loss, mean |error|^0.8, on a sigmoid output, in a module-level
loop whose clipping raises on a non-finite gradient norm before it steps
(`clip_grad_norm_(..., error_if_nonfinite=True)`, the check many training loops carry).
The loss's root has an infinite slope at an error of exactly 0, which float32 reaches
once a sigmoid saturates to exactly its target."""

import torch
import torch.nn as nn

torch.manual_seed(4)
x = torch.randn(512, 6)
y = (x[:, :1] + 0.5 * x[:, 1:2] > 0).float()  # targets 0 and 1

model = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=2.0)

for step in range(300):
    idx = torch.randint(0, 512, (64,))
    pred = torch.sigmoid(model(x[idx]))
    loss = ((pred - y[idx]).abs() ** 0.8).mean()
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0, error_if_nonfinite=True)
    opt.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.4f}")
