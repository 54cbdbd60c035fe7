"""A WGAN-GP written as a function loop with two optimizers: each iteration steps the
generator first, then the critic, whose gradient penalty takes the norm by hand,
`torch.sqrt((g**2).sum(dim=1))`. The data's short last batch is padded with rows the
critic masks out: there the critic's gradient is the zero vector, the root's value a
finite 0, and its derivative 0.5 / sqrt(0) infinite.

The doctor should find, through `gradient-doctor run` with no change to this file:
backward_singularity at the gradient of `Sqrt` (aten's division inside `SqrtBackward0`)
on the `norm = torch.sqrt(...)` line, phase backward, at iteration 5 (the first padded
batch: 44 rows in batches of 8; each iteration, both updates, is one step); the critic's
update skipped, the generator's of that iteration applied; an epsilon under the root
verified by a patched copy of the folder, run again.
"""

import torch
from torch import nn

ROWS, BATCH, FEATURES, NOISE = 44, 8, 3, 2


def batches(data):
    """The data in batches of 8; the last one padded with zero rows, masked out."""
    for start in range(0, ROWS, BATCH):
        real = data[start : start + BATCH]
        mask = torch.ones(BATCH)
        if real.shape[0] < BATCH:
            mask[real.shape[0] :] = 0.0
            real = torch.cat([real, torch.zeros(BATCH - real.shape[0], FEATURES)])
        yield real, mask


def gradient_penalty(critic, real, fake, mask):
    """The WGAN-GP penalty at random interpolates of the real and fake rows."""
    eps = torch.rand(real.shape[0], 1)
    x_hat = (eps * real + (1 - eps) * fake).requires_grad_(True)
    scores = critic(x_hat * mask[:, None])
    (g,) = torch.autograd.grad(scores.sum(), x_hat, create_graph=True)
    norm = torch.sqrt((g**2).sum(dim=1))
    return ((norm - 1) ** 2).mean()


def train(epochs=2):
    torch.manual_seed(0)
    generator = nn.Sequential(nn.Linear(NOISE, 16), nn.ReLU(), nn.Linear(16, FEATURES))
    critic = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))
    g_optimizer = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.9))
    c_optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
    data = torch.randn(ROWS, FEATURES) + 2.0
    for epoch in range(epochs):
        for real, mask in batches(data):
            g_loss = -critic(generator(torch.randn(BATCH, NOISE))).mean()
            g_optimizer.zero_grad()
            g_loss.backward()
            g_optimizer.step()

            fake = generator(torch.randn(BATCH, NOISE)).detach()
            wasserstein = critic(fake * mask[:, None]).mean() - critic(real).mean()
            c_loss = wasserstein + 10.0 * gradient_penalty(critic, real, fake, mask)
            c_optimizer.zero_grad()
            c_loss.backward()
            c_optimizer.step()
            print(f"epoch {epoch} g_loss {g_loss.item():.6f} c_loss {c_loss.item():.6f}")


if __name__ == "__main__":
    train()
