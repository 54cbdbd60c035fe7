"""A metric-learning loop whose author turned on `torch.autograd.set_detect_anomaly(True)`
to hunt a NaN, as PyTorch's docs suggest. Each batch's spread is the root of the summed
squared distances to the batch mean, written by hand; a batch of identical inputs (a
constant block of the data) has spread 0, where the root's gradient is infinite. Without
the doctor, anomaly mode stops the run inside `backward()` with a traceback."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.autograd.set_detect_anomaly(True)


def train(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        for batch, (inputs,) in enumerate(loader):
            embeddings = model(inputs)
            centred = embeddings - embeddings.mean(dim=0)
            spread = torch.sqrt(centred.pow(2).sum(dim=1))
            loss = (spread - 1.0).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} batch {batch} loss {loss.item():.4f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    data = torch.randn(96, 6)
    data[48:64] = 0.25  # a constant block: one batch of identical rows
    loader = DataLoader(TensorDataset(data), batch_size=16, shuffle=False)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
    train(model, loader, torch.optim.Adam(model.parameters(), lr=1e-2), epochs=3)
