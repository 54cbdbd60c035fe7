"""A healthy PyTorch run in another style: a `DataLoader` that shuffles, dropout, Adam, and
gradient accumulation (two backward passes per update), its losses printed exactly (as
hex) and the final weights as a digest of their bytes.

The doctor should find nothing (exit 0), and watching must not change what training
computes: the printed losses and the weights' digest are the same, bit for bit, as
`python` running this file alone.
"""

import hashlib

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATE = 2


def main():
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    inputs = torch.randn(256, 10)
    targets = inputs[:, :3].sum(dim=1, keepdim=True) + 0.1 * torch.randn(256, 1)
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(3):
        for index, (x, y) in enumerate(loader):
            loss = nn.functional.mse_loss(model(x), y) / ACCUMULATE
            loss.backward()
            if index % ACCUMULATE == ACCUMULATE - 1:
                optimizer.step()
                optimizer.zero_grad()
                print(f"epoch {epoch} loss {loss.item().hex()}")
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.numpy().tobytes())
    print(f"weights {digest.hexdigest()}")


if __name__ == "__main__":
    main()
