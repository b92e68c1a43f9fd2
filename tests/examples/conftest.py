"""The examples' ``flwr run`` environment: Flower's local SuperLink, started here by PID.

Flower's ``flwr run`` would start its managed local SuperLink detached, with no PID we
could know. So each test module starts that SuperLink itself, with the managed one's
command line, on free ports (Flower's FLWR_LOCAL_SUPERLINK_HTTP_API_PORT and
FLWR_LOCAL_CONTROL_API_PORT), and ``flwr run`` finds it running and uses it. The
teardown stops it and everything it spawned by PID (``fairfl.simulation.engine.stop``)
and checks that no process naming this FLWR_HOME is left.
"""

from __future__ import annotations

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

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def flower(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Environment of ``flwr run``, with Flower's local SuperLink started here, by PID.

    Flower's per-run dependency install is off: the apps run in this environment.
    """
    yield from local_superlink(tmp_path_factory.mktemp("example") / "flwr-home")


@pytest.fixture(scope="module")
def flower_installing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """As ``flower``, with Flower's per-run dependency install on, and uv offline.

    Each run's ``uv sync`` installs the app's dependencies into a fresh environment
    under FLWR_HOME; ``UV_OFFLINE=1``: from local files only, never the index.
    """
    yield from local_superlink(
        tmp_path_factory.mktemp("installing") / "flwr-home", runtime_install=True
    )


def local_superlink(home: Path, *, runtime_install: bool = False) -> Iterator[dict[str, str]]:
    """Start Flower's local SuperLink on free ports; yield ``flwr run``'s environment."""
    runtime = home / "local-superlink"
    runtime.mkdir(parents=True)
    env = flower_env(home)
    if runtime_install:
        del env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"]
        env["UV_OFFLINE"] = "1"
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
        cwd=runtime,  # where a ServerApp's relative paths land (the quickstart's final_model.pt)
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
