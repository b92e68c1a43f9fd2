"""The SuperLink's error reply for an unreachable node is booked under that node.

When a SuperNode's heartbeats lapse (it was killed, or lost its network), Flower's
SuperLink answers the messages sent to it itself: an error reply whose sender is node 1
(the SuperLink) and whose ``reply_to_message_id`` is the instruction's id. The drop
must name the dead node, not node 1, and two dead nodes in one round are two drops.
"""

from unittest.mock import Mock

import numpy as np
from flwr.app import ConfigRecord
from flwr.serverapp import Grid

from fairfl._compat import SERVER_NODE_ID, server_task_identity, set_message_id
from fairfl.contract import keys
from fairfl.strategies import AFL, RCFL, FedAvg
from tests.conftest import arrays_of, make_reply

GLOBAL = [np.zeros((2, 3), np.float32), np.zeros(3, np.float32)]
NODES = (11, 12, 13)
UNAVAILABLE = "Node Unavailable - The destination node failed to report a heartbeat"


def local(value):
    return [np.full((2, 3), value, np.float32), np.full(3, value, np.float32)]


def pushed(strategy, kind: str) -> dict[int, str]:
    """Configure ``kind`` on NODES and give the messages ids, as the Grid does on push."""
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = list(NODES)
    configure = strategy.configure_train if kind == "train" else strategy.configure_evaluate
    with server_task_identity(1):
        messages = list(configure(1, arrays_of(GLOBAL), ConfigRecord({"lr": 0.1}), grid))
    ids = {}
    for message in messages:
        node = int(message.metadata.dst_node_id)
        ids[node] = f"{kind}-to-{node}"
        set_message_id(message, ids[node])
    return ids


def unavailable(instruction_id: str) -> Mock:
    reply = make_reply(SERVER_NODE_ID, error=UNAVAILABLE)
    reply.metadata.reply_to_message_id = instruction_id
    return reply


def test_unreachable_nodes_train_replies_are_dropped_under_their_own_ids():
    strategy = AFL()
    ids = pushed(strategy, "train")
    good = make_reply(11, local(2.0), {keys.NUM_EXAMPLES: 10, keys.LOSS_BEFORE_TRAINING: 1.0})
    arrays, metrics = strategy.aggregate_train(
        1, [good, unavailable(ids[12]), unavailable(ids[13])]
    )
    np.testing.assert_allclose(arrays["0"].numpy(), 2.0)
    record = strategy.train_records[1]
    assert record.accepted == [11]
    assert sorted(record.dropped) == [12, 13]
    assert all(UNAVAILABLE in reason for reason in record.dropped.values())
    assert metrics["dropped-replies"] == 2


def test_rcfl_per_node_messages_also_map_error_replies_to_their_node():
    # RC-FL builds its own per-node train messages (one α_i each).
    strategy = RCFL()
    ids = pushed(strategy, "train")
    assert strategy.sampled[1]["train"] == len(NODES)
    good = make_reply(11, local(2.0), {keys.NUM_EXAMPLES: 10, keys.RCFL_ETA: 0.0})
    strategy.aggregate_train(1, [good, unavailable(ids[12])])
    assert list(strategy.train_records[1].dropped) == [12]


def test_unreachable_nodes_evaluate_reply_is_dropped_under_its_own_id():
    strategy = FedAvg()
    ids = pushed(strategy, "evaluate")
    good = {keys.NUM_EXAMPLES: 5, keys.EVAL_LOSS: 0.5, keys.EVAL_ACC: 0.8}
    replies = [make_reply(11, metrics=good), make_reply(13, metrics=good), unavailable(ids[12])]
    metrics = strategy.aggregate_evaluate(1, replies)
    assert [r.node_id for r in strategy.evaluations[1]] == [11, 13]
    assert list(strategy.evaluation_drops[1]) == [12]
    assert metrics["num-clients"] == 2


def test_an_error_reply_to_no_message_of_this_phase_stays_with_its_sender():
    strategy = FedAvg()
    pushed(strategy, "train")
    stray = unavailable("evaluate-to-12")  # not a message of this phase
    strategy.aggregate_train(1, [make_reply(11, local(1.0), {keys.NUM_EXAMPLES: 1}), stray])
    assert list(strategy.train_records[1].dropped) == [SERVER_NODE_ID]
