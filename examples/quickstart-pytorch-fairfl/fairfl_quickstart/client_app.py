"""ClientApp: the app's own training, wrapped by ``fairfl.client.fair_train``."""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from torch import nn
from torch.utils.data import DataLoader

from fairfl.client import fair_evaluate, fair_train
from fairfl_quickstart.task import Net, load_data, train

app = ClientApp()


def _loaders(context: Context, batch_size: int) -> tuple[DataLoader, DataLoader]:
    """Loaders of the node's partition (partition-id, num-partitions: node config)."""
    return load_data(
        int(context.node_config["partition-id"]),
        int(context.node_config["num-partitions"]),
        batch_size,
    )


@app.train()
def train_round(msg: Message, context: Context) -> Message:
    """Train on the local partition as the round's fair rule asks."""
    trainloader, _ = _loaders(context, int(msg.content["config"]["batch-size"]))
    # The partition id keys per-client state (AFL's λ, RC-FL's, Equitable FL's) by the
    # device, not by the node id, which changes when a SuperNode restarts.
    content = fair_train(
        msg,
        Net(),
        trainloader,
        nn.CrossEntropyLoss(),
        train,
        partition_id=int(context.node_config["partition-id"]),
    )
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate_round(msg: Message, context: Context) -> Message:
    """Evaluate the global model on the local test split."""
    _, testloader = _loaders(context, 64)
    content = fair_evaluate(
        msg,
        Net(),
        testloader,
        nn.CrossEntropyLoss(),
        partition_id=int(context.node_config["partition-id"]),
    )
    return Message(content=content, reply_to=msg)
