"""fairfl.client.fair_train / fair_evaluate: one adapter for any PyTorch ClientApp.

Every branch is checked against an independent computation: the loss before training
and the activation vector are recomputed by hand from the received weights on the whole
data set in one batch; the objective wrappers against their formulas; RC-FL against
fairfl's array-based client and a hand-written loop; q-FFL's h_k against the paper's
formula.
"""

import math
from unittest.mock import Mock

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fairfl.client import (
    RCFLSettings,
    fair_evaluate,
    fair_train,
    loader_activation,
    train_rcfl,
)
from fairfl.contract import keys
from fairfl.contract.activation import ActivationOptions

N, D, CLASSES = 23, 6, 3
BASE_CONFIG = {keys.SERVER_ROUND: 1, keys.LR: 0.1, keys.LOCAL_EPOCHS: 1, keys.BATCH_SIZE: 7}


class Hidden(nn.Module):
    """A stock model without features(): the hook path reads fc2's input."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(D, 5)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(5, CLASSES)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class WithFeatures(Hidden):
    """fairfl's convention: features() is the penultimate activation."""

    def features(self, x):
        return torch.tanh(self.fc1(x))  # deliberately not what forward uses

    def classifier(self, h):
        return self.fc2(h)


class NoLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, CLASSES, kernel_size=D)

    def forward(self, x):
        return self.conv(x.unsqueeze(1)).flatten(1)


def data(seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D, generator=generator)
    y = torch.randint(0, CLASSES, (N,), generator=generator)
    return x, y


def loader(batch_size=7):
    return DataLoader(TensorDataset(*data()), batch_size=batch_size, shuffle=False)


def global_model(cls=Hidden, seed=1):
    torch.manual_seed(seed)
    return cls()


def message(model, **config):
    msg = Mock(spec=Message)
    msg.content = RecordDict(
        {
            "arrays": ArrayRecord(model.state_dict()),
            "config": ConfigRecord({**BASE_CONFIG, **config}),
        }
    )
    return msg


def no_training(model, trainloader, loss_fn, config):
    return None


def sgd_epochs(model, trainloader, loss_fn, config):
    """A stock training loop: reads lr and epochs from the config, returns its loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    losses = []
    for _ in range(config["local-epochs"]):
        for x, y in trainloader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return float(np.mean(losses))


def metrics_of(content):
    return dict(content["metrics"])


# ------------------------------------------------------------------- plain round
def test_plain_round_reports_loss_before_count_and_trained_weights():
    sent = global_model()
    model = global_model(seed=99)  # other weights: fair_train must load the sent ones
    content = fair_train(message(sent), model, loader(), nn.CrossEntropyLoss(), sgd_epochs)
    metrics = metrics_of(content)
    x, y = data()
    with torch.no_grad():
        by_hand = float(nn.functional.cross_entropy(sent(x), y))  # one batch, all samples
    assert metrics[keys.NUM_EXAMPLES] == N
    assert metrics[keys.LOSS_BEFORE_TRAINING] == pytest.approx(by_hand, rel=1e-6)
    assert set(metrics) == {keys.NUM_EXAMPLES, keys.LOSS_BEFORE_TRAINING, keys.TRAIN_LOSS}
    # The same training from the sent weights, by hand: the reply carries its result.
    again = global_model()
    expected_loss = sgd_epochs(again, loader(), nn.CrossEntropyLoss(), BASE_CONFIG)
    assert metrics[keys.TRAIN_LOSS] == pytest.approx(expected_loss, rel=1e-6)
    arrays = content["arrays"]
    assert list(arrays) == list(sent.state_dict())
    for key, value in again.state_dict().items():
        np.testing.assert_allclose(arrays[key].numpy(), value.numpy(), rtol=1e-6)
        assert not np.allclose(arrays[key].numpy(), sent.state_dict()[key].numpy())


def test_accuracy_before_training_is_reported_when_the_config_asks():
    # FedFa's want-accuracy: the sent model's accuracy on all N samples (argmax over the
    # classes), from the same pass as the loss; the loss is the one reported without it.
    sent = global_model()
    x, y = data()
    with torch.no_grad():
        by_hand = int((sent(x).argmax(dim=1) == y).sum()) / N
    asked = metrics_of(
        fair_train(
            message(sent, **{keys.WANT_ACCURACY: True}),
            global_model(seed=99),
            loader(),
            nn.CrossEntropyLoss(),
            no_training,
        )
    )
    plain = metrics_of(
        fair_train(
            message(sent), global_model(seed=99), loader(), nn.CrossEntropyLoss(), no_training
        )
    )
    assert asked[keys.ACC_BEFORE_TRAINING] == pytest.approx(by_hand, abs=1e-12)
    assert asked[keys.LOSS_BEFORE_TRAINING] == plain[keys.LOSS_BEFORE_TRAINING]
    assert keys.ACC_BEFORE_TRAINING not in plain


def predict_class(label: int):
    """A ``train_fn`` whose 'training' makes the model predict ``label`` for every input."""

    def train(model, trainloader, loss_fn, config):
        with torch.no_grad():
            model.fc2.weight.zero_()
            model.fc2.bias.zero_()
            model.fc2.bias[label] = 1.0
        return None

    return train


def test_accuracy_after_training_is_reported_when_the_config_asks():
    # FedFa's default (want-accuracy-after-training): the *trained* model's accuracy on all
    # N samples. The training makes every prediction class 0, so by hand the accuracy is
    # the share of label 0 (7/23); the received model's (before training) is 10/23.
    sent = global_model()
    x, y = data()
    share_of_zero = int((y == 0).sum()) / N
    with torch.no_grad():
        before = int((sent(x).argmax(dim=1) == y).sum()) / N
    assert before != share_of_zero
    asked = metrics_of(
        fair_train(
            message(sent, **{keys.WANT_ACCURACY_AFTER_TRAINING: True}),
            global_model(seed=99),
            loader(),
            nn.CrossEntropyLoss(),
            predict_class(0),
        )
    )
    plain = metrics_of(
        fair_train(
            message(sent), global_model(seed=99), loader(), nn.CrossEntropyLoss(), predict_class(0)
        )
    )
    assert asked[keys.ACC_AFTER_TRAINING] == pytest.approx(share_of_zero, abs=1e-12)
    assert asked[keys.LOSS_BEFORE_TRAINING] == plain[keys.LOSS_BEFORE_TRAINING]
    assert keys.ACC_AFTER_TRAINING not in plain and keys.ACC_BEFORE_TRAINING not in asked


def test_plain_round_passes_the_users_loss_unchanged_and_omits_train_loss_if_none():
    seen = {}

    def train_fn(model, trainloader, loss_fn, config):
        seen.update(loss_fn=loss_fn, training=model.training, config=config)

    loss_fn = nn.CrossEntropyLoss()
    content = fair_train(message(global_model()), global_model(), loader(), loss_fn, train_fn)
    assert seen["loss_fn"] is loss_fn and seen["training"]
    assert seen["config"][keys.LR] == 0.1
    assert keys.TRAIN_LOSS not in metrics_of(content)


def test_any_iterable_of_pairs_works_and_a_bad_batch_is_named():
    x, y = data()
    pairs = [(x[:10], y[:10]), [x[10:], y[10:]]]  # a list: iterable several times
    content = fair_train(
        message(global_model()), global_model(), pairs, nn.CrossEntropyLoss(), no_training
    )
    assert metrics_of(content)[keys.NUM_EXAMPLES] == N
    with pytest.raises(TypeError, match=r"\(inputs, targets\) pair or a dict .*, got Tensor"):
        fair_train(message(global_model()), global_model(), [x], nn.CrossEntropyLoss(), None)
    with pytest.raises(ValueError, match="the loader yielded no sample"):
        fair_train(message(global_model()), global_model(), [], nn.CrossEntropyLoss(), None)


# -------------------------------------------------------------------- activation
def test_activation_of_a_model_with_features_is_the_mean_log_softmax_of_features():
    sent = global_model(WithFeatures)
    content = fair_train(
        message(sent, **{keys.WANT_ACTIVATION: True}),
        global_model(WithFeatures, seed=5),
        loader(),
        nn.CrossEntropyLoss(),
        sgd_epochs,
    )
    x, _ = data()
    with torch.no_grad():
        by_hand = torch.log_softmax(sent.features(x).double(), dim=1).mean(dim=0)
    np.testing.assert_allclose(metrics_of(content)[keys.ACTIVATION], by_hand.numpy(), rtol=1e-6)


@pytest.mark.parametrize("activation_layer", [None, "act"])
def test_activation_of_a_model_without_features_is_read_by_a_hook(activation_layer):
    sent = global_model()
    content = fair_train(
        message(sent, **{keys.WANT_ACTIVATION: True, keys.ACTIVATION_SOURCE: "penultimate_raw"}),
        global_model(seed=5),
        loader(),
        nn.CrossEntropyLoss(),
        sgd_epochs,
        activation_layer=activation_layer,
    )
    x, _ = data()
    with torch.no_grad():
        by_hand = torch.relu(sent.fc1(x)).double().mean(dim=0)  # fc2's input = act's output
    np.testing.assert_allclose(metrics_of(content)[keys.ACTIVATION], by_hand.numpy(), rtol=1e-6)


def test_output_logprob_of_a_hooked_model_is_the_mean_class_log_probability():
    model = global_model()
    got = loader_activation(
        model, loader(), torch.device("cpu"), ActivationOptions(source="output_logprob")
    )
    x, _ = data()
    with torch.no_grad():
        by_hand = torch.log_softmax(model(x).double(), dim=1).mean(dim=0)
    np.testing.assert_allclose(got, by_hand.numpy(), rtol=1e-6)


def test_loader_activation_takes_the_first_max_samples_and_checks_min_samples():
    model = global_model()
    cpu = torch.device("cpu")
    options = ActivationOptions(source="penultimate_raw", max_samples=10)
    got = loader_activation(model, loader(), cpu, options)
    x, _ = data()
    with torch.no_grad():
        by_hand = torch.relu(model.fc1(x[:10])).double().mean(dim=0)
    np.testing.assert_allclose(got, by_hand.numpy(), rtol=1e-6)
    # min_samples counts every sample of the loader, not only the max_samples used.
    assert loader_activation(model, loader(), cpu, ActivationOptions(min_samples=N + 1)) is None
    assert loader_activation(model, loader(), cpu, ActivationOptions(min_samples=N)) is not None


def test_too_few_samples_leave_the_activation_out_of_the_reply():
    content = fair_train(
        message(global_model(), **{keys.WANT_ACTIVATION: True, keys.ACTIVATION_MIN_SAMPLES: N + 1}),
        global_model(),
        loader(),
        nn.CrossEntropyLoss(),
        no_training,
    )
    assert keys.ACTIVATION not in metrics_of(content)


def test_unknown_activation_layer_is_named():
    with pytest.raises(ValueError, match=r"activation_layer 'fc3' is not a submodule of Hidden"):
        fair_train(
            message(global_model(), **{keys.WANT_ACTIVATION: True}),
            global_model(),
            loader(),
            nn.CrossEntropyLoss(),
            no_training,
            activation_layer="fc3",
        )


def test_model_without_features_or_linear_asks_for_activation_layer():
    sent = NoLinear()
    with pytest.raises(
        ValueError, match=r"no features\(\) method and no nn.Linear.*activation_layer="
    ):
        fair_train(
            message(sent, **{keys.WANT_ACTIVATION: True}),
            NoLinear(),
            loader(),
            nn.CrossEntropyLoss(),
            no_training,
        )


def test_unused_linear_layer_is_reported():
    class Unused(Hidden):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(CLASSES, 2)  # registered last, never called

    with pytest.raises(ValueError, match=r"the last nn.Linear of Unused was not called"):
        loader_activation(Unused(), loader(), torch.device("cpu"))


# -------------------------------------------------------------------- objectives
def losses_seen_by_train_fn(config):
    """The wrapped and the raw loss at w^t and after moving every weight by +0.1."""
    seen = {}

    def train_fn(model, trainloader, loss_fn, _config):
        x, y = data()
        seen["at_anchor"] = loss_fn(model(x), y).item()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1)
        seen["moved"] = loss_fn(model(x), y).item()
        seen["raw_moved"] = float(nn.functional.cross_entropy(model(x), y))
        seen["num_parameters"] = sum(p.numel() for p in model.parameters())

    sent = global_model()
    fair_train(message(sent, **config), global_model(), loader(), nn.CrossEntropyLoss(), train_fn)
    x, y = data()
    with torch.no_grad():
        seen["raw_at_anchor"] = float(nn.functional.cross_entropy(sent(x), y))
    return seen


def test_proximal_term_is_added_to_the_users_loss():
    seen = losses_seen_by_train_fn({keys.PROXIMAL_MU: 0.5})
    assert seen["at_anchor"] == pytest.approx(seen["raw_at_anchor"], rel=1e-6)  # no drift yet
    # μ/2 ||w - w^t||² = 0.25 · (number of weights · 0.1²).
    drift = 0.25 * seen["num_parameters"] * 0.01
    assert seen["moved"] == pytest.approx(seen["raw_moved"] + drift, rel=1e-5)


def test_propfair_transform_is_applied_to_the_users_loss():
    seen = losses_seen_by_train_fn({keys.PROPFAIR_M: 3.0})
    # Valid branch (M - ℓ >= ε = 0.2): -log(1 - ℓ/M).
    assert seen["at_anchor"] == pytest.approx(-math.log1p(-seen["raw_at_anchor"] / 3.0), rel=1e-5)


# ------------------------------------------------------------------------ RC-FL
RCFL_CONFIG = {
    keys.RCFL_ALPHA: 0.5,
    keys.RCFL_ETA: 0.3,
    keys.RCFL_MU: 0.1,
    keys.RCFL_LOCAL_STEPS: 3,
}


def test_rcfl_full_pass_steps_match_the_array_client_and_skip_train_fn():
    sent = global_model()
    train_fn = Mock()
    content = fair_train(
        message(sent, **RCFL_CONFIG), global_model(), loader(), nn.CrossEntropyLoss(), train_fn
    )
    train_fn.assert_not_called()
    # fairfl's array client: full-batch steps on the whole split in one batch.
    reference = global_model()
    x, y = data()
    settings = RCFLSettings(eta=0.3, alpha=0.5, mu=0.1, local_steps=3)
    result = train_rcfl(
        reference,
        x.numpy(),
        y.numpy(),
        settings=settings,
        lr=0.1,
        device=torch.device("cpu"),
        seed=0,
    )
    metrics = metrics_of(content)
    assert metrics[keys.RCFL_ETA] == pytest.approx(result.eta, rel=1e-5)
    assert metrics[keys.RCFL_ETA] != pytest.approx(0.3)  # η moved
    assert metrics[keys.TRAIN_LOSS] == pytest.approx(result.loss_last, rel=1e-5)
    for key, value in reference.state_dict().items():
        np.testing.assert_allclose(content["arrays"][key].numpy(), value.numpy(), atol=1e-6)


def test_rcfl_minibatch_steps_take_the_loaders_batches_in_turn():
    sent = global_model()
    config = {**RCFL_CONFIG, keys.RCFL_BATCH_SIZE: 7, keys.RCFL_LOCAL_STEPS: 5}  # 4 batches
    content = fair_train(
        message(sent, **config), global_model(), loader(7), nn.CrossEntropyLoss(), None
    )
    # By hand: ω ← ω - β q ∇ℓ_b, η ← η - β (1 - q), q = σ((ℓ_b - η)/μ)/α, batches cycling.
    model, eta, lr = global_model(), 0.3, 0.1
    batches = list(loader(7))
    for step in range(5):
        x, y = batches[step % len(batches)]
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        q = 1.0 / (1.0 + math.exp(-(loss.item() - eta) / 0.1)) / 0.5
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(lr * q * p.grad)
        eta -= lr * (1.0 - q)
    assert metrics_of(content)[keys.RCFL_ETA] == pytest.approx(eta, rel=1e-5)
    for key, value in model.state_dict().items():
        np.testing.assert_allclose(content["arrays"][key].numpy(), value.numpy(), atol=1e-6)


# ------------------------------------------------------------------------ q-FFL
def test_qffl_h_follows_the_papers_formula():
    sent = global_model()
    content = fair_train(
        message(sent, **{keys.QFFL_Q: 0.5}),
        global_model(),
        loader(),
        nn.CrossEntropyLoss(),
        sgd_epochs,
    )
    metrics = metrics_of(content)
    loss = metrics[keys.LOSS_BEFORE_TRAINING] + 1e-10
    squared = sum(
        float(np.sum((content["arrays"][k].numpy().astype(np.float64) - v.numpy()) ** 2))
        for k, v in sent.state_dict().items()
    )
    big_l = 1 / 0.1  # L = 1/lr
    by_hand = 0.5 * loss**-0.5 * big_l**2 * squared + big_l * loss**0.5
    assert metrics[keys.QFFL_H] == pytest.approx(by_hand, rel=1e-6)


# --------------------------------------------------------------------- evaluate
def test_fair_evaluate_reports_loss_and_accuracy_of_the_received_model():
    sent = global_model()
    msg = Mock(spec=Message)
    msg.content = RecordDict({"arrays": ArrayRecord(sent.state_dict())})
    content = fair_evaluate(
        msg, global_model(seed=7), loader(), nn.CrossEntropyLoss(), device="cpu", partition_id=4
    )
    x, y = data()
    with torch.no_grad():
        outputs = sent(x)
    metrics = metrics_of(content)
    assert metrics[keys.NUM_EXAMPLES] == N
    assert metrics[keys.EVAL_LOSS] == pytest.approx(
        float(nn.functional.cross_entropy(outputs, y)), rel=1e-6
    )
    assert metrics[keys.EVAL_ACC] == pytest.approx(float((outputs.argmax(1) == y).float().mean()))
    assert metrics[keys.PARTITION_ID] == 4
