"""Classify synthetic spectra loaded by two DataLoader workers; the Dataset standardises
each spectrum by its own standard deviation in `__getitem__`, and a few spectra are flat
(a dead detector), so the batch arrives holding NaN from another process.

The doctor should find: bad_input (no op of the step made the NaN: the batch came from
shared memory), its origin the div on the `s = (s - s.mean()) / s.std()` line of the
Dataset, read again in the main process, and a safe division patch of that line that
holds when rerun.
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SpectraDataset(Dataset):
    def __init__(self, n=1500, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.spectra = torch.randn(n, 64, generator=g).cumsum(dim=1)
        self.spectra[torch.randperm(n, generator=g)[:5]] = 2.0  # dead detector: flat
        self.labels = (self.spectra[:, -1] > 0).long()

    def __len__(self):
        return len(self.spectra)

    def __getitem__(self, i):
        s = self.spectra[i]
        s = (s - s.mean()) / s.std()
        return s, self.labels[i]


def train():
    torch.manual_seed(0)
    loader = DataLoader(SpectraDataset(), batch_size=32, shuffle=True, num_workers=2)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(3):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(epoch, loss.item())


if __name__ == "__main__":
    train()
