"""A tiny text GAN written as PyTorch users write it: the generator's tokens are the
`argmax` of its logits, embedded by the discriminator. The discriminator trains; the
generator's loss reaches its parameters only through those integer token ids.

The doctor should find: disconnected_gradients for every parameter of the generator's
optimizer (all of them), the path broken at `ArgMax` on the
`tokens = logits.argmax(dim=-1)` line; the discriminator's optimizer is not flagged
(its step detaches the generated tokens, as a GAN's discriminator step does).
"""

from __future__ import annotations

import torch
from torch import nn

VOCAB, LENGTH, NOISE = 12, 5, 8


class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(NOISE, 32)
        self.to_logits = nn.Linear(32, LENGTH * VOCAB)

    def forward(self, z):
        logits = self.to_logits(torch.tanh(self.hidden(z))).view(-1, LENGTH, VOCAB)
        tokens = logits.argmax(dim=-1)
        return tokens


class Discriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.score = nn.Linear(LENGTH * 16, 1)

    def forward(self, tokens):
        return self.score(self.embed(tokens).flatten(1))


def build(seed: int = 0):
    """The two models, their optimizers and the GAN's training step."""
    torch.manual_seed(seed)
    generator, discriminator = Generator(), Discriminator()
    opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()

    def train_step(real):
        z = torch.randn(real.shape[0], NOISE)
        fake = generator(z)
        opt_d.zero_grad()
        d_loss = bce(discriminator(real), torch.ones(real.shape[0], 1)) + bce(
            discriminator(fake.detach()), torch.zeros(real.shape[0], 1)
        )
        d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        g_loss = bce(discriminator(fake), torch.ones(real.shape[0], 1))
        g_loss.backward()
        opt_g.step()
        return g_loss.detach()

    return (generator, discriminator), (opt_g, opt_d), train_step


def batches(steps: int, seed: int = 0):
    """Batches of 8 'real' sentences: token ids that count up from a random start."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        start = torch.randint(0, VOCAB, (8, 1), generator=generator)
        yield ((start + torch.arange(LENGTH)) % VOCAB,)
