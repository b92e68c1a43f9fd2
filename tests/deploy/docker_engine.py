"""A private Docker engine for the compose test: started here, stopped here.

``dockerd`` runs with its own data root, exec root, socket and pid file under a
temporary directory, with ``--iptables=false --bridge=none`` (it changes nothing in the
host's firewall and has no default bridge) and an unusual private address pool for
the user-defined networks compose creates. Stopping it removes every container, image,
network and volume it held, since its data root is deleted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ADDRESS_POOL = "base=10.204.0.0/16,size=24"


def why_no_engine() -> str | None:
    """Why a private engine cannot be started here, or None if it can."""
    if os.geteuid() != 0:
        return "not root: a private dockerd needs root"
    for tool, pkg in (("dockerd", "docker.io"), ("containerd", "containerd"), ("runc", "runc")):
        if shutil.which(tool) is None:
            return f"'{tool}' not installed (apt-get install {pkg})"
    if shutil.which("docker") is None:
        return "docker CLI not installed (apt-get install docker.io)"
    return None


def compose_command() -> list[str] | None:
    """``docker-compose`` (Debian's docker-compose), else the ``docker compose`` plugin."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
    return ["docker", "compose"] if probe.returncode == 0 else None


@dataclass
class DockerEngine:
    """``with DockerEngine() as engine:`` gives ``engine.env`` with DOCKER_HOST set."""

    start_timeout: float = 60.0
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ffdk-")))
    popen: subprocess.Popen | None = None

    @property
    def host(self) -> str:
        return f"unix://{self.root}/docker.sock"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DOCKER_HOST"] = self.host
        env.pop("DOCKER_CONTEXT", None)
        env["COMPOSE_INTERACTIVE_NO_CLI"] = "1"
        return env

    def __enter__(self) -> DockerEngine:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        log = open(self.root / "dockerd.log", "w")  # noqa: SIM115 - handed to the child
        try:
            self.popen = subprocess.Popen(
                [
                    "dockerd",
                    "--storage-driver=overlay2",
                    "--iptables=false",
                    "--ip6tables=false",
                    "--bridge=none",
                    f"--default-address-pool={ADDRESS_POOL}",
                    f"--data-root={self.root}/data",
                    f"--exec-root={self.root}/x",
                    f"--pidfile={self.root}/dockerd.pid",
                    f"--host={self.host}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"dockerd exited ({self.popen.returncode}):\n{self.log_tail()}")
            probe = subprocess.run(["docker", "info"], env=self.env, capture_output=True)
            if probe.returncode == 0:
                return
            time.sleep(0.5)
        raise TimeoutError(f"dockerd not ready after {self.start_timeout}s:\n{self.log_tail()}")

    def docker(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["docker", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join((self.root / "dockerd.log").read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop dockerd (it stops its containers and its containerd), delete its root."""
        if self.popen is not None and self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)
        if self.popen is not None:
            # containerd and shims were started by dockerd in its session: none may stay.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        # Unmount anything left under our root (overlay layers, netns files), deepest first.
        prefix = str(self.root)
        with open("/proc/mounts") as f:
            mounts = [line.split()[1] for line in f if line.split()[1].startswith(prefix)]
        for mount in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
