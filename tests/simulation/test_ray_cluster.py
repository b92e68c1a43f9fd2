"""Flower's simulation on a Ray cluster fairfl did not start: two Ray nodes on loopback.

A Ray head (127.0.0.2) and a second Ray node (127.0.0.3), each with one CPU and a
resource of its own, are started as ``ray start --block`` in sessions of their own;
``scripts/flwr_sim.py --ray-address`` runs a federation on them. The GCS's actor table
must show ClientApp actors on both nodes, the results must equal the in-process runner's on
the same config (which ``test_simulation_engine`` also checks for a private Ray), the
cluster is recorded beside the results, and every Ray process started here is stopped by
its process group. Addresses stay inside 127.0.0.0/8: Ray rewrites 127.0.0.1 to the
host's outward address, so the nodes use 127.0.0.2 and 127.0.0.3.

The same cluster (one per module: starting it costs about a minute here) runs ``fairfl
compare --engine ray``: runs as Ray tasks on both nodes, a Ray worker killed mid-run
(its PID read from the GCS's task events) retried by Ray, every run's hash chain intact
and each run's rounds and final model equal to ``--engine inprocess``'s byte for byte.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fairfl.simulation import run_inprocess
from fairfl.simulation.engine import CLUSTER_FILE, federation_config, free_port, parse_init_args

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"
HEAD, WORKER = "127.0.0.2", "127.0.0.3"
# The config of test_simulation_engine.test_flwr_run_matches_inprocess_runner.
CONFIG = {"num-partitions": 4, "num-server-rounds": 2, "lr": 0.1, "seed": 3}


def overrides(config: dict) -> str:
    return " ".join(f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}" for k, v in config.items())


def test_federation_config_leaves_cluster_resources_to_an_attached_cluster():
    assert federation_config(4, 1) == "num-supernodes=4 client-resources-num-cpus=1"
    assert federation_config(4, 2, 0.25, {"num_cpus": 8}) == (
        "num-supernodes=4 client-resources-num-cpus=2 client-resources-num-gpus=0.25 "
        "init-args-num-cpus=8"
    )
    assert federation_config(2, 1, init_args={"logging_level": 30}, attached=True).endswith(
        "init-args-logging-level=30"
    )
    for key in ("num_cpus", "num-gpus"):
        with pytest.raises(ValueError, match=f"init arg {key} cannot be set when attaching"):
            federation_config(2, 1, init_args={key: 1}, attached=True)
    with pytest.raises(ValueError, match="non-negative GPUs"):
        federation_config(2, 1, -0.5)


def test_init_args_are_toml_scalars():
    assert parse_init_args(["num_cpus=4", "log_to_driver=false", "x='a b'", "level=INFO"]) == {
        "num_cpus": 4,
        "log_to_driver": False,
        "x": "a b",
        "level": "INFO",
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_init_args(["num_cpus"])


def test_cluster_owned_init_args_fail_the_launcher_before_anything_starts(tmp_path):
    """Ray would fail such a run while ``flwr run --stream`` exits 0: refused up front."""
    started = time.monotonic()
    completed = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "flwr_sim.py"),
            "--ray-address",
            f"{HEAD}:1",  # nothing listens there: the check must come first
            "--init-arg",
            "num_cpus=2",
            "--flwr-home",
            str(tmp_path / "flwr-home"),
            "-c",
            overrides({"out-dir": str(tmp_path / "out")}),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 2, completed.stderr
    assert "init arg num_cpus cannot be set when attaching to a Ray cluster" in completed.stderr
    assert time.monotonic() - started < 60 and not (tmp_path / "flwr-home").exists()


def test_an_address_where_no_cluster_answers_fails_at_once_naming_it(tmp_path, capsys):
    """``ray.init`` retried a dead address for minutes; a wrong address fails in seconds."""

    from fairfl.cli import main
    from fairfl.simulation.engine import check_ray_address

    with socket.socket() as listening:
        listening.bind((HEAD, 0))
        dead = f"{HEAD}:{listening.getsockname()[1]}"  # bound, never listening: refused
    check_ray_address("auto")  # Ray's own lookups are left to Ray
    with pytest.raises(ValueError, match=rf"no Ray cluster answers at {dead} \(--ray-address"):
        check_ray_address(dead)
    with pytest.raises(ValueError, match=r"'127\.0\.0\.2' is not host:port"):
        check_ray_address(HEAD)
    started = time.monotonic()
    code = main(
        ["compare", *SWEEP, "--engine", "ray", "--ray-address", dead, "--out", str(tmp_path)]
    )
    assert code == 2 and f"no Ray cluster answers at {dead}" in capsys.readouterr().err
    assert time.monotonic() - started < 30
    launcher = [sys.executable, str(ROOT / "scripts" / "flwr_sim.py"), "--ray-address", dead]
    launched = subprocess.run(
        [*launcher, "--flwr-home", str(tmp_path / "flwr-home")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert launched.returncode == 2 and f"no Ray cluster answers at {dead}" in launched.stderr
    assert not (tmp_path / "flwr-home").exists()  # refused before anything started


LAUNCHER = [sys.executable, str(ROOT / "scripts" / "flwr_sim.py")]
SWEEP_ARGS = ["compare", "--rules", "fedavg", "qffl", "--seeds", "1", "--engine", "ray"]


class _NeverAnswers:
    """A TCP listener on loopback that accepts connections and never says a word."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind((HEAD, 0))
        self.socket.listen()
        self.address = f"{HEAD}:{self.socket.getsockname()[1]}"

    def close(self) -> None:
        self.socket.close()


class _AnswersHttp:
    """An HTTP server on loopback (in a thread of this process)."""

    def __init__(self) -> None:
        self.server = http.server.HTTPServer((HEAD, 0), _QuietHandler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.address = f"{HEAD}:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


class _QuietHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.parametrize("service", [_NeverAnswers, _AnswersHttp])
def test_an_address_where_another_service_listens_is_refused_in_seconds(tmp_path, capsys, service):
    # Issue 47: a TCP connect was the whole check, so ray.init then hung past 300 s on a
    # silent listener, or failed after ~35 s with Ray's traceback on another service.
    from fairfl.cli import main
    from fairfl.simulation.engine import check_ray_address

    listener = service()
    home = tmp_path / "flwr-home"
    try:
        started = time.monotonic()
        with pytest.raises(ValueError, match=rf"no Ray cluster answers at {listener.address} "):
            check_ray_address(listener.address)
        assert time.monotonic() - started < 10
        code = main(
            [*SWEEP_ARGS, "--ray-address", listener.address, "--out", str(tmp_path / "out")]
        )
        err = capsys.readouterr().err
        assert code == 2 and f"no Ray cluster answers at {listener.address}" in err
        launched = subprocess.run(
            [*LAUNCHER, "--ray-address", listener.address, "--flwr-home", str(home)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        listener.close()
    assert launched.returncode == 2
    assert launched.stderr.strip().splitlines() == [
        next(line for line in launched.stderr.splitlines() if listener.address in line)
    ]
    assert not (tmp_path / "flwr-home").exists()  # refused before anything started


def _start_node(arguments: list[str], log: Path) -> subprocess.Popen[bytes]:
    # Task events reach the GCS every 100 ms instead of Ray's 1 s: the killer below reads a
    # running task's worker PID from them while the run still has rounds to go.
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_task_events_report_interval_ms": "100",
    }
    env.pop("RAY_ADDRESS", None)
    with log.open("wb") as handle:
        return subprocess.Popen(
            [str(RAY), "start", "--block", "--disable-usage-stats", *arguments],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its daemons share this group: stopped together
        )


def _group_alive(process: subprocess.Popen[bytes]) -> bool:
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if _group_alive(process):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    for process in processes:
        while _group_alive(process) and time.monotonic() < deadline:
            time.sleep(0.5)
        if _group_alive(process):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def _wait_started(process: subprocess.Popen[bytes], log: Path, deadline: float) -> None:
    """Wait for ``ray start``'s own "Ray runtime started." line (cheaper than a driver)."""
    while "Ray runtime started." not in log.read_text(errors="replace"):
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        time.sleep(1)


_ACTOR_NODES = """
import json, sys
import ray
from ray._private.state import actors
ray.init(address=sys.argv[1], logging_level="ERROR")
print(json.dumps([a["Address"]["NodeID"] for a in actors().values()
                  if a["ActorClassName"] == sys.argv[2]]))
"""


def actor_nodes(address: str, class_name: str) -> list[str]:
    """Node ids of the cluster's actors of ``class_name``, finished ones included.

    Read from the GCS's actor table through a driver: Ray's state API
    (``ray.util.state``) is served by the dashboard, which needs ``ray[default]`` and
    failed to start within Ray's 30 s module timeout on a loaded 2-core machine.
    """
    probe = subprocess.run(
        [sys.executable, "-c", _ACTOR_NODES, address, class_name],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return list(json.loads(probe.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory) -> Iterator[str]:
    """Two Ray nodes on loopback; the head's GCS address (one cluster for the module)."""
    tmp_path = tmp_path_factory.mktemp("ray-nodes")
    # Ray's socket paths must stay short: a temp dir of its own under /tmp.
    temp = Path("/tmp") / f"ffray-{uuid.uuid4().hex[:8]}"
    port = free_port()
    address = f"{HEAD}:{port}"
    started: list[subprocess.Popen[bytes]] = []
    try:
        started.append(
            _start_node(
                [
                    "--head",
                    f"--node-ip-address={HEAD}",
                    f"--port={port}",
                    "--num-cpus=1",
                    '--resources={"fairfl-node-a": 1}',
                    f"--temp-dir={temp}",
                    "--include-dashboard=false",
                ],
                tmp_path / "ray-head.log",
            )
        )
        deadline = time.monotonic() + 600  # generous: a loaded 2-core machine
        _wait_started(started[0], tmp_path / "ray-head.log", deadline)
        started.append(
            _start_node(
                [
                    f"--address={address}",
                    f"--node-ip-address={WORKER}",
                    "--num-cpus=1",
                    '--resources={"fairfl-node-b": 1}',
                ],
                tmp_path / "ray-worker.log",
            )
        )
        _wait_started(started[1], tmp_path / "ray-worker.log", deadline)
        yield address
    finally:
        _stop(started)
        assert not any(_group_alive(p) for p in started)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.integration
def test_a_federation_runs_on_both_nodes_of_an_attached_cluster(tmp_path, ray_cluster):
    address = ray_cluster
    out = tmp_path / "out"
    completed = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "flwr_sim.py"),
            "--ray-address",
            address,
            "--supernodes",
            "4",
            "--flwr-home",
            str(tmp_path / "flwr-home"),
            "-c",
            overrides({**CONFIG, "out-dir": str(out)}),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    # the cluster is recorded beside the results
    cluster = json.loads((out / CLUSTER_FILE).read_text())
    assert cluster["cpus"] == 2 and sorted(n["ip"] for n in cluster["nodes"]) == [HEAD, WORKER]
    # the GCS's actor table: the ClientApp actors ran on both nodes
    placed = actor_nodes(address, "ClientAppActor")
    assert set(placed) == {n["node_id"] for n in cluster["nodes"]}, placed
    # the same results as in-process (and so as on a private Ray: test_simulation_engine)
    local = run_inprocess({**CONFIG, "out-dir": str(tmp_path / "local")})
    simulated = np.load(out / "final_model.npz")
    for key, array in local.arrays.items():
        # node ids differ between runtimes, so the float64 sums run in another order
        np.testing.assert_allclose(simulated[key], array.numpy(), rtol=0, atol=1e-6)
    last = json.loads((out / "rounds.jsonl").read_text().splitlines()[-1])
    local_last = json.loads((tmp_path / "local" / "rounds.jsonl").read_text().splitlines()[-1])
    assert {c["partition_id"]: c["eval_acc"] for c in last["clients"]} == {
        c["partition_id"]: c["eval_acc"] for c in local_last["clients"]
    }
    leftovers = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path / "flwr-home") not in leftovers


# --------------------------------------------------------------------------- sweeps

# Two runs, one per node's CPU. A digits round takes about 0.2 s on an idle machine, so 3
# rounds ended before the killer saw the task (CI, 2026-11-28): 40 rounds leave it about
# 8 s after the first round is written, on an idle machine as on a loaded one.
SWEEP = ["--rules", "fedavg", "qffl", "--seeds", "1"]
SWEEP_SETTINGS = ["num-partitions=4", "num-server-rounds=40", "lr=0.1", "checkpoint=false"]

_KILL_WORKER = """
import json, os, signal, sys, time
from pathlib import Path
import ray
from ray._private.state import state
from ray.core.generated import common_pb2, gcs_pb2

ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
run_dir, name, sweep = Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
deadline = time.monotonic() + 600
def sweep_alive():  # the sweep is the test's child: a zombie once it exits
    try:
        return Path(f"/proc/{sweep}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
while time.monotonic() < deadline and sweep_alive():
    attempts = {}
    for raw in state._connect_and_get_accessor().get_task_events():
        event = gcs_pb2.TaskEvents.FromString(raw)
        seen = attempts.setdefault((event.task_id, event.attempt_number), {})
        if event.task_info.name:
            seen["name"] = event.task_info.name
        update = event.state_updates
        if update.worker_pid:
            seen["pid"], seen["node"] = update.worker_pid, update.node_id.hex()
        seen.update({common_pb2.TaskStatus.Name(s): 1 for s in update.state_ts_ns})
    running = [a for a in attempts.values() if a.get("name") == name and "pid" in a
               and "RUNNING" in a and "FINISHED" not in a and "FAILED" not in a]
    rounds = run_dir / "rounds.jsonl"
    done = rounds.is_file() and rounds.read_text().count("\\n")
    if running and done and not (run_dir / "summary.json").exists():
        os.kill(running[0]["pid"], signal.SIGKILL)  # the worker process running the run
        print(json.dumps({"pid": running[0]["pid"], "rounds": done}))
        break
    time.sleep(0.05)
ray.shutdown()
"""

_ATTEMPTS = """
import json, sys
import ray
from ray._private.state import state
from ray.core.generated import common_pb2, gcs_pb2
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
names, nodes = {}, {}
for raw in state._connect_and_get_accessor().get_task_events():
    event = gcs_pb2.TaskEvents.FromString(raw)
    key = (event.task_id.hex(), event.attempt_number)
    if event.task_info.name:
        names[event.task_id.hex()] = event.task_info.name
    if event.state_updates.node_id:
        nodes[key] = event.state_updates.node_id.hex()
print(json.dumps([[names.get(t), a, n] for (t, a), n in nodes.items()]))
ray.shutdown()
"""


def _probe(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True
    )


def _rounds(run: Path) -> list[dict]:
    """Each round's results, without its timing, run id and hash-chain links."""
    lines = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    dropped = ("wall_time", "run_id", "prev_sha256")
    return [{k: v for k, v in line.items() if k not in dropped} for line in lines]


@pytest.mark.integration
def test_compare_on_the_cluster_survives_a_killed_worker_with_inprocess_results(
    tmp_path, ray_cluster
):
    """``fairfl compare --engine ray``: runs as tasks on both nodes; a worker killed
    mid-run is retried; the report's runs equal ``--engine inprocess``'s bit for bit."""
    from fairfl.cli import main
    from fairfl.telemetry.ledger import verify_ledger

    address, out = ray_cluster, tmp_path / "ray"
    env = {**os.environ, "RAY_ADDRESS": address}  # the address from the environment
    log = (tmp_path / "sweep.log").open("w")
    sweep = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fairfl",
            "compare",
            *SWEEP,
            "--engine",
            "ray",
            "--set",
            *SWEEP_SETTINGS,
            "--out",
            str(out),
            "--no-progress",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    run = out / "runs/fedavg/seed-1"
    killer = _probe(
        _KILL_WORKER, address, str(run), f"fairfl-run {run.relative_to(out)}", str(sweep.pid)
    )
    try:
        said = killer.communicate(timeout=600)[0].strip().splitlines()
        sweep.wait(timeout=600)
    finally:
        for process in (killer, sweep):
            if process.poll() is None:
                process.kill()
                process.wait()
        log.close()
    output = (tmp_path / "sweep.log").read_text()
    assert sweep.returncode == 0 and said, output[-3000:]
    killed = json.loads(said[-1])
    assert 1 <= killed["rounds"] < 40  # killed mid-run: a round written, no summary yet
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)
    attempts = json.loads(_probe(_ATTEMPTS, address).communicate(timeout=300)[0].splitlines()[-1])
    mine = [(a, n) for name, a, n in attempts if name and name.startswith("fairfl-run runs/")]
    assert max(a for a, _ in mine) >= 1  # the killed run's task ran again
    assert len({n for _, n in mine}) == 2  # runs went to both nodes
    manifest = json.loads((out / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["ok", "ok"]
    assert manifest["engine"] == "ray" and manifest["cluster"]["cpus"] == 2
    assert not list(out.glob("runs/*/*/error.txt"))
    # the same comparison in this process
    local = tmp_path / "inprocess"
    code = main(["compare", *SWEEP, "--set", *SWEEP_SETTINGS, "--out", str(local), "--no-progress"])
    assert code == 0
    for run in manifest["runs"]:
        assert verify_ledger(out / run["dir"]).ok
        assert _rounds(out / run["dir"]) == _rounds(local / run["dir"])
        ours, theirs = (
            np.load(out / run["dir"] / "final_model.npz"),
            np.load(local / run["dir"] / "final_model.npz"),
        )
        assert sorted(ours) == sorted(theirs)
        for key in ours:
            assert ours[key].tobytes() == theirs[key].tobytes(), (run["dir"], key)
    assert (out / "report.md").read_text().count("fedavg") == (
        local / "report.md"
    ).read_text().count("fedavg")
