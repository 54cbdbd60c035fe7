"""A notebook turned script: the optimizer is built, then the model is built again (a
wider one) and trained. The optimizer holds the first model's parameters, so nothing the
loss uses ever moves, silently. Expected: disconnected_gradients at step 0, the
parameters that got the gradients named, the optimizer's line, and no rerun needed."""

import torch
import torch.nn.functional as F
from torch import nn


def make_model(width=16):
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 3))


torch.manual_seed(0)
inputs = torch.randn(256, 8)
labels = inputs[:, :3].argmax(dim=1)
model = make_model()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
model = make_model(width=32)  # "try a wider one"
for start in range(0, 256, 32):
    loss = F.cross_entropy(model(inputs[start : start + 32]), labels[start : start + 32])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(start // 32, repr(loss.item()))
