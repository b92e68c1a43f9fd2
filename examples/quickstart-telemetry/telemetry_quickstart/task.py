"""The app's model, data and training loop: plain PyTorch, nothing fairfl."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    """A small MLP for scikit-learn's 8x8 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits of a batch of flattened images."""
        return self.fc2(torch.relu(self.fc1(x)))


def load_data(partition_id: int, num_partitions: int) -> tuple[DataLoader, DataLoader]:
    """Train and test loaders of one partition (every n-th sample; 75 % trains).

    Partition ``i`` keeps only the digits ``i mod 10`` to ``i + 4 mod 10`` of its
    share, so the clients differ and their accuracies spread.
    """
    digits = load_digits()
    x = torch.from_numpy((digits.data / 16.0).astype(np.float32))
    y = torch.from_numpy(digits.target.astype(np.int64))
    index = torch.arange(partition_id, len(y), num_partitions)
    index = index[((y[index] - partition_id) % 10) < 5]
    split = int(0.75 * len(index))
    train, test = index[:split], index[split:]
    generator = torch.Generator().manual_seed(partition_id)
    trainloader = DataLoader(
        TensorDataset(x[train], y[train]), batch_size=32, shuffle=True, generator=generator
    )
    return trainloader, DataLoader(TensorDataset(x[test], y[test]), batch_size=64)


def train(net: nn.Module, trainloader: DataLoader, epochs: int, lr: float) -> float:
    """SGD for ``epochs`` epochs; the mean batch loss."""
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for _ in range(epochs):
        for images, labels in trainloader:
            optimizer.zero_grad()
            loss = loss_fn(net(images), labels)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return float(np.mean(losses))


def test(net: nn.Module, testloader: DataLoader) -> tuple[float, float]:
    """Mean loss and accuracy (a fraction) on the test loader."""
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    loss, correct, total = 0.0, 0, 0
    with torch.no_grad():
        for images, labels in testloader:
            logits = net(images)
            loss += loss_fn(logits, labels).item()
            correct += int((logits.argmax(1) == labels).sum())
            total += len(labels)
    return loss / total, correct / total
