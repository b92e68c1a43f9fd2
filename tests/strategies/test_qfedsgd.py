"""q-FedSGD (paper 002, Algorithm 1): math, the shared q-FFL core, replies, registry."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from fairfl.contract import keys
from fairfl.strategies import QFFL, STRATEGIES, MissingMetricError, QFedSGD, build_strategy
from fairfl.strategies.qffl_step import qffl_coefficients, qffl_update
from tests.conftest import arrays_of, make_reply
from tests.strategies.test_qffl import configured

EPSILON = 1e-10  # the reference code's ε, added to F_k before powers


def gradient_reply(node, gradient, loss, n=10, loss_key=keys.LOSS_BEFORE_TRAINING):
    """A q-FedSGD reply: the gradient as the ArrayRecord 'gradient', n_k and F_k(w^t)."""
    content = RecordDict(
        {
            keys.GRADIENT: arrays_of(
                [np.array(g, dtype=getattr(g, "dtype", np.float32)) for g in gradient]
            ),
            keys.METRICS: MetricRecord({keys.NUM_EXAMPLES: int(n), loss_key: float(loss)}),
        }
    )
    return make_reply(node, content=content)


def run_round(strategy, global_arrays, gradients, losses, counts=None, config=None):
    counts = counts or [10] * len(gradients)
    configured(strategy, global_arrays, range(1, len(gradients) + 1), config)
    replies = [
        gradient_reply(i + 1, g, f, n)
        for i, (g, f, n) in enumerate(zip(gradients, losses, counts, strict=True))
    ]
    return strategy.aggregate_train(1, replies)


def numpy_qfedsgd(global_arrays, gradients, losses, q, lipschitz, counts=None):
    """Algorithm 1, line by line, in float64 (s_k = p_k when ``counts`` is given)."""
    s = np.ones(len(losses)) if counts is None else np.asarray(counts) / np.sum(counts)
    deltas, hs = [], []
    for g, f in zip(gradients, losses, strict=True):
        flat = np.concatenate([np.ravel(a).astype(np.float64) for a in g])
        base = f + EPSILON
        deltas.append([base**q * np.asarray(a, np.float64) for a in g])
        hs.append((q * base ** (q - 1) * flat @ flat if q > 0 else 0.0) + lipschitz * base**q)
    total_h = float(np.dot(s, hs))
    return [
        np.asarray(w, np.float64) - sum(s[k] * deltas[k][j] for k in range(len(deltas))) / total_h
        for j, w in enumerate(global_arrays)
    ]


def test_hand_worked_two_clients():
    # q = 1, L = 1/0.5 = 2, w^t = 0. Client 1: ∇F = (2, 0), F = 1: Δ = (2, 0),
    # h = 1·1^0·4 + 2·1 = 6. Client 2: ∇F = (0, 4), F = 3: Δ = (0, 12), h = 16 + 6 = 22.
    # w^{t+1} = -(2, 12) / 28 = (-1/14, -3/7).
    arrays, metrics = run_round(
        QFedSGD(q=1.0),
        [np.zeros(2, np.float32)],
        [[[2.0, 0.0]], [[0.0, 4.0]]],
        [1.0, 3.0],
        config={keys.LR: 0.5},
    )
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], [-1 / 14, -3 / 7], rtol=1e-6)
    assert metrics["qffl-h-sum"] == pytest.approx(28.0)
    assert metrics["lambda-sum"] == pytest.approx(2 * (1 + 3) / 28)  # L Σ F_k / Σ h


@pytest.mark.parametrize("q", [0.0, 0.1, 1.0, 5.0])
@pytest.mark.parametrize("weighting", ["uniform", "p"])
def test_matches_an_independent_numpy_q_fedsgd(q, weighting):
    rng = np.random.default_rng(int(q * 10) + (weighting == "p"))
    shapes = [(3, 4), (5,), (2, 1, 3), ()]
    dtypes = [np.float32, np.float64, np.float32, np.float64]
    for _ in range(5):
        clients = int(rng.integers(2, 7))
        lr = float(rng.uniform(0.01, 1.0))
        global_arrays = [rng.normal(size=s).astype(d) for s, d in zip(shapes, dtypes, strict=True)]
        gradients = [
            [
                rng.normal(scale=rng.uniform(0.1, 3), size=s).astype(d)
                for s, d in zip(shapes, dtypes, strict=True)
            ]
            for _ in range(clients)
        ]
        losses = rng.uniform(0.05, 3.0, size=clients).tolist()
        counts = rng.integers(1, 500, size=clients).tolist()
        strategy = QFedSGD(q=q, weighting=weighting)
        arrays, _ = run_round(
            strategy, global_arrays, gradients, losses, counts, config={keys.LR: lr}
        )
        expected = numpy_qfedsgd(
            global_arrays,
            gradients,
            losses,
            q,
            1.0 / lr,
            counts if weighting == "p" else None,
        )
        for got, want, dtype in zip(arrays.to_numpy_ndarrays(), expected, dtypes, strict=True):
            assert got.dtype == dtype
            # Every c_k depends on ‖∇F_k‖², whose float32 arrays' part is a float32 dot
            # product (relative error ~1e-7, as q-FFL's distances): float64 arrays then
            # agree to ~1e-7 too, not to float64's precision.
            rtol = 1e-5 if dtype == np.float32 else 1e-6
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 1e-2)


def softmax_loss_and_gradient(weights, bias, x, y):
    """Mean cross-entropy of softmax(x Wᵀ + b) and its gradient, by hand."""
    logits = x @ weights.T + bias
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    loss = float(-np.log(probs[np.arange(len(y)), y]).mean())
    residual = probs.copy()
    residual[np.arange(len(y)), y] -= 1.0
    return loss, residual.T @ x / len(y), residual.mean(axis=0)


@pytest.mark.parametrize("q", [0.0, 1.0, 5.0])
def test_qfedavg_with_one_full_batch_step_of_size_1_over_l_equals_qfedsgd(q):
    rng = np.random.default_rng(7)
    lr = 0.2  # η = 1/L
    weights, bias = rng.normal(size=(4, 6)), rng.normal(size=4)
    global_arrays = [weights, bias]
    losses, gradients, trained = [], [], []
    for n in (5, 17, 40):
        x, y = rng.normal(size=(n, 6)), rng.integers(0, 4, size=n)
        loss, grad_w, grad_b = softmax_loss_and_gradient(weights, bias, x, y)
        losses.append(loss)
        gradients.append([grad_w, grad_b])
        trained.append([weights - lr * grad_w, bias - lr * grad_b])  # one GD step of 1/L
    sgd_arrays, _ = run_round(QFedSGD(q=q), global_arrays, gradients, losses, config={keys.LR: lr})
    configured(avg := QFFL(q=q), global_arrays, range(1, 4), {keys.LR: lr})
    replies = [
        make_reply(i + 1, w, {keys.NUM_EXAMPLES: 10, keys.LOSS_BEFORE_TRAINING: f})
        for i, (w, f) in enumerate(zip(trained, losses, strict=True))
    ]
    avg_arrays, _ = avg.aggregate_train(1, replies)
    for got, want in zip(
        sgd_arrays.to_numpy_ndarrays(), avg_arrays.to_numpy_ndarrays(), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert not np.allclose(sgd_arrays.to_numpy_ndarrays()[0], weights)  # it moved


def test_core_step_is_algorithm_lines_by_hand():
    # One client, q = 2, L = 3, F = 1, g = (1, 2): h = 2·1·5 + 3·1 = 13, c = 1/13.
    coefficients, h = qffl_coefficients([1.0], [5.0], q=2.0, lipschitz=3.0, epsilon=0.0)
    assert h.tolist() == pytest.approx([13.0]) and coefficients.tolist() == pytest.approx([1 / 13])
    (new,) = qffl_update([np.array([0.0, 0.0])], [[np.array([1.0, 2.0])]], coefficients)
    np.testing.assert_allclose(new, [-1 / 13, -2 / 13])
    (counter,) = qffl_update([np.array([4], np.int64)], [[np.array([9], np.int64)]], [0.5])
    assert counter.tolist() == [4]  # integer counters keep their global value


def test_train_config_asks_for_the_gradient_and_l_comes_from_lr_or_the_key():
    messages = configured(QFedSGD(), [np.zeros(2, np.float32)], [1, 2], {keys.LR: 0.25})
    assert messages[0].content[keys.CONFIG][keys.FULL_GRADIENT] is True
    strategy = QFedSGD()
    configured(strategy, [np.zeros(2, np.float32)], [1, 2], {keys.LR: 0.25})
    assert strategy.lipschitz == pytest.approx(4.0)
    fixed = QFedSGD(lipschitz=7.0)
    configured(fixed, [np.zeros(2, np.float32)], [1, 2], {keys.LR: 0.25})
    assert fixed.lipschitz == 7.0 and fixed.settings()["lipschitz"] == 7.0
    with pytest.raises(ValueError, match=r"QFedSGD needs L.*'lr'"):
        configured(QFedSGD(), [np.zeros(2, np.float32)], [1, 2], {keys.SERVER_ROUND: 1})


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"q": -1.0}, "q"),
        ({"lipschitz": -2.0}, "lipschitz"),
        ({"lipschitz": float("inf")}, "lipschitz"),
        ({"weighting": "n"}, "weighting"),
        ({"client_learning_rate": 0.0}, "client_learning_rate"),
    ],
)
def test_bad_hyperparameters_are_named(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name} must"):
        QFedSGD(**kwargs)


def weights_reply(node):
    """A reply of a client that trained: trained weights under 'arrays', no gradient."""
    return make_reply(
        node, [np.ones(2, np.float32)], {keys.NUM_EXAMPLES: 10, keys.LOSS_BEFORE_TRAINING: 1.0}
    )


def test_a_reply_without_the_gradient_is_dropped_with_the_reason():
    strategy = QFedSGD(q=1.0)
    configured(strategy, [np.zeros(2, np.float32)], [1, 2], {keys.LR: 0.5})
    arrays, metrics = strategy.aggregate_train(
        1, [gradient_reply(1, [[2.0, 0.0]], 1.0), weights_reply(2)]
    )
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], [-2 / 6, 0.0], rtol=1e-6)
    assert metrics["dropped-replies"] == 1
    assert strategy.train_records[1].dropped == {
        2: "content['gradient'] is missing (no ArrayRecord)"
    }


def test_no_gradient_in_any_reply_stops_the_run_naming_the_record_and_the_fix():
    strategy = QFedSGD()
    configured(strategy, [np.zeros(2, np.float32)], [1, 2], {keys.LR: 0.5})
    with pytest.raises(
        MissingMetricError, match=r"every reply \(2\) lacks content\['gradient'\]"
    ) as info:
        strategy.aggregate_train(1, [weights_reply(1), weights_reply(2)])
    assert "fairfl.client.fair_train" in str(info.value)
    assert "allow_missing_metrics=True" in str(info.value)
    lenient = QFedSGD(allow_missing_metrics=True)
    configured(lenient, [np.zeros(2, np.float32)], [1, 2], {keys.LR: 0.5})
    assert lenient.aggregate_train(1, [weights_reply(1), weights_reply(2)]) == (None, None)


def test_a_gradient_without_the_loss_is_dropped():
    strategy = QFedSGD()
    configured(strategy, [np.zeros(2, np.float32)], [1, 2], {keys.LR: 0.5})
    no_loss = make_reply(
        2,
        content=RecordDict(
            {
                keys.GRADIENT: arrays_of([np.ones(2, np.float32)]),
                keys.METRICS: MetricRecord({keys.NUM_EXAMPLES: 10}),
            }
        ),
    )
    strategy.aggregate_train(1, [gradient_reply(1, [[1.0, 1.0]], 1.0), no_loss])
    assert strategy.train_records[1].dropped == {2: "metrics['loss-before-training'] is missing"}


def test_registry_builds_qfedsgd_from_the_run_config():
    spec = STRATEGIES["qfedsgd"]
    assert spec.defaults() == {
        "qffl-q": 0.1,
        "qffl-weighting": "uniform",
        "qfedsgd-lipschitz": 0.0,
        "lr": None,
    }
    strategy = build_strategy(
        "qfedsgd", {"qffl-q": 1.0, "qffl-weighting": "p", "lr": 0.05, "qfedsgd-lipschitz": 0.0}
    )
    assert isinstance(strategy, QFedSGD)
    assert (strategy.q, strategy.weighting, strategy.lipschitz) == (1.0, "p", pytest.approx(20.0))
    assert build_strategy("qfedsgd", {"qfedsgd-lipschitz": 3.0}).lipschitz == 3.0


def test_config_record_is_not_changed():
    config = ConfigRecord({keys.LR: 0.5})
    strategy = QFedSGD()
    with_grid = configured(strategy, [np.zeros(2, np.float32)], [1, 2], dict(config))
    assert keys.FULL_GRADIENT not in config and len(with_grid) == 2
