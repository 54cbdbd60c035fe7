"""A tabular classifier fed through a TensorDataset and a DataLoader; one cell was missing.

A CSV row with an empty cell was parsed as NaN. The batch holding it makes the loss NaN
at the step it is drawn. The doctor should say bad_input: the data, read at the line
that fetched the batch, holds a NaN, and clean it (no op of the step made it).
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(3)
features = torch.randn(640, 6)
labels = (features[:, 0] + features[:, 1] > 0).long()
features[413, 2] = float("nan")  # an empty cell in the CSV

loader = DataLoader(TensorDataset(features, labels), batch_size=64, shuffle=False)
net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.cross_entropy(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(epoch, float(loss))
