"""A healthy two-headed MLP with tanh and ReLU units, trained with SGD momentum.

A `nn.Tanh` hidden layer and a functional-ReLU one, He-initialised, fit a smooth
target; a module-level loop with a `DataLoader`. Nothing dies, saturates or explodes.

The doctor should find: nothing (status healthy, no problems, no warnings).
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(5)
inputs = torch.randn(512, 6)
targets = torch.cos(inputs[:, :2]).sum(dim=1, keepdim=True)

encoder = nn.Sequential(nn.Linear(6, 24), nn.Tanh())
decoder = nn.Linear(24, 24)
head = nn.Linear(24, 1)
for layer in (decoder, head):
    nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
    nn.init.zeros_(layer.bias)
parameters = [*encoder.parameters(), *decoder.parameters(), *head.parameters()]
optimizer = torch.optim.SGD(parameters, lr=0.02, momentum=0.9)
loader = DataLoader(
    TensorDataset(inputs, targets),
    batch_size=32,
    shuffle=True,
    generator=torch.Generator().manual_seed(6),
)

for epoch in range(15):
    for x, y in loader:
        prediction = head(torch.relu(decoder(encoder(x))))
        loss = ((prediction - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.5f}")
