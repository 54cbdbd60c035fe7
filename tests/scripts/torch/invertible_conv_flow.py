"""Glow-style flow on 4-channel 8x8 'images': an invertible 1x1 convolution initialised as
a random rotation (as the paper does), then an affine coupling; trained by maximum
likelihood from `main()`. The 1x1 convolution's log-determinant is written with the
tensor method `.logdet()`."""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class InvConv1x1(nn.Module):
    def __init__(self, channels):
        super().__init__()
        rotation, _ = torch.linalg.qr(torch.randn(channels, channels))
        self.weight = nn.Parameter(rotation)

    def forward(self, x):
        _, c, h, w = x.shape
        y = F.conv2d(x, self.weight.view(c, c, 1, 1))
        return y, h * w * self.weight.logdet()


class AffineCoupling(nn.Module):
    def __init__(self, channels, hidden=16):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(channels // 2, hidden, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(hidden, channels, 3, padding=1),
        )

    def forward(self, x):
        xa, xb = x.chunk(2, dim=1)
        log_s, t = self.net(xa).chunk(2, dim=1)
        log_s = torch.tanh(log_s)
        return torch.cat([xa, xb * log_s.exp() + t], dim=1), log_s.flatten(1).sum(1)


class Glow(nn.Module):
    def __init__(self, channels, depth):
        super().__init__()
        self.steps = nn.ModuleList()
        for _ in range(depth):
            self.steps.append(InvConv1x1(channels))
            self.steps.append(AffineCoupling(channels))

    def forward(self, x):
        log_det = x.new_zeros(x.shape[0])
        for step in self.steps:
            x, ld = step(x)
            log_det = log_det + ld
        prior = -0.5 * (x**2 + math.log(2 * math.pi)).flatten(1).sum(1)
        return prior + log_det


def images(n, generator):
    base = torch.randn(n, 1, 8, 8, generator=generator)
    return torch.cat([base, 0.5 * base + 0.1 * torch.randn(n, 3, 8, 8, generator=generator)], 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    torch.manual_seed(3)
    generator = torch.Generator().manual_seed(0)
    model = Glow(channels=4, depth=3)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        x = images(32, generator)
        nll = -model(x).mean() / (4 * 8 * 8)
        optimizer.zero_grad()
        nll.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step}: {nll.item():.4f} nats per dim")


if __name__ == "__main__":
    main()
