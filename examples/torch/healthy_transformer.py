"""A tiny causal transformer language model: a healthy PyTorch run the doctor must leave alone.

A two-layer `nn.TransformerEncoder` with a causal mask of `-inf` above the diagonal
(`nn.Transformer.generate_square_subsequent_mask`) predicts the next token of
synthetic sequences that count up modulo the vocabulary, with learned position
embeddings, `F.cross_entropy` and AdamW. The `-inf` entries are masked scores, not
failures: every row keeps its diagonal, so no softmax row is all `-inf`.

The doctor should find: nothing (status healthy, no problems, no warnings); the losses
it prints are the same, bit for bit, watched or not.
"""

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, LENGTH, DIM = 16, 12, 32
BATCH_SIZE = 16
STEPS = 120


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.position = nn.Parameter(torch.randn(LENGTH, DIM) * 0.02)
        layer = nn.TransformerEncoderLayer(DIM, 4, 64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(DIM, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(LENGTH))

    def forward(self, tokens):
        h = self.embed(tokens) + self.position[: tokens.shape[1]]
        h = self.encoder(h, mask=self.mask[: tokens.shape[1], : tokens.shape[1]], is_causal=True)
        return self.head(h)


def batch(generator):
    start = torch.randint(0, VOCAB, (BATCH_SIZE, 1), generator=generator)
    step = torch.randint(1, 3, (BATCH_SIZE, 1), generator=generator)
    return (start + step * torch.arange(LENGTH + 1)) % VOCAB


def main():
    torch.manual_seed(0)
    data = torch.Generator().manual_seed(0)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(STEPS):
        sequence = batch(data)
        logits = model(sequence[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), sequence[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
