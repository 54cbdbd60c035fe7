"""An nn.RNN classifier in a plain loop, SGD at lr=2.0 with momentum: every value stays
finite (tanh), the head's weights grow 160x and the loss climbs from 1 to ~30.
Expected: `loss_diverged`, with the optimizer's line patched to a lower rate."""

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(512, 20, 8)
y = (x[:, :, 0].sum(1) > 0).float()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(8, 64, batch_first=True)
        self.head = nn.Linear(64, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1]).squeeze(1)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=2.0, momentum=0.9)
loss_fn = nn.BCEWithLogitsLoss()
for epoch in range(6):
    for i in range(0, 512, 32):
        loss = loss_fn(model(x[i : i + 32]), y[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, loss.item())
