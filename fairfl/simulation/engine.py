"""Run fairfl through Flower's simulation engine (``flwr run``) and clean up after it.

:func:`run_simulation` starts its own simulation SuperLink on a free loopback port with
a project-local ``FLWR_HOME``, submits the app with ``flwr run <app> --stream``, waits for
it, and stops the SuperLink it started, with all its descendants, by PID (Flower's
managed local SuperLink would otherwise stay alive in the background).
``scripts/flwr_sim.py`` is the command-line wrapper; ``fairfl compare --engine flwr``
calls :func:`run_simulation` once per run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)


def find_app_dir(start: Path | None = None) -> Path:
    """The Flower app directory: the nearest ``pyproject.toml`` with ``[tool.flwr.app]``.

    Searched upwards from ``start`` (default: this package's source tree, then the
    working directory).

    Raises
    ------
    FileNotFoundError
        If no such ``pyproject.toml`` is found (e.g. fairfl installed from a wheel:
        pass the app directory explicitly).
    """
    starts = [start] if start is not None else [Path(__file__).resolve(), Path.cwd()]
    for origin in starts:
        for folder in [origin, *origin.parents]:
            project = folder / "pyproject.toml"
            if project.is_file() and "[tool.flwr.app]" in project.read_text(encoding="utf-8"):
                return folder
    raise FileNotFoundError(
        "no pyproject.toml with [tool.flwr.app] above "
        + " or ".join(str(s) for s in starts)
        + "; pass the Flower app directory explicitly"
    )


def toml_overrides(run_config: Mapping[str, Any]) -> str:
    """Render run-config values as a ``flwr run --run-config`` string.

    Strings are single-quoted TOML literals, booleans ``true``/``false``, floats keep a
    decimal point or exponent (``1.0``, ``1e-05``) so Flower keeps their type.

    Raises
    ------
    ValueError
        If a value is a non-finite float, a string containing a single quote, or of
        another type.
    """
    parts = []
    for key, value in run_config.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError(f"run config {key} must be finite, got {value!r}")
            text = repr(value)
        elif isinstance(value, str):
            if "'" in value:
                raise ValueError(f"run config {key} must not contain a single quote: {value!r}")
            text = f"'{value}'"
        else:
            raise ValueError(
                f"run config {key} must be bool, int, float or str, got {type(value).__name__}"
            )
        parts.append(f"{key}={text}")
    return " ".join(parts)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def flower_env(flwr_home: Path) -> dict[str, str]:
    """Environment for Flower commands: project-local home, no telemetry, no uv sync."""
    env = dict(os.environ)
    env.update(
        FLWR_HOME=str(flwr_home),
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1",
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        PYTHONUNBUFFERED="1",
        # The SuperLink spawns flower-superexec / flwr-serverapp by name.
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Wait until something listens on ``port`` (or the process died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"flower-superlink exited early with code {process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


def descendants(pid: int) -> list[int]:
    """PIDs of every live descendant of ``pid`` (found via /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def processes_naming(path: Path) -> list[int]:
    """PIDs of live processes (not this one) whose command line or environment names ``path``.

    A run's FLWR_HOME is named by every process Flower starts for it (``flwr run``'s
    managed local SuperLink, its SuperExecs, Ray), which finds them without a name match.
    """
    needle = str(path).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            text = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if needle in text and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def stop_pids(pids: list[int], grace: float = 15.0) -> None:
    """Stop ``pids`` and all their descendants: SIGTERM, then SIGKILL after ``grace`` s.

    A pid that leads its own process group (a detached SuperLink) gets its group signalled
    too. The SuperLink starts its SuperExec detached (own session), and that one starts
    the simulation and Ray, so the group alone would leave them running: descendants are
    found via /proc.
    """
    family = sorted({*pids, *(child for pid in pids for child in descendants(pid))})
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGTERM)
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(pid) for pid in family):
        time.sleep(0.2)
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a process we started and all its descendants, by PID, and reap it."""
    stop_pids([process.pid])
    process.wait(timeout=15)


def run_simulation(
    run_config: str,
    supernodes: int,
    flwr_home: Path,
    cpus_per_client: int = 1,
    timeout: float = 1800.0,
    *,
    app_dir: Path | None = None,
    output: IO[bytes] | None = None,
    superlink_started: Any = None,
) -> int:
    """Start a simulation SuperLink, ``flwr run`` the app on it, stop the SuperLink.

    Parameters
    ----------
    run_config : str
        ``--run-config`` overrides (see :func:`toml_overrides`); empty for none.
    supernodes : int
        Number of simulated SuperNodes (one data partition each).
    flwr_home : Path
        ``FLWR_HOME`` of this run (created; holds the SuperLink's state and log).
    cpus_per_client : int
        ``client-resources-num-cpus`` of the federation.
    timeout : float
        Seconds ``flwr run`` may take.
    app_dir : Path | None
        The Flower app (default: :func:`find_app_dir`).
    output : IO[bytes] | None
        Where ``flwr run``'s output goes (default: this process's stdout and stderr).
    superlink_started : Callable[[subprocess.Popen], None] | None
        Called with the SuperLink process once it listens (benchmarks watch its tree).

    Returns
    -------
    int
        The exit code of ``flwr run``.
    """
    app = app_dir if app_dir is not None else find_app_dir()
    bin_dir = Path(sys.executable).parent
    flwr_home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (flwr_home / "config.toml").write_text(
        "[superlink]\n"
        'default = "fairfl-sim"\n\n'
        "[superlink.fairfl-sim]\n"
        f'address = "127.0.0.1:{port}"\n'
        "insecure = true\n"
    )
    env = flower_env(flwr_home)
    log_file = (flwr_home / "superlink.log").open("wb")
    superlink = subprocess.Popen(
        [
            str(bin_dir / "flower-superlink"),
            "--insecure",
            "--simulation",
            "--isolation",
            "subprocess",
            "--disable-runtime-dependency-installation",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--database",
            str(flwr_home / "state.db"),
        ],
        env=env,
        cwd=app,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for_port(port, superlink)
        if superlink_started is not None:
            superlink_started(superlink)
        command = [
            str(bin_dir / "flwr"),
            "run",
            str(app),
            "fairfl-sim",
            "--stream",
            "--federation-config",
            f"num-supernodes={supernodes} client-resources-num-cpus={cpus_per_client}",
        ]
        if run_config:
            command += ["--run-config", run_config]
        logger.debug("run_simulation: %s", " ".join(command))
        completed = subprocess.run(
            command,
            env=env,
            cwd=app,
            timeout=timeout,
            check=False,
            stdout=output,
            stderr=subprocess.STDOUT if output is not None else None,
        )
        return completed.returncode
    finally:
        stop(superlink)
        log_file.close()


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point of ``scripts/flwr_sim.py``."""
    parser = argparse.ArgumentParser(
        description="Run fairfl through Flower's simulation engine and clean up after it."
    )
    parser.add_argument("--supernodes", type=int, default=20)
    parser.add_argument("--cpus-per-client", type=int, default=1)
    parser.add_argument("--flwr-home", type=Path, default=None, help="default: <app>/.flwr-home")
    parser.add_argument("-c", "--run-config", default="")
    parser.add_argument("--summary", type=Path, help="print this summary.json afterwards")
    args = parser.parse_args(argv)
    flwr_home = args.flwr_home if args.flwr_home is not None else find_app_dir() / ".flwr-home"
    code = run_simulation(args.run_config, args.supernodes, flwr_home, args.cpus_per_client)
    if args.summary and args.summary.exists():
        final = json.loads(args.summary.read_text())["final_metrics"]
        print(
            "final client accuracy: mean {:.2f} %, worst-10% {:.2f} %, std {:.2f}".format(
                final["acc-mean"], final["acc-worst-10"], final["acc-std"]
            )
        )
    sys.exit(code)
