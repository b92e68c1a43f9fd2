"""Equitable-FL end to end: ClientApp activation vectors -> clustering -> eq. (6) weights."""

import json

import numpy as np
import pytest
from flwr.app import MetricRecord

from fairfl.contract import keys
from fairfl.data.groups import planted_groups
from fairfl.group_metrics import run_group_report
from fairfl.simulation import run_inprocess

# Two planted label-disjoint groups of 2 and 3 clients (classes 0-3 and 4-9).
GROUPS = {
    "strategy": "equitable",
    "partitioner": "groups",
    "group-sizes": "2,3",
    "num-partitions": 5,
    "num-server-rounds": 2,
    "lr": 0.1,
}


def rounds_of(path):
    return [json.loads(line) for line in (path / "rounds.jsonl").read_text().splitlines()]


def test_clusters_recover_planted_groups_and_each_gets_half(tmp_path):
    out = run_inprocess({**GROUPS, "out-dir": str(tmp_path)})
    rounds = rounds_of(tmp_path)
    for entry in rounds:
        weights = {w["partition_id"]: w["weight"] for w in entry["train"]["weights"]}
        # Full participation: each group is one cluster with total weight 1/2.
        assert weights == pytest.approx({0: 0.25, 1: 0.25, 2: 1 / 6, 3: 1 / 6, 4: 1 / 6})
        assert entry["train"]["diagnostics"]["num-clusters"] == 2
        assert entry["train"]["diagnostics"]["clusters-degenerate"] is False
    report = run_group_report(rounds, planted_groups((2, 3)).tolist())
    assert report["nmi-mean"] == pytest.approx(1.0) and report["nmi-rounds"] == 2
    assert set(report["final"]["acc-group"]) == {0, 1}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["strategy"] == "Equitable-FL"
    assert summary["strategy_settings"]["num_clusters"] == 2
    assert out.strategy.train_records[2].diagnostics["clusters"]


def test_registry_mode_and_a_client_that_withholds_its_vector(tmp_path):
    def withhold(instruction, reply):
        # Partition 0's node answers training without an activation vector.
        if (
            instruction.metadata.dst_node_id == 1001
            and instruction.metadata.message_type == "train"
        ):
            metrics = dict(reply.content[keys.METRICS])
            metrics.pop(keys.ACTIVATION)
            reply.content[keys.METRICS] = MetricRecord(metrics)
        return reply

    out = run_inprocess(
        {**GROUPS, "equitable-scope": "registry", "out-dir": str(tmp_path)}, reply_filter=withhold
    )
    for entry in rounds_of(tmp_path):
        train = entry["train"]
        assert train["dropped"] == {"1001": "metrics['activation'] is missing"}
        weights = {w["partition_id"]: w["weight"] for w in train["weights"]}
        assert weights == pytest.approx({1: 0.5, 2: 1 / 6, 3: 1 / 6, 4: 1 / 6})
        assert train["diagnostics"]["registry-size"] == 4
    assert np.all([np.isfinite(a.numpy()).all() for a in out.arrays.values()])
