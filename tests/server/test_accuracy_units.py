"""One unit for accuracy (issue 15 item 5): fractions in every record, percent only for people.

The strategy's evaluate MetricRecord and the ``rounds.jsonl`` line of the same round hold
the app's ``eval_acc`` and fairfl's ``acc-*`` statistics side by side, all as fractions in
[0, 1] under plain names (no ``-pct`` names); the console line shows percent and says so.
"""

from __future__ import annotations

import json
import logging
import math

import pytest
from flwr.app import ArrayRecord

from fairfl.contract import keys
from fairfl.server.results import ROUNDS_FILE, RoundLog
from fairfl.strategies import FedAvg
from tests.conftest import make_reply

# Four clients: accuracies 0.25, 0.5, 0.75, 1.0 on 10, 10, 10, 70 test samples.
ACCURACIES = {1: 0.25, 2: 0.5, 3: 0.75, 4: 1.0}
COUNTS = {1: 10, 2: 10, 3: 10, 4: 70}
# By hand: unweighted mean 2.5 / 4 = 0.625; weighted (2.5 + 5 + 7.5 + 70) / 100 = 0.85;
# deviations ±0.375, ±0.125: variance (2·0.140625 + 2·0.015625) / 4 = 0.078125,
# std sqrt(0.078125) = 0.279508; worst and both worst tails (1 client of 4) 0.25, best 1.
EXPECTED = {
    "acc-mean": 0.625,
    "acc-weighted-mean": 0.85,
    "acc-variance": 0.078125,
    "acc-std": math.sqrt(0.078125),
    "acc-worst": 0.25,
    "acc-worst-10": 0.25,
    "acc-worst-20": 0.25,
    "acc-best-10": 1.0,
}


def assert_one_unit(record: dict[str, float]) -> None:
    """Every accuracy in the record is a fraction and no name carries a unit suffix."""
    assert not [name for name in record if "pct" in name], record
    accuracies = {name: v for name, v in record.items() if name.startswith(("acc-", "eval_acc"))}
    assert set(EXPECTED) <= set(accuracies)
    assert all(0.0 <= value <= 1.0 for value in accuracies.values()), accuracies
    assert {name: record[name] for name in EXPECTED} == pytest.approx(EXPECTED)


def test_evaluate_record_and_rounds_line_hold_fractions_only(tmp_path, caplog):
    strategy = FedAvg()
    replies = [
        make_reply(
            node,
            None,
            {
                keys.NUM_EXAMPLES: COUNTS[node],
                keys.EVAL_LOSS: 1.0,
                keys.EVAL_ACC: acc,
                keys.PARTITION_ID: node - 1,
            },
        )
        for node, acc in ACCURACIES.items()
    ]
    record = strategy.aggregate_evaluate(1, replies)
    assert record is not None
    metrics = dict(record)
    assert metrics[keys.EVAL_ACC] == pytest.approx(0.85)  # weighted, the app's name
    assert_one_unit(metrics)

    log = RoundLog(tmp_path, strategy, {"strategy": "fedavg"}, checkpoint=False)
    with caplog.at_level(logging.INFO, logger="fairfl"):
        log.on_round_end(1, ArrayRecord())
    (line,) = (tmp_path / ROUNDS_FILE).read_text().splitlines()
    entry = json.loads(line)
    assert_one_unit(entry["metrics"])
    assert sorted(c["eval_acc"] for c in entry["clients"]) == [0.25, 0.5, 0.75, 1.0]
    # People read percent, and the line says so: 62.50, 25.00, 100·0.279508 = 27.95.
    assert "accuracy (%) mean 62.50 | worst-10% 25.00 | std 27.95" in caplog.text
