"""Keyword spotting with CTC, the loss called functionally (F.ctc_loss) inside a train()
function: a strided convolution halves each clip's frames, and one short clip ends up
with fewer frames than its transcript has labels."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Spotter(nn.Module):
    def __init__(self, features=12, symbols=6):
        super().__init__()
        self.conv = nn.Conv1d(features, 32, kernel_size=3, stride=2, padding=1)
        self.out = nn.Linear(32, symbols)

    def forward(self, clips):  # clips: (batch, features, frames)
        hidden = torch.relu(self.conv(clips)).transpose(1, 2)
        return self.out(hidden).log_softmax(-1)  # (batch, frames / 2, symbols)


def batches(generator, steps):
    for step in range(steps):
        frames = torch.randint(16, 24, (6,), generator=generator)
        if step == 7:
            frames[2] = 6  # a clip cut short by the recorder
        clips = torch.randn(6, 12, int(frames.max()), generator=generator)
        labels = torch.randint(1, 6, (6, 5), generator=generator)
        yield clips, frames, labels


def train(steps=30):
    torch.manual_seed(2)
    model = Spotter()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(2)
    for step, (clips, frames, labels) in enumerate(batches(generator, steps)):
        log_probs = model(clips).transpose(0, 1)  # (frames, batch, symbols)
        out_frames = (frames + 1) // 2
        label_lengths = torch.full((6,), 5, dtype=torch.long)
        loss = F.ctc_loss(log_probs, labels, out_frames, label_lengths, blank=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}")


if __name__ == "__main__":
    train()
