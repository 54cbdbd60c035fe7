"""A small trainer class whose loop lives in a method: an embedding trained so that pairs
of similar rows lie close, their distance written by hand, `torch.sqrt((d**2).sum(dim=1))`.
One batch pairs a row with itself: the difference is the zero vector, the root's value there
is a finite 0, and its derivative 0.5 / sqrt(0) is infinite (times a zero: NaN).

The doctor should find, through `gradient-doctor run` with no change to this file:
backward_singularity at the gradient of `Sqrt` (aten's division inside `SqrtBackward0`) on
the `distance = torch.sqrt(...)` line, phase backward, at the step of that batch (step
5), its update skipped; an epsilon under the root verified by a patched copy of the
folder, run again. `torch.linalg.vector_norm` would give a zero gradient there instead.
"""

import torch
from torch import nn

PAIRS, BATCH, FEATURES = 48, 8, 6


class PairTrainer:
    """Trains an embedding to pull each pair's two rows together, apart from the margin."""

    def __init__(self, seed=0):
        torch.manual_seed(seed)
        self.embed = nn.Sequential(nn.Linear(FEATURES, 12), nn.Tanh(), nn.Linear(12, 4))
        self.optimizer = torch.optim.Adam(self.embed.parameters(), lr=1e-2)
        left = torch.randn(PAIRS, FEATURES)
        right = left + 0.3 * torch.randn(PAIRS, FEATURES)
        right[5 * BATCH + 2] = left[5 * BATCH + 2]  # a row paired with itself
        self.left, self.right = left, right

    def distance(self, a, b):
        d = self.embed(a) - self.embed(b)
        distance = torch.sqrt((d**2).sum(dim=1))
        return distance

    def train_epoch(self):
        for start in range(0, PAIRS, BATCH):
            a = self.left[start : start + BATCH]
            b = self.right[start : start + BATCH]
            loss = self.distance(a, b).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            print(f"loss {loss.item():.6f}")

    def fit(self, epochs):
        for _ in range(epochs):
            self.train_epoch()


if __name__ == "__main__":
    PairTrainer().fit(epochs=4)
