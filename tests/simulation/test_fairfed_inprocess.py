"""FairFed and the group-fairness records through the in-process runner (issue 37)."""

import json

import numpy as np
import pytest
import torch

from fairfl.contract.sensitive import GROUP_METRICS, defined_metrics, group_fairness, sum_counts
from fairfl.simulation import run_inprocess

pytestmark = pytest.mark.integration


def test_fairfed_runs_and_group_fairness_reaches_the_records(tmp_path):
    config = {
        "strategy": "fairfed",
        "dataset": "adult-synthetic",
        "partitioner": "dirichlet",
        "dirichlet-alpha": 0.5,
        "num-partitions": 3,
        "num-server-rounds": 1,
        "model": "logreg",
        "out-dir": str(tmp_path),
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batches of 32 through a logistic regression: one is faster
    try:
        run_inprocess(config)
    finally:
        torch.set_num_threads(threads)
    lines = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    for line in lines:
        clients = line["clients"]
        assert len(clients) == 3 and all(len(c["group_counts"]) == 8 for c in clients)
        # The global metrics are those of the summed counts (the pooled predictions).
        total = sum_counts([c["group_counts"] for c in clients])
        assert line["group_counts"] == total
        expected = group_fairness(total)
        for name in GROUP_METRICS:
            assert line["metrics"][name] == pytest.approx(expected[name], abs=1e-12)
        assert line["metrics"]["group-acc"] == pytest.approx(line["metrics"]["acc-weighted-mean"])
        # Per client, from its own counts.
        for client in clients:
            own = defined_metrics(group_fairness(client["group_counts"]))
            assert {k: client[k] for k in GROUP_METRICS if k in client} == pytest.approx(own)
        weights = [w["weight"] for w in line["train"]["weights"]]
        assert sum(weights) == pytest.approx(1.0)
        assert "fairfed-global-metric" in line["train"]["diagnostics"]
    # FairFed moved the weights away from n_k / n (FedAvg's).
    sizes = np.array([c["num_examples"] for c in lines[0]["clients"]], dtype=float)
    assert not np.allclose(sorted(weights), sorted(sizes / sizes.sum()), atol=1e-3)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["strategy"] == "FairFed"
    assert summary["final_metrics"]["dp-diff"] == pytest.approx(lines[-1]["metrics"]["dp-diff"])
