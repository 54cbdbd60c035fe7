"""A score regressor with the usual global-norm clipping, where the gradients' squares overflow.

The targets' log-rate is clamped at 60, whose exp's gradient (~1e26) squares past
float32: clip_grad_norm_ takes the norm as inf and scales every gradient by
1.0 / inf = 0. Every step is finite and nothing moves: the loss is flat from the first
step to the last. The doctor should not call this run healthy: every gradient was
exactly zero for a whole window (disconnected_gradients, spelled for PyTorch).
"""

import torch
from torch import nn

torch.manual_seed(0)
inputs = torch.randn(512, 8) * 6.0
scores = torch.poisson(torch.exp(0.3 * inputs[:, :1])).squeeze(1)


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 1)

    def forward(self, x):
        return torch.clamp(self.linear(x).squeeze(1) * 4.0, max=60.0)


scorer = Scorer()
optimizer = torch.optim.Adam(scorer.parameters(), lr=0.01)
for step in range(70):
    log_rate = scorer(inputs)
    loss = (torch.exp(log_rate) - scores * log_rate).mean()
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(scorer.parameters(), max_norm=1.0)
    optimizer.step()
    if step % 10 == 0:
        print(step, f"{loss.item():.4g}")
