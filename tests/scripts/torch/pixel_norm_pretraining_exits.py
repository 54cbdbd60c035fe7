"""Masked-autoencoder pretraining, its engine written as MAE's and DeiT's are: the loss is
read with `.item()` and the run ends with `sys.exit(1)` on a non-finite value, before any
`backward()`. The reconstruction target is each patch normalised by its own spread, the
square root of its variance with no epsilon: a flat patch (a saturated region of an image)
has spread 0, and its normalised target is 0/0."""

import math
import sys

import torch
from torch import nn

PATCH, PATCHES = 12, 16


class TinyMAE(nn.Module):
    def __init__(self, width=24):
        super().__init__()
        self.embed = nn.Linear(PATCH, width)
        self.mixer = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU())
        self.decode = nn.Linear(width, PATCH)

    def forward(self, patches, keep):
        tokens = self.embed(patches * keep.unsqueeze(-1))
        return self.decode(self.mixer(tokens))


def normalised_target(patches):
    mean = patches.mean(dim=-1, keepdim=True)
    spread = patches.var(dim=-1, keepdim=True) ** 0.5
    return (patches - mean) / spread


def train_one_epoch(model, optimizer, images, epoch, generator):
    for index, patches in enumerate(images):
        keep = (torch.rand(patches.shape[:2], generator=generator) > 0.75).float()
        prediction = model(patches, keep)
        loss = ((prediction - normalised_target(patches)) ** 2).mean(dim=-1)
        loss = (loss * (1 - keep)).sum() / (1 - keep).sum()
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            print(f"Loss is {loss_value}, stopping training")
            sys.exit(1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"epoch {epoch} batch {index} loss {loss_value:.4f}")


def main():
    torch.manual_seed(3)
    generator = torch.Generator().manual_seed(4)
    images = [torch.rand(8, PATCHES, PATCH, generator=generator) for _ in range(6)]
    images[4][2, 7] = 1.0  # a saturated patch: every pixel at the top of the range
    model = TinyMAE()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    for epoch in range(4):
        train_one_epoch(model, optimizer, images, epoch, generator)


if __name__ == "__main__":
    main()
