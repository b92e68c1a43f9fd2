"""The app's own model, data, loss and training loop: plain PyTorch, nothing fairfl."""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ConfigRecord
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    """A small MLP for 8x8 digits (no ``features()``: fairfl reads fc2's input by hook)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits of a batch of flattened images."""
        return self.fc2(torch.relu(self.fc1(x)))


def load_data(
    partition_id: int, num_partitions: int, batch_size: int
) -> tuple[DataLoader, DataLoader]:
    """Train and test loaders of one partition of scikit-learn's bundled digits.

    Partition ``i`` of ``n`` takes every n-th sample from ``i`` on; 75 % of it trains.
    """
    digits = load_digits()
    x = torch.from_numpy((digits.data / 16.0).astype(np.float32))
    y = torch.from_numpy(digits.target.astype(np.int64))
    index = torch.arange(partition_id, len(y), num_partitions)
    split = int(0.75 * len(index))
    train, test = index[:split], index[split:]
    generator = torch.Generator().manual_seed(partition_id)
    trainloader = DataLoader(
        TensorDataset(x[train], y[train]),
        batch_size=batch_size,
        shuffle=True,
        generator=generator,
    )
    testloader = DataLoader(TensorDataset(x[test], y[test]), batch_size=batch_size)
    return trainloader, testloader


def train(
    net: nn.Module, trainloader: DataLoader, loss_fn: nn.Module, config: ConfigRecord
) -> float:
    """SGD for ``local-epochs`` epochs at ``lr``; return the mean batch loss."""
    optimizer = torch.optim.SGD(net.parameters(), lr=float(config["lr"]))
    losses = []
    for _ in range(int(config["local-epochs"])):
        for images, labels in trainloader:
            optimizer.zero_grad()
            loss = loss_fn(net(images), labels)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return float(np.mean(losses))
