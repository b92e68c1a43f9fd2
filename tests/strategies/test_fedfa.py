"""FedFa: information-quantity weights and server momentum (docs/specs/spec-fedfa.md)."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.contract import keys
from fairfl.strategies import MissingMetricError
from fairfl.strategies.fedfa import FedFa, fedfa_momentum_step, fedfa_weights
from fairfl.strategies.registry import STRATEGIES, build_strategy
from tests.conftest import make_reply
from tests.strategies.baseline_helpers import aggregate_round, configure


def reference_fedfa_round(
    model: np.ndarray,
    momentum: np.ndarray,
    models: list[np.ndarray],
    acc: list[float],
    freq: list[int],
    beta: float,
    gamma: float,
    eta: float,
) -> tuple[np.ndarray, np.ndarray]:
    """FLGo's ``Server.iterate`` (flgo/algorithm/fedfa.py, WwZzz/easyFL commit ea07f1d,
    lines 21-38) on flat numpy vectors, statement for statement: the oracle."""
    alpha = 1.0 - beta
    sum_acc = np.sum(acc)
    sum_f = np.sum(freq)
    ACCinf = [-np.log2(1.0 * a / sum_acc + 0.000001) for a in acc]
    Finf = [-np.log2(1 - 1.0 * f / sum_f + 0.00001) for f in freq]
    sum_acc = np.sum(ACCinf)
    sum_f = np.sum(Finf)
    ACCinf = [a / sum_acc for a in ACCinf]
    Finf = [f / sum_f for f in Finf]
    p = [alpha * accinf + beta * finf for accinf, finf in zip(ACCinf, Finf, strict=True)]
    wnew = sum(pk * mk for pk, mk in zip(p, models, strict=True))  # fmodule._model_average
    dw = wnew - model
    momentum = gamma * momentum + (1 - gamma) * dw
    return wnew - momentum * eta, momentum


# ----------------------------------------------------------------------------- weights
def test_weights_by_hand():
    # Acc = (0.2, 0.3, 0.5), Σ = 1: I^acc = -log2(share) = (2.321928, 1.736966, 1), Σ = 5.058894
    #   Ī^acc = (0.458979, 0.343351, 0.197671)
    # f = (1, 1, 2), Σ = 4: I^f = -log2(0.75, 0.75, 0.5) = (0.415037, 0.415037, 1), Σ = 1.830075
    #   Ī^f = (0.226787, 0.226787, 0.546425)
    # β = 0.5: p = (Ī^acc + Ī^f)/2 = (0.342883, 0.285069, 0.372048); the ε terms move it < 1e-5.
    p = fedfa_weights([0.2, 0.3, 0.5], [1, 1, 2], beta=0.5)
    np.testing.assert_allclose(p, [0.342883, 0.285069, 0.372048], atol=1e-5)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_accuracy_only_and_frequency_only():
    # β = 0: Ī^acc alone; the least-served client (0.2) weighs most.
    np.testing.assert_allclose(
        fedfa_weights([0.2, 0.3, 0.5], [1, 1, 2], beta=0.0),
        [0.458979, 0.343351, 0.197671],
        atol=1e-5,
    )
    # β = 1: Ī^f alone; the client seen twice weighs most, whatever the accuracies.
    np.testing.assert_allclose(
        fedfa_weights([0.9, 0.1, 0.5], [1, 1, 2], beta=1.0),
        [0.226787, 0.226787, 0.546425],
        atol=1e-5,
    )


def test_equal_reports_give_equal_weights():
    np.testing.assert_allclose(fedfa_weights([0.4] * 4, [3] * 4, beta=0.5), [0.25] * 4)


def test_all_accuracies_zero_gives_equal_accuracy_shares():
    # The reference divides 0 by 0 (NaN); fairfl takes a_i = 1/m: Ī^acc uniform.
    np.testing.assert_allclose(fedfa_weights([0.0, 0.0], [1, 3], beta=0.0), [0.5, 0.5])


def test_a_client_holding_every_correct_answer_gets_no_negative_weight():
    # a = (1, 0): the reference's -log2(1 + 1e-6) < 0 is clipped to 0; Ī^acc = (0, 1).
    p = fedfa_weights([0.7, 0.0], [1, 1], beta=0.0)
    np.testing.assert_allclose(p, [0.0, 1.0])
    assert np.all(p >= 0)


def test_a_lone_participant_gets_weight_one():
    np.testing.assert_allclose(fedfa_weights([0.3], [5], beta=0.5), [1.0])


@pytest.mark.parametrize(
    ("acc", "freq", "beta", "match"),
    [
        ([], [], 0.5, "non-empty 1-D"),
        ([0.5, 0.5], [1], 0.5, "of one shape"),
        ([0.5, 1.5], [1, 1], 0.5, r"accuracies must be finite numbers in \[0, 1\]"),
        ([0.5, math.nan], [1, 1], 0.5, "accuracies must be finite"),
        ([0.5, 0.5], [0, 1], 0.5, "frequencies must be finite numbers >= 1"),
        ([0.5, 0.5], [1, 1], 1.5, "beta must be <= 1"),
        ([0.5, 0.5], [1, 1], math.inf, "beta must be a finite number"),
    ],
)
def test_bad_input_is_refused(acc, freq, beta, match):
    with pytest.raises(ValueError, match=match):
        fedfa_weights(acc, freq, beta)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.01, 1.0), st.integers(1, 50)),
        min_size=2,
        max_size=8,
    ),
    st.floats(0.0, 1.0),
    st.randoms(use_true_random=False),
)
def test_weights_sum_to_one_and_follow_the_clients(reports, beta, random):
    acc, freq = (list(column) for column in zip(*reports, strict=True))
    p = fedfa_weights(acc, freq, beta)
    assert p.sum() == pytest.approx(1.0, abs=1e-9)
    assert np.all(p >= 0)
    permutation = list(range(len(acc)))
    random.shuffle(permutation)
    shuffled = fedfa_weights([acc[i] for i in permutation], [freq[i] for i in permutation], beta)
    np.testing.assert_allclose(shuffled, p[permutation], rtol=1e-12)


# ---------------------------------------------------------------------------- momentum
def test_momentum_by_hand_over_two_rounds():
    # γ = 0.9, η = 0.1. Round 1: w^t = 1, w̄ = 0: m = 0.1·(0 - 1) = -0.1; w = 0 - 0.1·(-0.1) = 0.01.
    new, m = fedfa_momentum_step([np.array([1.0])], [np.array([0.0])], None, gamma=0.9, eta=0.1)
    np.testing.assert_allclose(m[0], [-0.1])
    np.testing.assert_allclose(new[0], [0.01])
    # Round 2: w^t = 0.01, w̄ = -0.99: m = 0.9·(-0.1) + 0.1·(-1) = -0.19; w = -0.99 + 0.019.
    new, m = fedfa_momentum_step(new, [np.array([-0.99])], m, gamma=0.9, eta=0.1)
    np.testing.assert_allclose(m[0], [-0.19])
    np.testing.assert_allclose(new[0], [-0.971])


def test_momentum_reductions_and_integer_arrays():
    global_arrays = [np.array([1.0, 2.0], dtype=np.float32), np.array([7], dtype=np.int64)]
    average = [np.array([0.0, 1.0], dtype=np.float32), np.array([9], dtype=np.int64)]
    before = [a.copy() for a in global_arrays]
    # η = 0 and γ = 1 both give w̄.
    for gamma, eta in ((0.9, 0.0), (1.0, 0.5)):
        new, _ = fedfa_momentum_step(global_arrays, average, None, gamma=gamma, eta=eta)
        np.testing.assert_array_equal(new[0], average[0])
        assert new[0].dtype == np.float32
        np.testing.assert_array_equal(new[1], [7])  # a counter keeps the global value
    for got, want in zip(global_arrays, before, strict=True):
        np.testing.assert_array_equal(got, want)  # inputs unchanged


@pytest.mark.parametrize(
    ("gamma", "eta", "match"),
    [(1.5, 0.1, "gamma must be <= 1"), (0.9, -0.1, "eta must be >= 0")],
)
def test_momentum_refuses_bad_settings(gamma, eta, match):
    with pytest.raises(ValueError, match=match):
        fedfa_momentum_step([np.zeros(2)], [np.zeros(2)], None, gamma=gamma, eta=eta)


def test_momentum_refuses_other_shapes():
    with pytest.raises(ValueError, match="array 0: shapes differ"):
        fedfa_momentum_step([np.zeros(2)], [np.zeros(3)], None, gamma=0.9, eta=0.1)


# ------------------------------------------------------------------- reference oracle
def test_matches_the_reference_loop_over_rounds():
    rng = np.random.default_rng(3)
    dim, beta, gamma, eta = 6, 0.5, 0.9, 0.1
    model = rng.normal(size=dim)
    oracle_model, oracle_momentum = model.copy(), np.zeros(dim)
    ours, momentum = [model.copy()], None
    counts = np.zeros(5, dtype=int)
    for _ in range(4):
        clients = sorted(rng.choice(5, size=3, replace=False))
        counts[clients] += 1
        models = [oracle_model + rng.normal(size=dim) for _ in clients]
        acc = rng.uniform(0.05, 0.95, size=3).tolist()
        freq = counts[clients].tolist()
        oracle_model, oracle_momentum = reference_fedfa_round(
            oracle_model, oracle_momentum, models, acc, freq, beta, gamma, eta
        )
        p = fedfa_weights(acc, freq, beta)
        average = [sum(w * m for w, m in zip(p, models, strict=True))]
        ours, momentum = fedfa_momentum_step(ours, average, momentum, gamma=gamma, eta=eta)
        np.testing.assert_allclose(ours[0], oracle_model, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(momentum[0], oracle_momentum, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------- the strategy
def fa_reply(
    partition: int,
    arrays: list[np.ndarray],
    acc: float | None,
    key: str = keys.ACC_BEFORE_TRAINING,
    **extra: object,
):
    """Partition ``partition``'s reply from node ``partition + 1``, ``acc`` under ``key``."""
    metrics: dict[str, object] = {
        keys.NUM_EXAMPLES: 10 * (partition + 1),
        keys.PARTITION_ID: partition,
    }
    if acc is not None:
        metrics[key] = acc
    metrics.update(extra)
    return make_reply(partition + 1, arrays, metrics)


def test_strategy_matches_the_reference_loop_with_server_counted_participation():
    # Rounds of partitions {0, 1, 2}, {0, 2}, {0, 1, 3}: the server counts f = 1, 2, 3 for
    # partition 0. Each reply also claims a huge "freq": it is ignored.
    rng = np.random.default_rng(4)
    model = [rng.normal(size=(2, 2)), rng.normal(size=3)]
    oracle, oracle_momentum = np.concatenate([a.ravel() for a in model]), np.zeros(7)
    strategy = FedFa(accuracy="before-training", gamma=0.9)  # FLGo's
    counts: dict[int, int] = {}
    for server_round, chosen in enumerate(([0, 1, 2], [0, 2], [0, 1, 3]), start=1):
        locals_ = [oracle + rng.normal(size=7) for _ in chosen]
        acc = rng.uniform(0.1, 0.9, size=len(chosen)).tolist()
        for c in chosen:
            counts[c] = counts.get(c, 0) + 1
        oracle, oracle_momentum = reference_fedfa_round(
            oracle, oracle_momentum, locals_, acc, [counts[c] for c in chosen], 0.5, 0.9, 0.1
        )
        replies = [
            fa_reply(c, [w[:4].reshape(2, 2), w[4:]], a, freq=1000)
            for c, w, a in zip(chosen, locals_, acc, strict=True)
        ]
        new, metrics = aggregate_round(strategy, replies, server_round, model)
        model = [new["0"].numpy(), new["1"].numpy()]
        np.testing.assert_allclose(np.concatenate([a.ravel() for a in model]), oracle, rtol=1e-12)
        assert metrics["fedfa-momentum-norm"] == pytest.approx(np.linalg.norm(oracle_momentum))
    assert strategy.participation == {"0": 3, "1": 2, "2": 2, "3": 1}


@pytest.mark.parametrize(
    ("accuracy", "asked", "not_asked"),
    [
        ("after-training", keys.WANT_ACCURACY_AFTER_TRAINING, keys.WANT_ACCURACY),
        ("before-training", keys.WANT_ACCURACY, keys.WANT_ACCURACY_AFTER_TRAINING),
    ],
)
def test_every_train_config_asks_for_the_accuracy(accuracy, asked, not_asked):
    messages = configure(FedFa(accuracy=accuracy), [1, 2])
    assert all(m.content["config"][asked] is True for m in messages)
    assert all(not_asked not in m.content["config"] for m in messages)


def test_replies_without_or_with_a_bad_accuracy_are_dropped():
    start = [np.zeros(2)]
    strategy = FedFa(eta=0.0, accuracy="before-training")
    replies = [
        fa_reply(0, [np.array([1.0, 0.0])], 0.5),
        fa_reply(1, [np.array([5.0, 5.0])], None),
        fa_reply(2, [np.array([5.0, 5.0])], 1.5),
    ]
    new, metrics = aggregate_round(strategy, replies, 1, start)
    np.testing.assert_allclose(new["0"].numpy(), [1.0, 0.0])  # the lone good reply
    dropped = strategy.train_records[1].dropped
    assert "acc-before-training" in dropped[2] and "is missing" in dropped[2]
    assert "acc-before-training" in dropped[3]
    assert metrics["dropped-replies"] == 2
    assert strategy.participation == {"0": 1}  # dropped replies do not count
    with pytest.raises(MissingMetricError, match="acc-before-training"):
        aggregate_round(
            FedFa(accuracy="before-training"), [fa_reply(0, [np.zeros(2)], None)], 1, start
        )
    # The default reads acc-after-training: a reply with only the other accuracy lacks it.
    with pytest.raises(MissingMetricError, match="acc-after-training"):
        aggregate_round(FedFa(), [fa_reply(0, [np.zeros(2)], 0.5)], 1, start)


def test_state_survives_a_checkpoint():
    rng = np.random.default_rng(8)
    start = [np.zeros(3)]
    first = [fa_reply(c, [rng.normal(size=3)], 0.2 * (c + 1)) for c in (0, 1)]
    second = [fa_reply(c, [rng.normal(size=3)], 0.3) for c in (0, 2)]
    uninterrupted = FedFa(accuracy="before-training")
    aggregate_round(uninterrupted, first, 1, start)
    resumed = FedFa(accuracy="before-training")
    resumed.load_state_dict(json.loads(json.dumps(uninterrupted.state_dict())))
    expected, _ = aggregate_round(uninterrupted, second, 2, start)
    got, _ = aggregate_round(resumed, second, 2, start)
    np.testing.assert_array_equal(got["0"].numpy(), expected["0"].numpy())
    fresh = FedFa()
    fresh.load_state_dict({})
    assert fresh.participation == {} and fresh.momentum is None


def test_registry_declaration():
    spec = STRATEGIES["fedfa"]
    assert spec.strategy is FedFa
    assert spec.defaults() == {
        "fedfa-beta": 0.5,
        "fedfa-gamma": 0.5,
        "fedfa-eta": 0.1,
        "fedfa-accuracy": "after-training",
    }
    strategy = build_strategy(
        "fedfa", {"fedfa-beta": 1, "fedfa-eta": 0.0, "fedfa-accuracy": "before-training"}
    )
    assert strategy.settings() == {
        "beta": 1.0,
        "gamma": 0.5,
        "eta": 0.0,
        "accuracy": "before-training",
    }
    with pytest.raises(ValueError, match=r"run config fedfa-accuracy \(rule fedfa\)"):
        build_strategy("fedfa", {"fedfa-accuracy": "during-training"})
    with pytest.raises(
        ValueError, match=r"run config fedfa-gamma \(rule fedfa\): gamma must be <= 1"
    ):
        build_strategy("fedfa", {"fedfa-gamma": 2.0})
    with pytest.raises(ValueError, match="eta must be a finite number, got nan"):
        FedFa(eta=math.nan)


# ------------------------------------------------- the experiments' after-training accuracy
def test_default_weighs_by_the_accuracy_after_training_by_hand():
    # The default is the code of the paper's experiments: Acc_k after local training,
    # γ = 0.5 (β = 0.5, η = 0.1 as FLGo). Each reply carries both accuracies, swapped, so
    # reading the wrong one gives other weights. Round 1, w^t = 0, w_0 = (1, 0), w_1 = (0, 1),
    # Acc after = (0.2, 0.6): a = (0.25, 0.75), I^acc = -log2(a + 1e-6); f = (1, 1): equal
    # I^f, so Ī^f = (0.5, 0.5). p_0 = 0.5 I^acc_0 / (I^acc_0 + I^acc_1) + 0.25, p_1 = 1 - p_0.
    # w̄ = (p_0, p_1); m^1 = 0.5 · 0 + (1 - 0.5)(w̄ - 0) = w̄ / 2; w^2 = w̄ - 0.1 m^1 = 0.95 w̄.
    info = [-math.log2(0.25 + 1e-6), -math.log2(0.75 + 1e-6)]
    p0 = 0.5 * info[0] / sum(info) + 0.25
    strategy = FedFa()
    assert strategy.settings() == {
        "beta": 0.5,
        "gamma": 0.5,
        "eta": 0.1,
        "accuracy": "after-training",
    }
    replies = [
        fa_reply(c, [w], after, keys.ACC_AFTER_TRAINING, **{keys.ACC_BEFORE_TRAINING: before})
        for c, w, after, before in (
            (0, np.array([1.0, 0.0]), 0.2, 0.6),
            (1, np.array([0.0, 1.0]), 0.6, 0.2),
        )
    ]
    new, metrics = aggregate_round(strategy, replies, 1, [np.zeros(2)])
    np.testing.assert_allclose(new["0"].numpy(), [0.95 * p0, 0.95 * (1 - p0)], rtol=1e-12)
    assert p0 == pytest.approx(0.664072, abs=1e-6)  # the lower accuracy weighs more
    assert metrics["fedfa-momentum-norm"] == pytest.approx(0.5 * math.hypot(p0, 1 - p0))
    # FLGo's option reads the accuracy before training: the weights swap.
    new, _ = aggregate_round(FedFa(accuracy="before-training"), replies, 1, [np.zeros(2)])
    np.testing.assert_allclose(new["0"].numpy(), [0.95 * (1 - p0), 0.95 * p0], rtol=1e-12)
