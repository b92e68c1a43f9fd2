"""A stock Flower ClientApp (it reports only ``train_loss``, measured during training)
against fairfl's rules: the run stops at once with an error saying what to report."""

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fairfl._compat import server_task_identity
from fairfl.simulation import InMemoryGrid, node_configs_for
from fairfl.strategies import QFFL, EquitableFL
from fairfl.strategies.core.base import MissingMetricError

NUM_NODES = 3
app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    # A quickstart's train(): one step, then the loss *during* training.
    weights = msg.content["arrays"].to_numpy_ndarrays()
    trained = ArrayRecord([w - 0.1 for w in weights])
    metrics = MetricRecord({"train_loss": 0.7, "num-examples": 20})
    return Message(RecordDict({"arrays": trained, "metrics": metrics}), reply_to=msg)


def run(strategy) -> None:
    grid = InMemoryGrid(app, node_configs_for(NUM_NODES), {})
    with server_task_identity(grid.run_id):
        strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord([np.zeros(3, np.float32)]),
            num_rounds=1,
            train_config=ConfigRecord({"lr": 0.1}),
        )


def test_qffl_names_the_loss_key_its_opt_in_and_the_client_helper():
    with pytest.raises(
        MissingMetricError,
        match=r"every reply \(3\) lacks metrics\['loss-before-training'\].*"
        r"fairfl\.client\.fair_train\(message, model, trainloader, loss_fn, train_fn\).*"
        r"train_loss_key='train_loss'",
    ):
        run(QFFL(min_available_nodes=NUM_NODES, fraction_evaluate=0.0))


def test_equitable_fl_names_activation_and_its_helpers():
    with pytest.raises(
        MissingMetricError,
        match=r"lacks metrics\['activation'\].*fairfl\.client\.fair_train.*"
        r"fairfl\.client\.activation_for_config",
    ):
        run(EquitableFL(min_available_nodes=NUM_NODES, fraction_evaluate=0.0))


def test_qffl_opted_in_to_train_loss_trains_with_the_stock_app():
    strategy = QFFL(
        train_loss_key="train_loss", min_available_nodes=NUM_NODES, fraction_evaluate=0.0
    )
    run(strategy)
    assert len(strategy.train_records[1].accepted) == NUM_NODES
