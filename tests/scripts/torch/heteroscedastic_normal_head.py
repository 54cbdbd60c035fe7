"""Heteroscedastic regression: a model returns a torch.distributions.Normal whose scale
is a second head's raw output, trained by a Trainer class on its negative log-likelihood
(argument validation switched off for speed, as many training scripts do). Nothing keeps
the scale positive, and the log inside log_prob meets its first negative values."""

import torch
import torch.nn as nn
from torch.distributions import Distribution, Normal

Distribution.set_default_validate_args(False)


class GaussianRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 32), nn.Tanh())
        self.loc = nn.Linear(32, 1)
        self.scale = nn.Linear(32, 1)
        nn.init.constant_(self.scale.bias, 0.3)

    def forward(self, x):
        h = self.body(x)
        scale = self.scale(h)
        return Normal(self.loc(h), scale)


class Trainer:
    def __init__(self, model, lr):
        self.model = model
        self.opt = torch.optim.Adam(model.parameters(), lr=lr)

    def fit(self, x, y, epochs):
        for epoch in range(epochs):
            order = torch.randperm(len(x))
            for start in range(0, len(x), 50):
                rows = order[start : start + 50]
                nll = -self.model(x[rows]).log_prob(y[rows]).mean()
                self.opt.zero_grad()
                nll.backward()
                self.opt.step()
            print(f"epoch {epoch} nll {nll.item():.4f}")


torch.manual_seed(8)
x = torch.randn(400, 3)
y = x[:, :1] * 2.0 + 0.05 * torch.randn(400, 1)
Trainer(GaussianRegressor(), lr=3e-2).fit(x, y, epochs=12)
