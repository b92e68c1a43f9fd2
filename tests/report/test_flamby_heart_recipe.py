"""The flamby-heart recipe (issue 52): FLamby's budget, its rows, and the quick form end to end."""

from __future__ import annotations

import csv
import json

import pytest

from fairfl.cli import main
from fairfl.report.recipes import RECIPES
from fairfl.report.results import round_metrics
from fairfl.report.tables import COLUMN_SETS


def test_the_recipe_is_flambys_budget():
    recipe = RECIPES["flamby-heart"]
    for item in (
        "model=binary-logreg",
        "batch-size=4",
        "local-steps=100",
        "num-server-rounds=15",
        "lr=0.001",
        "fedprox:fedprox-mu=0.01",
        "fedadam:lr=0.01",
        "fedyogi:lr=0.0031623",  # 10^-2.5
    ):
        assert item in recipe.settings
    assert recipe.seeds == (42, 43, 44, 45, 46)
    assert recipe.rules is not None and recipe.rules[:4] == (
        "fedavg",
        "fedprox",
        "fedadam",
        "fedyogi",
    )


def test_the_quick_form_is_the_recipe_cut_short():
    full, quick = RECIPES["flamby-heart"], RECIPES["flamby-heart-quick"]
    assert quick.columns == full.columns == "flamby-heart"
    changed = set(full.settings) ^ set(quick.settings)
    assert {item.split("=")[0] for item in changed} == {
        "num-server-rounds",
        "local-steps",
        "evaluate-every",
    }


def test_the_columns_are_each_hospital_the_worst_and_the_pooled_accuracy():
    # (and Ditto's personal models' worst and pooled, n/a for the other rules)
    # Two hospitals' replies worked by hand: 3/4 and 1/2 of 4 and 2 test samples.
    entry = {
        "clients": [
            {"partition_id": 1, "eval_acc": 0.5, "eval_loss": 0.7, "num_examples": 2},
            {"partition_id": 0, "eval_acc": 0.75, "eval_loss": 0.5, "num_examples": 4},
        ]
    }
    metrics = round_metrics(entry)
    assert (metrics["acc-client-0"], metrics["acc-client-1"]) == (0.75, 0.5)
    assert metrics["acc-worst"] == 0.5
    assert metrics["acc-weighted-mean"] == pytest.approx(4 / 6)  # (3 + 1) correct of 6
    titles = [c.title for c in COLUMN_SETS["flamby-heart"]]
    assert titles == [
        "Centre 0",
        "Centre 1",
        "Centre 2",
        "Centre 3",
        "Worst centre",
        "Pooled test",
        "Personal worst centre",
        "Personal pooled test",
    ]


def test_flamby_heart_quick_runs_end_to_end(shared_data_root, tmp_path):
    settings = ["--set", f"data-root={shared_data_root}"]
    argv = ["compare", "--recipe", "flamby-heart-quick", "--out", str(tmp_path), "--no-progress"]
    assert main([*argv, *settings]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [run["status"] for run in manifest["runs"]] == ["ok", "ok"]
    with (tmp_path / "table_flamby-heart.csv").open() as handle:
        rows = {row["label"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"fedavg", "qffl"}
    report = (tmp_path / "report.md").read_text()
    assert "| FedAvg100 | paper | 73.1 | 71.9 | 65.0 | 64.0 | 59.5 ± 5.8 | 74.8 |" in report
    # Every hospital is evaluated on its FLamby test split: 104 + 89 + 16 + 45 samples.
    lines = (tmp_path / manifest["runs"][0]["dir"] / "rounds.jsonl").read_text().splitlines()
    clients = json.loads(lines[-1])["clients"]
    assert sorted(c["num_examples"] for c in clients) == [16, 45, 89, 104]
