"""q-FFL / q-FedAvg (paper 002, Algorithm 2): math, Flower agreement, qffl-h, run."""

from __future__ import annotations

import gc
import logging
from unittest.mock import Mock, patch

import numpy as np
import pytest
from flwr.app import ConfigRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import QFedAvg as FlowerQFedAvg
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl._compat import server_task_identity
from fairfl.contract import keys
from fairfl.contract.keys import QFFL_Q
from fairfl.contract.qffl import h_term, qffl_h
from fairfl.simulation import run_inprocess
from fairfl.strategies import QFFL, STRATEGIES, FedAvg
from fairfl.strategies.qffl_step import qfedavg_squared_norms
from tests.conftest import arrays_of, make_reply
from tests.strategies.reference import qfedavg_lambdas as lambdas
from tests.strategies.reference import squared_distance

# Hand-worked two-client example (Algorithm 2 with η = 0.5 -> L = 2, q = 1, w^t = 0):
#   client 1: w̄_1 = (-1, 0), F_1 = 1:  Δw_1 = L (w^t - w̄_1) = (2, 0), ‖Δw_1‖² = 4
#             Δ_1 = F_1 Δw_1 = (2, 0);   h_1 = q F_1^0 · 4 + L F_1 = 4 + 2 = 6
#   client 2: w̄_2 = (0, -2), F_2 = 3:  Δw_2 = (0, 4), ‖Δw_2‖² = 16
#             Δ_2 = 3 (0, 4) = (0, 12);  h_2 = 1 · 3^0 · 16 + 2 · 3 = 22
#   w^{t+1} = w^t - (Δ_1 + Δ_2) / (h_1 + h_2) = -(2, 12) / 28 = (-1/14, -3/7)
#   unified form: λ_k = L F_k^q / Σh = (2/28, 6/28) = (1/14, 3/14)
#   (λ_k = L c_k, c_k = F_k^q / Σh the coefficient of Δw_k: (1/28, 3/28))
LR = 0.5
GLOBAL = [np.zeros(2, np.float32)]
LOCALS = [[np.array([-1.0, 0.0], np.float32)], [np.array([0.0, -2.0], np.float32)]]
LOSSES = [1.0, 3.0]


def grid_of(nodes):
    # At least two nodes: Flower's sampling waits for min_available_nodes (2) forever.
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = sorted(set(nodes) | {1, 2})
    return grid


def configured(strategy, arrays, nodes, config=None):
    with server_task_identity(1):
        return list(
            strategy.configure_train(
                1, arrays_of(arrays), ConfigRecord(config or {"lr": LR}), grid_of(nodes)
            )
        )


def replies_for(locals_, losses, counts=None, extra=None, loss_key=keys.LOSS_BEFORE_TRAINING):
    counts = counts or [10] * len(locals_)
    replies = []
    for i, (arrays, loss, n) in enumerate(zip(locals_, losses, counts, strict=True)):
        metrics = {keys.NUM_EXAMPLES: int(n), loss_key: float(loss)}
        metrics.update((extra or {}).get(i + 1, {}))
        replies.append(make_reply(i + 1, [np.array(a, copy=True) for a in arrays], metrics))
    return replies


def aggregate(strategy, global_arrays, locals_, losses, counts=None, extra=None):
    configured(strategy, global_arrays, range(1, len(locals_) + 1))
    replies = replies_for(locals_, losses, counts, extra, strategy.train_loss_key)
    return strategy.aggregate_train(1, replies)


def flower_aggregate(lr, q, global_arrays, locals_, losses, counts=None):
    flower = FlowerQFedAvg(client_learning_rate=lr, q=q)
    configured(flower, global_arrays, range(1, len(locals_) + 1))
    # Flower's to_numpy_ndarrays(keep_input=False) runs gc.collect() per reply (~0.5 s in
    # a process holding torch); skipping it changes nothing but the test's run time.
    with patch.object(gc, "collect", return_value=0):
        replies = replies_for(locals_, losses, counts, loss_key=keys.TRAIN_LOSS)
        arrays, _ = flower.aggregate_train(1, replies)
    return arrays


# ---------------------------------------------------------------- pure functions
def test_squared_distance_and_h_by_hand():
    assert squared_distance(GLOBAL, LOCALS[0]) == 1.0  # ‖(1, 0)‖²: squared, not the norm
    assert squared_distance(GLOBAL, LOCALS[1]) == 4.0
    assert h_term(1.0, 1.0, q=1.0, lipschitz=2.0) == pytest.approx(6.0)
    assert h_term(3.0, 4.0, q=1.0, lipschitz=2.0) == pytest.approx(22.0)
    # q = 0: h = L whatever the loss and distance (the step is 1/L·L = plain averaging)
    assert h_term(0.0, 123.0, q=0.0, lipschitz=2.0) == 2.0
    # integer arrays (counters) are skipped
    assert squared_distance([np.array([5])], [np.array([1])]) == 0.0


def test_squared_distance_rejects_mismatched_models():
    with pytest.raises(ValueError, match="same number of arrays, got 1 and 2"):
        squared_distance([np.zeros(2)], [np.zeros(2), np.zeros(1)])
    with pytest.raises(ValueError, match=r"array 0 has shape \(3,\) locally and \(2,\) globally"):
        squared_distance([np.zeros(2)], [np.zeros(3)])


def test_lambdas_by_hand():
    np.testing.assert_allclose(qfedavg_squared_norms([1.0, 4.0], 2.0), [4.0, 16.0])
    lam, h = lambdas(LOSSES, [1.0, 4.0], q=1.0, lipschitz=2.0)
    np.testing.assert_allclose(h, [6.0, 22.0])
    np.testing.assert_allclose(lam, [1 / 14, 3 / 14])


def test_lambdas_with_p_weighting_by_hand():
    # s = p = (0.25, 0.75): Σ s h = 0.25·6 + 0.75·22 = 18; λ = s L F^q / 18
    #   = (0.25·2·1, 0.75·2·3) / 18 = (0.5/18, 4.5/18) = (1/36, 1/4)
    lam, _ = lambdas(LOSSES, [1.0, 4.0], q=1.0, lipschitz=2.0, weights=[0.25, 0.75])
    np.testing.assert_allclose(lam, [1 / 36, 1 / 4])


def test_lambdas_reject_bad_inputs():
    with pytest.raises(ValueError, match="non-empty vectors of one length"):
        lambdas([1.0], [1.0, 2.0], q=1.0, lipschitz=1.0)
    with pytest.raises(ValueError, match="losses must be finite and >= 0"):
        lambdas([-1.0], [1.0], q=1.0, lipschitz=1.0)
    # A negative distance passes the L² scaling unchanged and is refused by name.
    with pytest.raises(ValueError, match=r"squared_distances must be finite and >= 0"):
        lambdas([1.0], [-1.0], q=1.0, lipschitz=1.0, norms_name="squared_distances")


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.0, 20.0), st.floats(0.0, 1e4)), min_size=1, max_size=10),
    st.floats(0.0, 5.0),
    st.floats(1e-3, 10.0),
)
def test_lambdas_are_finite_positive_and_sum_at_most_one(clients, q, lr):
    losses, distances = zip(*clients, strict=True)
    lam, h = lambdas(losses, distances, q=q, lipschitz=1 / lr)
    assert np.all(np.isfinite(lam)) and np.all(lam >= 0) and np.all(h > 0)
    # Σλ = Σ L F^q / Σ (L F^q + q F^{q-1} ‖Δw‖²) <= 1
    assert lam.sum() <= 1 + 1e-12


@given(
    st.lists(st.floats(0.0, 1e3), min_size=1, max_size=6),
    st.floats(0.01, 3.0),
    st.floats(0.01, 10.0),
)
def test_equal_losses_give_equal_lambdas(distances, q, loss):
    lam, _ = lambdas([loss] * len(distances), distances, q=q, lipschitz=4.0)
    np.testing.assert_allclose(lam, lam[0])


def test_client_helper_by_hand_and_agrees_with_server():
    # Client 2 of the example: F = 3, w̄ = (0, -2), η = 0.5, q = 1 -> h = 22
    assert qffl_h(3.0, GLOBAL, LOCALS[1], q=1.0, lr=LR) == pytest.approx(22.0)
    assert qffl_h(1.0, GLOBAL, LOCALS[0], 1.0, LR) == pytest.approx(6.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1.0, GLOBAL, LOCALS[0], -1.0, LR), "q must be >= 0, got -1.0"),
        ((1.0, GLOBAL, LOCALS[0], 1.0, 0.0), "lr must be > 0, got 0.0"),
        ((-1.0, GLOBAL, LOCALS[0], 1.0, LR), "loss_before must be >= 0, got -1.0"),
    ],
)
def test_client_helper_rejects_bad_inputs(args, message):
    with pytest.raises(ValueError, match=message):
        qffl_h(*args)


# ---------------------------------------------------------------- the strategy
def test_strategy_by_hand():
    strategy = QFFL(client_learning_rate=LR, q=1.0)
    arrays, metrics = aggregate(strategy, GLOBAL, LOCALS, LOSSES)
    np.testing.assert_allclose(arrays["0"].numpy(), [-1 / 14, -3 / 7], rtol=1e-6)
    assert strategy.train_records[1].weights == pytest.approx({1: 1 / 14, 2: 3 / 14})
    assert metrics["qffl-h-sum"] == pytest.approx(28.0)
    assert metrics["lambda-sum"] == pytest.approx(4 / 14)
    assert metrics["qffl-client-h"] == 0


def test_matches_flower_qfedavg_by_hand():
    flower = flower_aggregate(LR, 1.0, GLOBAL, LOCALS, LOSSES)
    np.testing.assert_allclose(flower["0"].numpy(), [-1 / 14, -3 / 7], rtol=1e-6)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 6),
    st.sampled_from([0.0, 0.001, 0.1, 1.0, 2.0, 5.0]),
    st.sampled_from([0.005, 0.05, 0.1, 1.0]),
    st.integers(0, 2**31 - 1),
)
def test_matches_flower_qfedavg_on_identical_replies(num_clients, q, lr, seed):
    rng = np.random.default_rng(seed)
    global_arrays = [
        rng.normal(size=(5, 4)).astype(np.float32),
        rng.normal(size=4).astype(np.float32),
    ]
    locals_ = [
        [(g - lr * rng.normal(size=g.shape)).astype(np.float32) for g in global_arrays]
        for _ in range(num_clients)
    ]
    losses = rng.uniform(0.05, 4.0, size=num_clients).tolist()
    counts = rng.integers(1, 100, size=num_clients).tolist()
    # Flower's QFedAvg reads train_loss; so does QFFL with train_loss_key="train_loss".
    strategy = QFFL(client_learning_rate=lr, q=q, train_loss_key="train_loss")
    ours, _ = aggregate(strategy, global_arrays, locals_, losses, counts)
    flower = flower_aggregate(lr, q, global_arrays, locals_, losses, counts)
    for key in ("0", "1"):
        # Flower computes Δ_k and ‖Δw_k‖² in float32; fairfl in float64.
        np.testing.assert_allclose(ours[key].numpy(), flower[key].numpy(), rtol=1e-5, atol=1e-6)


def test_q_zero_is_flowers_q_zero_and_the_unweighted_mean():
    rng = np.random.default_rng(3)
    global_arrays = [rng.normal(size=6).astype(np.float32)]
    locals_ = [[rng.normal(size=6).astype(np.float32)] for _ in range(4)]
    losses, counts = [0.3, 1.0, 2.0, 0.01], [1, 5, 20, 3]
    ours, metrics = aggregate(
        QFFL(client_learning_rate=0.1, q=0.0, train_loss_key="train_loss"),
        global_arrays,
        locals_,
        losses,
        counts,
    )
    flower = flower_aggregate(0.1, 0.0, global_arrays, locals_, losses, counts)
    mean = np.mean([c[0] for c in locals_], axis=0)
    np.testing.assert_allclose(ours["0"].numpy(), mean, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ours["0"].numpy(), flower["0"].numpy(), rtol=1e-5, atol=1e-6)
    assert metrics["lambda-sum"] == pytest.approx(1.0)


def test_q_zero_with_p_weighting_is_fedavg():
    rng = np.random.default_rng(4)
    global_arrays = [rng.normal(size=(2, 2)).astype(np.float32)]
    locals_ = [[rng.normal(size=(2, 2)).astype(np.float32)] for _ in range(3)]
    losses, counts = [0.5, 1.5, 3.0], [2, 7, 11]
    ours, _ = aggregate(
        QFFL(client_learning_rate=0.05, q=0.0, weighting="p"),
        global_arrays,
        locals_,
        losses,
        counts,
    )
    fedavg, _ = aggregate(FedAvg(), global_arrays, locals_, losses, counts)
    np.testing.assert_allclose(ours["0"].numpy(), fedavg["0"].numpy(), rtol=1e-6)


# Size-proportional sampling (Algorithm 2, line 3: device k drawn with probability p_k)
# with weighting="p", three clients, η = 0.5 -> L = 2, q = 1, w^t = 0, one weight:
#   client 1: n = 10, F = 1, w̄ = -1:   Δw = L (0 + 1) = 2,   Δ = 1 · 2 = 2,   h = 1·1·4 + 2·1 = 6
#   client 2: n = 30, F = 2, w̄ = -1:   Δw = 2,              Δ = 2 · 2 = 4,   h = 4 + 2·2 = 8
#   client 3: n = 60, F = 3, w̄ = 0.5:  Δw = L (0 - 0.5) = -1, Δ = 3 · -1 = -3, h = 1 + 2·3 = 7
# Round 1 is a census (no n_k known: every node trains, no draw), so "p" weighs by
# p = (0.1, 0.3, 0.6): w = -(0.2 + 1.2 - 1.8) / (0.6 + 2.4 + 4.2) = 0.4 / 7.2 = 1/18.
# Round 2 draws all three ∝ n_k, and Algorithm 2, line 8 sums the drawn devices
# uniformly: w = -(2 + 4 - 3) / (6 + 8 + 7) = -3/21 = -1/7. (Weighting the sums of Δ_k
# by p but Σ h_k by 1/3 would give -(-0.4) / 7 = 2/35.)
SAMPLED_LOCALS = [[np.array([x], np.float32)] for x in (-1.0, -1.0, 0.5)]
SAMPLED_LOSSES = [1.0, 2.0, 3.0]
SAMPLED_COUNTS = [10, 30, 60]


def test_size_proportional_sampling_with_p_weighting_by_hand():
    strategy = QFFL(
        client_learning_rate=LR, q=1.0, weighting="p", client_sampling="size-proportional"
    )
    results = []
    for server_round in (1, 2):
        with server_task_identity(1):
            sent = strategy.configure_train(
                server_round,
                arrays_of([np.zeros(1, np.float32)]),
                ConfigRecord({"lr": LR}),
                grid_of([1, 2, 3]),
            )
            assert sorted(m.metadata.dst_node_id for m in sent) == [1, 2, 3]
        extra = {i: {keys.PARTITION_ID: i - 1} for i in (1, 2, 3)}
        replies = replies_for(SAMPLED_LOCALS, SAMPLED_LOSSES, SAMPLED_COUNTS, extra)
        arrays, _ = strategy.aggregate_train(server_round, replies)
        results.append(float(arrays["0"].numpy()[0]))
        assert strategy.size_sampler.drawn == (server_round == 2)
    assert results == pytest.approx([1 / 18, -1 / 7], rel=1e-6)
    # Round 2's λ_k = (1/3) L F_k / ((1/3) Σh) = 2 F_k / 21.
    assert strategy.train_records[2].weights == pytest.approx({1: 2 / 21, 2: 4 / 21, 3: 6 / 21})


def test_client_h_that_agrees_is_used_and_one_that_disagrees_is_dropped(caplog):
    # Client 1 sends its exact h (6); client 2 sends 44 (twice the server's 22: e.g. it
    # trained with lr 0.25 while the server assumes 0.5) and is dropped with the reason.
    strategy = QFFL(client_learning_rate=LR, q=1.0)
    extra = {1: {keys.QFFL_H: qffl_h(1.0, GLOBAL, LOCALS[0], 1.0, LR)}, 2: {keys.QFFL_H: 44.0}}
    with caplog.at_level(logging.INFO, logger="fairfl"):
        arrays, metrics = aggregate(strategy, GLOBAL, LOCALS, LOSSES, extra=extra)
    reason = strategy.train_records[1].dropped[2]
    assert reason == ("metrics['qffl-h'] is 44 but the server computes 22 (q 1, L 2, rtol 0.001)")
    assert f"dropped reply from node 2: {reason}" in caplog.text
    # only client 1 left: λ_1 = L F / h_1 = 2/6 = 1/3 -> w = -(1/3)(1, 0)
    np.testing.assert_allclose(arrays["0"].numpy(), [-1 / 3, 0.0], rtol=1e-6)
    assert metrics["qffl-client-h"] == 1 and metrics["dropped-replies"] == 1


def test_client_h_within_tolerance_is_the_one_summed():
    # h_1 sent as 6·(1 + 5e-4) (inside rtol 1e-3) is used: Σh = 6.003 + 22
    strategy = QFFL(client_learning_rate=LR, q=1.0)
    extra = {1: {keys.QFFL_H: 6.003}}
    _, metrics = aggregate(strategy, GLOBAL, LOCALS, LOSSES, extra=extra)
    assert metrics["qffl-h-sum"] == pytest.approx(28.003)
    assert not strategy.train_records[1].dropped


def test_reply_missing_the_loss_is_dropped_by_name():
    strategy = QFFL(client_learning_rate=LR, q=1.0)
    configured(strategy, GLOBAL, [1, 2])
    replies = [
        make_reply(1, LOCALS[0], {keys.NUM_EXAMPLES: 5, keys.LOSS_BEFORE_TRAINING: 1.0}),
        make_reply(2, LOCALS[1], {keys.NUM_EXAMPLES: 5, keys.TRAIN_LOSS: 1.0}),
    ]
    arrays, _ = strategy.aggregate_train(1, replies)
    assert strategy.train_records[1].dropped == {2: "metrics['loss-before-training'] is missing"}
    np.testing.assert_allclose(arrays["0"].numpy(), [-1 / 3, 0.0], rtol=1e-6)


@pytest.mark.parametrize(
    ("local", "reason"),
    [
        ([np.nan, 0.0], "arrays['0'] contains nan"),
        ([0.0, -np.inf], "arrays['0'] contains inf"),
        ([2e6, 0.0], "arrays['0'] has |value| 2e+06 > 1e+06"),
    ],
)
def test_bad_values_are_dropped_with_the_readers_reason(local, reason):
    # q-FFL checks values in its distance pass (checks_array_values); the reasons must be
    # those of fairfl.contract.check_array_values.
    strategy = QFFL(client_learning_rate=LR, q=1.0)
    configured(strategy, GLOBAL, [1, 2])
    replies = [
        make_reply(1, LOCALS[0], {keys.NUM_EXAMPLES: 5, keys.LOSS_BEFORE_TRAINING: 1.0}),
        make_reply(
            2,
            [np.array(local, np.float32)],
            {keys.NUM_EXAMPLES: 5, keys.LOSS_BEFORE_TRAINING: 1.0},
        ),
    ]
    arrays, _ = strategy.aggregate_train(1, replies)
    assert strategy.train_records[1].dropped == {2: reason}
    np.testing.assert_allclose(arrays["0"].numpy(), [-1 / 3, 0.0], rtol=1e-6)


def test_value_bound_falls_back_to_the_exact_check():
    # w^t = (5e5, -5e5), w̄ = (5e5, 5e5): the bound max|w^t| + ‖w^t - w̄‖ = 1.5e6 exceeds
    # 1e6, but every |value| is 5e5, so the exact check keeps the reply.
    strategy = QFFL(client_learning_rate=LR, q=0.0)
    global_arrays = [np.array([5e5, -5e5], np.float32)]
    arrays, _ = aggregate(strategy, global_arrays, [[np.array([5e5, 5e5], np.float32)]], [1.0])
    assert not strategy.train_records[1].dropped
    np.testing.assert_allclose(arrays["0"].numpy(), [5e5, 5e5])
    # Without a magnitude bound, huge finite values are fine too.
    unbounded = QFFL(client_learning_rate=LR, q=0.0, max_abs_weight=None)
    arrays, _ = aggregate(unbounded, GLOBAL, [[np.array([3e30, 0.0], np.float32)]], [1.0])
    np.testing.assert_allclose(arrays["0"].numpy(), [3e30, 0.0], rtol=1e-6)


def test_squared_distance_parts_by_array_and_float32_overflow():
    from tests.strategies.reference import squared_distance_parts

    # rows: clients, columns: arrays; (1-0)² + (2-0)² = 5 and (3-1)² = 4
    parts = squared_distance_parts(
        [np.zeros(2, np.float32), np.ones(1, np.float32)],
        [[np.array([1.0, 2.0], np.float32), np.array([3.0], np.float32)]],
    )
    np.testing.assert_allclose(parts, [[5.0, 4.0]])
    # (3e30)² overflows float32; the block is redone in float64.
    assert squared_distance(GLOBAL, [np.array([3e30, 0.0], np.float32)]) == pytest.approx(9e60)


@pytest.mark.parametrize("size", [1, 4095, 4097, (1 << 17) + 4099])
def test_squared_distance_matches_float64_across_rows_and_blocks(size, monkeypatch):
    from fairfl.strategies._ops import passes

    rng = np.random.default_rng(size)
    g = rng.normal(size=size).astype(np.float32)
    local = rng.normal(size=size).astype(np.float32)
    exact = float(np.sum((g.astype(np.float64) - local.astype(np.float64)) ** 2))
    assert squared_distance([g], [local]) == pytest.approx(exact, rel=1e-6)
    monkeypatch.setattr(passes, "_VECDOT", None)  # numpy < 2: square and sum
    assert squared_distance([g], [local]) == pytest.approx(exact, rel=1e-6)


def test_all_replies_dropped_keeps_the_model():
    strategy = QFFL(client_learning_rate=LR)
    configured(strategy, GLOBAL, [1])
    bad = {keys.NUM_EXAMPLES: 5, keys.LOSS_BEFORE_TRAINING: float("nan")}
    assert strategy.aggregate_train(1, [make_reply(1, LOCALS[0], bad)]) == (None, None)


@settings(max_examples=25, deadline=None)
@given(
    st.permutations([1, 2, 3, 4]),
    st.lists(st.floats(0.0, 5.0), min_size=4, max_size=4),
    st.sampled_from([0.0, 0.1, 1.0, 3.0]),
)
def test_reply_order_does_not_change_the_result(order, losses, q):
    locals_ = [[np.full(3, -float(n), np.float32)] for n in range(1, 5)]
    replies = dict(enumerate(replies_for(locals_, losses), start=1))
    first, second = QFFL(client_learning_rate=0.1, q=q), QFFL(client_learning_rate=0.1, q=q)
    configured(first, [np.zeros(3, np.float32)], range(1, 5))
    configured(second, [np.zeros(3, np.float32)], range(1, 5))
    a, _ = first.aggregate_train(1, [replies[n] for n in [1, 2, 3, 4]])
    b, _ = second.aggregate_train(1, [replies[n] for n in order])
    np.testing.assert_array_equal(a["0"].numpy(), b["0"].numpy())
    assert np.all(np.isfinite(a["0"].numpy()))


def test_train_config_sends_q_and_keeps_callers_config():
    strategy = QFFL(client_learning_rate=LR, q=0.7)
    config = {"lr": LR}
    messages = configured(strategy, GLOBAL, [1, 2], config)
    assert config == {"lr": LR}
    assert all(m.content["config"][QFFL_Q] == 0.7 for m in messages)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"client_learning_rate": 0.0}, "client_learning_rate must be > 0, got 0.0"),
        ({"client_learning_rate": True}, "client_learning_rate must be a finite number, got True"),
        ({"client_learning_rate": 0.1, "q": -1.0}, "q must be >= 0, got -1.0"),
        ({"client_learning_rate": 0.1, "q": float("inf")}, "q must be a finite number, got inf"),
        (
            {"client_learning_rate": 0.1, "weighting": "n"},
            r"weighting must be one of \('uniform', 'p'\), got 'n'",
        ),
        ({"client_learning_rate": 0.1, "h_rtol": 0.0}, "h_rtol must be > 0, got 0.0"),
    ],
)
def test_invalid_settings_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        QFFL(**kwargs)


def test_defaults_and_registry():
    strategy = QFFL(client_learning_rate=0.05)
    assert strategy.settings() == {
        "q": 0.1,
        "client_learning_rate": 0.05,
        "weighting": "uniform",
        "h_rtol": 0.001,
    }
    assert strategy.lipschitz == pytest.approx(20.0)
    spec = STRATEGIES["qffl"]
    assert spec.strategy is QFFL
    assert spec.parameters["lr"] == "client_learning_rate"
    assert spec.defaults() == {"qffl-q": 0.1, "qffl-weighting": "uniform", "lr": None}


# ---------------------------------------------------------------- end to end
def test_three_rounds_in_process_with_client_h(tmp_path):
    out = run_inprocess(
        {
            "strategy": "qffl",
            "qffl-q": 1.0,
            "lr": 0.05,
            "num-server-rounds": 3,
            "num-partitions": 5,
            "out-dir": str(tmp_path),
        }
    )
    strategy = out.strategy
    assert strategy.q == 1.0 and strategy.client_learning_rate == 0.05
    for record in strategy.train_records.values():
        assert len(record.accepted) == 5 and not record.dropped
        # every client sent qffl-h (the ClientApp sees qffl-q) and it agreed
        assert record.diagnostics["qffl-client-h"] == 5
        assert 0 < sum(record.weights.values()) <= 1
    assert np.isfinite(out.summary["final_metrics"]["acc-mean"])


def test_in_process_client_with_another_lr_is_dropped(tmp_path):
    # The ClientApp computes h with the lr it was sent; a reply filter that rescales the
    # client's qffl-h (as a client with another lr would) makes the server drop it.
    from flwr.app import MetricRecord

    def tamper(instruction, reply):
        metrics = dict(reply.content["metrics"])
        if instruction.metadata.dst_node_id == 1001 and keys.QFFL_H in metrics:
            metrics[keys.QFFL_H] = 2.0 * metrics[keys.QFFL_H]
            reply.content["metrics"] = MetricRecord(metrics)
        return reply

    out = run_inprocess(
        {"strategy": "qffl", "num-server-rounds": 1, "num-partitions": 3, "out-dir": str(tmp_path)},
        reply_filter=tamper,
    )
    dropped = out.strategy.train_records[1].dropped
    assert list(dropped) == [1001]
    assert dropped[1001].startswith("metrics['qffl-h'] is ")
