"""Bring your own ClientApp: a stock Flower quickstart-style PyTorch app plus fairfl's
client helpers trains against every fairfl rule (issue 10).

Everything in the "stock app" below is what a Flower quickstart user already has: a
`Net`, a data loader, a training loop. The lines marked `# fairfl` are all that is added
so that each rule gets what it needs: F_k(w^t) (`mean_loss`), the activation vector,
the PropFair / proximal objective, RC-FL's joint (ω, η) step, q-FFL's h_k, q-FedSGD's
full-batch gradient, and the reply in wire-contract form. The server side is a user
ServerApp loop calling `strategy.start` with a fairfl strategy.
"""

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from sklearn.datasets import load_digits
from torch import nn

from fairfl._compat import server_task_identity
from fairfl.client import evaluate as loss_and_accuracy  # fairfl
from fairfl.client import loader_gradient, mean_loss  # fairfl
from fairfl.client.activation import activation_for_config  # fairfl
from fairfl.client.objectives import local_objective  # fairfl
from fairfl.client.rcfl import rcfl_settings, train_rcfl  # fairfl
from fairfl.contract import (
    keys,
    write_train_reply,  # fairfl
)
from fairfl.contract.keys import QFFL_Q
from fairfl.contract.qffl import qffl_h, write_gradient_reply  # fairfl
from fairfl.contract.sensitive import group_counts  # fairfl
from fairfl.simulation import InMemoryGrid, node_configs_for
from fairfl.strategies import STRATEGIES, build_strategy

RUN_CONFIG = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())[
    "tool"
]["flwr"]["app"]["config"]
NUM_NODES = 3


# ----------------------------------------------------------------- the stock app
class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def features(self, x: torch.Tensor) -> torch.Tensor:  # fairfl: penultimate layer
        return torch.relu(self.fc1(x.flatten(1)))

    def classifier(self, h: torch.Tensor) -> torch.Tensor:  # fairfl
        return self.fc2(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def load_data(partition_id: int, num_partitions: int):
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    idx = np.arange(partition_id, len(y), num_partitions)[:120]
    return x[idx[:90]], y[idx[:90]], x[idx[90:]], y[idx[90:]]


def stock_train(net, x, y, epochs, lr, batch_objective=None):
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    net.train()
    for _ in range(epochs):
        for start in range(0, len(x), 16):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(
                net(torch.from_numpy(x[start : start + 16])),
                torch.from_numpy(y[start : start + 16]),
            )
            if batch_objective is not None:  # fairfl: PropFair's transformed loss
                loss = batch_objective(loss)
            loss.backward()
            optimizer.step()


app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    net = Net()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    pid, parts = context.node_config["partition-id"], context.node_config["num-partitions"]
    x, y, _, _ = load_data(pid, parts)
    config = msg.content["config"]
    device = torch.device("cpu")
    if config.get(keys.FULL_GRADIENT, False):  # fairfl: q-FedSGD, gradient instead of training
        gradient, loss, count = loader_gradient(net, [(x, y)], nn.CrossEntropyLoss(), device)
        content = write_gradient_reply(
            ArrayRecord(gradient), num_examples=count, loss_before_training=loss, partition_id=pid
        )
        return Message(content=content, reply_to=msg)
    loss_before = mean_loss(net, x, y, device)  # fairfl: F_k(w^t), before training
    accuracy = (  # fairfl: FedFa's accuracy of the received model, when asked
        loss_and_accuracy(net, x, y, device)[1] if config.get(keys.WANT_ACCURACY, False) else None
    )
    activation = (  # fairfl: Equitable FL's report, when asked
        activation_for_config(net, x, device, config, sample_seed=pid)
        if config.get(keys.WANT_ACTIVATION, False)
        else None
    )
    counts = None
    if config.get(keys.WANT_GROUP_COUNTS, False):  # fairfl: FairFed's counts, when asked
        # The app's binary question (digit >= 5) and attribute (an ink-heavy image).
        with torch.no_grad():
            predicted = net(torch.from_numpy(x)).argmax(1).numpy() >= 5
        heavy = x.mean(axis=1) > np.median(x.mean(axis=1))
        counts = group_counts(heavy.astype(int), (y >= 5).astype(int), predicted.astype(int), 2)
    rcfl, eta = rcfl_settings(config), None  # fairfl
    if rcfl is not None:  # fairfl: RC-FL trains (ω, η) jointly
        eta = train_rcfl(
            net, x, y, settings=rcfl, lr=float(config["lr"]), device=device, seed=pid
        ).eta
    else:
        stock_train(
            net,
            x,
            y,
            int(config["local-epochs"]),
            float(config["lr"]),
            local_objective(config).batch_objective,
        )  # fairfl: PropFair objective
    accuracy_after = (  # fairfl: FedFa's default, the trained model's accuracy, when asked
        loss_and_accuracy(net, x, y, device)[1]
        if config.get(keys.WANT_ACCURACY_AFTER_TRAINING, False)
        else None
    )
    state = net.state_dict()
    h = (  # fairfl: q-FFL's client-side h_k
        qffl_h(
            loss_before,
            msg.content["arrays"].to_numpy_ndarrays(),
            [v.numpy() for v in state.values()],
            float(config[QFFL_Q]),
            float(config["lr"]),
        )
        if QFFL_Q in config
        else None
    )
    content = write_train_reply(  # fairfl: the wire-contract reply
        ArrayRecord(state),
        num_examples=len(y),
        loss_before_training=loss_before,
        acc_before_training=accuracy,
        acc_after_training=accuracy_after,
        partition_id=pid,
        activation=activation,
        qffl_h=h,
        rcfl_eta=eta,
        group_counts=counts,
    )
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    net = Net()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, _, x, y = load_data(
        context.node_config["partition-id"], context.node_config["num-partitions"]
    )
    with torch.no_grad():
        logits = net(torch.from_numpy(x))
    metrics = {
        "num-examples": len(y),
        "eval_loss": float(nn.functional.cross_entropy(logits, torch.from_numpy(y))),
        "eval_acc": float((logits.argmax(1) == torch.from_numpy(y)).float().mean()),
    }
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


# ----------------------------------------------------------------------- tests
@pytest.mark.parametrize("rule", sorted(STRATEGIES))
def test_stock_clientapp_trains_against_every_rule(rule):
    torch.manual_seed(0)
    grid = InMemoryGrid(app, node_configs_for(NUM_NODES), {})
    strategy = build_strategy(rule, RUN_CONFIG, min_available_nodes=NUM_NODES)
    initial = Net().state_dict()
    with server_task_identity(grid.run_id):
        result = strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord(initial),
            num_rounds=2,
            train_config=ConfigRecord({"lr": 0.1, "local-epochs": 1, "batch-size": 16}),
        )
    for server_round in (1, 2):
        record = strategy.train_records[server_round]
        assert record.dropped == {}, json.dumps(record.dropped)
        assert len(record.accepted) == NUM_NODES
        assert len(strategy.evaluations[server_round]) == NUM_NODES
    assert all(np.isfinite(a.numpy()).all() for a in result.arrays.values())
    assert not np.allclose(result.arrays["fc2.weight"].numpy(), initial["fc2.weight"].numpy())
