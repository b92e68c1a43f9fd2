"""FairStrategy plumbing, through fairfl's FedAvg: validation, drops, bookkeeping."""

import logging
from unittest.mock import Mock

import numpy as np
import pytest
from flwr.app import ConfigRecord
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl._compat import server_task_identity
from fairfl.contract import keys
from fairfl.strategies import FedAvg
from tests.conftest import arrays_of, make_reply
from tests.strategies.baseline_helpers import GLOBAL, configure, local

NODES = (1, 2, 3)


def test_fedavg_matches_flower_fedavg_on_good_replies():
    replies = [
        make_reply(1, local(1.0), {keys.NUM_EXAMPLES: 10}),
        make_reply(2, local(4.0), {keys.NUM_EXAMPLES: 30}),
    ]
    ours = FedAvg()
    configure(ours, NODES)
    arrays, metrics = ours.aggregate_train(1, replies)
    flower, _ = FlowerFedAvg().aggregate_train(1, [r for r in replies])
    # (10·1 + 30·4) / 40 = 3.25
    np.testing.assert_allclose(arrays["0"].numpy(), np.full((2, 3), 3.25))
    for key in ("0", "1"):
        np.testing.assert_allclose(arrays[key].numpy(), flower[key].numpy(), rtol=1e-6)
    assert metrics["num-replies"] == 2 and metrics["dropped-replies"] == 0
    assert ours.train_records[1].weights == {1: 0.25, 2: 0.75}
    # Node 3 was sent a message and never answered: not a rejected reply, but listed.
    assert ours.train_records[1].unanswered == [3] and ours.train_records[1].dropped == {}


def test_configure_train_does_not_mutate_callers_config_and_adds_round():
    strategy = FedAvg()
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = [1, 2]
    config = ConfigRecord({"lr": 0.1})
    with server_task_identity(1):
        messages = list(strategy.configure_train(3, arrays_of(GLOBAL), config, grid))
    assert dict(config) == {"lr": 0.1}
    assert messages[0].content["config"]["server-round"] == 3
    assert {m.metadata.dst_node_id for m in messages} == {1, 2}


def test_bad_reply_is_dropped_with_named_reason_and_round_goes_on(caplog):
    strategy = FedAvg()
    configure(strategy, NODES)
    bad = local(np.nan)
    replies = [
        make_reply(1, local(2.0), {keys.NUM_EXAMPLES: 10}),
        make_reply(2, bad, {keys.NUM_EXAMPLES: 10}),
        make_reply(3, local(1.0), {keys.NUM_EXAMPLES: -1}),
        make_reply(4, error="ClientApp crashed"),
    ]
    with caplog.at_level(logging.INFO, logger="fairfl"):
        arrays, metrics = strategy.aggregate_train(1, replies)
    np.testing.assert_allclose(arrays["0"].numpy(), 2.0)
    assert metrics["dropped-replies"] == 3
    dropped = strategy.train_records[1].dropped
    assert dropped[2] == "arrays['0'] contains nan"
    assert dropped[3] == "metrics['num-examples'] must be > 0, got -1"
    assert dropped[4].startswith("error reply is an error: ClientApp crashed")
    assert "dropped reply from node 2: arrays['0'] contains nan" in caplog.text


def test_all_replies_bad_keeps_previous_model(caplog):
    strategy = FedAvg()
    configure(strategy, NODES)
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        result = strategy.aggregate_train(1, [make_reply(1, local(np.inf), {keys.NUM_EXAMPLES: 1})])
    assert result == (None, None)
    assert "no usable reply (1 dropped); keeping the previous global model" in caplog.text


def test_duplicate_node_replies_are_all_dropped():
    strategy = FedAvg()
    configure(strategy, NODES)
    replies = [
        make_reply(1, local(1.0), {keys.NUM_EXAMPLES: 1}),
        make_reply(1, local(9.0), {keys.NUM_EXAMPLES: 1}),
        make_reply(2, local(3.0), {keys.NUM_EXAMPLES: 1}),
    ]
    arrays, _ = strategy.aggregate_train(1, replies)
    np.testing.assert_allclose(arrays["1"].numpy(), 3.0)
    assert strategy.train_records[1].dropped == {
        1: "duplicate reply from the same node in one round"
    }


def test_aggregate_before_configure_is_fatal():
    with pytest.raises(AggregationError, match="called before configure_train"):
        FedAvg().aggregate_train(1, [])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fraction_train": 1.5}, r"fraction_train must be in \[0, 1\], got 1.5"),
        ({"fraction_evaluate": -0.1}, r"fraction_evaluate must be in \[0, 1\], got -0.1"),
        ({"min_available_nodes": -1}, "min_available_nodes must be an int >= 0, got -1"),
        ({"min_train_nodes": 1.5}, "min_train_nodes must be an int >= 0, got 1.5"),
        ({"max_abs_weight": 0.0}, "max_abs_weight must be > 0 or None, got 0.0"),
    ],
)
def test_invalid_settings_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FedAvg(**kwargs)


def test_evaluation_kept_per_client_with_fairness_metrics():
    strategy = FedAvg()
    replies = [
        make_reply(
            7,
            None,
            {keys.NUM_EXAMPLES: 10, keys.EVAL_LOSS: 1.0, keys.EVAL_ACC: 0.5, keys.PARTITION_ID: 0},
        ),
        make_reply(
            3,
            None,
            {keys.NUM_EXAMPLES: 30, keys.EVAL_LOSS: 0.5, keys.EVAL_ACC: 0.9, keys.PARTITION_ID: 1},
        ),
        make_reply(5, None, {keys.NUM_EXAMPLES: 30, keys.EVAL_LOSS: 0.5, keys.EVAL_ACC: 2.0}),
    ]
    metrics = strategy.aggregate_evaluate(2, replies)
    # In client-key order: partition 0 (node 7) before partition 1 (node 3).
    assert [r.node_id for r in strategy.evaluations[2]] == [7, 3]
    assert strategy.evaluation_drops[2] == {5: "metrics['eval_acc'] must be <= 1, got 2"}
    # weighted acc (10·0.5 + 30·0.9)/40 = 0.8; unweighted mean (0.5 + 0.9)/2 = 0.7.
    assert metrics[keys.EVAL_ACC] == pytest.approx(0.8)
    assert metrics["acc-mean"] == pytest.approx(0.7)
    assert metrics["acc-worst"] == pytest.approx(0.5)


@settings(max_examples=30, deadline=None)
@given(st.permutations([1, 2, 3, 4]), st.lists(st.integers(1, 50), min_size=4, max_size=4))
def test_reply_order_does_not_change_the_result(order, counts):
    replies = {
        n: make_reply(n, local(float(n)), {keys.NUM_EXAMPLES: c})
        for n, c in zip([1, 2, 3, 4], counts, strict=True)
    }
    first = FedAvg()
    configure(first, NODES)
    a, _ = first.aggregate_train(1, [replies[n] for n in [1, 2, 3, 4]])
    second = FedAvg()
    configure(second, NODES)
    b, _ = second.aggregate_train(1, [replies[n] for n in order])
    for key in ("0", "1"):
        np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())
