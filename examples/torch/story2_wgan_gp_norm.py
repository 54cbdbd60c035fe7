"""A conditional-free WGAN-GP on tabular "credit card" rows whose critic gradients turn NaN.

Story 2 of gradient-doctor, in PyTorch: a WGAN-GP as the PyTorch tutorials write it,
three critic steps per generator step, the gradient penalty taken with
`torch.autograd.grad(..., create_graph=True)` at random interpolates of real and fake
rows, its norm written by hand, `torch.sqrt((grads ** 2).sum(dim=1))`. The critic ends
in a tanh and its loss pushes its scores towards -1 and +1; the unscaled "Amount"
column lets it get there with small weights. After a while the tanh saturates for
some interpolated row: tanh rounds to exactly +-1.0 in float32, so the critic's
gradient with respect to that row is exactly the zero vector. The penalty itself
stays finite (a norm of 0 gives (0 - 1)^2 = 1), but the root's derivative there is
0.5 / sqrt(0): the backward of the penalty writes inf, then NaN, into every critic
weight. Removing the penalty "fixes" it, which hides the real cause.

The doctor should find: backward_singularity at the gradient of `Sqrt`, on the
`norm = torch.sqrt((grads**2).sum(dim=1))` line, phase backward, the root's input
holding an exact zero; that update skipped. `torch.linalg.vector_norm` (a zero
gradient at a zero vector) or a root of the sum plus a tiny epsilon fix it; gradient
clipping does not.
"""

import torch
from torch import nn

NUM_ROWS = 4096
X_DIM = 30
LATENT_DIM = 16
BATCH_SIZE = 64
CRITIC_STEPS = 3
GP_WEIGHT = 10.0
STEPS = 400  # generator steps


def make_transactions(generator):
    """30 anonymised features (like V1..V28, Time, Amount); a tenth of the rows are fraud."""
    is_fraud = torch.rand(NUM_ROWS, generator=generator) < 0.1
    x = torch.randn(NUM_ROWS, X_DIM, generator=generator)
    x[is_fraud, :5] += 2.0  # fraud rows differ in a few features...
    # ...and in the amount, left unscaled: typically ~3 for normal rows, ~12 for fraud.
    log_amount = torch.where(is_fraud, 2.5, 1.0) + 0.5 * torch.randn(NUM_ROWS, generator=generator)
    x[:, -1] = log_amount.exp()
    return x


torch.manual_seed(0)
critic = nn.Sequential(
    nn.Linear(X_DIM, 64),
    nn.LeakyReLU(0.2),
    nn.Linear(64, 32),
    nn.LeakyReLU(0.2),
    nn.Linear(32, 1),
    nn.Tanh(),
)
generator = nn.Sequential(
    nn.Linear(LATENT_DIM, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, X_DIM)
)


def gradient_penalty(real, fake):
    """(||d critic / d x_hat|| - 1)^2 at random interpolates of real and fake rows."""
    alpha = torch.rand(real.shape[0], 1)
    x_hat = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    (grads,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    # The penalty keeps the gradient norm close to 1 (a 1-Lipschitz critic).
    norm = torch.sqrt((grads**2).sum(dim=1))
    return ((norm - 1.0) ** 2).mean()


def main():
    data = make_transactions(torch.Generator().manual_seed(0))
    c_opt = torch.optim.Adam(critic.parameters(), lr=4e-3, betas=(0.5, 0.9))
    g_opt = torch.optim.Adam(generator.parameters(), lr=4e-3, betas=(0.5, 0.9))
    for step in range(STEPS):
        for _ in range(CRITIC_STEPS):
            real = data[torch.randint(0, NUM_ROWS, (BATCH_SIZE,))]
            fake = generator(torch.randn(BATCH_SIZE, LATENT_DIM)).detach()
            c_loss = critic(fake).mean() - critic(real).mean()
            c_loss = c_loss + GP_WEIGHT * gradient_penalty(real, fake)
            c_opt.zero_grad()
            c_loss.backward()
            c_opt.step()
        g_loss = -critic(generator(torch.randn(BATCH_SIZE, LATENT_DIM))).mean()
        g_opt.zero_grad()
        g_loss.backward()
        g_opt.step()
        if step % 25 == 0 or not torch.isfinite(c_loss):
            print(f"step {step}: critic {c_loss.item():.4f} generator {g_loss.item():.4f}")
        if not torch.isfinite(c_loss):
            break


if __name__ == "__main__":
    main()
