"""fairfl report shows ε beside accuracy and fairness for runs with DP (issue #49)."""

import json

from fairfl.report.build import build_report
from fairfl.report.results import round_metrics


def write_private_run(folder, accuracies, epsilon):
    folder.mkdir(parents=True)
    entry = {
        "round": 1,
        "clients": [
            {"node_id": 1000 + k, "partition_id": k, "num_examples": 10, "eval_acc": a}
            for k, a in enumerate(accuracies)
        ],
        "train": {"weights": [], "diagnostics": {"dp-epsilon": epsilon, "dp-delta": 1e-5}},
    }
    (folder / "rounds.jsonl").write_text(json.dumps(entry) + "\n")


def test_round_metrics_carry_the_rounds_epsilon():
    entry = {
        "clients": [{"node_id": 1, "eval_acc": 0.5}],
        "train": {"diagnostics": {"dp-epsilon": 3.5}},
    }
    assert round_metrics(entry)["dp-epsilon"] == 3.5
    assert "dp-epsilon" not in round_metrics({"clients": [{"node_id": 1, "eval_acc": 0.5}]})


def test_table6_has_an_epsilon_column_with_the_mean_over_seeds(tmp_path):
    write_private_run(tmp_path / "runs" / "term" / "seed-0", [0.4, 0.6], 2.0)
    write_private_run(tmp_path / "runs" / "term" / "seed-1", [0.5, 0.7], 4.0)
    build_report(tmp_path)
    table = (tmp_path / "table6.md").read_text()
    header, _, row = table.splitlines()[:3]
    assert header.split("|")[-3].strip() == "ε"
    # Mean 3.00 ± population std 1.00, beside Jain and before the seeds.
    assert row.split("|")[-3].strip() == "3.00 ± 1.00"
    assert "dp-epsilon" in (tmp_path / "runs.csv").read_text().splitlines()[0]
