"""fairfl on the oldest supported flwr, whose Fleet API is gRPC (issue 10).

Runs in the second virtual environment that ``scripts/test.sh`` builds with the oldest
supported flwr (``.venv-flwr-oldest``); in the main environment (flwr >= 1.37, where the
Fleet API moved to HTTP) it is skipped. A real SuperLink and two SuperNodes on loopback
run 2 rounds of Semi-VRed submitted with ``flwr run``.
"""

import json
import subprocess
import time
from pathlib import Path

import flwr
import pytest
from packaging.version import Version

from fairfl.simulation.engine import flower_env, free_port, stop, toml_overrides, wait_for_port
from fairfl.simulation.staging import stage_app

ROOT = Path(__file__).resolve().parents[2]
FLWR_VERSION = Version(flwr.__version__)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        Version("1.37") <= FLWR_VERSION,
        reason=f"flwr {FLWR_VERSION} serves the Fleet API over HTTP; this test runs in the "
        "oldest-flwr environment of scripts/test.sh",
    ),
]


def test_semivred_over_the_grpc_fleet_api(tmp_path):
    serverappio, fleet, control = free_port(), free_port(), free_port()
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "grpc"\n\n[superlink.grpc]\n'
        f'address = "127.0.0.1:{control}"\ninsecure = true\n'
    )
    env = flower_env(home)
    processes: list[subprocess.Popen[bytes]] = []
    logs = {}

    def spawn(name, command):
        logs[name] = tmp_path / f"{name}.log"
        process = subprocess.Popen(
            command,
            env=env,
            cwd=tmp_path,
            stdout=logs[name].open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        processes.append(process)
        return process

    try:
        superlink = spawn(
            "superlink",
            [
                "flower-superlink",
                "--insecure",
                "--serverappio-api-address",
                f"127.0.0.1:{serverappio}",
                "--fleet-api-address",
                f"127.0.0.1:{fleet}",
                "--control-api-address",
                f"127.0.0.1:{control}",
            ],
        )
        wait_for_port(fleet, superlink, timeout=120)
        wait_for_port(control, superlink, timeout=120)
        for partition in range(2):
            spawn(
                f"supernode-{partition}",
                [
                    "flower-supernode",
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{fleet}",
                    "--clientappio-api-address",
                    f"127.0.0.1:{free_port()}",
                    "--node-config",
                    f"partition-id={partition} num-partitions=2",
                ],
            )
        out_dir = tmp_path / "out"
        overrides = toml_overrides(
            {
                "strategy": "semivred",
                "num-server-rounds": 2,
                "num-partitions": 2,
                "out-dir": str(out_dir),
                "local-epochs": 1,
            }
        )
        # The packed files only: Flower walks every file of the folder it packs.
        app = stage_app(ROOT, tmp_path / "app" / ROOT.name)
        submitted = subprocess.run(
            ["flwr", "run", str(app), "grpc", "--stream", "--run-config", overrides],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
        deadline = time.monotonic() + 60
        while not (out_dir / "summary.json").exists() and time.monotonic() < deadline:
            time.sleep(1)
        summary = json.loads((out_dir / "summary.json").read_text())
        rounds = [json.loads(x) for x in (out_dir / "rounds.jsonl").read_text().splitlines()]
        assert summary["strategy"] == "Semi-VRed" and summary["rounds"] == 2
        assert [r["round"] for r in rounds] == [1, 2]
        assert {c["partition_id"] for c in rounds[-1]["clients"]} == {0, 1}
        assert sum(w["weight"] for w in rounds[-1]["train"]["weights"]) == pytest.approx(1.0)
        # The transport: the only Fleet API this SuperLink serves is gRPC-rere, and both
        # SuperNodes talked to it (their replies were aggregated above).
        superlink_log = logs["superlink"].read_text()
        assert f"Fleet API (gRPC-rere) on 127.0.0.1:{fleet}" in superlink_log
    finally:
        for process in reversed(processes):
            stop(process)
