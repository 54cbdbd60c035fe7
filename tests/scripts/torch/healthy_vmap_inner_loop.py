"""A meta-learning loop in the torch.func style: each task's inner step is a
`functional_call` of the model with its own copy of the weights, vmapped over tasks;
the meta-optimizer is a plain SGD on the module's parameters. Healthy."""

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
meta_opt = torch.optim.SGD(net.parameters(), lr=0.05)


def task_loss(params, x, y):
    return ((functional_call(net, params, (x,)) - y) ** 2).mean()


def adapted_query_loss(params, x_support, y_support, x_query, y_query):
    step = grad(task_loss)(params, x_support, y_support)
    fast = {name: value - 0.1 * step[name] for name, value in params.items()}
    return task_loss(fast, x_query, y_query)


for it in range(20):
    phase = torch.rand(4, 1, 1) * 3.0
    x = torch.rand(4, 20, 1) * 6 - 3
    y = torch.sin(x + phase)
    params = dict(net.named_parameters())
    losses = vmap(adapted_query_loss, in_dims=(None, 0, 0, 0, 0))(
        params, x[:, :10], y[:, :10], x[:, 10:], y[:, 10:]
    )
    loss = losses.mean()
    meta_opt.zero_grad()
    loss.backward()
    meta_opt.step()
    print(f"meta {it} query loss {loss.item():.6f}")
