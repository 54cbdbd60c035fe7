"""Trains for epochs, saving a checkpoint after each and resuming from it when present;
hidden features are normalised by their sum, which a ReLU row of zeros turns into 0 / 0
in the second epoch. A rerun's copy of the folder must not hold the checkpoint the run
wrote, or it starts at epoch 1 with the rate the checkpoint restores."""

import os

import torch
from torch import nn

torch.manual_seed(0)
CHECKPOINT = "checkpoint.pt"
x = torch.randn(512, 6)
y = (x[:, 0] > 0).long()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(6, 8)
        self.out = nn.Linear(8, 2)

    def forward(self, inputs):
        h = torch.relu(self.hidden(inputs))
        h = h / h.sum(1, keepdim=True)
        return self.out(h)


net = Net()
optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
start = 0
if os.path.exists(CHECKPOINT):
    saved = torch.load(CHECKPOINT)
    net.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    start = saved["epoch"] + 1
for epoch in range(start, 6):
    for i in range(0, 512, 32):
        loss = nn.functional.cross_entropy(net(x[i : i + 32]), y[i : i + 32])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(epoch, round(loss.item(), 5))
    state = {"model": net.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
    torch.save(state, CHECKPOINT)
