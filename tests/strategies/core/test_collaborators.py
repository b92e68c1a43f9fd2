"""The orchestrator's collaborators, each tested without a Grid or a strategy."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from fairfl.contract import ModelLayout, keys, read_train_reply
from fairfl.strategies.core import intake
from fairfl.strategies.core.client_keys import ClientKeys
from fairfl.strategies.core.errors import missing_metric_help, missing_metric_message
from fairfl.strategies.core.records import TrainRoundRecord, round_metrics
from tests.conftest import make_reply

LAYOUT = ModelLayout.of(ArrayRecord({"0": Array(np.zeros(2, np.float32))}))
READ = partial(
    read_train_reply,
    layout=LAYOUT,
    required_metrics=(keys.LOSS_BEFORE_TRAINING,),
    loss_key=keys.LOSS_BEFORE_TRAINING,
)


def good(node: int, partition: int | None = None, loss: float = 1.0):
    metrics: dict[str, object] = {keys.NUM_EXAMPLES: 10, keys.LOSS_BEFORE_TRAINING: loss}
    if partition is not None:
        metrics[keys.PARTITION_ID] = partition
    return make_reply(node, [np.ones(2, np.float32)], metrics)


def test_intake_reads_each_reply_alone_in_one_pass():
    messages = [
        good(1),
        make_reply(2, [np.ones(2, np.float32)], {keys.NUM_EXAMPLES: 10}),  # no loss
        good(3),
        good(3),  # the same node twice: neither is kept
        make_reply(4, error="client crashed"),
    ]
    read = intake.read_replies("aggregate_train", messages, [], READ)
    assert list(read.accepted) == [1]
    assert read.dropped[2] == "metrics['loss-before-training'] is missing"
    assert read.dropped[3] == "duplicate reply from the same node in one round"
    assert 4 in read.dropped
    assert read.missing == {2: keys.LOSS_BEFORE_TRAINING}
    assert read.answered == {1, 2, 3}


def test_value_errors_name_the_reply_and_array():
    replies = [READ(good(1)), READ(good(2))]
    # ‖w‖² of each reply's one array: reply 2's is not finite.
    errors = intake.value_errors(replies, np.array([[2.0], [np.inf]]), ["0"], 1e6)
    assert [error.node_id for error in errors] == []  # its values are fine: the norm lied
    replies[1].arrays[0] = np.array([np.nan, 1.0], np.float32)
    errors = intake.value_errors(replies, np.array([[2.0], [np.nan]]), ["0"], 1e6)
    assert [(error.node_id, error.field) for error in errors] == [(2, "arrays['0']")]


def test_client_keys_order_by_key_and_drop_a_shared_key():
    keys_ = ClientKeys("TERM")
    accepted = {9: READ(good(9, partition=1)), 4: READ(good(4, partition=0))}
    dropped: dict[int, str] = {}
    ordered = keys_.order(accepted, dropped)
    assert [r.node_id for r in ordered] == [4, 9]  # partition 0 before partition 1
    assert keys_.node_keys == {4: "0", 9: "1"}
    clash = {5: READ(good(5, partition=2)), 6: READ(good(6, partition=2))}
    assert keys_.order(clash, dropped) == []
    assert dropped[5] == "client key '2' (partition-id) also sent by nodes [5, 6]"


def test_client_keys_warn_once_for_replies_without_a_partition_id(caplog):
    keys_ = ClientKeys("AFL")
    assert keys_.key_of(READ(good(7))) == "node-7"
    keys_.key_of(READ(good(8)))
    assert caplog.text.count("keys its per-client state by node id") == 1


def test_round_metrics_keep_finite_diagnostics():
    record = TrainRoundRecord(
        dropped={3: "x"}, diagnostics={"a": 1.5, "b": float("inf"), "c": True}
    )
    assert round_metrics(2, record) == {"num-replies": 2, "dropped-replies": 1, "a": 1.5, "c": 1}


def test_missing_metric_message_names_the_key_and_the_way_out():
    helps = missing_metric_help(
        "my-key", "aggregate_train", rule_name="TERM", weighted_by_key="n", train_loss_key="l"
    )
    assert helps == "'my-key' is a metric TERM reads from every reply."
    message = missing_metric_message(
        "aggregate_train", 3, {1: "my-key", 2: "my-key"}, "TERM", helps
    )
    assert message.startswith(
        "aggregate_train: round 3: every reply (2) lacks metrics['my-key'], which TERM needs."
    )
    assert message.endswith("build the strategy with allow_missing_metrics=True.")


@pytest.mark.parametrize("hook", ["aggregate_train", "aggregate_evaluate"])
def test_unanswered_lists_nodes_sent_a_message_that_did_not_reply(hook, caplog):
    sent = [make_reply(node) for node in (1, 2, 3)]
    for message, node in zip(sent, (1, 2, 3), strict=True):
        message.metadata.dst_node_id = node
    assert intake.unanswered(hook, [good(2)], sent) == [1, 3]
    assert f"{hook}: no reply from node(s) 1, 3" in caplog.text
