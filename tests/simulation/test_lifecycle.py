"""The simulation runner through Flower's real simulation engine: failure and SIGTERM.

``scripts/flwr_sim.py`` starts a SuperLink, which starts the SuperExec, the simulation
and Ray. A failed run exits 1 although ``flwr run`` exits 0; SIGTERM stops the run,
leaves the checkpoint of the last finished round and no process behind, checked by PID.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairfl.server.checkpoint import load_checkpoint
from fairfl.simulation.engine import alive, descendants, processes_naming, stop_pids

ROOT = Path(__file__).resolve().parents[2]
RUNNER = [sys.executable, str(ROOT / "scripts" / "flwr_sim.py"), "--supernodes", "2"]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.integration
def test_failed_run_exits_1_and_prints_no_summary(tmp_path):
    """Every client fails to load its data (MNIST absent, no download): nothing trains."""
    out = tmp_path / "out"
    run_config = (
        f"dataset='mnist' data-root='{tmp_path / 'no-data'}' download=false "
        f"num-partitions=2 num-server-rounds=1 out-dir='{out}'"
    )
    home = tmp_path / "flwr-home"
    try:
        completed = subprocess.run(
            [*RUNNER, "--flwr-home", str(home), "-c", run_config],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        stop_pids(processes_naming(home))
    assert completed.returncode == 1, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "final client accuracy" not in completed.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert f"error: run {summary['run_id']} failed: " in completed.stderr
    assert "trained nothing" in completed.stderr
    assert not processes_naming(home)


@pytest.mark.integration
def test_sigterm_stops_the_run_and_leaves_no_process(tmp_path):
    out = tmp_path / "out"
    home = tmp_path / "flwr-home"
    run_config = f"num-partitions=2 num-server-rounds=200 local-epochs=1 out-dir='{out}'"
    runner = subprocess.Popen(
        [*RUNNER, "--flwr-home", str(home), "-c", run_config],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    family: list[int] = []
    try:
        deadline = time.monotonic() + 300
        rounds = out / "rounds.jsonl"
        while not (rounds.is_file() and rounds.read_text().count("\n") >= 1):
            assert runner.poll() is None, runner.communicate()
            assert time.monotonic() < deadline, "round 1 did not finish in 300 s"
            time.sleep(0.5)
        # Every process of the run, before the signal: the runner's tree and the
        # processes that left it but carry this run's FLWR_HOME (Ray's daemons).
        family = sorted({*descendants(runner.pid), *processes_naming(home)} - {runner.pid})
        names = " ".join(command_line(pid) for pid in family)
        assert "flower-superlink" in names and "ray" in names, names
        runner.send_signal(signal.SIGTERM)
        _, stderr = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            stop_pids([runner.pid])
            runner.wait(timeout=30)
        stop_pids(processes_naming(home))
    assert runner.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    survivors = [(pid, command_line(pid)) for pid in family if alive(pid)]
    assert survivors == []
    assert not processes_naming(home)
    checkpoint = load_checkpoint(out / "checkpoint.npz")
    assert checkpoint.server_round >= 1
    assert f"checkpoint after round {checkpoint.server_round}" in stderr
    assert "stopped by SIGTERM" in stderr
