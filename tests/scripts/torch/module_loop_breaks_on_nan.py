# A notebook's cells run top to bottom: a softmax regression over word counts, the
# softmax written out by hand, and a loop that stops quietly when the loss diverges
# (a test that NaN fails too, and no finiteness test).
import torch

torch.manual_seed(0)
vocabulary, classes = 40, 3
counts = torch.poisson(torch.full((256, vocabulary), 3.0))
true_weights = torch.randn(vocabulary, classes)
labels = (counts @ true_weights).argmax(dim=1)

weights = torch.zeros(vocabulary, classes, requires_grad=True)
bias = torch.zeros(classes, requires_grad=True)
opt = torch.optim.SGD([weights, bias], lr=0.5)

for epoch in range(60):
    scores = counts @ weights + bias
    probs = torch.exp(scores) / torch.exp(scores).sum(dim=1, keepdim=True)
    loss = -torch.log(probs[torch.arange(len(labels)), labels]).mean()
    if not loss.item() < 1e4:
        print("loss is nan, stopping")
        break
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
