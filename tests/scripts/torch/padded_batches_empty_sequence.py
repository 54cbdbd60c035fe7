"""A tagger trained on padded batches, its attention written by hand with a -inf mask.

Sequences of 0 to 6 tokens are padded to 6; `masked_fill(pad, float("-inf"))` hides the
padding keys. A batch holding an empty sequence (every key padding) makes that
sequence's rows -inf everywhere, and their softmax is 0 / 0. The padded queries are
left out of the loss, so the loss stays finite: only the gradients go NaN.

The doctor should find: forward_domain at `Softmax` in module `Mixer` (a module outside
any model is named by its class), on the `weights = torch.softmax(scores, dim=-1)` line,
phase forward, the -inf written by the `masked_fill` line; a finite fill patched there
trains on.
"""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(3)
VOCAB, WIDTH, LENGTH, TAGS = 20, 16, 6, 3


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(WIDTH, 2 * WIDTH)

    def forward(self, h, pad):
        q, k = self.qk(h).chunk(2, dim=-1)
        scores = torch.bmm(q, k.transpose(1, 2)) / WIDTH**0.5
        scores = scores.masked_fill(pad.unsqueeze(1), float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return torch.bmm(weights, h)


embed = nn.Embedding(VOCAB, WIDTH)
mixer = Mixer()
head = nn.Linear(WIDTH, TAGS)
params = [*embed.parameters(), *mixer.parameters(), *head.parameters()]
opt = torch.optim.SGD(params, lr=0.1)


def batch(step):
    lengths = torch.randint(1, LENGTH + 1, (8,))
    if step == 4:
        lengths[2] = 0  # an empty sequence
    pad = torch.arange(LENGTH)[None, :] >= lengths[:, None]
    tokens = torch.randint(0, VOCAB, (8, LENGTH))
    tags = torch.randint(0, TAGS, (8, LENGTH))
    return tokens, tags, pad


for step in range(30):
    tokens, tags, pad = batch(step)
    logits = head(mixer(embed(tokens), pad))
    loss = F.cross_entropy(logits[~pad], tags[~pad])
    opt.zero_grad()
    loss.backward()
    opt.step()
    nonfinite = sum(int(not torch.isfinite(p).all()) for p in params)
    print(f"step {step} loss {loss.item():.4f} nonfinite_params {nonfinite}")
