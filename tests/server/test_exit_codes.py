"""Honest outcome: every entry point exits non-zero on a failed run, with this run's summary.

One test per exit-code path of the ServerApp, the simulation runner
(``scripts/flwr_sim.py``, :func:`fairfl.simulation.engine_cli.main`) and the ``fairfl``
CLI, driven in process. The runner's paths through the real simulation engine are in
``tests/simulation/test_lifecycle.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from flwr.app import Context, Error, Message, RecordDict

from fairfl import cli
from fairfl._compat import server_task_identity
from fairfl.client.app import app as client_app
from fairfl.server.app import main as server_app_main
from fairfl.server.results import SUMMARY_FILE, SummaryError, summary_of_run
from fairfl.server.run import RunFailedError
from fairfl.simulation import engine, engine_cli, run_inprocess
from fairfl.simulation.engine import alive, stop_pids
from fairfl.simulation.inprocess import InMemoryGrid, node_configs_for

ROOT = Path(__file__).resolve().parents[2]
#: Two clients on digits, one local epoch: a run takes well under a second.
TINY = {"num-partitions": 2, "num-server-rounds": 2, "local-epochs": 1}


def no_training(instruction, reply):
    """Every train reply is lost (evaluations come back)."""
    return None if instruction.metadata.message_type == "train" else reply


def read_summary(out: Path) -> dict:
    return json.loads((out / SUMMARY_FILE).read_text())


def rounds_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------ the ServerApp body
def test_completed_run_writes_its_run_id_everywhere(tmp_path):
    outcome = run_inprocess({**TINY, "out-dir": str(tmp_path)})
    summary = read_summary(tmp_path)
    assert summary["status"] == "completed" and summary["error"] is None
    assert summary == outcome.summary
    assert len(summary["run_id"]) == 32  # uuid4 hex
    assert [line["run_id"] for line in rounds_of(tmp_path)] == [summary["run_id"]] * 2
    assert summary_of_run(tmp_path, summary["run_id"]) == summary


def test_run_that_trains_nothing_fails_with_a_failed_summary(tmp_path):
    with pytest.raises(
        RunFailedError, match=r"trained nothing: none of its 2 rounds aggregated a reply"
    ):
        run_inprocess({**TINY, "out-dir": str(tmp_path)}, reply_filter=no_training)
    summary = read_summary(tmp_path)
    assert summary["status"] == "failed" and "trained nothing" in summary["error"]
    assert summary["rounds"] == 2
    assert {line["run_id"] for line in rounds_of(tmp_path)} == {summary["run_id"]}


def test_run_whose_every_evaluation_is_lost_fails(tmp_path):
    def no_evaluation(instruction, reply):
        return None if instruction.metadata.message_type == "evaluate" else reply

    with pytest.raises(RunFailedError, match=r"evaluated nothing: no client evaluation"):
        run_inprocess({**TINY, "out-dir": str(tmp_path)}, reply_filter=no_evaluation)
    assert read_summary(tmp_path)["status"] == "failed"


def every_client_fails_round_one(instruction, reply):
    """Round 1: every ClientApp raises (as Ditto's step did without local-epochs)."""
    if (
        instruction.metadata.message_type == "train"
        and instruction.content["config"]["server-round"] == 1
    ):
        return Message(
            Error(code=0, reason="ValueError: config key 'lr' is missing"), reply_to=instruction
        )
    return reply


def test_a_round_where_no_reply_could_be_used_fails_the_run(tmp_path):
    """Issue 47, item 6: one of two rounds used no reply; the run completed and exited 0."""
    with pytest.raises(
        RunFailedError,
        match=r"failed 1 of its 2 rounds, more than max-failed-rounds=0: no client's train "
        r"reply could be used in round\(s\) 1 \(round 1: node \d+: error reply is an error: "
        r"ValueError: config key 'lr' is missing; node \d+: ",
    ):
        run_inprocess({**TINY, "out-dir": str(tmp_path)}, reply_filter=every_client_fails_round_one)
    summary = read_summary(tmp_path)
    assert summary["status"] == "failed" and "max-failed-rounds=0" in summary["error"]
    assert summary["failed_rounds"] == {"1": "none of the 2 clients' train replies could be used"}
    first, second = rounds_of(tmp_path)
    errors = first["failed"]["errors"]
    assert len(errors) == 2
    assert set(errors.values()) == {
        "error reply is an error: ValueError: config key 'lr' is missing"
    }
    assert "failed" not in second and second["train"]["accepted"] == 2


def test_max_failed_rounds_lets_a_run_with_that_many_failed_rounds_complete(tmp_path):
    outcome = run_inprocess(
        {**TINY, "out-dir": str(tmp_path), "max-failed-rounds": 1},
        reply_filter=every_client_fails_round_one,
    )
    assert outcome.summary["status"] == "completed"
    assert list(outcome.summary["failed_rounds"]) == ["1"]
    assert "failed" in rounds_of(tmp_path)[0]


def test_exception_in_a_round_is_recorded_then_raised(tmp_path):
    def crash_in_round_two(instruction, reply):
        if instruction.content["config"]["server-round"] == 2:
            raise OSError("disk gone in round 2")
        return reply

    with pytest.raises(OSError, match="disk gone in round 2"):
        run_inprocess({**TINY, "out-dir": str(tmp_path)}, reply_filter=crash_in_round_two)
    summary = read_summary(tmp_path)
    assert summary["status"] == "failed"
    assert summary["error"] == "OSError: disk gone in round 2"
    assert summary["rounds"] == 1  # round 1 finished and was recorded


def test_a_stale_summary_is_removed_and_never_taken_for_this_runs(tmp_path):
    (tmp_path / SUMMARY_FILE).write_text(json.dumps({"run_id": "earlier", "status": "completed"}))
    with pytest.raises(SummaryError, match=r"is from another run \(run_id 'earlier'\)"):
        summary_of_run(tmp_path, "mine")

    def crash_at_once(instruction, reply):
        raise RuntimeError("round 1 crashed")

    with pytest.raises(RuntimeError, match="round 1 crashed"):
        run_inprocess(
            {**TINY, "out-dir": str(tmp_path), "overwrite": True}, reply_filter=crash_at_once
        )
    summary = read_summary(tmp_path)
    assert summary["run_id"] != "earlier" and summary["status"] == "failed"
    with pytest.raises(SummaryError, match=r"wrote no summary: cannot read"):
        summary_of_run(tmp_path / "empty", "mine")


def test_server_app_raises_on_a_round_that_used_no_reply(tmp_path):
    # What makes flwr-serverapp exit non-zero, in flwr run and deployments alike.
    run_config = {**TINY, "out-dir": str(tmp_path)}
    grid = InMemoryGrid(
        client_app, node_configs_for(2), run_config, reply_filter=every_client_fails_round_one
    )
    context = Context(
        run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config
    )
    with server_task_identity(1), pytest.raises(RunFailedError, match="max-failed-rounds=0"):
        server_app_main(grid, context)


def test_server_app_raises_on_a_failed_run(tmp_path):
    """The exception is what makes Flower's flwr-serverapp exit non-zero (and mark the run
    failed); ``flwr run --stream`` itself still exits 0, hence the runner's summary check."""
    run_config = {**TINY, "out-dir": str(tmp_path)}
    grid = InMemoryGrid(client_app, node_configs_for(2), run_config, reply_filter=no_training)
    context = Context(
        run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config
    )
    with server_task_identity(1), pytest.raises(RunFailedError, match="trained nothing"):
        server_app_main(grid, context)


# ---------------------------------------------------------------- the simulation runner
def write_summary(out: Path, run_id: str, status: str = "completed", error: str | None = None):
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "run_id": run_id,
        "status": status,
        "error": error,
        "final_metrics": {"acc-mean": 0.5, "acc-worst-10": 0.25, "acc-std": 0.125},
    }
    (out / SUMMARY_FILE).write_text(json.dumps(summary))


@pytest.mark.parametrize(
    ("written", "flwr_code", "expected_code", "message"),
    [
        (("mine", "completed"), 0, 0, "run mine completed"),
        (("mine", "failed"), 0, 1, "run mine failed: RunFailedError: trained nothing"),
        (("earlier", "completed"), 0, 1, r"from another run \(run_id 'earlier'\)"),
        (None, 0, 1, "run mine wrote no summary"),
        (None, 3, 3, "run mine wrote no summary"),
        (("mine", "completed"), 3, 3, "flwr run exited with code 3"),
    ],
)
def test_runner_outcome_comes_from_this_runs_summary(
    tmp_path, written, flwr_code, expected_code, message
):
    if written is not None:
        write_summary(tmp_path, written[0], written[1], "RunFailedError: trained nothing")
    result = engine.run_outcome(tmp_path, "mine", flwr_code)
    assert result.code == expected_code
    assert result.summary is None or result.summary["run_id"] == "mine"
    assert re.search(message, result.message), result.message


def fake_simulate(tmp_path: Path, result_code: int, run_id: str = "mine"):
    def simulate(run_config, supernodes, flwr_home, cpus, timeout, *, app_dir, summary_path, **ray):
        assert summary_path == tmp_path / "out" / SUMMARY_FILE
        # no cluster asked for: a private Ray, default client resources
        assert ray == {"ray_address": None, "gpus_per_client": 0.0, "init_args": {}}
        return engine.run_outcome(summary_path.parent, run_id, result_code)

    return simulate


def run_main(monkeypatch, tmp_path, simulate) -> int:
    monkeypatch.setattr(engine_cli, "simulate", simulate)
    argv = ["--supernodes", "2", "--flwr-home", str(tmp_path / "home")]
    with pytest.raises(SystemExit) as exited:
        engine_cli.main([*argv, "-c", f"out-dir='{tmp_path / 'out'}'"])
    return int(exited.value.code)


def test_runner_prints_this_runs_summary_and_exits_0(monkeypatch, tmp_path, capsys):
    write_summary(tmp_path / "out", "mine")
    assert run_main(monkeypatch, tmp_path, fake_simulate(tmp_path, 0)) == 0
    assert capsys.readouterr().out == (
        "run mine: final client accuracy: mean 50.00 %, worst-10% 25.00 %, std 12.50\n"
    )


def test_runner_exits_1_and_does_not_print_an_earlier_runs_summary(monkeypatch, tmp_path, capsys):
    write_summary(tmp_path / "out", "earlier")
    assert run_main(monkeypatch, tmp_path, fake_simulate(tmp_path, 0)) == 1
    printed = capsys.readouterr()
    assert printed.out == ""
    assert "error: run mine wrote no summary" in printed.err and "50.00" not in printed.err


def test_runner_exits_1_on_a_failed_run(monkeypatch, tmp_path, capsys):
    write_summary(tmp_path / "out", "mine", "failed", "OSError: disk gone")
    assert run_main(monkeypatch, tmp_path, fake_simulate(tmp_path, 0)) == 1
    assert "error: run mine failed: OSError: disk gone" in capsys.readouterr().err


def test_runner_overwrite_adds_the_run_config_key(monkeypatch, tmp_path):
    seen = []

    def simulate(run_config, *args, summary_path, **kwargs):
        seen.append(run_config)
        return engine.run_outcome(summary_path.parent, "mine", 0)

    write_summary(tmp_path / "out", "mine")
    monkeypatch.setattr(engine_cli, "simulate", simulate)
    with pytest.raises(SystemExit) as exited:
        engine_cli.main(["-c", f"out-dir='{tmp_path / 'out'}'", "--overwrite"])
    assert exited.value.code == 0
    assert seen == [f"out-dir='{tmp_path / 'out'}' overwrite=true"]


def test_runner_gives_124_past_its_timeout_and_stops_what_it_started(monkeypatch, tmp_path):
    """The SuperLink and ``flwr run`` are stood in for by sleeping processes."""
    started = []
    original_start = engine._start

    def start(command, into, **options):
        sleeper = original_start([sys.executable, "-c", "import time; time.sleep(120)"], into)
        started.append(sleeper.pid)
        return sleeper

    monkeypatch.setattr(engine, "_start", start)
    monkeypatch.setattr(engine, "wait_for_port", lambda port, process: None)
    result = engine.simulate(
        f"out-dir='{tmp_path / 'out'}'", 2, tmp_path / "home", timeout=0.5, app_dir=ROOT
    )
    assert result.code == 124 and result.message == "flwr run took over 0.5 s"
    assert len(started) == 2 and not any(alive(pid) for pid in started)


def test_runner_exits_2_on_a_bad_run_config(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        engine_cli.main(["--flwr-home", str(tmp_path), "-c", "out-dir='unterminated"])
    assert exited.value.code == 2
    assert "error: --run-config" in capsys.readouterr().err


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_runner_stopped_by_a_signal_exits_128_plus_signum(
    monkeypatch, tmp_path, capsys, signum, code
):
    def stopped(*args, **kwargs):
        os.kill(os.getpid(), signum)
        raise AssertionError("the signal handler raises before this line")

    assert run_main(monkeypatch, tmp_path, stopped) == code
    err = capsys.readouterr().err
    assert f"stopped by {signal.Signals(signum).name}" in err
    assert "no round finished, so there is no checkpoint" in err
    # The handlers are restored afterwards.
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# ------------------------------------------------------------------------ the fairfl CLI
def compare_argv(out: Path) -> list[str]:
    return [
        "compare",
        "--rules",
        "fedavg",
        "--set",
        "num-partitions=2",
        "num-server-rounds=1",
        "local-epochs=1",
        "--out",
        str(out),
        "--no-progress",
    ]


def test_cli_exits_1_when_a_run_of_the_comparison_fails(monkeypatch, tmp_path, capsys):
    import fairfl.simulation

    def failing_run(run_config):
        raise RunFailedError("the run trained nothing")

    monkeypatch.setattr(fairfl.simulation, "run_inprocess", failing_run)
    assert cli.main(compare_argv(tmp_path / "cmp")) == 1
    err = capsys.readouterr().err
    assert "fairfl compare: 1 of 1 runs failed" in err
    error_file = tmp_path / "cmp" / "runs" / "fedavg" / "seed-0" / "error.txt"
    assert "RunFailedError: the run trained nothing" in error_file.read_text()


#: A ``fairfl compare`` whose run starts a child process, then gets SIGTERM.
STOPPED_COMPARE = """
import os, signal, subprocess, sys, time
from fairfl import cli
from fairfl._compat import server_task_identity
from fairfl.client.app import app as client_app

def compare(**kwargs):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print(child.pid, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)

import importlib
# the CLI imports it when the command runs (fairfl.sweep re-exports the function
# under the module's name, so the module is reached through importlib)
importlib.import_module("fairfl.sweep.compare").compare = compare
sys.exit(cli.main(sys.argv[1:]))
"""


def test_cli_stopped_exits_143_and_stops_what_it_started(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-c", STOPPED_COMPARE, *compare_argv(tmp_path / "cmp")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 143, completed.stderr[-2000:]
    child = int(completed.stdout.split()[0])
    survived = alive(child)
    if survived:
        stop_pids([child])
    assert not survived
    assert "fairfl compare: stopped by SIGTERM; stopping every process it started" in (
        completed.stderr
    )
