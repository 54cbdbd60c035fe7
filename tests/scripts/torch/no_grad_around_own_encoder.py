"""A classifier whose forward runs its own convolutional encoder (a module with a
`forward` of its own) under `with torch.no_grad():`: the encoder's four parameters never
get a gradient while the attention pooling and the head train. Expected:
disconnected_gradients for `encoder.*` only, broken at the `self.encoder(x)` line inside
the block (not at the convolution inside the encoder's forward), its op a Conv1D."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)


class ConvEncoder(nn.Module):
    def __init__(self, channels=16):
        super().__init__()
        self.conv1 = nn.Conv1d(4, channels, 5, padding=2)
        self.conv2 = nn.Conv1d(channels, channels, 5, padding=2)

    def forward(self, x):
        return F.gelu(self.conv2(F.gelu(self.conv1(x))))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = ConvEncoder()
        self.attn = nn.Linear(16, 1)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        with torch.no_grad():
            feats = self.encoder(x).transpose(1, 2)
        weights = torch.softmax(self.attn(feats), dim=1)
        return self.head((weights * feats).sum(1))


model = Classifier()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(20):
    x = torch.randn(16, 4, 30)
    y = torch.randint(0, 3, (16,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(loss.item())
