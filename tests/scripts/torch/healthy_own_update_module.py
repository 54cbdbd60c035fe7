"""PyTorch's nn-module tutorial, as written there: a third-order polynomial fitted to
sin(x) by an nn.Sequential with no optimizer, each parameter updated by hand under
`torch.no_grad()`. Healthy: it must print the same losses and weights watched or not.
"""

import math

import torch

torch.manual_seed(0)
x = torch.linspace(-math.pi, math.pi, 2000).unsqueeze(-1)
y = torch.sin(x)
p = torch.tensor([1, 2, 3])
xx = x.pow(p)

model = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1))
loss_fn = torch.nn.MSELoss(reduction="sum")

learning_rate = 1e-6
for t in range(300):
    y_pred = model(xx)
    loss = loss_fn(y_pred, y.flatten())
    if t % 50 == 49:
        print(t, loss.item())
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for param in model.parameters():
            param -= learning_rate * param.grad

linear = model[0]
print(linear.bias.item(), linear.weight[:, 0].item(), linear.weight[:, 1].item())
