"""fair_train as Flower's quickstart calls it: dict batches, a train_fn with its own
criterion and optimizer (issue 40).

The quickstart's train loop reads ``batch["img"]`` and ``batch["label"]``, builds
``nn.CrossEntropyLoss()`` itself and steps ``SGD(lr, momentum=0.9)``.
"""

import logging
from unittest.mock import Mock

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from torch import nn

from fairfl.client import fair_evaluate, fair_train, sgd_problems, split_batch
from fairfl.contract import keys, read_train_reply
from fairfl.contract.objective import objective_dropped, objective_dropped_message
from fairfl.contract.replies import ModelLayout
from tests.conftest import make_reply

BASE = {keys.SERVER_ROUND: 1, keys.LR: 0.1, keys.LOCAL_EPOCHS: 1, keys.BATCH_SIZE: 2}


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 3))


def message(model: nn.Module, **config: object) -> Message:
    msg = Mock(spec=Message)
    msg.content = RecordDict(
        {"arrays": ArrayRecord(model.state_dict()), "config": ConfigRecord({**BASE, **config})}
    )
    return msg


X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
Y = torch.tensor([0, 1, 2, 0])
PAIRS = [(X[:2], Y[:2]), (X[2:], Y[2:])]
DICTS = [{"img": X[:2], "label": Y[:2]}, {"img": X[2:], "label": Y[2:]}]


def quickstart_train(model, trainloader, loss_fn, config, momentum=0.9):
    """Flower's quickstart train(): its own criterion and optimizer, dict batches."""
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=momentum)
    for batch in trainloader:
        optimizer.zero_grad()
        criterion(model(batch["img"]), batch["label"]).backward()
        optimizer.step()


def uses_loss_fn(model, trainloader, loss_fn, config):
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    for batch in trainloader:
        optimizer.zero_grad()
        loss_fn(model(batch["img"]), batch["label"]).backward()
        optimizer.step()


# ---------------------------------------------------------------- dict batches
@pytest.mark.parametrize(
    ("batch", "keys_", "expected"),
    [
        ({"img": 1, "label": 2}, None, (1, 2)),  # CIFAR-10 (the quickstart)
        ({"image": 1, "label": 2}, None, (1, 2)),  # MNIST
        ({"pixel_values": 1, "labels": 2}, None, (1, 2)),  # Hugging Face processors
        ({"img": 1, "fine_label": 2, "coarse_label": 3}, None, (1, 2)),  # CIFAR-100
        ({"x": 1, "y": 2, "id": 5}, None, (1, 2)),  # extra columns are ignored
        ({"a": 1, "b": 2}, ("a", "b"), (1, 2)),  # named by argument
        ({"img": 1, "coarse_label": 3}, ("img", "coarse_label"), (1, 3)),
        ((1, 2), None, (1, 2)),
        ([1, 2], ("ignored", "for pairs"), (1, 2)),
    ],
)
def test_split_batch_reads_pairs_and_named_columns(batch, keys_, expected):
    assert split_batch(batch, keys_) == expected


def test_ambiguous_or_unknown_dict_batches_name_the_keys_found():
    with pytest.raises(ValueError, match=r"inputs of a dict batch with keys \['img', 'image', "):
        split_batch({"img": 1, "image": 1, "label": 2})
    with pytest.raises(ValueError, match=r"targets .* keys \['img', 'cls'\]: none .*batch_keys="):
        split_batch({"img": 1, "cls": 2})
    with pytest.raises(KeyError, match=r"no 'lbl' \(its keys: \['img', 'label'\]\)"):
        split_batch({"img": 1, "label": 2}, ("img", "lbl"))
    with pytest.raises(TypeError, match="pair or a dict of named columns, got Tensor"):
        split_batch(torch.zeros(3))


def test_dict_batches_give_the_same_reply_as_pairs(sgd_train_fn):
    by_pairs = fair_train(message(net()), net(), PAIRS, nn.CrossEntropyLoss(), sgd_train_fn)
    by_dicts = fair_train(message(net()), net(), DICTS, nn.CrossEntropyLoss(), uses_loss_fn)
    assert dict(by_dicts["metrics"]) == pytest.approx(dict(by_pairs["metrics"]))
    for key in by_pairs["arrays"]:
        assert (by_dicts["arrays"][key].numpy() == by_pairs["arrays"][key].numpy()).all()
    # Zero weights: every logit 0, so F_k(w^t) = ln 3 on each of the 4 samples.
    zero = nn.Sequential(nn.Linear(2, 3))
    nn.init.zeros_(zero[0].weight), nn.init.zeros_(zero[0].bias)
    reply = fair_evaluate(message(zero), net(), DICTS, nn.CrossEntropyLoss())
    assert reply["metrics"][keys.EVAL_LOSS] == pytest.approx(1.0986123, rel=1e-6)
    assert reply["metrics"][keys.EVAL_ACC] == 0.5  # argmax 0 everywhere; labels 0, 1, 2, 0


def test_dict_batches_reach_equitable_fls_activation_and_rcfl():
    mu = {keys.WANT_ACTIVATION: True, keys.PROXIMAL_MU: 0.0}
    reply = fair_train(message(net(), **mu), net(), DICTS, nn.CrossEntropyLoss(), uses_loss_fn)
    assert len(reply["metrics"][keys.ACTIVATION]) == 2  # the input of the last Linear: x
    rcfl = {keys.RCFL_ALPHA: 0.5, keys.RCFL_ETA: 0.0, keys.RCFL_MU: 0.1, keys.RCFL_LOCAL_STEPS: 1}
    reply = fair_train(message(net(), **rcfl), net(), DICTS, nn.CrossEntropyLoss(), Mock())
    assert keys.RCFL_ETA in reply["metrics"]


# --------------------------------------------------------- the client objective
def test_an_ignored_proximal_term_is_reported_and_warned(caplog):
    # Equitable FL's config: the proximal term μ/2 ||w - w^t||² and the activation.
    config = {keys.WANT_ACTIVATION: True, keys.PROXIMAL_MU: 1.0}
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        reply = fair_train(
            message(net(), **config), net(), DICTS, nn.CrossEntropyLoss(), quickstart_train
        )
    assert reply["metrics"][keys.OBJECTIVE_IGNORED] == 1
    assert objective_dropped(reply["metrics"])
    assert "client objective (proximal-mu)" in caplog.text
    assert "never called the loss_fn" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        reply = fair_train(
            message(net(), **config), net(), DICTS, nn.CrossEntropyLoss(), uses_loss_fn
        )
    assert reply["metrics"][keys.OBJECTIVE_IGNORED] == 0
    assert not objective_dropped(reply["metrics"])
    assert "client objective" not in caplog.text


def test_an_ignored_propfair_transform_is_reported_and_the_reply_is_valid():
    reply = fair_train(
        message(net(), **{keys.PROPFAIR_M: 5.0}),
        net(),
        DICTS,
        nn.CrossEntropyLoss(),
        quickstart_train,
    )
    layout = ModelLayout.of(message(net()).content["arrays"])
    read = read_train_reply(make_reply(4, content=reply), layout, (keys.LOSS_BEFORE_TRAINING,))
    assert objective_dropped(read.metrics)


def test_rules_without_a_client_objective_send_no_flag():
    reply = fair_train(
        message(net(), **{keys.QFFL_Q: 1.0}), net(), DICTS, nn.CrossEntropyLoss(), uses_loss_fn
    )
    assert keys.OBJECTIVE_IGNORED not in reply["metrics"]
    assert not objective_dropped(reply["metrics"])


def test_the_server_side_check_and_message():
    assert objective_dropped({keys.OBJECTIVE_IGNORED: 1})
    assert not objective_dropped({keys.OBJECTIVE_IGNORED: 0})
    assert not objective_dropped({keys.NUM_EXAMPLES: 3})  # a client that does not report it
    assert objective_dropped_message("node 7", "proximal-mu").startswith(
        "node 7 trained without the rule's client objective (proximal-mu): "
    )


# ----------------------------------------------------------------- the optimizer
def test_qffl_warns_about_the_quickstarts_momentum(caplog):
    qffl = {keys.QFFL_Q: 1.0}
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        fair_train(message(net(), **qffl), net(), DICTS, nn.CrossEntropyLoss(), quickstart_train)
    assert "q-FFL computes L = 1/lr for plain SGD" in caplog.text
    assert "train_fn stepped SGD with momentum=0.9;" in caplog.text
    assert "client_learning_rate" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fairfl"):  # plain SGD at the config's lr
        fair_train(message(net(), **qffl), net(), DICTS, nn.CrossEntropyLoss(), uses_loss_fn)
        # Another rule: momentum is the app's business.
        fair_train(message(net()), net(), DICTS, nn.CrossEntropyLoss(), quickstart_train)
    assert caplog.text == ""


def test_sgd_problems_name_adaptive_optimizers_momentum_and_another_lr():
    params = [nn.Parameter(torch.zeros(1))]
    assert sgd_problems([torch.optim.SGD(params, lr=0.1)], 0.1) == []
    assert sgd_problems([torch.optim.Adam(params, lr=0.1)], 0.1) == ["stepped Adam, not plain SGD"]
    assert sgd_problems([torch.optim.SGD(params, lr=0.05, momentum=0.5)], 0.1) == [
        "stepped SGD with momentum=0.5",
        "stepped SGD with lr=0.05, not lr=0.1",
    ]


def test_optimizers_of_other_models_are_not_counted(caplog):
    other = nn.Linear(1, 1)

    def train_fn(model, trainloader, loss_fn, config):
        side = torch.optim.Adam(other.parameters())  # e.g. a GAN's discriminator
        other(torch.ones(1, 1)).sum().backward()
        side.step()
        uses_loss_fn(model, trainloader, loss_fn, config)

    with caplog.at_level(logging.WARNING, logger="fairfl"):
        fair_train(
            message(net(), **{keys.QFFL_Q: 1.0}), net(), DICTS, nn.CrossEntropyLoss(), train_fn
        )
    assert caplog.text == ""
