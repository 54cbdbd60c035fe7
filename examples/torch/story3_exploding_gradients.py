"""A deep plain MLP regressor whose gradients explode under a learning rate that is too high.

Story 3 of gradient-doctor, in PyTorch: a 10-layer ReLU MLP with no normalization,
trained with plain SGD in a plain loop over a `DataLoader`, the learning rate warmed
up linearly by a `LambdaLR` scheduler to a peak far too high for this depth. Training
is fine at first; once the rate passes what the net tolerates every update overshoots,
the weights grow, and the gradient norm grows by a large factor each step until an
update blows the weights up and the mean-squared error overflows float32 to inf (the
loss is inf, the gradients NaN). The loss is only where the overflow shows; the cause
is the learning rate.

The doctor should find: exploding_gradients (the gradient norm grew over the steps
before), at the loss line `loss = F.mse_loss(model(x), y)`, phase forward, within the
first few hundred steps; the fixes a lower learning rate and gradient clipping
(`torch.nn.utils.clip_grad_norm_`).
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

NUM_SAMPLES = 2048
NUM_FEATURES = 20
DEPTH = 10
WIDTH = 64
BATCH_SIZE = 64
EPOCHS = 10
PEAK_LEARNING_RATE = 2.0  # too high for a deep net without normalization
WARMUP_STEPS = 150


def make_data(generator):
    x = torch.randn(NUM_SAMPLES, NUM_FEATURES, generator=generator)
    w = torch.randn(NUM_FEATURES, 1, generator=generator)
    y = torch.sin(x @ w) + 0.1 * torch.randn(NUM_SAMPLES, 1, generator=generator)
    return x, y


def build_model():
    layers = []
    width = NUM_FEATURES
    for _ in range(DEPTH):
        layers += [nn.Linear(width, WIDTH), nn.ReLU()]
        width = WIDTH
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def main():
    torch.manual_seed(0)
    x, y = make_data(torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, shuffle=True)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=PEAK_LEARNING_RATE)
    warmup = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS)
    )
    step = 0
    for epoch in range(EPOCHS):
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            warmup.step()
            if step % 20 == 0:
                print(f"step {step}: loss {loss.item():.4f}")
            step += 1
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
