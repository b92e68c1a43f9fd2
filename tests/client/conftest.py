"""Fixtures shared by the client tests."""

import pytest
import torch


def sgd_over_pairs(model, trainloader, loss_fn, config):
    """A user's ``train_fn``: one pass of plain SGD at the config's lr over ``(x, y)``
    batches, minimising the ``loss_fn`` it is handed (so a rule's objective applies)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    for inputs, targets in trainloader:
        optimizer.zero_grad()
        loss_fn(model(inputs), targets).backward()
        optimizer.step()


@pytest.fixture
def sgd_train_fn():
    """:func:`sgd_over_pairs`, the ``train_fn`` handed to ``fair_train``."""
    return sgd_over_pairs
