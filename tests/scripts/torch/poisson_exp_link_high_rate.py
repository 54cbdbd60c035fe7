"""A Poisson regression whose exp link overflows under a learning rate ten times too high.

SGD at lr=1.0 throws the log-rate's weights far enough in two updates that
torch.exp(log_rate) overflows float32 at step 2; at lr=0.1 the same script trains.
Lowering the rate is then no mere delay of a drift but the fix, which only a rerun of
the patched script can show (an unchanged script has no step function to try it in).

Expected: category=forward_overflow step=2 op=Exp on the loss line; lower_learning_rate
among the fixes, verified by its rerun, and not among the remedies said not to help.
"""

import torch

torch.manual_seed(0)
features = torch.randn(512, 8)
true_w = torch.randn(8, 1) * 0.5
counts = torch.poisson(torch.exp(features @ true_w))

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=1.0)


def train_step(xb, yb):
    log_rate = model(xb)
    loss = (torch.exp(log_rate) - yb * log_rate).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


for step in range(250):
    batch = torch.randint(0, 512, (64,))
    loss = train_step(features[batch], counts[batch])
    if step % 50 == 0:
        print(step, loss)
