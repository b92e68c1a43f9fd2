"""A ServerApp of one's own running a fairfl rule: a run that trained nothing raises.

Issue 47, item 6: on Flower's quickstart app every client failed every round, the global
model never changed, and ``flwr run`` exited 0. fairfl's ServerApp judges its runs itself
(``max-failed-rounds``); a user's own ServerApp calls ``strategy.start`` directly, which
now raises :class:`~fairfl.strategies.core.records.TrainedNothingError` when no round made a
new global model, so that ServerApp ends non-zero too. One trained round is enough.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp.exception import AggregationError

from fairfl._compat import server_task_identity
from fairfl.simulation import InMemoryGrid, node_configs_for
from fairfl.strategies import TERM, FedAvg
from fairfl.strategies.core.records import TrainedNothingError

NUM_NODES = 3
app = ClientApp()
#: Partition ids whose ClientApp raises on every train message.
failing: set[int] = set()


@app.train()
def train(msg: Message, context: Context) -> Message:
    partition_id = int(context.node_config["partition-id"])
    if partition_id in failing:
        raise RuntimeError("config key 'local-epochs' is missing")
    arrays = msg.content["arrays"]
    weights = {k: v.numpy() + 0.5 for k, v in arrays.items()}
    metrics = {"num-examples": 10 + partition_id, "loss-before-training": 1.0 + partition_id}
    content = RecordDict(
        {
            "arrays": ArrayRecord({k: Array(np.asarray(v)) for k, v in weights.items()}),
            "metrics": MetricRecord(metrics),
        }
    )
    return Message(content=content, reply_to=msg)


def _start(strategy, rounds: int = 2):
    grid = InMemoryGrid(app, node_configs_for(NUM_NODES), {})
    initial = ArrayRecord({"w": Array(np.zeros(3, dtype=np.float32))})
    with server_task_identity(grid.run_id):
        return strategy.start(
            grid=grid,
            initial_arrays=initial,
            num_rounds=rounds,
            train_config=ConfigRecord({"lr": 0.1}),
        )


@pytest.mark.parametrize("rule", [FedAvg, TERM])
def test_a_run_where_every_client_fails_every_round_raises(rule):
    failing.update(range(NUM_NODES))
    strategy = rule(min_available_nodes=NUM_NODES, fraction_evaluate=0.0)
    with pytest.raises(TrainedNothingError, match="trained nothing: none of its 2 rounds") as e:
        _start(strategy)
    assert isinstance(e.value, AggregationError)  # Flower's error: the ServerApp ends
    assert all(not record.accepted for record in strategy.train_records.values())
    assert all(len(record.dropped) == NUM_NODES for record in strategy.train_records.values())


def test_one_client_that_trains_is_a_run_that_trained():
    failing.update({0, 1})
    strategy = FedAvg(min_available_nodes=NUM_NODES, fraction_evaluate=0.0)
    result = _start(strategy)
    np.testing.assert_allclose(result.arrays["w"].numpy(), [1.0, 1.0, 1.0])  # two rounds


@pytest.fixture(autouse=True)
def _no_failures():
    failing.clear()
    yield
    failing.clear()
