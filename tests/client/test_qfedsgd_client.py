"""q-FedSGD's client step: the full-batch gradient and F_k(w^t) of one pass.

Checked against gradients worked out independently: the softmax-regression gradient
by hand in NumPy, and torch's gradient of the mean loss over all samples in one batch.
"""

from itertools import pairwise
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fairfl.client import fair_train, loader_gradient
from fairfl.client.app import _client_data, _settings, load_global_model
from fairfl.contract import keys
from fairfl.simulation import run_inprocess
from tests.client.test_adapter import message

N, D, CLASSES = 23, 5, 4


def data(seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D, generator=generator, dtype=torch.float64)
    y = torch.randint(0, CLASSES, (N,), generator=generator)
    return x, y


def unequal_batches(x, y, sizes=(1, 9, 3, 10)):
    """(x, y) cut into batches of the given sizes (they sum to N)."""
    starts = np.cumsum((0, *sizes))
    return [(x[a:b], y[a:b]) for a, b in pairwise(starts)]


def softmax_regression(seed=3):
    torch.manual_seed(seed)
    return nn.Linear(D, CLASSES).double()


def by_hand(model, x, y):
    """Mean cross-entropy of softmax(x Wᵀ + b) over all samples and its gradient, in NumPy."""
    w = model.weight.detach().numpy()
    b = model.bias.detach().numpy()
    xs, ys = x.numpy(), y.numpy()
    logits = xs @ w.T + b
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    loss = float(-np.log(probs[np.arange(N), ys]).mean())
    residual = probs.copy()
    residual[np.arange(N), ys] -= 1.0
    return loss, residual.T @ xs / N, residual.mean(axis=0)


def test_accumulated_gradient_over_unequal_batches_is_the_full_data_gradient():
    x, y = data()
    model = softmax_regression()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    gradient, loss, count = loader_gradient(
        model, unequal_batches(x, y), nn.CrossEntropyLoss(), torch.device("cpu")
    )
    expected_loss, grad_w, grad_b = by_hand(model, x, y)
    assert count == N
    assert loss == pytest.approx(expected_loss, rel=1e-12)
    np.testing.assert_allclose(gradient["weight"].numpy(), grad_w, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(gradient["bias"].numpy(), grad_b, rtol=1e-10, atol=1e-14)
    for key, value in model.state_dict().items():  # nothing trained, no .grad left
        assert torch.equal(value, before[key])
    assert all(p.grad is None for p in model.parameters())


def test_buffers_get_a_zero_gradient_and_eval_mode_keeps_running_stats():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, 6), nn.BatchNorm1d(6), nn.Linear(6, CLASSES)).double()
    model[1].running_mean.fill_(0.3)
    x, y = data()
    gradient, _, _ = loader_gradient(
        model, unequal_batches(x, y), nn.CrossEntropyLoss(), torch.device("cpu")
    )
    assert list(gradient) == list(model.state_dict())
    assert gradient["1.num_batches_tracked"].dtype == torch.int64
    for key in ("1.running_mean", "1.running_var", "1.num_batches_tracked"):
        assert not gradient[key].any()
    assert torch.all(model[1].running_mean == 0.3)
    # The same (eval-mode) loss in one batch, differentiated by torch.
    model.eval()
    nn.functional.cross_entropy(model(x), y).backward()
    np.testing.assert_allclose(
        gradient["0.weight"].numpy(), model[0].weight.grad.numpy(), rtol=1e-10
    )


def test_an_empty_loader_is_refused():
    with pytest.raises(ValueError, match="no sample"):
        loader_gradient(softmax_regression(), [], nn.CrossEntropyLoss(), torch.device("cpu"))


def test_fair_train_in_a_q_fedsgd_round_replies_the_gradient_without_training():
    sent = softmax_regression(seed=1)
    x, y = data()
    loader = DataLoader(TensorDataset(x, y), batch_size=7)  # 7, 7, 7, 2

    def must_not_train(model, trainloader, loss_fn, config):
        raise AssertionError("q-FedSGD rounds do not train")

    content = fair_train(
        message(sent, **{keys.FULL_GRADIENT: True}),
        softmax_regression(seed=9),  # other weights: fair_train loads the sent ones
        loader,
        nn.CrossEntropyLoss(),
        must_not_train,
        partition_id=4,
    )
    assert set(content.array_records) == {keys.GRADIENT}
    metrics = dict(content[keys.METRICS])
    expected_loss, grad_w, grad_b = by_hand(sent, x, y)
    assert metrics == {
        keys.NUM_EXAMPLES: N,
        keys.LOSS_BEFORE_TRAINING: pytest.approx(expected_loss, rel=1e-12),
        keys.PARTITION_ID: 4,
    }
    gradient = content[keys.GRADIENT].to_numpy_ndarrays()
    assert list(content[keys.GRADIENT]) == list(sent.state_dict())
    np.testing.assert_allclose(gradient[0], grad_w, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(gradient[1], grad_b, rtol=1e-10, atol=1e-14)


def test_fairfls_client_app_sends_the_gradient_of_its_whole_split(tmp_path):
    seen = []

    def keep(instruction, reply):
        seen.append((instruction, reply))
        return reply

    config = {
        "strategy": "qfedsgd",
        "qffl-q": 1.0,
        "num-server-rounds": 1,
        "num-partitions": 3,
        "evaluate-every": 1,
        "out-dir": str(tmp_path),
    }
    out = run_inprocess(config, reply_filter=keep)
    train = [(i, r) for i, r in seen if keys.GRADIENT in r.content.array_records]
    assert len(train) == 3 and out.strategy.train_records[1].dropped == {}
    instruction, reply = train[0]
    partition = reply.content[keys.METRICS][keys.PARTITION_ID]
    context = SimpleNamespace(
        run_config=config, node_config={"partition-id": partition, "num-partitions": 3}
    )
    settings, node = _settings(context)
    client = _client_data(settings, node)
    model = load_global_model(instruction, settings, torch.device("cpu"))
    model.eval()
    loss = nn.functional.cross_entropy(
        model(torch.from_numpy(client.x_train)), torch.from_numpy(client.y_train)
    )
    loss.backward()
    assert reply.content[keys.METRICS][keys.LOSS_BEFORE_TRAINING] == pytest.approx(
        float(loss), rel=1e-5
    )
    assert reply.content[keys.METRICS][keys.NUM_EXAMPLES] == len(client.y_train)
    gradient = reply.content[keys.GRADIENT].to_numpy_ndarrays()
    for got, (name, parameter) in zip(gradient, model.named_parameters(), strict=True):
        np.testing.assert_allclose(got, parameter.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
