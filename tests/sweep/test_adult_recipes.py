"""The two UCI Adult recipes (issue 52) run end to end in their quick forms on the real files."""

import json
import math

import pytest

from fairfl.cli import main
from fairfl.sweep.recipes import RECIPES


def run_recipe(name, out, data_root):
    settings = ["--set", f"data-root={data_root}"]
    code = main(["compare", "--recipe", name, "--out", str(out), "--no-progress", *settings])
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert [run["status"] for run in manifest["runs"]] == ["ok"] * len(manifest["runs"])
    return manifest


def last_round(out, run):
    lines = (out / run["dir"] / "rounds.jsonl").read_text().splitlines()
    return json.loads(lines[-1])


def last_metrics(out, run):
    return last_round(out, run)["metrics"]


@pytest.mark.parametrize("name", ["qffl-adult", "fairfed-adult"])
def test_the_quick_form_is_the_recipe_cut_short(name):
    full, quick = RECIPES[name], RECIPES[f"{name}-quick"]
    assert quick.rules == full.rules and quick.columns == full.columns
    assert quick.seeds == (0,) and len(full.seeds) == 5
    changed = set(full.settings) ^ set(quick.settings)
    assert {item.split("=")[0] for item in changed} <= {"num-server-rounds", "evaluate-every"}


def test_qffl_adult_quick_runs_afls_two_clients(shared_data_root, tmp_path):
    manifest = run_recipe("qffl-adult-quick", tmp_path, shared_data_root)
    assert sorted(v["label"] for v in manifest["variants"]) == [
        "afl",
        "fedavg",
        "qfedsgd[qffl-q=2]",
        "qfedsgd[qffl-q=5]",
    ]
    for run in manifest["runs"]:
        clients = {c["partition_id"]: c for c in last_round(tmp_path, run)["clients"]}
        # adult.test's rows without a '?': 169 PhDs and 14,891 others.
        assert {k: c["num_examples"] for k, c in clients.items()} == {0: 169, 1: 14_891}
        assert all(0 <= c["eval_acc"] <= 1 for c in clients.values())
    report = (tmp_path / "report.md").read_text()
    assert "Hu, Shaloudegi, Zhang and Yu (IEEE TNSE 2022), Table 7" in report
    assert "| AFL | paper | 83.26±0.01 | 77.90±0.00 | 83.32±0.01 |" in report


def test_fairfed_adult_quick_reports_the_group_gaps(shared_data_root, tmp_path):
    manifest = run_recipe("fairfed-adult-quick", tmp_path, shared_data_root)
    assert {run["rule"] for run in manifest["runs"]} == {"fedavg", "fairfed"}
    for run in manifest["runs"]:
        metrics = last_metrics(tmp_path, run)
        assert metrics["num-clients"] == 5
        for key in ("group-acc", "dp-diff", "eop-diff"):
            assert math.isfinite(metrics[key])
        # Adult's income gap between the sexes shows in any model trained on it.
        assert metrics["dp-diff"] > 0.05
    assert "| Rule | Accuracy (%) | DP gap (%) |" in (tmp_path / "report.md").read_text()
