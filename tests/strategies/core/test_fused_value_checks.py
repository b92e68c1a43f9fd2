"""Reply values checked in the weighted average's own pass (issue 17, item 1).

The re-weighted rules read every reply value once:
``reweighted_average_and_squared_norms`` sums them and takes each array's ‖w‖² in the
same block loop (NaN/Inf if a value is; ``max |w| <= ‖w‖``), and the strategy drops a
reply with a NaN/Inf or a ``|value| > max_abs_weight`` with the reader's reason (an
array whose norm breaks the bound gets the reader's exact check), then aggregates the
rest again. The guarantees are the reader's: the bad reply is named (node, field,
reason) and never changes the model or the rule's state.
"""

import logging
from unittest.mock import Mock

import numpy as np
import pytest
from flwr.app import Array, ConfigRecord
from flwr.serverapp import Grid

from fairfl._compat import server_task_identity
from fairfl.contract import keys, replies
from fairfl.contract.replies import array_view
from fairfl.strategies import AFL, FedAvg
from fairfl.strategies._ops import passes
from fairfl.strategies.core.aggregation import (
    reweighted_average,
    reweighted_average_and_squared_norms,
)
from tests.conftest import arrays_of, make_reply


def test_squared_norms_by_hand_across_blocks(monkeypatch):
    # Blocks of 2 elements: [3, 4 | 0, 12 | 0] -> 9 + 16 + 144 = 169 over three blocks.
    monkeypatch.setattr(passes, "SUM_BLOCK", 2)
    g = [np.zeros(5, np.float32), np.array([4], np.int64), np.zeros(0, np.float32)]
    c1 = [np.array([3, 4, 0, 12, 0], np.float32), np.array([9], np.int64), g[2]]
    c2 = [np.array([0, 0, np.nan, 0, 0], np.float32), np.array([9], np.int64), g[2]]
    c3 = [np.array([0, 1, 0, 0, -np.inf], np.float32), np.array([9], np.int64), g[2]]
    new, norms = reweighted_average_and_squared_norms(g, [c1, c2, c3], [1.0, 0.0, 0.0])
    assert norms[0, 0] == 169.0
    assert np.isnan(norms[1, 0]) and norms[2, 0] == np.inf
    # A counter or an empty array has no value to check: 0.
    np.testing.assert_array_equal(norms[:, 1:], np.zeros((3, 2)))
    np.testing.assert_array_equal(new[0], [3, 4, 0, 12, 0])  # λ = (1, 0, 0)
    np.testing.assert_array_equal(new[1], [4])  # counters keep the global value


def test_squared_norms_bound_the_largest_value():
    # ‖w‖ >= max |w|: 1e6 among 100,000 ones, 1e4 among 2^20 tiny values (float32 sums).
    g = [np.zeros(100_001, np.float32), np.zeros(2**20 + 1, np.float32)]
    big = [np.ones(100_001, np.float32), np.full(2**20 + 1, 1e-3, np.float32)]
    big[0][17], big[1][-1] = -1e6, 1e4
    _, norms = reweighted_average_and_squared_norms(g, [big], [1.0])
    assert np.sqrt(norms[0, 0]) >= 1e6 and np.sqrt(norms[0, 1]) >= 1e4


@pytest.mark.parametrize("seed", range(4))
def test_same_average_as_reweighted_average_and_exact_norms(seed):
    rng = np.random.default_rng(seed)
    block = passes.SUM_BLOCK
    shapes = [(block + 11,), (3, 4), ()]
    g = [rng.normal(size=s).astype(np.float32) for s in shapes]
    clients = [[rng.normal(size=s).astype(np.float32) * 5 for s in shapes] for _ in range(3)]
    weights = rng.uniform(-0.3, 1.0, size=3)
    new, norms = reweighted_average_and_squared_norms(g, clients, weights)
    for ours, plain in zip(new, reweighted_average(g, clients, weights), strict=True):
        np.testing.assert_array_equal(ours, plain)
    for i, client in enumerate(clients):
        for j, array in enumerate(client):
            exact = float(np.sum(array.astype(np.float64) ** 2))
            assert norms[i, j] == pytest.approx(exact, rel=1e-5)


def test_reweighted_rules_skip_the_readers_value_pass(monkeypatch):
    # The reader's own check must not run: the block loop does it.
    monkeypatch.setattr(replies, "check_array_values", Mock(side_effect=AssertionError))
    arrays, metrics = run_round(FedAvg(), {1: ([1.0, 1.0], 10), 2: ([3.0, 3.0], 30)})
    np.testing.assert_array_equal(arrays["0"].numpy(), [2.5, 2.5])
    assert metrics["dropped-replies"] == 0


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ([1.0, np.nan], "arrays['0'] contains nan"),
        ([-np.inf, 1.0], "arrays['0'] contains inf"),
        ([2e6, 1.0], "arrays['0'] has |value| 2e+06 > 1e+06"),
    ],
)
def test_bad_reply_dropped_with_the_readers_reason_and_model_unchanged(bad, reason, caplog):
    # w^t = 0; honest w_1 = (1, 1) with n = 10 and w_3 = (3, 3) with n = 30:
    # FedAvg over them is 0.25 (1, 1) + 0.75 (3, 3) = (2.5, 2.5), node 2 or not.
    strategy = FedAvg()
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        arrays, metrics = run_round(
            strategy, {1: ([1.0, 1.0], 10), 2: (bad, 1000), 3: ([3.0, 3.0], 30)}
        )
    np.testing.assert_array_equal(arrays["0"].numpy(), [2.5, 2.5])
    record = strategy.train_records[1]
    assert record.dropped == {2: reason}
    assert record.accepted == [1, 3] and set(record.weights) == {1, 3}
    assert 2 not in record.partition_ids
    assert metrics["num-replies"] == 2 and metrics["dropped-replies"] == 1
    assert f"dropped reply from node 2: {reason}" in caplog.text


def test_a_norm_beyond_the_bound_alone_does_not_drop_a_reply():
    # max_abs_weight 10: w_2 = (8, 8) has ‖w_2‖ = 11.3 > 10 but every |value| <= 10,
    # so the reader's exact check keeps it: FedAvg of (2, 0) and (8, 8) by n = (1, 1).
    strategy = FedAvg(max_abs_weight=10.0)
    arrays, metrics = run_round(strategy, {1: ([2.0, 0.0], 1), 2: ([8.0, 8.0], 1)})
    np.testing.assert_array_equal(arrays["0"].numpy(), [5.0, 4.0])
    assert metrics["dropped-replies"] == 0


def test_every_bad_reply_of_the_pass_is_dropped_at_once():
    strategy = FedAvg()
    arrays, _ = run_round(
        strategy,
        {1: ([np.nan, 0.0], 5), 2: ([4.0, 8.0], 10), 3: ([0.0, 3e6], 5)},
    )
    np.testing.assert_array_equal(arrays["0"].numpy(), [4.0, 8.0])
    assert set(strategy.train_records[1].dropped) == {1, 3}


def test_all_replies_bad_keeps_the_model():
    strategy = FedAvg()
    assert run_round(strategy, {1: ([np.nan, 0.0], 5), 2: ([0.0, np.inf], 5)}) == (None, None)
    assert strategy.train_records[1].accepted == []


def test_rule_state_and_diagnostics_are_those_of_a_round_without_the_bad_reply():
    # AFL updates its λ from the losses while computing the weights: the aborted pass
    # must leave no trace.
    honest = {1: ([1.0, 0.0], 10, 0.5), 3: ([0.0, 2.0], 30, 2.0)}
    with_bad = {**honest, 2: ([np.nan, 0.0], 20, 3.0)}
    clean, dirty = AFL(lambda_lr=0.5), AFL(lambda_lr=0.5)
    expected, _ = run_round(clean, honest)
    got, _ = run_round(dirty, with_bad)
    np.testing.assert_array_equal(got["0"].numpy(), expected["0"].numpy())
    assert dirty.state_dict() == clean.state_dict()
    assert dirty.train_records[1].diagnostics == clean.train_records[1].diagnostics
    assert dirty.train_records[1].weights == clean.train_records[1].weights


def test_array_view_parses_each_distinct_header_once(monkeypatch):
    replies._npy_header.cache_clear()
    parse = Mock(wraps=np.lib.format.read_array_header_1_0)
    monkeypatch.setattr(np.lib.format, "read_array_header_1_0", parse)
    payloads = [Array(np.full((2, 3), i, np.float32)) for i in range(5)]
    for i, payload in enumerate(payloads):
        np.testing.assert_array_equal(array_view(payload), np.full((2, 3), i))
    assert parse.call_count == 1
    array_view(Array(np.zeros(4, np.float32)))  # another shape: another header
    assert parse.call_count == 2


def test_array_view_refuses_an_oversized_header():
    payload = Array(np.zeros(2, np.float32))
    data = bytearray(payload.data)
    data[8:10] = (20_000).to_bytes(2, "little")  # header length field
    payload.data = bytes(data)
    with pytest.raises(ValueError, match=r"has a \.npy header of 20010 bytes, more than 10012"):
        array_view(payload)


def run_round(strategy, replies_by_node):
    """One round from w^t = (0, 0): node -> (values, n[, loss before training])."""
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = sorted(replies_by_node)
    with server_task_identity(1):
        list(
            strategy.configure_train(
                1, arrays_of([np.zeros(2, np.float32)]), ConfigRecord({}), grid
            )
        )
    messages = []
    for node, (values, count, *loss) in replies_by_node.items():
        metrics = {keys.NUM_EXAMPLES: count, keys.PARTITION_ID: node}
        if loss:
            metrics[keys.LOSS_BEFORE_TRAINING] = loss[0]
        messages.append(make_reply(node, [np.array(values, np.float32)], metrics))
    return strategy.aggregate_train(1, messages)
