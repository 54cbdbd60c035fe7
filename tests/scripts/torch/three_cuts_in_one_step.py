"""One step whose loss reaches three weight matrices only through values with no
autograd history: topk's indices, an integer cast, and a `.tolist()` round trip wrapped
again by `torch.tensor`. Recorded and analysed directly, as `gradient-doctor run` does.

The doctor should find: `w` cut at `TopKV2` on `_, picked = (x @ w).topk(2, dim=1)`,
`v` at `Cast` on `steps = (x @ v).long()`, `u` leaving PyTorch at `ToList` on
`rows = (x @ u).tolist()` and coming back on `back = torch.tensor(rows)`.
"""

from __future__ import annotations

import torch


def build(seed: int = 0):
    """The three weights and the step, which returns its loss."""
    torch.manual_seed(seed)
    w, v, u = (torch.randn(4, 4, requires_grad=True) for _ in range(3))
    x = torch.randn(3, 4)

    def step():
        _, picked = (x @ w).topk(2, dim=1)
        steps = (x @ v).long()
        rows = (x @ u).tolist()
        back = torch.tensor(rows)
        loss = (picked.float() + steps.float().sum() + back.sum()).mean()
        loss.requires_grad_(True).backward()
        return loss

    return (w, v, u), step
