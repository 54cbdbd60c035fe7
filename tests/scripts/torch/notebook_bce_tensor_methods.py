"""A notebook turned into a script: logistic regression on separable points, its binary
cross-entropy written with tensor methods, `p.log()` and `(1 - p).log()`, at a learning
rate this high; a few steps in, float32 rounds some `p` to exactly 1 and `(1 - p).log()`
is -inf.

The doctor should find: forward_domain at `Log` on the loss line, phase forward; its
guard is a patch spelled in PyTorch (`torch.clamp_min(...).log()`, the tensor the method
is called on guarded), never a generic TensorFlow line, and that patch holds.
"""

import torch

torch.manual_seed(0)
x = torch.randn(256, 3)
y = (x[:, 0] > 0).float().unsqueeze(1)
w = torch.zeros(3, 1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
opt = torch.optim.SGD([w, b], lr=5.0)

for epoch in range(200):
    p = (x @ w + b).sigmoid()
    loss = -(y * p.log() + (1 - y) * (1 - p).log()).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if epoch % 20 == 0:
        print(epoch, loss.item())
