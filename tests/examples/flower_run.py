"""``flwr run`` for the example tests: Flower's local SuperLink started here, by PID.

Flower's ``flwr run`` would start its managed local SuperLink detached, with no PID we
could know. So the tests start that SuperLink themselves (:func:`local_superlink`), with
the managed one's command line, on free ports (Flower's FLWR_LOCAL_SUPERLINK_HTTP_API_PORT
and FLWR_LOCAL_CONTROL_API_PORT), and ``flwr run`` (:func:`flwr_run`) finds it running and
uses it. The teardown stops it and everything it spawned by PID
(``fairfl.simulation.engine.stop``) and checks that no process naming its FLWR_HOME is left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from fairfl.simulation.engine import (
    flower_env,
    free_port,
    processes_naming,
    stop,
    wait_for_port,
)

#: This environment's commands (``flwr``, ``flower-superlink``, ...).
BIN = Path(sys.executable).parent


def local_superlink(
    home: Path,
    *,
    bin_dir: Path = BIN,
    runtime_install: bool = False,
) -> Iterator[dict[str, str]]:
    """Start Flower's local SuperLink on free ports; yield ``flwr run``'s environment.

    Parameters
    ----------
    home : Path
        FLWR_HOME, created here.
    bin_dir : Path
        Where Flower's commands are: the SuperLink is ``bin_dir/flower-superlink``, and
        ``bin_dir`` leads PATH, so the processes it spawns by name are that environment's.
    runtime_install : bool
        Leave Flower's per-run dependency install on (``uv sync`` into a fresh environment
        under FLWR_HOME for each run), never reaching a package index (``UV_NO_INDEX=1``:
        local paths and direct URLs only) and with uv's cache under ``home``.
    """
    runtime = home / "local-superlink"
    runtime.mkdir(parents=True)
    env = flower_env(home)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    if runtime_install:
        del env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"]
        env["UV_NO_INDEX"] = "1"
        env["UV_CACHE_DIR"] = str(home / "uv-cache")
    http_port, control_port = free_port(), free_port()
    env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] = str(http_port)
    env["FLWR_LOCAL_CONTROL_API_PORT"] = str(control_port)
    # flwr/cli/local_superlink.py's command for the managed local SuperLink.
    superlink = subprocess.Popen(
        [
            str(bin_dir / "flower-superlink"),
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


def flwr_run(
    app: Path,
    env: dict[str, str],
    log: Path,
    *options: str,
    cwd: Path,
    timeout: float,
    bin_dir: Path = BIN,
) -> tuple[int, str]:
    """``bin_dir/flwr run <app> --stream <options>``; its exit code and output.

    The output (stdout and stderr) is also kept in ``log``. ``flwr run --stream`` exits 0
    whatever the run did: the caller checks the output (or the run's files) as well.
    """
    with log.open("wb") as out:
        completed = subprocess.run(
            [str(bin_dir / "flwr"), "run", str(app), "--stream", *options],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    return completed.returncode, log.read_text(errors="replace")
