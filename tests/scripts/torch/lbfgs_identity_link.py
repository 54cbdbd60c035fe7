"""A Poisson regression fitted full-batch with LBFGS, its rate an identity of a linear layer.

`optimizer.step(closure)` evaluates the loss inside the step; at lr=10 a step lands where
some rates are negative, `torch.log(rate)` is NaN, and from there every step is NaN.

The doctor should find: the closure step that went non-finite, checked after it ran and
undone (weights and LBFGS's state as before it); no op named (a closure's ops run inside
the step, which the doctor does not record), the reason said.
"""

import torch

torch.manual_seed(0)
x = torch.rand(64, 3)
counts = torch.poisson(1.0 + 4.0 * x[:, :1])
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.LBFGS(model.parameters(), lr=10.0, max_iter=5)


def closure():
    optimizer.zero_grad()
    rate = model(x)
    nll = (rate - counts * torch.log(rate)).mean()
    nll.backward()
    return nll


for epoch in range(6):
    nll = optimizer.step(closure)
    print(f"epoch {epoch} nll {nll.item():.6f}")
