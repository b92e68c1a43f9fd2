"""The flamby-heart recipe (issue 52): FLamby's budget, its rows, and the quick form end to end."""

from __future__ import annotations

import csv
import json

import pytest

from fairfl.cli import main
from fairfl.report.results import round_metrics
from fairfl.report.tables import COLUMN_SETS
from fairfl.sweep.recipes import RECIPES


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


def test_the_answer_is_computed_from_the_table_and_holds_personal_models_to_fedavg():
    from fairfl.report.build import question_markdown
    from fairfl.report.tables import TABLE6_COLUMNS, Stat, SummaryRow

    def row(label: str, worst: list[float], pooled: list[float], **personal: list[float]):
        stats = {"acc-worst": Stat.of(worst), "acc-weighted-mean": Stat.of(pooled)}
        stats |= {f"personal-{key}": Stat.of(v) for key, v in personal.items()}
        return SummaryRow(label, label.split("[")[0], (1, 2), (1, 2), stats)

    summary = [
        row("fedavg", [0.60, 0.58], [0.70, 0.70]),  # worst 59, pooled 70
        row("clear", [0.70, 0.72], [0.71, 0.71]),  # 71 ± 1: clear of 67.6, keeps (+1)
        row("loses", [0.69, 0.69], [0.69, 0.69]),  # lifts, pooled -1
        row(  # global 59 / 70: no; personal 68 ± 1 / 71: lifts within 1 sd, keeps
            "ditto",
            [0.58, 0.60],
            [0.70, 0.70],
            **{"acc-worst": [0.67, 0.69], "acc-weighted-mean": [0.71, 0.71]},
        ),
    ]
    by_title = {c.title: c for c in (*TABLE6_COLUMNS, *COLUMN_SETS["flamby-heart"])}
    question = next(q for q in RECIPES["flamby-heart"].reference if q["kind"] == "question")
    text = question_markdown(question, summary, by_title, "fedavg")
    assert "**Yes** for 2 of 5 rows" in text
    assert "`clear` (global model: worst 71.00 ± 1.00" in text
    assert "`ditto` (personal model: worst 68.00 ± 1.00" in text
    lines = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in text.splitlines()}
    assert "| yes, clear | yes (+1.00) |" in lines[("clear", "global")]
    assert "| yes, clear | no (-1.00) |" in lines[("loses", "global")]
    assert "| yes, within 1 sd | yes (+1.00) |" in lines[("ditto", "personal")]
    assert "| no | yes (+0.00) |" in lines[("fedavg", "global")]
    # Highest worst first.
    order = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")]
    assert order[2:4] == ["clear", "loses"]  # after the header and its rule
