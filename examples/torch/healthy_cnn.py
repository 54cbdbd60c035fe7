"""A small CNN classifying synthetic images: a healthy PyTorch run the doctor must leave alone.

Two conv blocks (Conv2d, BatchNorm2d, ReLU, max-pool) and a linear head learn which
quadrant of a noisy 16x16 image holds a bright square, with `nn.CrossEntropyLoss` and
Adam over a shuffled `DataLoader`. Nothing in it is numerically risky.

The doctor should find: nothing (status healthy, no problems, no warnings); the losses
it prints are the same, bit for bit, watched or not.
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

NUM_IMAGES = 512
SIZE = 16
EPOCHS = 3


def make_images(generator):
    labels = torch.randint(0, 4, (NUM_IMAGES,), generator=generator)
    images = 0.3 * torch.randn(NUM_IMAGES, 1, SIZE, SIZE, generator=generator)
    for i, label in enumerate(labels.tolist()):
        row, col = divmod(label, 2)
        top = row * SIZE // 2 + 2
        left = col * SIZE // 2 + 2
        images[i, 0, top : top + 4, left : left + 4] += 1.0
    return images, labels


torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1),
    nn.BatchNorm2d(8),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, padding=1),
    nn.BatchNorm2d(16),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Flatten(),
    nn.Linear(16 * (SIZE // 4) ** 2, 4),
)


def main():
    images, labels = make_images(torch.Generator().manual_seed(0))
    loader = DataLoader(
        TensorDataset(images, labels),
        batch_size=32,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(EPOCHS):
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 4 == 0:
                print(f"epoch {epoch} step {step}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
