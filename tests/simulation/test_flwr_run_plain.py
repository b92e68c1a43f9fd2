"""Plain `flwr run .`, as Flower users type it, finishes on Flower's default federation.

With a fresh FLWR_HOME, `flwr run .` starts Flower's managed local SuperLink, whose
simulation runs 2 SuperNodes while the run config says num-partitions = 20: the ServerApp
runs on the 2 (one partition each). Asking for more SuperNodes than the simulation has
ends the run after node-wait-timeout with an error saying how to fix it.

The managed SuperLink is detached from `flwr run` and stays alive after it, so the
module's teardown finds every process that names this FLWR_HOME (command line or
environment) and stops it by PID. Ports: free ones through Flower's
FLWR_LOCAL_SUPERLINK_HTTP_API_PORT / FLWR_LOCAL_CONTROL_API_PORT, so `flwr run` never
reuses a local SuperLink someone else started on the default 39091.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairfl.simulation.engine import flower_env, free_port, processes_naming, stop_pids

ROOT = Path(__file__).resolve().parents[2]
FLWR = Path(sys.executable).parent / "flwr"


@pytest.fixture(scope="module")
def flower(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh FLWR_HOME and the environment `flwr run` gets; stops what it leaves behind."""
    home = tmp_path_factory.mktemp("plain") / "flwr-home"
    env = flower_env(home)
    env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] = str(free_port())
    env["FLWR_LOCAL_CONTROL_API_PORT"] = str(free_port())
    yield home, env
    stop_pids(processes_naming(home))
    assert not processes_naming(home), "processes left behind"


def flwr_run(env: dict[str, str], run_config: str, log: Path) -> subprocess.CompletedProcess[bytes]:
    """``flwr run . --stream -c <run_config>`` from the repo root, output into ``log``."""
    with log.open("wb") as out:
        return subprocess.run(
            [str(FLWR), "run", ".", "--stream", "-c", run_config],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
            check=False,
        )


@pytest.mark.integration
def test_plain_flwr_run_finishes(flower, tmp_path):
    home, env = flower
    out = tmp_path / "out"
    log = tmp_path / "flwr.log"
    completed = flwr_run(env, f"num-server-rounds=2 out-dir='{out}'", log)
    text = log.read_text(errors="replace")
    assert completed.returncode == 0, text[-5000:]
    assert (home / "local-superlink" / "state.db").exists()  # Flower's managed SuperLink
    rounds = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [1, 2]
    # Flower's default federation: 2 simulated SuperNodes, partitions 0 and 1 of 2.
    assert sorted(c["partition_id"] for c in rounds[-1]["clients"]) == [0, 1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 2
    assert summary["config"]["num-partitions"] == 2
    assert "num-supernodes=20" in text  # the warning says how to simulate 20 clients


@pytest.mark.integration
def test_too_few_simulated_supernodes_end_the_run(flower, tmp_path):
    _, env = flower
    out = tmp_path / "out"
    log = tmp_path / "flwr.log"
    flwr_run(
        env,
        f"num-server-rounds=2 out-dir='{out}' min-available-nodes=3 node-wait-timeout=3",
        log,
    )
    # `flwr run --stream` exits 0 whatever the run's status; the run itself failed.
    text = log.read_text(errors="replace")
    assert "only 2 of the 3 SuperNodes this run needs connected" in text, text[-5000:]
    assert "--federation-config 'num-supernodes=3'" in text
    assert not (out / "summary.json").exists()
