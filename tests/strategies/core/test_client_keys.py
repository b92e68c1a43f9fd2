"""Stable client keys: partition id first, the client-key query, duplicates dropped."""

import logging
from unittest.mock import Mock

import numpy as np
import pytest
from flwr.app import Message, MessageType, RecordDict
from flwr.serverapp import Grid

from fairfl._compat import server_task_identity
from fairfl.contract import (
    ReplyError,
    client_key,
    client_key_order,
    keys,
    read_client_key_reply,
    sorted_client_keys,
    write_client_key_query,
)
from fairfl.simulation.inprocess import InMemoryGrid, node_configs_for
from fairfl.strategies import FedAvg
from tests.conftest import make_reply
from tests.strategies.baseline_helpers import GLOBAL, aggregate_round, local


def test_client_key_is_the_partition_id_else_the_node():
    assert client_key(1234, 3) == "3"
    assert client_key(1234, None) == "node-1234"
    # Partitions by number, then the node-keyed clients by node id.
    assert sorted_client_keys(["node-12", "10", "node-3", "2"]) == ["2", "10", "node-3", "node-12"]
    for bad in ("x", "-1", "01", "node-", "node-x", "node-+4", "²", 3):
        with pytest.raises(ValueError, match="client key must be"):
            client_key_order(bad)


def test_fairfl_client_app_answers_the_client_key_query():
    from fairfl.client.app import app

    config = {"num-partitions": 3}
    grid = InMemoryGrid(app, node_configs_for(3, first_node_id=70), config)
    with server_task_identity(grid.run_id):
        queries = [
            Message(write_client_key_query(), dst_node_id=node, message_type=MessageType.QUERY)
            for node in (70, 72)
        ]
        replies = list(grid.send_and_receive(queries))
        assert sorted(read_client_key_reply(r) for r in replies) == ["0", "2"]
        # Any other query is an error reply (Flower turns the handler's exception into one).
        other = Message(RecordDict(), dst_node_id=71, message_type=MessageType.QUERY)
        (error,) = grid.send_and_receive([other])
    with pytest.raises(ReplyError, match="reply is an error") as raised:
        read_client_key_reply(error)
    assert raised.value.node_id == 71


def test_query_reply_without_a_valid_partition_id_is_named():
    with pytest.raises(ReplyError, match=r"metrics\['partition-id'\] is missing"):
        read_client_key_reply(make_reply(5, metrics={}))
    with pytest.raises(ReplyError, match="must be >= 0"):
        read_client_key_reply(make_reply(5, metrics={keys.PARTITION_ID: -2}))


def test_nodes_that_do_not_answer_are_keyed_by_node_id_with_a_warning(caplog):
    strategy = FedAvg()
    strategy.node_keys = {4: "1"}
    grid = Mock(spec=Grid)
    grid.send_and_receive.return_value = [
        make_reply(5, metrics={keys.PARTITION_ID: 0}),
        make_reply(6, error="no query handler"),
    ]
    with server_task_identity(1), caplog.at_level(logging.WARNING, logger="fairfl"):
        found = strategy.learn_client_keys(grid, [6, 4, 5, 7])
    assert found == {4: "1", 5: "0", 6: "node-6", 7: "node-7"}
    # Only the unknown nodes were asked, each with a QUERY message.
    (sent,) = grid.send_and_receive.call_args.args
    assert sorted(m.metadata.dst_node_id for m in sent) == [5, 6, 7]
    assert {m.metadata.message_type for m in sent} == {MessageType.QUERY}
    assert "node 6: error reply is an error: no query handler" in caplog.text
    assert "node 7 gave no client key" in caplog.text


def test_two_nodes_claiming_one_partition_are_both_dropped():
    strategy = FedAvg()
    replies = [
        make_reply(node, local(value), {keys.NUM_EXAMPLES: 10, keys.PARTITION_ID: partition})
        for node, value, partition in ((1, 1.0, 0), (2, 2.0, 1), (3, 4.0, 1))
    ]
    arrays, _ = aggregate_round(strategy, replies, arrays=GLOBAL)
    record = strategy.train_records[1]
    assert record.accepted == [1]
    assert set(record.dropped) == {2, 3}
    assert "client key '1' (partition-id) also sent by nodes [2, 3]" in record.dropped[2]
    np.testing.assert_allclose(arrays["0"].numpy(), 1.0)


def test_replies_are_summed_in_partition_order_whatever_the_node_ids():
    strategy = FedAvg()
    replies = [
        make_reply(node, local(1.0), {keys.NUM_EXAMPLES: 10, keys.PARTITION_ID: partition})
        for node, partition in ((50, 2), (7, 0), (900, 1))
    ]
    aggregate_round(strategy, replies)
    assert strategy.train_records[1].accepted == [7, 900, 50]
    assert strategy.node_keys == {7: "0", 900: "1", 50: "2"}
