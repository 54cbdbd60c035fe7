"""A script that finds its data next to itself through `__file__`, then moves into its
`outputs` folder (as scripts that save plots and checkpoints do) and trains a rate
whose log goes to -inf at step 1."""

import os

import torch

here = os.path.dirname(__file__)
with open(os.path.join(here, "counts.txt")) as handle:
    counts = torch.tensor([float(line) for line in handle])
os.chdir(os.path.join(here, "outputs"))

rate = torch.nn.Parameter(torch.tensor([1.0]))
opt = torch.optim.SGD([rate], lr=1.0)
for step in range(5):
    loss = torch.log(rate * counts.mean()).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, loss.item())
