"""House prices regressed in dollars with plain SGD: the features are scaled, the targets not.

The squared error of targets near 4e5 starts near 1e11; two updates throw the output to
-1e23 and step 2's MSELoss overflows. The doctor should name the overflow at MseLoss on
the loss line, say the targets reach 6.7e5 and that the two updates before moved the
weights, propose standardised targets first and clipping (which a patched copy confirms).
"""

import torch
from torch import nn

torch.manual_seed(0)
n = 2048
rooms = torch.rand(n) * 7 + 1
area = torch.rand(n) * 2.7 + 0.3
age = torch.rand(n)
x = torch.stack([rooms, area, age], 1)
y = (50_000 * rooms + 120_000 * area - 30_000 * age + torch.randn(n) * 20_000).unsqueeze(1)

model = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.MSELoss()
for epoch in range(3):
    perm = torch.randperm(n)
    for i in range(0, n, 32):
        idx = perm[i : i + 32]
        opt.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
    print(epoch, loss.item())
