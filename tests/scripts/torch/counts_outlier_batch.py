"""Poisson regression of event counts, written as a notebook turned into a script: one
logged count is a sensor glitch (50000 where the others are under 20), and the update
on its batch throws the log-rate's weights so far that the next exp overflows."""

import torch

torch.manual_seed(3)
features = torch.randn(640, 6)
true_weights = torch.randn(6, 1) * 0.3
counts = torch.poisson(torch.exp(features @ true_weights + 1.0))
counts[200] = 50000.0  # the glitch

net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.01)

for epoch in range(3):
    for start in range(0, 640, 32):
        x, y = features[start : start + 32], counts[start : start + 32]
        log_rate = net(x)
        rate = torch.exp(log_rate)
        loss = (rate - y * log_rate).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} poisson nll {loss.item():.4f}")
