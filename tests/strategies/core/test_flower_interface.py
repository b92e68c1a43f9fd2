"""Flower's interface kept (issue 15): FedAvg's arguments, the app's metrics, loud failures.

Every rule takes all of Flower FedAvg's keyword arguments and honours the record keys;
its MetricRecords hold what FedAvg would return plus fairfl's metrics; a round in which
every reply lacks a metric the rule needs stops the run with an error that says how to
report it; dropped replies are WARNINGs that reach Flower's console with no set-up.
"""

from __future__ import annotations

import inspect
import logging
import subprocess
import sys
from pathlib import Path
from unittest.mock import Mock

import numpy as np
import pytest
from flwr.app import ConfigRecord, MetricRecord, RecordDict
from flwr.app.exception import AppExitException
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

from fairfl._compat import server_task_identity
from fairfl.contract import keys
from fairfl.strategies import QFFL, RCFL, STRATEGIES, EquitableFL, FedAvg
from fairfl.strategies.core.base import MissingMetricError
from tests.conftest import arrays_of, make_reply

ROOT = Path(__file__).resolve().parents[3]
GLOBAL = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}
NODES = [1, 2, 3, 4]


def local(value: float) -> dict[str, np.ndarray]:
    return {k: np.full(v.shape, value, np.float32) for k, v in GLOBAL.items()}


def grid_of(nodes):
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = list(nodes)
    return grid


def configure(strategy, nodes=NODES, config=None):
    with server_task_identity(1):
        return list(
            strategy.configure_train(
                1,
                arrays_of(GLOBAL),
                ConfigRecord(config if config is not None else {"lr": 0.1}),
                grid_of(nodes),
            )
        )


def full_metrics(node: int, loss_key: str = keys.LOSS_BEFORE_TRAINING) -> dict[str, object]:
    """Every metric any rule needs, plus an app metric of the ClientApp's own."""
    return {
        keys.NUM_EXAMPLES: 10 * node,
        loss_key: 0.5 * node,
        keys.ACTIVATION: [float(node % 2), 1.0 - node % 2, 0.5],
        keys.RCFL_ETA: 0.1 * node,
        keys.ACC_BEFORE_TRAINING: 0.1 * node,
        keys.ACC_AFTER_TRAINING: 0.05 * node,
        # FairFed's counts per (attribute, label, prediction): one attribute value, 2x2.
        keys.GROUP_COUNTS: [0, 0, node, 0, 0, 1, 0, node],
        "my-metric": float(node),
    }


def stock_metrics(node: int) -> dict[str, object]:
    """What a stock Flower ClientApp reports: its loss *during* training."""
    return {keys.NUM_EXAMPLES: 10 * node, keys.TRAIN_LOSS: 0.5 * node}


def weighted_my_metric(nodes=NODES) -> float:
    # Flower's weighted average of "my-metric" = node, weights 10·node.
    return sum(10 * n * n for n in nodes) / sum(10 * n for n in nodes)


def keep_first(records: list[RecordDict], weighted_by_key: str) -> MetricRecord:
    return MetricRecord({"first": float(len(records))})


FEDAVG_KWARGS = {
    "fraction_train": 0.5,
    "fraction_evaluate": 0.25,
    "min_train_nodes": 3,
    "min_evaluate_nodes": 1,
    "min_available_nodes": 4,
    "weighted_by_key": "n",
    "arrayrecord_key": "weights",
    "configrecord_key": "cfg",
    "train_metrics_aggr_fn": keep_first,
    "evaluate_metrics_aggr_fn": keep_first,
}


def test_the_table_covers_every_argument_of_flowers_fedavg():
    parameters = set(inspect.signature(FlowerFedAvg.__init__).parameters) - {"self"}
    assert parameters == set(FEDAVG_KWARGS)


@pytest.mark.parametrize("rule", sorted(STRATEGIES))
def test_every_rule_takes_every_fedavg_argument(rule):
    strategy = STRATEGIES[rule].strategy(**FEDAVG_KWARGS)
    for name, value in FEDAVG_KWARGS.items():
        assert getattr(strategy, name) == value, name


@pytest.mark.parametrize("rule", sorted(STRATEGIES))
def test_every_rule_honours_record_keys_and_passes_the_apps_metrics_through(rule):
    strategy = STRATEGIES[rule].strategy(
        weighted_by_key="n",
        arrayrecord_key="weights",
        configrecord_key="cfg",
        train_loss_key="my-loss",
    )
    messages = configure(strategy)
    assert {m.content.array_records.keys() == {"weights"} for m in messages} == {True}
    assert {set(m.content.config_records) == {"cfg"} for m in messages} == {True}
    replies = []
    for node in NODES:
        metrics = full_metrics(node, loss_key="my-loss")
        metrics["n"] = metrics.pop(keys.NUM_EXAMPLES)
        content = RecordDict(
            {
                # "weights" (arrayrecord_key); q-FedSGD's replies carry "gradient"
                strategy.reply_arrays_key: arrays_of(local(0.1 * node)),
                "metrics": MetricRecord(metrics),
            }
        )
        replies.append(make_reply(node, content=content))
    arrays, metrics = strategy.aggregate_train(1, replies)
    assert strategy.train_records[1].dropped == {}
    assert arrays is not None and set(arrays) == set(GLOBAL)
    # The app's metric, as Flower's FedAvg aggregates it, next to fairfl's.
    assert metrics["my-metric"] == pytest.approx(weighted_my_metric())
    assert metrics["my-loss"] == pytest.approx(sum(5 * n * n for n in NODES) / 100)
    assert metrics["num-replies"] == len(NODES)
    # fairfl's per-client reports are not averaged into the record.
    assert keys.ACTIVATION not in metrics


def test_custom_metric_aggregation_is_used_next_to_fairfls():
    strategy = FedAvg(train_metrics_aggr_fn=keep_first, evaluate_metrics_aggr_fn=keep_first)
    configure(strategy)
    _, metrics = strategy.aggregate_train(
        1, [make_reply(n, local(1.0), full_metrics(n)) for n in NODES]
    )
    assert metrics["first"] == 4.0 and metrics["lambda-sum"] == pytest.approx(1.0)
    assert "my-metric" not in metrics
    evaluation = strategy.aggregate_evaluate(
        1,
        [
            make_reply(n, None, {keys.NUM_EXAMPLES: 5, keys.EVAL_LOSS: 1.0, keys.EVAL_ACC: 0.5})
            for n in NODES
        ],
    )
    assert evaluation["first"] == 4.0 and evaluation["acc-mean"] == pytest.approx(0.5)


def test_an_app_metric_that_cannot_be_averaged_warns_and_keeps_fairfls(caplog):
    strategy = FedAvg()
    configure(strategy, [1, 2])
    replies = [
        make_reply(1, local(1.0), {keys.NUM_EXAMPLES: 5, "odd": 1.0}),
        make_reply(2, local(2.0), {keys.NUM_EXAMPLES: 5, "odd": [1.0, 2.0]}),
    ]
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        arrays, metrics = strategy.aggregate_train(1, replies)
    assert arrays is not None and "odd" not in metrics and metrics["num-replies"] == 2
    assert "aggregate_train: the replies' own metrics could not be aggregated" in caplog.text


def test_evaluate_record_has_the_apps_metrics_and_accuracy_in_one_unit():
    strategy = FedAvg()
    replies = [
        make_reply(
            n,
            None,
            {
                keys.NUM_EXAMPLES: 10 * n,
                keys.EVAL_LOSS: 0.1 * n,
                keys.EVAL_ACC: 0.2 * n,
                "my-metric": float(n),
                keys.PARTITION_ID: n,
            },
        )
        for n in NODES
    ]
    metrics = strategy.aggregate_evaluate(1, replies)
    assert metrics["my-metric"] == pytest.approx(weighted_my_metric())
    # eval_acc is a fraction (the app's, Flower's name): weighted (2+8+18+32)/100 = 0.6.
    assert metrics[keys.EVAL_ACC] == pytest.approx(0.6)
    # fairfl's accuracy statistics are fractions too, under plain names: accuracies
    # 0.2, 0.4, 0.6, 0.8 -> unweighted mean 0.5, worst 0.2, variance
    # (0.3² + 0.1² + 0.1² + 0.3²) / 4 = 0.05 (a fraction squared).
    assert metrics["acc-mean"] == pytest.approx(0.5)
    assert metrics["acc-worst"] == pytest.approx(0.2)
    assert metrics["acc-variance"] == pytest.approx(0.05)
    assert not [k for k in metrics if "pct" in k]
    assert keys.PARTITION_ID not in metrics


# --------------------------------------------------------------- loud failures
LOSS_RULES = sorted(name for name, spec in STRATEGIES.items() if spec.strategy.needs_loss)


def test_the_loss_rules_are_the_papers_loss_aware_ones():
    assert LOSS_RULES == [
        "afl",
        "deltafl",
        "fedfv",
        "gifair",
        "qfedsgd",
        "qffl",
        "semivred",
        "term",
        "vred",
    ]


@pytest.mark.parametrize("rule", LOSS_RULES)
def test_stock_replies_stop_a_loss_rule_naming_the_key_and_the_fix(rule):
    strategy = STRATEGIES[rule].strategy()
    configure(strategy)
    replies = [make_reply(n, local(1.0), stock_metrics(n)) for n in NODES]
    with pytest.raises(MissingMetricError, match="every reply") as info:
        strategy.aggregate_train(1, replies)
    text = str(info.value)
    assert "metrics['loss-before-training']" in text
    assert "measured before local training" in text
    assert "fairfl.client.fair_train(message, model, trainloader, loss_fn, train_fn)" in text
    assert "or pass train_loss_key='train_loss' if your ClientApp's train_loss" in text
    assert "allow_missing_metrics=True" in text
    assert isinstance(info.value, AggregationError) and isinstance(info.value, AppExitException)


def test_stock_replies_stop_qffl_and_the_opt_in_reads_train_loss():
    with pytest.raises(
        MissingMetricError,
        match=r"aggregate_train: round 1: every reply \(4\) lacks "
        r"metrics\['loss-before-training'\], which q-FFL needs\..*fairfl\.client\.fair_train"
        r".*train_loss_key='train_loss'",
    ):
        strategy = QFFL()
        configure(strategy)
        strategy.aggregate_train(1, [make_reply(n, local(1.0), stock_metrics(n)) for n in NODES])
    opted_in = QFFL(train_loss_key="train_loss")
    configure(opted_in)
    arrays, metrics = opted_in.aggregate_train(
        1, [make_reply(n, local(1.0), stock_metrics(n)) for n in NODES]
    )
    assert arrays is not None and metrics[keys.TRAIN_LOSS] == pytest.approx(1.5)


def test_stock_replies_stop_equitable_fl_naming_activation_and_the_helpers():
    strategy = EquitableFL()
    configure(strategy)
    with pytest.raises(
        MissingMetricError,
        match=r"lacks metrics\['activation'\], which Equitable-FL needs\. 'activation' is the "
        r"mean penultimate-layer activation.*fairfl\.client\.fair_train\(message, model, "
        r"trainloader, loss_fn, train_fn\).*fairfl\.client\.activation_for_config",
    ):
        strategy.aggregate_train(1, [make_reply(n, local(1.0), stock_metrics(n)) for n in NODES])


def test_stock_replies_stop_rcfl_naming_its_dual_variable():
    strategy = RCFL()
    configure(strategy)
    with pytest.raises(
        MissingMetricError,
        match=r"lacks metrics\['rcfl-eta'\], which RC-FL needs\. 'rcfl-eta' is the client's "
        r"dual variable eta.*fairfl\.client\.fair_train",
    ):
        strategy.aggregate_train(1, [make_reply(n, local(1.0), stock_metrics(n)) for n in NODES])


def test_a_missing_weight_key_names_flowers_argument():
    strategy = FedAvg(weighted_by_key="n")
    configure(strategy)
    with pytest.raises(MissingMetricError, match=r"lacks metrics\['n'\].*weighted_by_key="):
        strategy.aggregate_train(1, [make_reply(n, local(1.0), stock_metrics(n)) for n in NODES])


def test_evaluate_replies_that_all_lack_the_accuracy_stop_the_run():
    replies = [make_reply(n, None, {keys.NUM_EXAMPLES: 5, keys.EVAL_LOSS: 0.3}) for n in NODES]
    with pytest.raises(
        MissingMetricError,
        match=r"aggregate_evaluate: round 1: every reply \(4\) lacks metrics\['eval_acc'\]"
        r".*a fraction in \[0, 1\]",
    ):
        FedAvg().aggregate_evaluate(1, replies)
    assert FedAvg(allow_missing_metrics=True).aggregate_evaluate(1, replies) is None


def test_opt_out_drops_with_warnings_and_keeps_the_model(caplog):
    strategy = QFFL(allow_missing_metrics=True)
    configure(strategy)
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        result = strategy.aggregate_train(
            1, [make_reply(n, local(1.0), stock_metrics(n)) for n in NODES]
        )
    assert result == (None, None)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    # every node failed the same way: one line with the count, not one per node
    (line,) = [r.getMessage() for r in warnings if "dropped reply from node" in r.getMessage()]
    assert f"{len(NODES) - 1} more for the same reason ({len(NODES)} replies: nodes " in line
    assert "metrics['loss-before-training'] is missing" in line


def test_some_replies_without_the_key_are_dropped_and_the_round_goes_on(caplog):
    strategy = QFFL()
    configure(strategy)
    replies = [make_reply(n, local(1.0), full_metrics(n)) for n in (1, 2)] + [
        make_reply(n, local(1.0), stock_metrics(n)) for n in (3, 4)
    ]
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        arrays, _ = strategy.aggregate_train(1, replies)
    assert arrays is not None
    assert strategy.train_records[1].dropped == {
        3: "metrics['loss-before-training'] is missing",
        4: "metrics['loss-before-training'] is missing",
    }
    assert "aggregate_train: dropped reply from node 3" in caplog.text


def test_error_replies_alone_do_not_stop_the_run():
    strategy = QFFL()
    configure(strategy)
    assert strategy.aggregate_train(1, [make_reply(n, error="gone") for n in NODES]) == (
        None,
        None,
    )


def test_invalid_interface_arguments_are_named():
    with pytest.raises(ValueError, match="train_loss_key must be a non-empty str, got ''"):
        FedAvg(train_loss_key="")
    with pytest.raises(ValueError, match="arrayrecord_key must be a non-empty str, got 3"):
        FedAvg(arrayrecord_key=3)
    with pytest.raises(ValueError, match="train_metrics_aggr_fn must be callable or None"):
        FedAvg(train_metrics_aggr_fn="mean")
    with pytest.raises(ValueError, match="allow_missing_metrics must be a bool, got 1"):
        FedAvg(allow_missing_metrics=1)


# ----------------------------------------------------------------- q-FFL's L
def test_qffl_reads_eta_from_the_rounds_lr_and_an_explicit_value_wins():
    strategy = QFFL()
    configure(strategy, config={"lr": 0.25})
    assert strategy.lipschitz == pytest.approx(4.0)
    configure(strategy, config={"lr": 0.5})
    assert strategy.lipschitz == pytest.approx(2.0)
    explicit = QFFL(client_learning_rate=0.1)
    configure(explicit, config={"lr": 0.5})
    assert explicit.lipschitz == pytest.approx(10.0)
    # Same replies, same η: the default reads what the explicit value states.
    replies = [make_reply(n, local(0.1 * n), full_metrics(n)) for n in NODES]
    from_config = QFFL()
    configure(from_config, config={"lr": 0.1})
    a, _ = from_config.aggregate_train(1, replies)
    b, _ = explicit.aggregate_train(1, replies)
    np.testing.assert_array_equal(a["w"].numpy(), b["w"].numpy())


def test_qffl_without_eta_anywhere_says_what_to_pass():
    with pytest.raises(ValueError, match=r"pass client_learning_rate=eta, or send 'lr' \(> 0\)"):
        configure(QFFL(), config={"local-epochs": 1})
    with pytest.raises(ValueError, match="L = 1/eta is unknown"):
        _ = QFFL().lipschitz


# ------------------------------------------------------------------- logging
def test_dropped_replies_reach_flowers_console_with_no_set_up():
    # A fresh interpreter: a ServerApp that only imports fairfl.strategies.
    script = """
import numpy as np
from unittest.mock import Mock
from flwr.app import ConfigRecord
from flwr.serverapp import Grid
from fairfl._compat import server_task_identity
from fairfl.contract import keys
from fairfl.strategies import FedAvg
from tests.conftest import arrays_of, make_reply

strategy = FedAvg()
FedAvg()  # a second strategy attaches nothing more
grid = Mock(spec=Grid)
grid.get_node_ids.return_value = [1, 2]
with server_task_identity(1):
    strategy.configure_train(1, arrays_of([np.zeros(2, np.float32)]), ConfigRecord({}), grid)
strategy.aggregate_train(
    1,
    [
        make_reply(1, [np.ones(2, np.float32)], {keys.NUM_EXAMPLES: 3}),
        make_reply(2, [np.ones(2, np.float32)], {keys.NUM_EXAMPLES: -1}),
    ],
)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    lines = [line for line in done.stderr.splitlines() if "dropped reply" in line]
    assert len(lines) == 1, done.stderr
    assert "WARNING" in lines[0]
    assert (
        "aggregate_train: dropped reply from node 2: metrics['num-examples'] must be > 0"
        in (lines[0])
    )


def test_a_root_console_handler_is_not_doubled():
    script = """
import logging, sys
logging.basicConfig(stream=sys.stderr, format="ROOT %(message)s")
from fairfl.strategies import FedAvg
FedAvg()
logging.getLogger("fairfl.strategies.core.base").warning(
    "aggregate_train: dropped reply from node 7: x"
)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    lines = [line for line in done.stderr.splitlines() if "node 7" in line]
    assert lines == ["ROOT aggregate_train: dropped reply from node 7: x"]
