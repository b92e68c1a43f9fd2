"""examples/quickstart-pytorch-fairfl, a user's Flower app, runs every kind of fair rule.

Each test runs exactly what the example's README says, ``flwr run <example> --stream
-c "strategy='<rule>' num-server-rounds=2"``, on Flower's default local connection and
federation (2 simulated SuperNodes) with a fresh FLWR_HOME. The rules cover each client
branch of ``fairfl.client.fair_train``: q-FFL (h_k), Equitable FL (activation vector by
a hook: the example's model has no ``features()``), RC-FL (joint (ω, η) steps) and
FedMGDA+ (plain training).

Flower's ``flwr run`` would start its managed local SuperLink detached, with no PID we
could know. So the module starts that SuperLink itself, with the managed one's command
line, on free ports (Flower's FLWR_LOCAL_SUPERLINK_HTTP_API_PORT and
FLWR_LOCAL_CONTROL_API_PORT), and ``flwr run`` finds it running and uses it. The
teardown stops it and everything it spawned by PID (``fairfl.simulation.engine.stop``)
and checks that no process naming this FLWR_HOME is left.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairfl.simulation.engine import (
    flower_env,
    free_port,
    processes_naming,
    stop,
    wait_for_port,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart-pytorch-fairfl"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def flower(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Environment of ``flwr run``, with Flower's local SuperLink started here, by PID."""
    home = tmp_path_factory.mktemp("example") / "flwr-home"
    runtime = home / "local-superlink"
    runtime.mkdir(parents=True)
    env = flower_env(home)
    http_port, control_port = free_port(), free_port()
    env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] = str(http_port)
    env["FLWR_LOCAL_CONTROL_API_PORT"] = str(control_port)
    # flwr/cli/local_superlink.py's command for the managed local SuperLink.
    superlink = subprocess.Popen(
        [
            str(BIN / "flower-superlink"),
            "--insecure",
            "--simulation",
            "--isolation",
            "subprocess",
            "--control-api-address",
            f"127.0.0.1:{control_port}",
            "--host",
            "127.0.0.1",
            "--port",
            str(http_port),
            "--log-file",
            str(runtime / "superlink.log"),
            "--database",
            str(runtime / "state.db"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for_port(http_port, superlink)
        yield env
    finally:
        stop(superlink)
        deadline = time.monotonic() + 10
        while processes_naming(home) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not processes_naming(home), "processes left behind"


@pytest.mark.integration
@pytest.mark.parametrize("rule", ["qffl", "equitable", "rcfl", "fedmgda"])
def test_example_runs_the_rule_with_flwr_run(flower, tmp_path, rule):
    log = tmp_path / "flwr.log"
    with log.open("wb") as out:
        completed = subprocess.run(
            [
                str(BIN / "flwr"),
                "run",
                str(EXAMPLE),
                "--stream",
                "-c",
                f"strategy='{rule}' num-server-rounds=2",
            ],
            cwd=tmp_path,
            env=flower,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=300,
            check=False,
        )
    text = log.read_text(errors="replace")
    assert completed.returncode == 0, text[-5000:]
    # `flwr run --stream` exits 0 whatever the run did: the ServerApp's last line says.
    assert f"quickstart-pytorch-fairfl: strategy={rule} aggregated-rounds=[1, 2]" in text, text[
        -5000:
    ]
    assert "dropped reply" not in text
    # The app reports each node's partition id: per-client state is keyed by device.
    assert "reports no 'partition-id'" not in text
    accuracy = re.search(r"eval-acc=\{1: [0-9.]+, 2: ([0-9.]+)\}", text)
    assert accuracy is not None, text[-3000:]
    assert float(accuracy.group(1)) > 0.1  # better than chance on 10 digits
