"""`fairfl report` on small hand-written results: tables, plots and report.md."""

import json
from pathlib import Path

import pytest

from fairfl.cli import main
from fairfl.report.build import build_report
from fairfl.report.results import load_runs, weight_matrix


def write_run(folder: Path, accuracies_by_round, weights_by_round=None, config=None):
    """A hand-written rounds.jsonl: clients by partition id, accuracies as fractions."""
    folder.mkdir(parents=True)
    lines = []
    for index, accuracies in enumerate(accuracies_by_round, start=1):
        entry = {
            "round": index,
            "clients": [
                {
                    "node_id": 1000 + pid,
                    "partition_id": pid,
                    "num_examples": 10 + pid,
                    "eval_acc": acc,
                    "eval_loss": 1.0 - acc,
                }
                for pid, acc in enumerate(accuracies)
            ],
        }
        if weights_by_round is not None:
            entry["train"] = {
                "weights": [
                    {"node_id": 1000 + pid, "partition_id": pid, "weight": w}
                    for pid, w in enumerate(weights_by_round[index - 1])
                ]
            }
        lines.append(json.dumps(entry))
    (folder / "rounds.jsonl").write_text("\n".join(lines) + "\n")
    if config is not None:
        (folder / "summary.json").write_text(json.dumps({"config": config}))


@pytest.fixture
def results(tmp_path):
    # FedAvg, final round 0.4, 0.6, 0.8, 0.2 (mean 0.5); Semi-VRed 0.45, 0.55, 0.8, 0.15.
    write_run(
        tmp_path / "runs" / "fedavg" / "seed-0",
        [[0.1, 0.1, 0.1, 0.1], [0.4, 0.6, 0.8, 0.2]],
        [[0.25] * 4, [0.25] * 4],
    )
    write_run(
        tmp_path / "runs" / "semivred" / "seed-0",
        [[0.2, 0.2, 0.2, 0.2], [0.45, 0.55, 0.8, 0.15]],
        [[0.4, 0.2, 0.2, 0.2], [0.5, 0.1, 0.1, 0.3]],
        config={"strategy": "semivred", "seed": 0},
    )
    return tmp_path


def test_load_runs_finds_runs_by_folder_without_manifest(results):
    runs = load_runs(results)
    assert [(r.label, r.rule, r.seed) for r in runs] == [
        ("fedavg", "fedavg", 0),
        ("semivred", "semivred", 0),
    ]
    assert runs[1].final_accuracies() == pytest.approx({0: 0.45, 1: 0.55, 2: 0.8, 3: 0.15})
    rounds, clients, weights = weight_matrix(runs[1])
    assert rounds.tolist() == [1, 2] and clients == [0, 1, 2, 3]
    assert weights[:, 1].tolist() == [0.5, 0.1, 0.1, 0.3]


def test_build_report_writes_tables_plots_and_report(results):
    report = build_report(results)
    # Table 6, FedAvg: mean 50, pooled over the 10 + 11 + 12 + 13 = 46 test samples
    # (4 + 6.6 + 9.6 + 2.6) / 46 = 22.8 / 46 = 49.57 %, population std sqrt(500) = 22.36,
    # worst 20, worst 10% and 20% (1 client of 4) 20, best 10% 80; Jain (Σa)² / (n Σa²)
    # of 0.2, 0.4, 0.6, 0.8 = 2² / (4 · 1.2) = 0.833.
    table6 = (results / "table6.md").read_text()
    assert (
        "| fedavg | 50.00 | 49.57 | 22.36 | 20.00 | 20.00 | 20.00 | 80.00 | 0.833 | 1/1 |" in table6
    )
    assert (results / "tradeoff.png").stat().st_size > 0
    # Semi-VRed: mean 48.75, pooled (4.5 + 6.05 + 9.6 + 1.95) / 46 = 22.1 / 46 = 48.04 %.
    # Table 2 against FedAvg: 50 % of the suffering clients improved (mean change 0),
    # 50 % of the well-performing ones degraded (-2.50); pooled -0.7 / 46 = -1.52 points.
    assert "| semivred | 48.75 | 48.04 |" in table6
    table2 = (results / "table2.md").read_text()
    assert "| semivred | 50.00 (+0.00) | 50.00 (-2.50) | -1.25 | -1.52 | 2 / 2 | 1 |" in table2
    assert table6.startswith("| Rule | Mean (%) | Pooled (%) | Std (%) | Worst (%) |")
    # The CSV files are records: fractions (Semi-VRed's mean 0.4875).
    table6_csv = (results / "table6.csv").read_text().splitlines()
    assert table6_csv[0].startswith("rule,label,seeds,seeds_ok,acc-mean mean,acc-mean std")
    assert float(table6_csv[2].split(",")[4]) == pytest.approx(0.4875)
    runs_csv = (results / "runs.csv").read_text().splitlines()
    assert runs_csv[0].startswith("label,rule,seed,rounds,status,acc-mean")
    assert runs_csv[2].startswith("semivred,semivred,0,2,ok,")
    assert float(runs_csv[2].split(",")[5]) == pytest.approx(0.4875)
    for name in ("curves.png", "distribution.png", "weights.png"):
        assert (results / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (results / name).stat().st_size < 200_000
    text = (results / "report.md").read_text()
    for link in ("table6.csv", "table2.csv", "runs.csv", "curves.png", "weights.png"):
        assert f"({link})" in text
    assert "[seed 0](runs/semivred/seed-0/rounds.jsonl)" in text
    assert "min 10, median 12, max 13" in text  # test samples per client
    assert report.baseline == "fedavg"
    assert "weights.png" in report.files


def test_report_command_rebuilds_from_saved_results(results, capsys):
    assert main(["report", str(results)]) == 0
    out = capsys.readouterr().out
    assert "| fedavg | 50.00 | 49.57 | 22.36 |" in out
    assert (results / "report.md").is_file()


def test_report_with_unknown_baseline_is_an_error(results, capsys):
    assert main(["report", str(results), "--baseline", "nope"]) == 2
    assert "baseline must be one of ['fedavg', 'semivred'], got 'nope'" in capsys.readouterr().err


def test_report_of_an_empty_folder_is_an_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no manifest.json and no rounds.jsonl below" in capsys.readouterr().err


def test_failed_run_is_reported_not_fatal(results):
    failed = results / "runs" / "afl" / "seed-0"
    failed.mkdir(parents=True)
    (failed / "error.txt").write_text("Traceback ...\nRuntimeError: diverged\n")
    (failed / "rounds.jsonl").write_text("")
    build_report(results)
    assert "| afl | - | - | - | - | - | - | - | - | 0/1 |" in (results / "table6.md").read_text()
    assert "- `afl` seed 0: RuntimeError: diverged" in (results / "report.md").read_text()


def test_malformed_rounds_file_names_file_and_line(tmp_path):
    folder = tmp_path / "runs" / "fedavg" / "seed-0"
    folder.mkdir(parents=True)
    (folder / "rounds.jsonl").write_text('{"round": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"rounds.jsonl:2 is not valid JSON"):
        load_runs(tmp_path)


def test_gzipped_rounds_are_read_and_linked(results):
    from fairfl.report.results import compress_rounds

    compress_rounds(results / "runs" / "semivred" / "seed-0")
    assert not (results / "runs" / "semivred" / "seed-0" / "rounds.jsonl").exists()
    runs = load_runs(results)
    assert runs[1].final_accuracies() == pytest.approx({0: 0.45, 1: 0.55, 2: 0.8, 3: 0.15})
    build_report(results)
    assert "[seed 0](runs/semivred/seed-0/rounds.jsonl.gz)" in (results / "report.md").read_text()
