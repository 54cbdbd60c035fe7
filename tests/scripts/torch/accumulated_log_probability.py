"""A classifier trained with gradient accumulation (4 micro-batches an update), its
cross-entropy written by hand as the log of the softmax's probability of the label.

At lr=20 with momentum the logits jump apart within two updates; the softmax then
rounds some labels' probability to exactly 0 and `torch.log` is -inf in the forward
pass of every micro-batch of that update.

The doctor should find: forward_domain at `Log` on the `nll = -torch.log(p_label)...`
line, phase forward (each micro-batch's loss is checked, not only the last one's).
"""

import torch
import torch.nn.functional as F

ACCUMULATE = 4


def train(updates=12, seed=1):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))
    optimizer = torch.optim.SGD(net.parameters(), lr=20.0, momentum=0.9)
    features = torch.randn(256, 6)
    labels = (features[:, :5] * 3).argmax(dim=1)
    for update in range(updates):
        total = 0.0
        for _ in range(ACCUMULATE):
            rows = torch.randint(0, 256, (16,))
            probabilities = F.softmax(net(features[rows]), dim=1)
            p_label = probabilities.gather(1, labels[rows, None]).squeeze(1)
            nll = -torch.log(p_label).mean() / ACCUMULATE
            nll.backward()
            total += nll.item()
        optimizer.step()
        optimizer.zero_grad()
        print(f"update {update} loss {total:.4f}")


if __name__ == "__main__":
    train()
