"""A module-level PyTorch training loop, no function anywhere: a small classifier's
log-likelihood half stable, `F.logsigmoid` for the positive class and `torch.log(1 - p)` of
a sigmoid's `p` written by hand for the negative one. The learning rate is high for data
this separable, the logits pass ~17, float32 rounds `p` to exactly 1, and that log is -inf.

The doctor should find, through `gradient-doctor run` with no change to this file:
forward_domain at `Log` on the `log_q = torch.log(1 - p)` line, phase forward, at the
first step whose loss is not finite (the script prints each step's loss), that update
skipped; a patch of that line verified by a patched copy of the folder, run again.
"""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
features = torch.randn(64, 4) * 3
labels = (features[:, :1] + features[:, 1:2] > 0).float()

model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)

for step in range(80):
    rows = slice(16 * (step % 4), 16 * (step % 4 + 1))
    x, y = features[rows], labels[rows]
    logits = model(x)
    p = torch.sigmoid(logits)
    log_p = F.logsigmoid(logits)
    log_q = torch.log(1 - p)
    loss = -(y * log_p + (1 - y) * log_q).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.6f}")
