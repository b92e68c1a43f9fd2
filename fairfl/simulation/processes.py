"""Processes of a simulation run: ports, environment, finding and stopping them by PID.

A free loopback port and Flower's environment for a run's commands; the live
descendants of a process, the processes that name a folder or carry a run's id (found
via /proc, so Ray's daemons that leave the tree are found too), and stopping them:
SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

#: Run ids of the :func:`~fairfl.simulation.engine.simulate` calls in progress in this
#: process (any thread).
_ACTIVE_RUNS: set[str] = set()


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


def processes_of_run(run_id: str) -> list[int]:
    """PIDs of live processes (not this one) started for run ``run_id``.

    The runner hands every process of the run ``FAIRFL_RUN_ID=<run_id>`` in its
    environment, and Flower and Ray pass it on, also to daemons that leave the
    SuperLink's process tree (Ray's GCS server and raylet).
    """
    from fairfl.telemetry.stream import RUN_ID_ENV

    needle = f"{RUN_ID_ENV}={run_id}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes() + b"\0"
        except OSError:  # gone, or not ours to read
            continue
        if needle in environ and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def stop_started_processes() -> None:
    """Stop, by PID, every process this one started and those of its runs in progress.

    That is every descendant (found via /proc), plus every process carrying the run id
    of a :func:`~fairfl.simulation.engine.simulate` call in progress in any thread (Ray's
    daemons leave the tree).
    """
    runs = [pid for run_id in list(_ACTIVE_RUNS) for pid in processes_of_run(run_id)]
    stop_pids(descendants(os.getpid()) + runs)
