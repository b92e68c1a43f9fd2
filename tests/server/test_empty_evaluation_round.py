"""A round in which no client evaluated keeps the record's shape (issue 41).

The in-process runner with every evaluation reply of a round lost: that round's
``metrics`` hold every key of :func:`fairfl.metrics.fairness_metrics`, ``num-clients``
is 0, every statistic is ``null`` (NaN in JSON), the counts still add up, and the
readers of the record (the run's log, the runner's summary line, the telemetry sinks'
scalars, the report's final metrics) take it without raising.
"""

import json
import logging

import pytest
from flwr.app import Message

from fairfl.metrics import FAIRNESS_METRICS
from fairfl.report.results import RunResult
from fairfl.server.run import RunFailedError
from fairfl.simulation import run_inprocess
from fairfl.simulation.engine import final_line
from fairfl.telemetry.sinks import RoundRecord

CONFIG = {"num-partitions": 3, "num-server-rounds": 2, "lr": 0.1, "local-epochs": 1}


def drop_evaluations(rounds: set[int]):
    def reply_filter(instruction: Message, reply: Message) -> Message | None:
        server_round = int(instruction.content["config"]["server-round"])
        evaluating = instruction.metadata.message_type == "evaluate"
        return None if evaluating and server_round in rounds else reply

    return reply_filter


def read_lines(out_dir):
    return [json.loads(x) for x in (out_dir / "rounds.jsonl").read_text().splitlines()]


def assert_nobody_evaluated(line):
    assert line["clients"] == []
    assert list(line["metrics"]) == list(FAIRNESS_METRICS)
    assert line["metrics"]["num-clients"] == 0
    assert all(line["metrics"][k] is None for k in FAIRNESS_METRICS if k != "num-clients")
    # 3 sampled for evaluation: 0 answered, 3 dropped for no reply; training intact.
    assert line["sampled"] == {"train": 3, "evaluate": 3}
    assert len(line["evaluate_dropped"]) == 3
    assert line["train"]["accepted"] == 3


def test_a_round_with_every_evaluation_dropped_records_zero_clients(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    outcome = run_inprocess(
        {**CONFIG, "out-dir": str(tmp_path)}, reply_filter=drop_evaluations({1})
    )
    first, second = read_lines(tmp_path)
    assert_nobody_evaluated(first)
    # Round 2 evaluated everyone: the same keys, 3 clients, finite statistics.
    assert list(second["metrics"]) == list(FAIRNESS_METRICS)
    assert second["metrics"]["num-clients"] == 3
    assert all(isinstance(v, float) for v in second["metrics"].values())
    assert outcome.summary["status"] == "completed"
    assert outcome.summary["final_metrics"] == second["metrics"]
    # The log reports round 2 and the final metrics, not round 1.
    assert "round 1: accuracy" not in caplog.text and "round 2: accuracy" in caplog.text
    assert "final: accuracy" in caplog.text
    # Telemetry: the count is logged, no statistic (a null is not a number).
    scalars = RoundRecord(first, client_accuracy={}, unlabelled=0).scalars()
    assert scalars["fairness/num-clients"] == 0.0
    assert scalars["clients/answered-evaluate"] == 0.0
    assert scalars["clients/dropped-evaluate"] == 3.0
    assert not [tag for tag in scalars if tag.startswith("fairness/acc-")]
    # The report reads the last evaluated round.
    run = RunResult(label="fedavg", rule="fedavg", seed=0, path=tmp_path, rounds=[first])
    assert run.final_metrics() == {} and not run.ok


def test_a_run_whose_evaluations_are_all_dropped_fails_with_a_readable_summary(tmp_path):
    with pytest.raises(RunFailedError, match="evaluated nothing"):
        run_inprocess({**CONFIG, "out-dir": str(tmp_path)}, reply_filter=drop_evaluations({1, 2}))
    for line in read_lines(tmp_path):
        assert_nobody_evaluated(line)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["final_metrics"]["num-clients"] == 0
    assert summary["test_samples_per_client"] == {}
    assert final_line(summary).endswith("no client evaluation in the last round")
