"""Linear regression the way PyTorch's autograd tutorial trains: no optimizer, the
tensors updated by hand (`w -= lr * w.grad` under `torch.no_grad()`), at a learning
rate too high for it (1.5: the loss's curvature is about 2, so each step overshoots
and the error grows ~2x a step until the loss overflows, around step 43).

The doctor should watch each `backward()` as a step (there is no optimizer), stop the
step that goes non-finite before the script's own update reads its gradients (set to
zero), and write the lower rate as a patch of `lr = 1.5`, which holds.
"""

import torch

torch.manual_seed(0)
x = torch.randn(200, 3)
y = x @ torch.tensor([[2.0], [-1.0], [0.5]]) + 0.1 * torch.randn(200, 1)
w = torch.randn(3, 1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
lr = 1.5
for epoch in range(60):
    pred = x @ w + b
    loss = ((pred - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= lr * w.grad
        b -= lr * b.grad
        w.grad.zero_()
        b.grad.zero_()
    if epoch % 10 == 0:
        print(epoch, loss.item())
