"""Poisson regression of counts with a clamped log-rate, trained with Adam.

The log-rate is clamped at 60 so that exp never overflows: every value stays finite.
But at step 0 some log-rates sit just under the clamp, and the gradient of exp there is
~1e26: its square overflows float32 in Adam's second moment, which turns inf, and the
layer's every later update is 0; the loss stays flat, silently. The doctor should stop
that update (exploding_gradients), name the parameter and propose clipping.
"""

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(512, 8) * 6.0  # unscaled features
counts = torch.poisson(torch.exp(0.3 * x[:, :1])).squeeze(1)

layer = nn.Linear(8, 1)
optimizer = torch.optim.Adam(layer.parameters(), lr=0.01)
for step in range(60):
    log_rate = torch.clamp(layer(x).squeeze(1) * 4.0, max=60.0)
    loss = (torch.exp(log_rate) - counts * log_rate).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        print(step, f"{loss.item():.4g}", f"{layer.weight.norm().item():.6f}")
