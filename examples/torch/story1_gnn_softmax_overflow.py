"""A message-passing GNN regressor, written as PyTorch users write one, whose loss turns NaN.

Story 1 of gradient-doctor, in PyTorch: a batch of small synthetic "molecules" is one
graph (PyG style: node features `x`, an `edge_index` of bonds, a bond length `e` per
edge, always in [0.5, 4] and never NaN). A message-passing layer scores every bond
with a one-layer net applied to [mean of the two atoms' features, e], turns the scores
into attention weights with a softmax over each atom's incoming bonds written by hand
(`torch.exp` of the scores, summed per atom with `index_add_`, divided back), and
averages the neighbours' features with those weights. Each atom's target is set by the
neighbour at the end of its longest bond, so the model wants ever sharper attention:
the weight on e, and with it the largest score, grows steadily until a score passes
88.72, float32 `torch.exp` overflows to inf, inf / inf is NaN, and the loss goes NaN
(after a few hundred steps). Gradient clipping or a smaller learning rate only delay
it: the gradients are not the problem, the hand-written softmax is.

The doctor should find: forward_overflow at `Exp` on the `w = torch.exp(scores)` line,
phase forward, in the `MessagePassing` layer, the exp's input above 88.72; that update
skipped. The fix is the max-shift of the scores per atom (or `torch_scatter`-style
segment softmax), not clipping.
"""

import torch
from torch import nn

NUM_GRAPHS = 16  # molecules per batch
NUM_NODES = 6  # atoms per molecule
NUM_NEIGHBOURS = 3  # incoming bonds per atom
NUM_FEATURES = 4
STEPS = 600


def make_batch(generator):
    """One batch of molecules flattened into a single graph."""
    n = NUM_GRAPHS * NUM_NODES
    x = torch.randn(n, NUM_FEATURES, generator=generator)
    dst = torch.arange(n).repeat_interleave(NUM_NEIGHBOURS)
    # Each atom's bonds come from distinct other atoms of its own molecule.
    offsets = torch.stack(
        [torch.randperm(NUM_NODES - 1, generator=generator)[:NUM_NEIGHBOURS] for _ in range(n)]
    ).flatten()
    src = (dst // NUM_NODES) * NUM_NODES + (dst % NUM_NODES + 1 + offsets) % NUM_NODES
    edge_index = torch.stack([src, dst])
    e = 0.5 + 3.5 * torch.rand(src.shape[0], 1, generator=generator)  # bond lengths
    # The target: the first feature of the atom at the end of the longest bond.
    longest = e.view(n, NUM_NEIGHBOURS).argmax(dim=1)
    far_atom = src.view(n, NUM_NEIGHBOURS)[torch.arange(n), longest]
    y = x[far_atom, :1] + 0.05 * torch.randn(n, 1, generator=generator)
    return x, edge_index, e, y


class MessagePassing(nn.Module):
    """Updates each atom with an attention-weighted mean of its neighbours' features."""

    def __init__(self):
        super().__init__()
        # One score per bond. No bias: the softmax ignores a constant shift anyway.
        self.net = nn.Linear(NUM_FEATURES + 1, 1, bias=False)

    def forward(self, x, edge_index, e):
        src, dst = edge_index
        z = torch.cat([0.5 * (x[src] + x[dst]), e], dim=1)
        scores = self.net(z).squeeze(-1)  # (edges,)
        # Softmax over each atom's incoming bonds, written out by hand.
        w = torch.exp(scores)
        total = torch.zeros(x.shape[0]).index_add_(0, dst, w)
        w = w / total[dst]
        return torch.zeros_like(x).index_add_(0, dst, w[:, None] * x[src])


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.message_passing = MessagePassing()
        self.head = nn.Sequential(nn.Linear(NUM_FEATURES, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x, edge_index, e):
        # Two outputs per atom: the prediction's mean and log(sigma).
        return self.head(self.message_passing(x, edge_index, e))


def robust_loss(pred, y):
    """Laplace-style negative log-likelihood with a learned per-atom scale."""
    mean, log_sigma = pred.chunk(2, dim=1)
    return (2.0**0.5 * (mean - y).abs() * torch.exp(-log_sigma) + log_sigma).mean()


def main():
    torch.manual_seed(1)
    data = torch.Generator().manual_seed(1)
    batches = [make_batch(data) for _ in range(32)]
    model = Regressor()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.2)
    for step in range(STEPS):
        x, edge_index, e, y = batches[step % len(batches)]
        loss = robust_loss(model(x, edge_index, e), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step}: loss {loss.item():.4f}")
        if not torch.isfinite(loss):
            print(f"step {step}: loss {loss.item()}")
            break


if __name__ == "__main__":
    main()
