"""A script that does not repeat itself: it counts its own runs in a file outside its
folder (`RUNS_FILE`, else the temp folder) and trains for a shorter time once the file
exists, so a seeded rerun never reaches the step where the encoder's gradients are cut
(from step 8 its features are detached).

Expected: a disconnected_gradients problem naming the encoder's parameters, its break
not named (the rerun stopped early), and the run otherwise healthy.
"""

import os
import tempfile
from pathlib import Path

import torch
from torch import nn

runs = Path(os.environ.get("RUNS_FILE", Path(tempfile.gettempdir()) / "unrepeatable_cut.txt"))
earlier = int(runs.read_text()) if runs.exists() else 0
runs.write_text(str(earlier + 1))
steps = 4 if earlier else 20

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
head = nn.Linear(16, 1)
optimizer = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.05)
x, y = torch.randn(64, 6), torch.randn(64, 1)
for step in range(steps):
    features = encoder(x)
    if step >= 8:
        features = features.detach()
    loss = nn.functional.mse_loss(head(features), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("done", loss.item())
