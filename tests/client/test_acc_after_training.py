"""fairfl's ClientApp reports its trained model's training accuracy when FedFa asks."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict

from fairfl._compat import server_task_identity, set_message_id
from fairfl.client.app import _client_data, _settings, app
from fairfl.contract import keys
from fairfl.models import build_model

RUN_CONFIG = {"num-partitions": 4, "dataset": "digits", "model": "mlp"}
NODE_CONFIG = {"partition-id": 1, "num-partitions": 4}


def train_reply(model: torch.nn.Module, **config: object) -> RecordDict:
    """The ClientApp's reply to a train message sending ``model``."""
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
    return app(message, context).content


def accuracy(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """Share of argmax predictions equal to ``y``, by hand."""
    model.eval()
    with torch.no_grad():
        predicted = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    return float((predicted == y).mean())


def test_accuracy_of_the_trained_model_on_the_training_split():
    torch.manual_seed(0)
    sent = build_model("mlp", (1, 8, 8), 10)
    asked = train_reply(sent, **{keys.WANT_ACCURACY_AFTER_TRAINING: True})
    plain = train_reply(sent)
    metrics, plain_metrics = dict(asked[keys.METRICS]), dict(plain[keys.METRICS])
    # By hand: the reply's trained weights, argmax over the node's whole training split.
    settings, node = _settings(SimpleNamespace(run_config=RUN_CONFIG, node_config=NODE_CONFIG))
    data = _client_data(settings, node)
    trained = build_model("mlp", (1, 8, 8), 10)
    trained.load_state_dict(asked[keys.ARRAYS].to_torch_state_dict())
    after = accuracy(trained, data.x_train, data.y_train)
    assert metrics[keys.ACC_AFTER_TRAINING] == pytest.approx(after, abs=1e-12)
    assert after != accuracy(sent, data.x_train, data.y_train)  # training moved it
    # The pass after training changes nothing else the reply carries.
    assert metrics[keys.LOSS_BEFORE_TRAINING] == plain_metrics[keys.LOSS_BEFORE_TRAINING]
    for key, value in plain[keys.ARRAYS].items():
        np.testing.assert_array_equal(asked[keys.ARRAYS][key].numpy(), value.numpy())
    assert keys.ACC_AFTER_TRAINING not in plain_metrics
    assert keys.ACC_BEFORE_TRAINING not in metrics
