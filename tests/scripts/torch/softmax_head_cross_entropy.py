"""Silent failure: a classifier whose forward returns softmax probabilities, trained with
nn.CrossEntropyLoss, which applies its own softmax. Squashed twice, the loss stalls near
log(C). Expected: probabilities_as_logits at step 0, the softmax line named, and its
removal (the logits handed to the loss) verified by a rerun that learns far more."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
centers = torch.randn(5, 10) * 2
labels = torch.randint(0, 5, (1500,))
features = centers[labels] + torch.randn(1500, 10)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 5))

    def forward(self, x):
        return F.softmax(self.body(x), dim=1)


model = Classifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
criterion = nn.CrossEntropyLoss()
for epoch in range(4):
    for start in range(0, 1500, 50):
        loss = criterion(model(features[start : start + 50]), labels[start : start + 50])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(epoch, repr(loss.item()))
