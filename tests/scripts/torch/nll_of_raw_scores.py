"""Silent failure: nn.NLLLoss on a model's raw scores (no log_softmax). The loss has no
floor and falls below zero while the scores grow. Expected: logits_as_probabilities at
step 0 (nll_loss read raw scores), the NLLLoss() line patched to CrossEntropyLoss()."""

import torch
from torch import nn

torch.manual_seed(1)
labels = torch.randint(0, 4, (960,))
inputs = torch.randn(960, 12) + nn.functional.one_hot(labels, 12).float() * 2
net = nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 4))
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
criterion = nn.NLLLoss()
for epoch in range(4):
    for i in range(0, 960, 32):
        loss = criterion(net(inputs[i : i + 32]), labels[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, repr(loss.item()))
