"""Run fairfl through Flower's simulation engine (`flwr run .`) and clean up after it.

Starts its own simulation SuperLink on free loopback ports with a project-local
FLWR_HOME, submits the app with `flwr run . --stream`, waits for the results files, and
stops the SuperLink it started by PID (Flower's managed local SuperLink would otherwise
stay alive in the background).

Usage: python scripts/flwr_sim.py --supernodes 20 -c "num-server-rounds=20 out-dir='...'"
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
    """PIDs of every live descendant of ``pid`` (children first found via /proc)."""
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


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a process we started and all its descendants, by PID: SIGTERM, then SIGKILL.

    The SuperLink starts its SuperExec detached (own session), and that one starts the
    simulation and Ray, so killing the process group alone would leave them running.
    """
    family = [*descendants(process.pid), process.pid]
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in family):
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.2)
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=15)


def run_simulation(
    run_config: str,
    supernodes: int,
    flwr_home: Path,
    cpus_per_client: int = 1,
    timeout: float = 1800.0,
) -> int:
    """Start a simulation SuperLink, `flwr run` the app on it, stop the SuperLink."""
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
        cwd=ROOT,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for_port(port, superlink)
        command = [
            str(bin_dir / "flwr"),
            "run",
            str(ROOT),
            "fairfl-sim",
            "--stream",
            "--federation-config",
            f"num-supernodes={supernodes} client-resources-num-cpus={cpus_per_client}",
        ]
        if run_config:
            command += ["--run-config", run_config]
        return subprocess.run(command, env=env, cwd=ROOT, timeout=timeout, check=False).returncode
    finally:
        stop(superlink)
        log_file.close()


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--supernodes", type=int, default=20)
    parser.add_argument("--cpus-per-client", type=int, default=1)
    parser.add_argument("--flwr-home", type=Path, default=ROOT / ".flwr-home")
    parser.add_argument("-c", "--run-config", default="")
    parser.add_argument("--summary", type=Path, help="print this summary.json afterwards")
    args = parser.parse_args()
    code = run_simulation(args.run_config, args.supernodes, args.flwr_home, args.cpus_per_client)
    if args.summary and args.summary.exists():
        final = json.loads(args.summary.read_text())["final_metrics"]
        print(
            "final client accuracy: mean {:.2f} %, worst-10% {:.2f} %, std {:.2f}".format(
                final["acc-mean"], final["acc-worst-10"], final["acc-std"]
            )
        )
    sys.exit(code)


if __name__ == "__main__":
    main()
