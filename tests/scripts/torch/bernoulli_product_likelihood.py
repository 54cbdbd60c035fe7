"""A mixture of Bernoulli naive-Bayes classes fit by maximum likelihood, written the
textbook way: the likelihood of 300 features is their product, logged at the end.

The parameters are plain tensors an optimizer trains (no module). The product of 300
probabilities near 0.5 underflows float32 to exactly 0 at the first step, and its log
is -inf.
"""

import torch

torch.manual_seed(3)
classes, features, examples = 4, 300, 400
true_p = torch.rand(classes, features) * 0.8 + 0.1
data = torch.bernoulli(true_p[torch.randint(0, classes, (examples,))])

logits_p = torch.zeros(classes, features, requires_grad=True)
logits_pi = torch.zeros(classes, requires_grad=True)
optimizer = torch.optim.Adam([logits_p, logits_pi], lr=0.05)


def negative_log_likelihood(x):
    p = torch.sigmoid(logits_p)
    pi = torch.softmax(logits_pi, 0)
    per_feature = x[:, None, :] * p + (1 - x[:, None, :]) * (1 - p)
    likelihood = torch.prod(per_feature, dim=2)
    mixture = (likelihood * pi).sum(1)
    return -torch.log(mixture).mean()


for _ in range(5):
    loss = negative_log_likelihood(data[torch.randint(0, examples, (50,))])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("last loss", loss.item())
