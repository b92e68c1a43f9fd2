"""pytorchexample: A Flower / PyTorch app."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader


class Net(nn.Module):
    """Model (simple CNN adapted from 'PyTorch: A 60 Minute Blitz')"""

    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


# fairfl: a local stand-in for CIFAR-10 (no download): the same dict batches,
# {"img": float tensor (3, 32, 32) normalised like the template, "label": int in 0..9}.
# Class c is a fixed random image plus noise, so the CNN learns it in a few rounds.
PROTOTYPES = torch.randn(10, 3, 32, 32, generator=torch.Generator().manual_seed(0))


def stand_in(num_samples: int, seed: int) -> list[dict]:
    """``num_samples`` CIFAR-10-shaped samples as dicts, drawn with ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (num_samples,), generator=generator)
    noise = torch.randn(num_samples, 3, 32, 32, generator=generator)
    images = (0.5 * PROTOTYPES[labels] + noise).clamp(-1, 1)
    return [{"img": image, "label": int(label)} for image, label in zip(images, labels)]


def load_data(partition_id: int, num_partitions: int, batch_size: int):
    """Load partition CIFAR10 data (the stand-in: 200 samples per partition)."""
    partition = stand_in(200, seed=1 + partition_id)
    # Divide data on each node: 80% train, 20% test
    trainloader = DataLoader(partition[:160], batch_size=batch_size, shuffle=True)
    testloader = DataLoader(partition[160:], batch_size=batch_size)
    return trainloader, testloader


def load_centralized_dataset():
    """Load test set and return dataloader."""
    return DataLoader(stand_in(500, seed=0), batch_size=128)


def train(net, trainloader, epochs, lr, device):
    """Train the model on the training set."""
    net.to(device)  # move model to GPU if available
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    running_loss = 0.0
    for _ in range(epochs):
        for batch in trainloader:
            images = batch["img"].to(device)
            labels = batch["label"].to(device)
            optimizer.zero_grad()
            loss = criterion(net(images), labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
    avg_trainloss = running_loss / (epochs * len(trainloader))
    return avg_trainloss


def test(net, testloader, device):
    """Validate the model on the test set."""
    net.to(device)
    criterion = torch.nn.CrossEntropyLoss()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for batch in testloader:
            images = batch["img"].to(device)
            labels = batch["label"].to(device)
            outputs = net(images)
            loss += criterion(outputs, labels).item()
            correct += (torch.max(outputs.data, 1)[1] == labels).sum().item()
    accuracy = correct / len(testloader.dataset)
    loss = loss / len(testloader)
    return loss, accuracy
