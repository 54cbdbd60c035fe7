"""A PyTorch loop that writes into its folder as it trains: a line appended to `train.log`
every step, and from step 4 on, every 4 steps, a `torch.save` of the weights over
`model.pt` and a `np.save` of the features over `features.npy` (both large files that were
there before the run). A `torch.log` of a ReLU's output meets an exact zero at step 3.

The doctor should find forward_domain at `Log` on the `torch.log(torch.relu(...))` line,
step 3; its reruns run in scratch copies, so `train.log` holds one run's four lines and
the two large files are as they were before the run. The patched copy's `np.save` over
the linked `features.npy` is refused, so its fix is not confirmed, and says why.
"""

import numpy as np

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(2, 1)
with torch.no_grad():
    model.weight.fill_(1.0)
    model.bias.fill_(0.0)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
features = np.ones((8, 2), dtype="float32")

for step in range(12):
    sign = -1.0 if step == 3 else 1.0
    x = torch.from_numpy(features) * sign
    loss = -torch.log(torch.relu(model(x))).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with open("train.log", "a") as log:
        print(f"step {step} loss {loss.item():.6f}", file=log)
    if step % 4 == 0 and step > 0:
        torch.save(model.state_dict(), "model.pt")
        np.save("features.npy", features)
