"""A part-of-speech tagger trained on sentences of different lengths, padded to the
longest in the batch; the padding's labels are -100, which `cross_entropy` ignores. A
batch made of empty sentences (the data had blank lines) has no label that counts, and
the mean over zero labels is 0 / 0: the epoch's mean loss the script prints is NaN."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

torch.manual_seed(3)
VOCAB, TAGS, PAD = 50, 6, -100


def sentence(index):
    length = 0 if 40 <= index < 48 else int(torch.randint(3, 9, ()).item())
    words = torch.randint(1, VOCAB, (length,))
    return words, words % TAGS


def collate(batch):
    longest = max(1, max(len(words) for words, _ in batch))
    words = torch.zeros(len(batch), longest, dtype=torch.long)
    tags = torch.full((len(batch), longest), PAD)
    for row, (w, t) in enumerate(batch):
        words[row, : len(w)], tags[row, : len(t)] = w, t
    return words, tags


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 24)
        self.lstm = nn.LSTM(24, 24, batch_first=True)
        self.head = nn.Linear(24, TAGS)

    def forward(self, words):
        return self.head(self.lstm(self.embed(words))[0])


data = [sentence(i) for i in range(64)]
loader = DataLoader(data, batch_size=8, collate_fn=collate)
model = Tagger()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(3):
    total = 0.0
    for words, tags in loader:
        logits = model(words)
        loss = F.cross_entropy(logits.view(-1, TAGS), tags.view(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    print(f"epoch {epoch} mean loss {total / len(loader):.4f}")
