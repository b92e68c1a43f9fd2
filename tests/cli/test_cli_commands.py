"""`fairfl run`, `fairfl verify` on every kind of folder, and the parser's light constants."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from blocked_extras import BLOCKED
from test_core_install import write_run

from fairfl import cli
from fairfl.cli import main

SMALL = ["num-partitions=3", "local-epochs=1", "batch-size=64"]


def test_parser_constants_match_the_modules_that_own_them():
    import importlib

    from fairfl.simulation import engine

    # fairfl.sweep re-exports a function named compare: import the modules by name.
    compare, recipes, results, tables, tune = (
        importlib.import_module(f"fairfl.{package}.{name}")
        for package, name in (
            ("sweep", "compare"),
            ("sweep", "recipes"),
            ("report", "results"),
            ("report", "tables"),
            ("sweep", "tune"),
        )
    )

    assert (cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_USAGE) == (
        engine.EXIT_OK,
        engine.EXIT_FAILED,
        engine.EXIT_USAGE,
    )
    assert (cli.ENGINES, cli.MAX_WORKERS) == (compare.ENGINES, compare.MAX_WORKERS)
    assert tuple(sorted(recipes.RECIPES)) == cli.RECIPE_NAMES
    assert tuple(sorted(tables.COLUMN_SETS)) == cli.COLUMN_SETS
    assert cli.TUNE_CRITERIA == tune.CRITERIA
    assert (cli.DEFAULT_CRITERION, cli.DEFAULT_TOLERANCE, cli.DEFAULT_VALIDATION_FRACTION) == (
        tune.DEFAULT_CRITERION,
        tune.DEFAULT_TOLERANCE,
        tune.DEFAULT_VALIDATION_FRACTION,
    )
    assert (cli.TUNING_JSON, cli.MANIFEST_FILE) == (tune.TUNING_JSON, results.MANIFEST_FILE)
    assert set(BLOCKED) <= set(cli.MODULE_EXTRAS)


def test_run_trains_in_process_and_prints_the_final_fairness_line(tmp_path, capsys):
    out = tmp_path / "q"
    argv = ["run", "--strategy", "qffl", "-c", "num-server-rounds=2", *SMALL, "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr()
    lines = printed.out.splitlines()
    assert lines[0].startswith("run ") and ": final client accuracy: mean " in lines[0]
    assert "worst-10% " in lines[0] and lines[1] == (
        f"results: {out / 'rounds.jsonl'} {out / 'summary.json'}"
    )
    assert "fairfl run: qffl on digits, 3 clients, 2 rounds" in printed.err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds"] == 2
    assert summary["config"]["strategy"] == "qffl" and summary["config"]["model"] == "mlp"
    assert main(["verify", str(out)]) == 0
    # The same out-dir again is refused before anything runs (it holds results).
    assert main(argv) == 2
    assert "already holds" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-c", "qfl-q=0.5"], "unknown key 'qfl-q' (did you mean 'qffl-q'?)"),
        (["-c", "num-partitions=5000"], "run config num-partitions must be <= 599"),
        (["-c", "seed=-1"], "run config seed must be in [0, 4294967295]"),
        (["--strategy", "qffl", "-c", "qffl-q=1e308"], "run config qffl-q (rule qffl) must be"),
        (["-c", "lr"], "-c: expected key=value, got 'lr'"),
        (["--torch-threads", "-1"], "--torch-threads must be >= 0, got -1"),
        (
            ["--strategy", "qffl", "-c", "ditto-lambda=1", "term-alpha=1", "--strict"],
            "qffl does not read ditto-lambda, term-alpha (another rule's keys",
        ),
    ],
)
def test_run_refuses_bad_config_with_one_line_and_exit_2(tmp_path, capsys, argv, message):
    assert main(["run", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out" / "rounds.jsonl").exists()


def test_a_key_the_rule_does_not_read_is_a_warning_naming_it(tmp_path, capsys):
    argv = ["run", "--strategy", "fedavg", "-c", "num-server-rounds=1", *SMALL]
    assert main([*argv, "qffl-q=2", "--quiet", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "fairfl run: warning: fedavg does not read qffl-q (another rule's key" in err


def test_run_trains_on_one_torch_thread_unless_told(tmp_path, monkeypatch):
    # As fairfl compare's workers: torch's default (a thread per core) made fairfl run
    # ~10-50x slower per round on a busy 2-core machine (benchmarks/bench_run_vs_compare.py).
    import torch

    chosen: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", chosen.append)
    base = ["run", "-c", "num-server-rounds=1", *SMALL, "--quiet"]
    assert main([*base, "--out", str(tmp_path / "default")]) == 0
    assert main([*base, "--torch-threads", "3", "--out", str(tmp_path / "three")]) == 0
    assert main([*base, "--torch-threads", "0", "--out", str(tmp_path / "torch")]) == 0
    assert chosen == [1, 3]


def test_verify_tells_missing_empty_and_other_folders_apart(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == (
        f"fairfl verify: error: {tmp_path / 'nowhere'} does not exist\n"
    )
    (tmp_path / "empty").mkdir()
    assert main(["verify", str(tmp_path / "empty")]) == 2
    assert "is empty: no run has written results there" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    assert main(["verify", str(tmp_path / "other")]) == 2
    assert "holds no run (no rounds.jsonl) and no comparison" in capsys.readouterr().err


def _comparison(folder: Path) -> None:
    runs = []
    for label in ("fedavg", "qffl"):
        write_run(folder / "runs" / label / "seed-0")
        runs.append({"label": label, "seed": 0, "dir": f"runs/{label}/seed-0", "status": "ok"})
    (folder / "manifest.json").write_text(json.dumps({"version": 1, "runs": runs}))


def test_verify_checks_every_run_of_a_comparison(tmp_path, capsys):
    _comparison(tmp_path / "cmp")
    assert main(["verify", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("fairfl verify: fedavg seed 0: ")
    assert out[1].startswith("fairfl verify: qffl seed 0: ")
    assert out[2] == f"fairfl verify: all 2 runs in {tmp_path / 'cmp'} intact"
    # An edited summary of one run fails the comparison, naming the run.
    summary_path = tmp_path / "cmp" / "runs" / "qffl" / "seed-0" / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["rounds"] = 3
    summary_path.write_text(json.dumps(summary))
    assert main(["verify", str(tmp_path / "cmp")]) == 1
    err = capsys.readouterr().err
    assert "qffl seed 0: " in err and "summary.json was edited after the run wrote it" in err
    assert err.endswith(f"1 of 2 runs in {tmp_path / 'cmp'} failed\n")


def test_verify_refuses_a_manifest_path_outside_the_comparison(tmp_path, capsys):
    _comparison(tmp_path / "cmp")
    shutil.copytree(tmp_path / "cmp" / "runs" / "fedavg" / "seed-0", tmp_path / "outside")
    manifest = json.loads((tmp_path / "cmp" / "manifest.json").read_text())
    manifest["runs"][0]["dir"] = "../outside"
    (tmp_path / "cmp" / "manifest.json").write_text(json.dumps(manifest))
    assert main(["verify", str(tmp_path / "cmp")]) == 1
    assert "'../outside' is not a folder inside" in capsys.readouterr().err


def test_dashboard_says_when_a_folder_does_not_exist(tmp_path, monkeypatch, capsys):
    import fairfl.dashboard as dashboard

    monkeypatch.setattr(dashboard.DashboardServer, "serve_forever", lambda self: None)
    assert main(["dashboard", str(tmp_path / "later"), "--port", "0"]) == 0
    printed = capsys.readouterr()
    assert f"{tmp_path / 'later'} does not exist (yet)" in printed.err
    assert printed.out.startswith("fairfl dashboard: http://127.0.0.1:")


@pytest.mark.integration
def test_run_through_flowers_engine_prints_the_final_fairness_line(tmp_path, capsys):
    from fairfl.simulation.engine import processes_naming

    home = tmp_path / "flwr-home"
    out = tmp_path / "out"
    argv = ["run", "--engine", "flower", "--flwr-home", str(home), "--out", str(out)]
    code = main([*argv, "-c", "num-server-rounds=1", "num-partitions=2", "local-epochs=1"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert ": final client accuracy: mean " in printed.out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["config"]["num-partitions"] == 2
    # one run id on screen, the summary's: Flower's (its SuperLink's) is not shown
    assert f"run {summary['run_id']}: started on Flower's simulation engine" in printed.out
    assert f"run {summary['run_id']}: final client accuracy: mean " in printed.out
    assert "Successfully started run" not in printed.out and "run_id `" not in printed.out
    assert not processes_naming(home)  # the SuperLink and Ray were stopped


def test_rules_fit_100_columns_and_show_the_runs_values(capsys):
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    # q-FFL's lr is the run's (0.1), not "None".
    assert "lr=0.1, qffl-q=0.1" in out and "lr=None" not in out


def test_one_rule_shows_its_paper_reports_and_keys(capsys):
    assert main(["rules", "qffl"]) == 0
    out = capsys.readouterr().out
    assert "Fair Resource Allocation in Federated Learning" in out and "ICLR 2020" in out
    assert "clients report: num-examples, loss-before-training" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert lines["qffl-q"].split()[1:] == ["0.1", ">=", "0;", "grid:", "0.01,", "0.1,", "1"]
    assert "> 0, or unset" in lines["lr"]
    assert main(["rules", "qfl"]) == 2
    assert "Did you mean 'qffl'?" in capsys.readouterr().err


def test_each_run_gets_its_own_default_folder_and_latest_points_at_the_newest(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--strategy", "fedavg", "-c", "num-server-rounds=1", *SMALL, "--quiet"]
    assert main(argv) == 0 and main(argv) == 0  # the second is not refused
    runs = sorted(p.name for p in (tmp_path / "outputs").iterdir() if not p.is_symlink())
    assert len(runs) == 2 and all(name.endswith("-fedavg") or "-fedavg-" in name for name in runs)
    latest = tmp_path / "outputs" / "latest"
    assert latest.is_symlink() and (latest / "summary.json").is_file()
    assert latest.resolve().name == max(
        runs, key=lambda n: (tmp_path / "outputs" / n).stat().st_mtime
    )
    # A run refused at its checks leaves no folder behind.
    assert main(["run", "-c", "seed=-1"]) == 2
    left = sorted(p.name for p in (tmp_path / "outputs").iterdir() if not p.is_symlink())
    assert left == runs
