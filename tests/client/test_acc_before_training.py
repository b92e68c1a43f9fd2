"""fairfl's ClientApp reports the received model's training accuracy when FedFa asks."""

from types import SimpleNamespace

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict

from fairfl._compat import server_task_identity, set_message_id
from fairfl.client.app import _client_data, _settings, app
from fairfl.contract import keys
from fairfl.models import build_model

RUN_CONFIG = {"num-partitions": 4, "dataset": "digits", "model": "mlp"}
NODE_CONFIG = {"partition-id": 1, "num-partitions": 4}


def train_reply_metrics(model: torch.nn.Module, **config: object) -> dict:
    """The metrics of the ClientApp's reply to a train message sending ``model``."""
    context = Context(
        run_id=1, node_id=7, node_config=NODE_CONFIG, state=RecordDict(), run_config=RUN_CONFIG
    )
    round_config = {"lr": 0.1, "local-epochs": 1, "batch-size": 32, "server-round": 1, **config}
    with server_task_identity(1):
        content = RecordDict(
            {"arrays": ArrayRecord(model.state_dict()), "config": ConfigRecord(round_config)}
        )
        message = Message(content=content, dst_node_id=7, message_type="train")
    set_message_id(message, "m-train")
    return dict(app(message, context).content[keys.METRICS])


def test_accuracy_of_the_received_model_on_the_training_split():
    torch.manual_seed(0)
    model = build_model("mlp", (1, 8, 8), 10)
    asked = train_reply_metrics(model, **{keys.WANT_ACCURACY: True})
    plain = train_reply_metrics(model)
    # By hand: argmax of the sent model over the node's whole training split.
    settings, node = _settings(SimpleNamespace(run_config=RUN_CONFIG, node_config=NODE_CONFIG))
    data = _client_data(settings, node)
    model.eval()
    with torch.no_grad():
        predicted = model(torch.from_numpy(data.x_train)).argmax(dim=1).numpy()
    assert asked[keys.ACC_BEFORE_TRAINING] == pytest.approx(
        float((predicted == data.y_train).mean()), abs=1e-12
    )
    assert asked[keys.LOSS_BEFORE_TRAINING] == plain[keys.LOSS_BEFORE_TRAINING]
    assert keys.ACC_BEFORE_TRAINING not in plain
