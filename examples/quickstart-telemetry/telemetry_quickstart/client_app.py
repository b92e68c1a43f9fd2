"""ClientApp: Flower's quickstart client, unchanged (it knows nothing of fairfl)."""

from __future__ import annotations

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from telemetry_quickstart.task import Net, load_data
from telemetry_quickstart.task import test as test_fn
from telemetry_quickstart.task import train as train_fn

app = ClientApp()


def _partition(context: Context) -> tuple[int, int]:
    return int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train the received model on the local data."""
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    trainloader, _ = load_data(*_partition(context))
    train_loss = train_fn(
        model,
        trainloader,
        int(context.run_config["local-epochs"]),
        float(msg.content["config"]["lr"]),
    )
    metrics = MetricRecord({"train_loss": train_loss, "num-examples": len(trainloader.dataset)})
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the received model on the local test data."""
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, testloader = load_data(*_partition(context))
    eval_loss, eval_acc = test_fn(model, testloader)
    metrics = MetricRecord(
        {"eval_loss": eval_loss, "eval_acc": eval_acc, "num-examples": len(testloader.dataset)}
    )
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
