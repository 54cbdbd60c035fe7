"""A WGAN-GP critic trained by a small trainer class, its gradient penalty's norm written by
hand, `torch.sqrt((g ** 2).sum(dim=1))`, on batches whose short last one is padded with
rows the critic masks out: for a masked row the critic's gradient is the zero vector, the
root's value there is a finite 0, and its derivative 0.5 / sqrt(0) is infinite.

The doctor should find: backward_singularity at the gradient of `Sqrt` (aten's division
inside `SqrtBackward0`), on the `norm = torch.sqrt(...)` line, phase backward, at the
critic's first step on a padded batch (step 5: 44 rows in batches of 8); that update
skipped. `torch.linalg.vector_norm` would give a zero gradient there instead.
"""

from __future__ import annotations

import torch
from torch import nn

ROWS, BATCH, FEATURES, NOISE = 44, 8, 3, 2


def gradient_penalty(critic, real, fake, mask):
    """The WGAN-GP penalty at random interpolates of the real and fake rows."""
    eps = torch.rand(real.shape[0], 1)
    x_hat = (eps * real + (1 - eps) * fake).requires_grad_(True)
    scores = critic(x_hat * mask[:, None])
    (g,) = torch.autograd.grad(scores.sum(), x_hat, create_graph=True)
    norm = torch.sqrt((g**2).sum(dim=1))
    return ((norm - 1) ** 2).mean()


class CriticTrainer:
    """Trains the critic against a fixed generator (the critic's steps of a WGAN-GP)."""

    def __init__(self, seed: int = 0, penalty: float = 10.0) -> None:
        torch.manual_seed(seed)
        self.critic = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))
        self.generator = nn.Sequential(nn.Linear(NOISE, 16), nn.ReLU(), nn.Linear(16, FEATURES))
        self.optimizer = torch.optim.Adam(self.critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
        self.penalty = penalty

    def step(self, real, mask):
        self.optimizer.zero_grad()
        with torch.no_grad():
            fake = self.generator(torch.randn(real.shape[0], NOISE))
        wasserstein = self.critic(fake * mask[:, None]).mean() - self.critic(real).mean()
        loss = wasserstein + self.penalty * gradient_penalty(self.critic, real, fake, mask)
        loss.backward()
        self.optimizer.step()
        return loss.item()


def batches(epochs: int = 1, seed: int = 0):
    """The data in batches of 8; the last one padded with zero rows, masked out."""
    generator = torch.Generator().manual_seed(seed)
    data = torch.randn(ROWS, FEATURES, generator=generator) + 2.0
    for _ in range(epochs):
        for start in range(0, ROWS, BATCH):
            real = data[start : start + BATCH]
            mask = torch.ones(BATCH)
            if real.shape[0] < BATCH:
                mask[real.shape[0] :] = 0.0
                real = torch.cat([real, torch.zeros(BATCH - real.shape[0], FEATURES)])
            yield real, mask


if __name__ == "__main__":
    import gradient_doctor.torch

    trainer = CriticTrainer()
    step = gradient_doctor.torch.watch(
        trainer.step, model=trainer.critic, optimizer=trainer.optimizer
    )
    for real, mask in batches(epochs=3):
        step(real, mask)
