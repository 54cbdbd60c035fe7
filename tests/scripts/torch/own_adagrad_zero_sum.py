"""A hand-written Adagrad with no epsilon: an embedding row no batch has used yet keeps a
zero gradient, so its update divides 0 by the root of a zero sum and writes NaN into the
weights from finite gradients. Expected: optimizer_overflow at step 0 (the update), the
NaN read at step 1 in `emb.weight`, the optimizer's line, and the class's own `step`."""

import torch
import torch.nn.functional as F
from torch import nn


class PlainAdagrad(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1):
        super().__init__(params, dict(lr=lr))

    def step(self, closure=None):
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    state = self.state[p]
                    state.setdefault("sum", torch.zeros_like(p)).add_(p.grad * p.grad)
                    p.sub_(group["lr"] * p.grad / state["sum"].sqrt())


torch.manual_seed(0)
words = torch.randint(0, 300, (512, 12))
labels = (words % 3).mode(dim=1).values
emb = nn.EmbeddingBag(300, 16, mode="mean")
head = nn.Linear(16, 3)
opt = PlainAdagrad([*emb.parameters(), *head.parameters()], lr=0.05)
for i in range(0, 512, 32):
    loss = F.cross_entropy(head(emb(words[i : i + 32])), labels[i : i + 32])
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(i // 32, repr(loss.item()))
