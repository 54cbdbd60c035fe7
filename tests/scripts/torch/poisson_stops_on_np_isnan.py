"""Counts regressed with a Poisson likelihood written by hand. The rate comes straight out
of a linear layer, and the loop, in a function, stops when NumPy finds the loss NaN; it
zeroes the gradients before the forward, so none is held when it stops."""

import numpy as np

import torch
from torch import nn


def poisson_nll(rate, counts):
    return (rate - counts * torch.log(rate)).mean()


def train(model, features, counts, epochs=30):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for epoch in range(epochs):
        optimizer.zero_grad()
        loss = poisson_nll(model(features).squeeze(1), counts)
        if np.isnan(loss.item()):
            print(f"epoch {epoch}: loss is nan, stopping")
            break
        loss.backward()
        optimizer.step()
        if epoch % 10 == 9:
            print(f"epoch {epoch} loss {loss.item():.4f}")
    return model


if __name__ == "__main__":
    torch.manual_seed(2)
    features = torch.randn(64, 3)
    counts = torch.poisson(torch.exp(features[:, 0]))
    model = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 1))
    with torch.no_grad():
        model[2].bias.fill_(2.0)
    train(model, features, counts)
