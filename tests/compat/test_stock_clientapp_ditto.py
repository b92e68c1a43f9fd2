"""Flower's quickstart app (examples/quickstart-pytorch) with Ditto as its strategy.

Its ServerApp sends only ``lr`` (its ClientApp reads ``local-epochs`` from its own run
config) and its ClientApp calls ``fair_train``. Issue 47, item 6: Ditto's client step
read ``local-epochs`` from the train config with no default, so every client failed
every round (``config key 'local-epochs' is missing``), the model never changed, and the
run exited 0. The personal step now takes the run's defaults for training.
"""

import logging

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.clientapp import ClientApp
from torch import nn

from fairfl._compat import server_task_identity
from fairfl.client import fair_train
from fairfl.client.ditto import STATE_RECORD
from fairfl.simulation import InMemoryGrid, node_configs_for
from fairfl.strategies import Ditto

NUM_NODES = 2
app = ClientApp()
contexts: dict[int, Context] = {}


def load_data(partition_id: int):
    rng = np.random.default_rng(partition_id)
    x = torch.from_numpy(rng.normal(size=(16, 4)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 2, size=16))
    return [(x[:8], y[:8]), (x[8:], y[8:])]


def quickstart_train(model, trainloader, epochs, lr):
    """The quickstart's own loop: its epochs come from its run config, not the message."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(epochs):
        for x, y in trainloader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


@app.train()
def train(msg: Message, context: Context) -> Message:
    model = nn.Linear(4, 2)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    partition_id = int(context.node_config["partition-id"])
    trainloader = load_data(partition_id)
    contexts[partition_id] = context
    content = fair_train(
        msg,
        model,
        trainloader,
        nn.CrossEntropyLoss(),
        lambda *_: quickstart_train(model, trainloader, 1, msg.content["config"]["lr"]),
        partition_id=partition_id,
        context=context,
    )
    return Message(content=content, reply_to=msg)


def test_ditto_with_a_server_that_sends_only_lr_trains_every_client(caplog):
    caplog.set_level(logging.WARNING, logger="fairfl")
    grid = InMemoryGrid(app, node_configs_for(NUM_NODES), {})
    strategy = Ditto(min_available_nodes=NUM_NODES, fraction_evaluate=0.0)
    initial = nn.Linear(4, 2).state_dict()
    with server_task_identity(grid.run_id):
        result = strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord(initial),
            num_rounds=2,
            train_config=ConfigRecord({"lr": 0.1}),
        )
    for server_round in (1, 2):
        record = strategy.train_records[server_round]
        assert record.dropped == {}, record.dropped
        assert len(record.accepted) == NUM_NODES
    assert not np.allclose(result.arrays["weight"].numpy(), initial["weight"].numpy())
    # Every client kept a personal model, trained with the default epochs (one warning).
    assert sorted(contexts) == list(range(NUM_NODES))
    assert all(STATE_RECORD in c.state for c in contexts.values())
    warnings = [r.getMessage() for r in caplog.records if "has no local-epochs" in r.getMessage()]
    assert warnings == [
        "ditto: the train config has no local-epochs; the personal step takes fairfl's "
        "default for training, local-epochs = 2 (send local-epochs in the train config to "
        "choose)"
    ]


@pytest.fixture(autouse=True)
def _fresh_contexts(monkeypatch):
    monkeypatch.setattr("fairfl.client.ditto._DEFAULTED", set())  # warned once per process
    contexts.clear()
    yield
    contexts.clear()
