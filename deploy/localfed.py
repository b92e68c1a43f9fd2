#!/usr/bin/env python3
"""A real Flower federation on one machine, TLS and SuperNode authentication on.

SuperLink, its Fleet proxy and SuperNodes run on separate network addresses, started
with the scripts in ``deploy/scripts/`` exactly as an operator would start them on
separate hosts, in the locked layout of deploy/README.md ("Security model"):

    netns <tag>-br     bridge br0, no address: the only link between the namespaces,
                       and it leads nowhere else (no route out, nothing in the host's
                       own network namespace is touched)
    netns <tag>-link   server host, 10.203.0.1: the SuperLink on its loopback
                       127.0.0.1:8000 (Fleet, Control and Runtime APIs); the Fleet
                       proxy (nginx) on 10.203.0.1:9092, the only port devices reach;
                       the operator's flwr CLI, which talks to 127.0.0.1:8000
    netns <tag>-n<i>   SuperNode i      10.203.0.(10+i)   (device i; Runtime API on
                       its own 127.0.0.1:9094, since each namespace has its own loopback)
    netns <tag>-rogue  a device whose key is never registered, or (``start_impostor``)
                       registered with the SuperLink but for no partition, 10.203.0.99

Without namespaces everything runs on 127.0.0.1 with free ports instead (``mode`` then
says "loopback" and ``fallback_reason`` why); SuperNodes still go through the proxy,
but nothing then keeps a local process from the SuperLink's own port.

Used by ``tests/deploy/test_netns_federation.py``, ``tests/deploy/test_proxy_paths.py``,
``tests/deploy/test_deployment_faults.py`` (``pause_supernode``, ``kill_supernode``,
``serverapp_pids``, ``restart_superlink``), ``tests/deploy/test_churn_soak.py``
(``leave_supernode``, ``kill_supernode``, ``restart_supernode``),
``tests/deploy/test_registration_default.py`` (``start_impostor``) and
``benchmarks/deployment_round_time.py``; also a command:

    sudo .venv/bin/python deploy/localfed.py --supernodes 3 --rounds 2 -c strategy=fedavg

starts the federation, submits one run, prints where its results are, and tears down
every process and namespace it made.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = REPO_ROOT / "deploy" / "scripts"

SUBNET_PREFIX = "10.203.0"  # private, unusual; only ever inside our own namespaces
SERVER_IP = f"{SUBNET_PREFIX}.1"
ROGUE_IP = f"{SUBNET_PREFIX}.99"
#: The server host's namespace: SuperLink, Fleet proxy and the operator's flwr CLI.
SERVER = "link"
#: Port of the SuperLink (loopback only) and of the Fleet proxy (devices) in netns mode.
SUPERLINK_PORT = 8000
FLEET_PROXY_PORT = 9092

#: Requests a device sends to the Fleet proxy in ``probe_apis_from_device``: name ->
#: (method, path). Flower's SuperLink serves /v1/fleet/, /v1/control/ and /v1/runtime/.
PROBE_REQUESTS: dict[str, tuple[str, str]] = {
    "fleet-get-run": ("POST", "/v1/fleet/get-run"),
    "fleet-get-run-as-get": ("GET", "/v1/fleet/get-run"),
    "control-start-run": ("POST", "/v1/control/start-run"),
    "control-register-node": ("POST", "/v1/control/register-node"),
    "control-unregister-node": ("POST", "/v1/control/unregister-node"),
    "control-list-nodes": ("POST", "/v1/control/list-nodes"),
    "runtime-get-run": ("POST", "/v1/runtime/get-run"),
    "api-docs": ("GET", "/docs"),
}

#: Non-canonical paths (dot segments, escapes, doubled slashes, backslashes) a device
#: might send to slip past the proxy's routing: name -> (method, path). nginx routes on
#: the normalised path but forwards the raw one, so the proxy refuses all of them with
#: 400 before routing (deploy/proxy/nginx.conf.template); each would otherwise be
#: routed as the Fleet method (or the 403 location) it normalises to.
NON_CANONICAL_REQUESTS: dict[str, tuple[str, str]] = {
    "control-then-dots-to-fleet": ("POST", "/v1/control/list-runs/../../fleet/pull-messages"),
    "fleet-then-dots-to-control": ("POST", "/v1/fleet/../control/start-run"),
    "dot-segment": ("POST", "/v1/fleet/./get-run"),
    "trailing-dot-segment": ("POST", "/v1/fleet/get-run/."),
    "escaped-dots-lower": ("POST", "/v1/control/x/%2e%2e/%2e%2e/fleet/get-run"),
    "escaped-dots-upper": ("POST", "/v1/control/x/%2E%2E/%2E%2E/fleet/get-run"),
    "escaped-slash": ("POST", "/v1/fleet%2fget-run"),
    "escaped-letter": ("POST", "/v1/fleet/get%2drun"),
    "double-slash": ("POST", "/v1/fleet//get-run"),
    "leading-double-slash": ("POST", "//v1/fleet/get-run"),
    "backslash": ("POST", "/v1/fleet\\get-run"),
    "backslash-dots": ("POST", "/v1/fleet/..\\control\\start-run"),
    "query-string": ("POST", "/v1/fleet/get-run?x=../../control/start-run"),
}

#: Flower's exit code (logged as "Exit Code: 305"; the process itself exits with 1)
#: for a SuperNode the SuperLink refuses: its key is not registered.
EXIT_SUPERNODE_NOT_REGISTERED = 305


def toml_value(value: Any) -> str:
    """A run-config value as TOML, the syntax ``flwr run -c`` expects."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if "'" in text:
        return json.dumps(text)
    return f"'{text}'"


def app_run_config(overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run config a run of this app gets: pyproject defaults, then ``overrides``."""
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        config = dict(tomllib.load(f)["tool"]["flwr"]["app"]["config"])
    unknown = set(overrides or {}) - set(config)
    if unknown:
        raise KeyError(f"not run-config keys of this app: {sorted(unknown)}")
    config.update(overrides or {})
    return config


def why_no_proxy() -> str | None:
    """Why the Fleet proxy (nginx) cannot run on this machine, or None if it can."""
    path = f"{os.environ.get('PATH', '')}{os.pathsep}/usr/sbin"
    if shutil.which("nginx", path=path) is None:
        return "nginx is not installed (apt-get install nginx-light)"
    return None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_group_gone(pgid: int, timeout: float = 15.0) -> bool:
    """Wait until no process (killed children not yet reaped included) is in ``pgid``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        time.sleep(0.1)
    return False


def _venv_bin() -> Path | None:
    """The bin directory holding flwr's commands next to this interpreter, if any."""
    for candidate in (Path(sys.executable).parent, REPO_ROOT / ".venv" / "bin"):
        if (candidate / "flower-superlink").exists():
            return candidate
    return None


def read_rounds(out_dir: Path) -> list[dict[str, Any]]:
    """The complete lines of ``out_dir/rounds.jsonl`` so far (a line being written: skipped)."""
    try:
        text = (Path(out_dir) / "rounds.jsonl").read_text()
    except FileNotFoundError:
        return []
    lines = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return lines


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _descendants(pid: int) -> list[tuple[int, str]]:
    """(PID, command line) of every live descendant of ``pid``, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found: list[tuple[int, str]] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        todo.extend(children.get(child, []))
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if _alive(child):
            found.append((child, cmd))
    return found


@dataclass
class Proc:
    """A process this module started (in its own session: PID == process group id)."""

    name: str
    popen: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        """The last lines of its log."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class LocalFederation:
    """Start and stop one SuperLink, its Fleet proxy and ``supernodes`` SuperNodes.

    TLS and SuperNode authentication are on; devices reach only the proxy
    (``fleet_addr``), the operator the SuperLink itself (``superlink_addr``). Once
    started, ``registration`` is the client registration the operator's
    ``register-supernodes.sh`` wrote where it does by default (SuperNode i's key ->
    partition i), which ``submit-run.sh`` passes to every run by default.

    Parameters
    ----------
    workdir : Path
        Everything goes here: PKI, one FLWR_HOME per "host", logs, state DB, results.
    supernodes : int
        Number of SuperNodes; SuperNode i gets ``partition-id = i`` of ``supernodes``.
    network : str
        "netns", "loopback" or "auto" (netns when namespaces can be made).
    isolation : str
        "subprocess" (SuperLink and SuperNodes run apps themselves) or "process"
        (one SuperExec per SuperLink/SuperNode, as in docker-compose.yml).
    device : str
        node-config ``device`` of every SuperNode.
    supernode_max_retries : int | None
        Flower's ``--max-retries`` of each SuperNode (connection attempts before it
        gives up; a refused key fails fast with 3); ``None``: Flower's default, retry
        without end, as a deployed device that must outlive a SuperLink restart.
    ditto_state : bool
        Give every SuperNode a node-config ``ditto-state-dir`` on its own host's disk
        (:meth:`ditto_state_dir`), where Ditto keeps its personal models across restarts.
    """

    workdir: Path
    supernodes: int = 3
    network: str = "auto"
    isolation: str = "subprocess"
    device: str = "cpu"
    ready_timeout: float = 120.0
    supernode_max_retries: int | None = 3
    ditto_state: bool = False
    mode: str = ""
    fallback_reason: str = ""
    procs: list[Proc] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)
    tag: str = field(default_factory=lambda: f"ffl{uuid.uuid4().hex[:5]}")
    registration: Path = field(init=False)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> LocalFederation:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Make keys and profiles, start the SuperLink, register keys, start SuperNodes."""
        self.workdir = Path(self.workdir).resolve()
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.pki = self.workdir / "pki"
        self.out_root = self.workdir / "out"
        self._choose_network()
        if self.mode == "netns":
            self.superlink_addr = f"127.0.0.1:{SUPERLINK_PORT}"
            self.fleet_addr = f"{SERVER_IP}:{FLEET_PROXY_PORT}"
            sans = ["--san", SERVER_IP]
        else:
            self.superlink_addr = f"127.0.0.1:{free_port()}"
            self.fleet_addr = f"127.0.0.1:{free_port()}"
            sans = []
        # (a) keys: CA, a certificate for the names the proxy and the SuperLink are
        # reached by, one key pair (and SuperExec secret) per SuperNode, and one for a
        # SuperNode that is never registered.
        names = [f"supernode-{i + 1}" for i in range(self.supernodes)]
        names += ["unregistered", "impostor"]
        self._script(
            "gen-certs.sh",
            "--out",
            str(self.pki),
            *sans,
            *(a for n in names for a in ("--supernode", n)),
            host=SERVER,
        )
        self._script(
            "flwr-home.sh",
            "--superlink",
            self.superlink_addr,
            "--ca",
            str(self.pki / "ca.crt"),
            host=SERVER,
        )
        # (b) SuperLink on the server's loopback, its Fleet proxy, then registration
        # of the SuperNodes' public keys by the operator on the server host.
        host, port = self.superlink_addr.rsplit(":", 1)
        link_args = [
            "--pki",
            str(self.pki),
            "--host",
            host,
            "--port",
            port,
            "--database",
            str(self.workdir / "superlink" / "state.db"),
            "--isolation",
            self.isolation,
        ]
        self._link_cmd = [str(SCRIPTS / "start-superlink.sh"), *link_args]
        self._spawn("superlink", SERVER, self._link_cmd)
        self._wait_tcp(SERVER, host, int(port), self.procs[-1])
        proxy_host, proxy_port = self.fleet_addr.rsplit(":", 1)
        self._spawn(
            "proxy",
            SERVER,
            [
                str(SCRIPTS / "start-proxy.sh"),
                "--listen",
                self.fleet_addr,
                "--superlink",
                self.superlink_addr,
                "--pki",
                str(self.pki),
                "--run-dir",
                str(self.workdir / "proxy"),
            ],
        )
        self._wait_tcp(SERVER, proxy_host, int(proxy_port), self.procs[-1])
        if self.isolation == "process":
            self._spawn(
                "superexec-serverapp",
                SERVER,
                [
                    str(SCRIPTS / "start-superexec.sh"),
                    "--runtime-api",
                    self.superlink_addr,
                    "--ca",
                    str(self.pki / "ca.crt"),
                    "--secret",
                    str(self.pki / "superexec.secret"),
                ],
            )
        # The same command writes the client registration (key fingerprint -> partition
        # id) to its default place, $FAIRFL_PKI_DIR/clients.toml, where submit-run.sh
        # finds it for every run.
        self.registration = self.pki / "clients.toml"
        self._script(
            "register-supernodes.sh",
            "--connection",
            "tls",
            *(
                f"{self.pki / 'supernodes' / f'supernode-{i + 1}.pub'}={i}"
                for i in range(self.supernodes)
            ),
            host=SERVER,
        )
        # (c) SuperNodes, each with its own partition.
        for i in range(self.supernodes):
            self._start_supernode(i, f"supernode-{i + 1}", host=f"n{i + 1}")
        self._wait_online(self.supernodes)

    def stop(self) -> None:
        """Stop every process we started (by process group), then remove namespaces."""
        for proc in reversed(self.procs):
            if proc.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in reversed(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            # Children (SuperExecs, app processes) share the group: make sure they go too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=5)
            _wait_group_gone(proc.popen.pid)
        self.procs.clear()
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces.clear()

    # ------------------------------------------------------------------ operations
    def submit_run(
        self, run_config: Mapping[str, Any], *, timeout: float = 900, name: str = "run"
    ) -> subprocess.CompletedProcess:
        """(d) ``flwr run . tls --stream`` on the server host; waits for the end.

        ``out-dir`` defaults to ``<workdir>/out/<name>`` (on the SuperLink host).
        """
        config = dict(run_config)
        config.setdefault("out-dir", str(self.out_root / name))
        args = [str(SCRIPTS / "submit-run.sh"), "--connection", "tls", "--app", str(self.app())]
        for key, value in config.items():
            args += ["-c", f"{key}={toml_value(value)}"]
        log = self.workdir / "logs" / f"flwr-run-{name}.log"
        with open(log, "w") as out:
            return subprocess.run(
                self._wrap(SERVER, ["bash", *args]),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env(SERVER),
                timeout=timeout,
                cwd=REPO_ROOT,
                start_new_session=True,
            )

    def kill_supernode(self, index: int) -> int:
        """SIGKILL SuperNode ``index`` (0-based) as a crash or power loss would.

        Its whole process group goes (the ClientApp processes it started), and its
        SuperExec under process isolation; nothing tells the SuperLink, which counts the
        node online until its heartbeats lapse (Flower: 2 x 30 s). The killed processes
        are reaped and forgotten. Returns the SuperNode's PID.

        Raises
        ------
        ValueError
            If SuperNode ``index`` is not running.
        """
        name = f"supernode-{index + 1}"
        victims = [p for p in self.procs if p.name in (name, f"superexec-{name}") and p.alive()]
        if not any(p.name == name for p in victims):
            raise ValueError(f"{name} is not running")
        for proc in victims:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
        for proc in victims:
            proc.popen.wait(timeout=15)
            _wait_group_gone(proc.popen.pid)
            self.procs.remove(proc)
        self.killed.add(index)
        return next(p.popen.pid for p in victims if p.name == name)

    def leave_supernode(self, index: int) -> int:
        """Stop SuperNode ``index`` gracefully (SIGTERM), as a device switched off.

        Flower's SuperNode deactivates itself at the SuperLink on SIGTERM, so the
        SuperLink stops counting it online at once (a killed node lingers until its
        heartbeats lapse). Bring it back with :meth:`restart_supernode`. Returns its PID.

        Raises
        ------
        ValueError
            If SuperNode ``index`` is not running.
        """
        name = f"supernode-{index + 1}"
        proc = next((p for p in self.procs if p.name == name and p.alive()), None)
        if proc is None:
            raise ValueError(f"{name} is not running")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, signal.SIGTERM)
        try:
            proc.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait(timeout=15)
        # Its SuperExec and ClientApp processes share the group; none may outlive it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.popen.pid, signal.SIGKILL)
        _wait_group_gone(proc.popen.pid)
        self.procs.remove(proc)
        self.killed.add(index)
        return proc.popen.pid

    def pause_supernode(self, index: int, paused: bool = True) -> None:
        """SIGSTOP (``paused``) or SIGCONT SuperNode ``index`` and its ClientApp processes.

        A paused node is a straggler: it keeps its connection and counts as online until
        its heartbeats lapse (Flower: 2 x 30 s), but answers nothing until continued.
        """
        name = f"supernode-{index + 1}"
        proc = next((p for p in self.procs if p.name == name and p.alive()), None)
        if proc is None:
            raise ValueError(f"{name} is not running")
        os.killpg(proc.popen.pid, signal.SIGSTOP if paused else signal.SIGCONT)

    def serverapp_pids(self) -> list[int]:
        """PIDs of the ``flwr-serverapp`` processes the SuperLink started (runs going on).

        They run under the SuperLink's SuperExec, in a session of their own, so they are
        found by walking the SuperLink's process tree.
        """
        link = next(p for p in self.procs if p.name == "superlink")
        return [pid for pid, cmd in _descendants(link.popen.pid) if "flwr-serverapp" in cmd]

    def restart_superlink(self) -> Proc:
        """Kill the SuperLink (SIGKILL, as a crash) and start it again on its database.

        What its SuperExec started (ServerApps of runs going on) dies with it: they
        watch their parent. SuperNodes and the Fleet proxy keep running. Returns the new
        SuperLink process once it listens again.
        """
        link = next(p for p in self.procs if p.name == "superlink")
        orphans = [pid for pid, _ in _descendants(link.popen.pid)]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(link.popen.pid, signal.SIGKILL)
        link.popen.wait(timeout=15)
        _wait_group_gone(link.popen.pid)
        self.procs.remove(link)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(pid) for pid in orphans):
            time.sleep(0.2)
        left = [pid for pid in orphans if _alive(pid)]
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc = self._spawn("superlink", SERVER, self._link_cmd)
        host, port = self.superlink_addr.rsplit(":", 1)
        self._wait_tcp(SERVER, host, int(port), proc)
        return proc

    def restart_supernode(self, index: int) -> Proc:
        """Start killed SuperNode ``index`` again with its own key, so its old node id.

        The SuperLink refuses to activate a node it still counts online, so this first
        waits until every killed node is offline, then until this one is online again
        (each wait at most ``ready_timeout``). Its log continues the killed one's.

        Raises
        ------
        ValueError
            If SuperNode ``index`` was not killed with :meth:`kill_supernode`.
        """
        if index not in self.killed:
            raise ValueError(f"supernode-{index + 1} was not killed")
        running = self.supernodes - len(self.killed)
        self._wait_nodes(lambda online: online <= running, f"at most {running} online")
        proc = self._start_supernode(index, f"supernode-{index + 1}", host=f"n{index + 1}")
        self.killed.discard(index)
        self._wait_online(running + 1)
        return proc

    def try_unregistered_supernode(self, timeout: float = 90) -> tuple[int | None, str]:
        """Start a SuperNode whose key was never registered; return (exit code, log)."""
        proc = self._start_supernode(0, "unregistered", host="rogue", name="unregistered")
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=timeout)
        return proc.popen.poll(), proc.tail(60)

    def start_impostor(self, partition: int) -> Proc:
        """Start a SuperNode that claims ``partition`` with a key registered for none.

        The operator registers its key ("impostor") with the SuperLink, so it connects,
        but not in the client registration (``register-supernodes.sh
        --no-registration``): a device admitted to the federation that copies another's
        node config. It runs on the rogue host; this waits until it is online.
        """
        self._script(
            "register-supernodes.sh",
            "--connection",
            "tls",
            "--no-registration",
            str(self.pki / "supernodes" / "impostor.pub"),
            host=SERVER,
        )
        proc = self._start_supernode(partition, "impostor", host="rogue", name="impostor")
        self._wait_online(self.supernodes + 1)
        return proc

    def flwr_cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``flwr ARGS`` as the operator on the server host (profiles in its FLWR_HOME)."""
        return subprocess.run(
            self._wrap(SERVER, ["flwr", *args]),
            capture_output=True,
            text=True,
            env=self._env(SERVER),
            timeout=timeout,
            cwd=self.workdir,
        )

    def node_status(self) -> list[str]:
        """Status of each SuperNode the SuperLink knows ("registered", "online", ...)."""
        res = self.flwr_cli("supernode", "list", "tls", "--format", "json")
        try:
            return [n["status"] for n in json.loads(res.stdout)["nodes"]]
        except (ValueError, KeyError):
            return []

    def probe_tls(self, device: int = 0) -> dict[str, str]:
        """Probe the Fleet proxy's port from SuperNode ``device``'s host.

        Returns the outcome of a TLS handshake trusting only our CA (must succeed,
        hostname checked against the certificate's SANs), of one trusting only the
        system CAs (must fail), and what plain HTTP gets back (must not be HTTP).
        """
        host, port = self.fleet_addr.rsplit(":", 1)
        code = (
            "import socket, ssl, sys, json\n"
            "host, port, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3]\n"
            "out = {}\n"
            "def hs(ctx):\n"
            "    with socket.create_connection((host, port), 5) as s:\n"
            "        with ctx.wrap_socket(s, server_hostname=host) as t:\n"
            "            return t.version()\n"
            "out['with_ca'] = hs(ssl.create_default_context(cafile=ca))\n"
            "try:\n"
            "    out['system_cas'] = 'accepted ' + hs(ssl.create_default_context())\n"
            "except ssl.SSLError as e:\n"
            "    out['system_cas'] = 'refused: ' + e.__class__.__name__\n"
            "with socket.create_connection((host, port), 5) as s:\n"
            "    s.settimeout(5)\n"
            "    s.sendall(b'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
            "    try:\n"
            "        data = s.recv(64)\n"
            "    except OSError as e:\n"
            "        data = repr(e).encode()\n"
            "out['plain_http'] = data.decode('latin-1')\n"
            "print(json.dumps(out))\n"
        )
        res = subprocess.run(
            self._wrap(
                f"n{device + 1}",
                [sys.executable, "-c", code, host, port, str(self.pki / "ca.crt")],
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if res.returncode != 0:
            raise RuntimeError(res.stderr)
        return json.loads(res.stdout)

    def probe_apis_from_device(
        self, device: int = 0, requests: Mapping[str, tuple[str, str]] = PROBE_REQUESTS
    ) -> dict[str, int | str]:
        """What SuperNode ``device``'s host gets from the server, request by request.

        Raw HTTPS requests (trusting our CA, as a device does) to the Fleet proxy: the
        HTTP status of each of ``requests`` (name -> status), the path sent byte for
        byte (no normalisation on the way). Plus ``"superlink-port"``: whether a TCP
        connection to the SuperLink's own port on the server's device-facing address is
        ``"refused"`` or ``"open"`` (``"n/a"`` on loopback, where the server has no
        separate address).
        """
        return {
            name: got if isinstance(got, str) else got[0]
            for name, got in self._probe_from_device(device, requests).items()
        }

    def probe_bodies_from_device(
        self, requests: Mapping[str, tuple[str, str]], device: int = 0
    ) -> dict[str, tuple[int, str]]:
        """As ``probe_apis_from_device``: name -> (HTTP status, response body), no port."""
        got = self._probe_from_device(device, requests)
        return {name: (got[name][0], got[name][1]) for name in requests}

    def _probe_from_device(
        self, device: int, requests: Mapping[str, tuple[str, str]]
    ) -> dict[str, Any]:
        host, port = self.fleet_addr.rsplit(":", 1)
        direct = f"{SERVER_IP}:{self.superlink_addr.rsplit(':', 1)[1]}"
        code = (
            "import http.client, json, socket, ssl, sys\n"
            "host, port, ca, direct = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]\n"
            "probes = json.loads(sys.argv[5])\n"
            "ctx = ssl.create_default_context(cafile=ca)\n"
            "out = {}\n"
            "for name, (method, path) in probes.items():\n"
            "    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)\n"
            "    conn.request(method, path, body=b'' if method == 'POST' else None,\n"
            "                 headers={'content-type': 'application/protobuf'})\n"
            "    res = conn.getresponse()\n"
            "    out[name] = [res.status, res.read(300).decode('latin-1')]\n"
            "    conn.close()\n"
            "if direct == 'n/a':\n"
            "    out['superlink-port'] = 'n/a'\n"
            "else:\n"
            "    h, p = direct.rsplit(':', 1)\n"
            "    try:\n"
            "        socket.create_connection((h, int(p)), 5).close()\n"
            "        out['superlink-port'] = 'open'\n"
            "    except ConnectionRefusedError:\n"
            "        out['superlink-port'] = 'refused'\n"
            "print(json.dumps(out))\n"
        )
        args = [
            host,
            port,
            str(self.pki / "ca.crt"),
            direct if self.mode == "netns" else "n/a",
            json.dumps(dict(requests)),
        ]
        res = subprocess.run(
            self._wrap(f"n{device + 1}", [sys.executable, "-c", code, *args]),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if res.returncode != 0:
            raise RuntimeError(res.stderr)
        return json.loads(res.stdout)

    def device_flwr_cli(
        self, *args: str, device: int = 0, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """Run ``flwr ARGS`` on SuperNode ``device``'s host, profile ``tls`` = the proxy.

        What an operator's commands do when a device (holding ``ca.crt``) tries them.
        """
        host = f"n{device + 1}"
        self._script(
            "flwr-home.sh",
            "--superlink",
            self.fleet_addr,
            "--ca",
            str(self.pki / "ca.crt"),
            host=host,
        )
        return subprocess.run(
            self._wrap(host, ["flwr", *args]),
            capture_output=True,
            text=True,
            env=self._env(host),
            timeout=timeout,
            cwd=self.workdir,
        )

    def log_tails(self, lines: int = 30) -> str:
        """The last ``lines`` lines of every log of the federation, for failure messages."""
        parts = []
        for log in sorted((self.workdir / "logs").glob("*.log")):
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
            parts.append(f"----- {log.name}\n{tail}")
        return "\n".join(parts)

    def ditto_state_dir(self, index: int) -> Path:
        """SuperNode ``index``'s ``ditto-state-dir``: a folder of its host's home."""
        return self.workdir / "homes" / f"n{index + 1}" / "ditto"

    def app(self) -> Path:
        """The app ``flwr run`` packs: the checkout's packed files, staged in the workdir.

        Flower walks every file under the folder it is given before applying
        ``fab-include``; the checkout's venv made that 12 CPU-s a run
        (:mod:`fairfl.simulation.staging`). Staged again on every call, so a run packs
        the checkout as it is now.
        """
        from fairfl.simulation.staging import stage_app

        staged = self.workdir / "app" / REPO_ROOT.name
        shutil.rmtree(staged, ignore_errors=True)
        return stage_app(REPO_ROOT, staged)

    def out_dir(self, name: str = "run") -> Path:
        """Where run ``name`` writes its results (on the SuperLink host)."""
        return self.out_root / name

    # ------------------------------------------------------------------ internals
    def _choose_network(self) -> None:
        if self.network == "loopback":
            self.mode, self.fallback_reason = "loopback", "loopback requested"
            return
        reason = self._make_namespaces()
        if reason is None:
            self.mode = "netns"
            return
        if self.network == "netns":
            raise RuntimeError(f"network namespaces unavailable: {reason}")
        self.mode, self.fallback_reason = "loopback", reason

    def _ip(self, *args: str) -> None:
        res = subprocess.run(["ip", *args], capture_output=True, text=True)
        if res.returncode != 0:
            raise OSError(f"ip {' '.join(args)}: {res.stderr.strip()}")

    def _make_namespaces(self) -> str | None:
        """Create the namespaces and their bridge; return why not, or None on success."""
        if shutil.which("ip") is None:
            return "iproute2 ('ip') is not installed"
        hosts = {SERVER: SERVER_IP, "rogue": ROGUE_IP}
        hosts |= {f"n{i + 1}": f"{SUBNET_PREFIX}.{10 + i + 1}" for i in range(self.supernodes)}
        bridge_ns = f"{self.tag}-br"
        try:
            self._ip("netns", "add", bridge_ns)
            self.namespaces.append(bridge_ns)
            self._ip("-n", bridge_ns, "link", "add", "br0", "type", "bridge")
            self._ip("-n", bridge_ns, "link", "set", "br0", "up")
            for host, ip in hosts.items():
                ns = f"{self.tag}-{host}"
                self._ip("netns", "add", ns)
                self.namespaces.append(ns)
                # The pair is created inside the bridge namespace with its peer moved
                # straight into the host namespace: the root namespace never sees it.
                self._ip(
                    "-n",
                    bridge_ns,
                    "link",
                    "add",
                    f"v-{host}",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    ns,
                )
                self._ip("-n", bridge_ns, "link", "set", f"v-{host}", "master", "br0", "up")
                self._ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
                self._ip("-n", ns, "link", "set", "eth0", "up")
                self._ip("-n", ns, "link", "set", "lo", "up")
        except OSError as err:
            for ns in reversed(self.namespaces):
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            self.namespaces.clear()
            return str(err)
        return None

    def _wrap(self, host: str, cmd: Sequence[str]) -> list[str]:
        if self.mode == "netns":
            return ["ip", "netns", "exec", f"{self.tag}-{host}", *cmd]
        return list(cmd)

    def _env(self, host: str) -> dict[str, str]:
        env = dict(os.environ)
        venv_bin = _venv_bin()
        if venv_bin is not None:
            env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
            env["FAIRFL_VENV"] = str(venv_bin.parent)
        # One Flower home per "host", as on separate machines; the operator's holds
        # the connection profiles.
        env["FLWR_HOME"] = str(self.workdir / "homes" / host)
        env["FAIRFL_PKI_DIR"] = str(self.pki)
        env["FLWR_TELEMETRY_ENABLED"] = "0"
        env["FLWR_DISABLE_UPDATE_CHECK"] = "1"
        env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _script(self, script: str, *args: str, host: str) -> str:
        res = subprocess.run(
            self._wrap(host, ["bash", str(SCRIPTS / script), *args]),
            capture_output=True,
            text=True,
            env=self._env(host),
            timeout=120,
        )
        if res.returncode != 0:
            raise RuntimeError(f"{script} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
        return res.stdout

    def _spawn(self, name: str, host: str, cmd: Sequence[str]) -> Proc:
        log = self.workdir / "logs" / f"{name}.log"
        # Append: a restarted SuperNode's log continues the killed one's.
        out = open(log, "a")  # noqa: SIM115 - handed to the child; closed below
        try:
            popen = subprocess.Popen(
                self._wrap(host, ["bash", *cmd]),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env(host),
                cwd=self.workdir,
                start_new_session=True,
            )
        finally:
            out.close()
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def _start_supernode(self, index: int, key: str, *, host: str, name: str | None = None) -> Proc:
        name = name or f"supernode-{index + 1}"
        # Each namespace has its own loopback: all SuperNodes can use Flower's default.
        runtime_port = 9094 if self.mode == "netns" else free_port()
        args = [
            str(SCRIPTS / "start-supernode.sh"),
            "--superlink",
            self.fleet_addr,
            "--partition-id",
            str(index),
            "--num-partitions",
            str(self.supernodes),
            "--device",
            self.device,
            "--key",
            str(self.pki / "supernodes" / key),
            "--ca",
            str(self.pki / "ca.crt"),
            "--port",
            str(runtime_port),
            "--isolation",
            self.isolation,
        ]
        if self.ditto_state:
            args += ["--ditto-state-dir", str(self.ditto_state_dir(index))]
        if self.supernode_max_retries is not None:
            args += ["--", "--max-retries", str(self.supernode_max_retries)]
        proc = self._spawn(name, host, args)
        if self.isolation == "process":
            self._wait_tcp(host, "127.0.0.1", runtime_port, proc)
            self._spawn(
                f"superexec-{name}",
                host,
                [
                    str(SCRIPTS / "start-superexec.sh"),
                    "--runtime-api",
                    f"127.0.0.1:{runtime_port}",
                    "--insecure",
                    "--secret",
                    str(self.pki / "supernodes" / f"{key}.superexec.secret"),
                ],
            )
        return proc

    def _wait_tcp(self, host: str, ip: str, port: int, proc: Proc) -> None:
        probe = (
            "import socket,sys\n"
            "try: socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).close()\n"
            "except OSError: sys.exit(1)\n"
        )
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.tail()}")
            res = subprocess.run(self._wrap(host, [sys.executable, "-c", probe, ip, str(port)]))
            if res.returncode == 0:
                return
            time.sleep(0.5)
        raise TimeoutError(f"{proc.name} not listening on {ip}:{port}:\n{proc.tail()}")

    def _wait_online(self, count: int) -> None:
        self._wait_nodes(lambda online: online >= count, f"{count} online")

    def _wait_nodes(self, done: Callable[[int], bool], what: str) -> None:
        """Wait until ``done(number of SuperNodes the SuperLink counts online)``."""
        deadline = time.monotonic() + self.ready_timeout
        status: list[str] = []
        while time.monotonic() < deadline:
            for proc in self.procs:
                if not proc.alive():
                    raise RuntimeError(
                        f"{proc.name} exited ({proc.popen.returncode}):\n{proc.tail()}"
                    )
            status = self.node_status()
            if status and done(status.count("online")):
                return
            time.sleep(1)
        raise TimeoutError(f"SuperNodes not {what} after {self.ready_timeout}s: {status}")


def main(argv: Sequence[str] | None = None) -> int:
    """Start a federation, submit one run, tear down; return flwr run's exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--supernodes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--network", choices=["auto", "netns", "loopback"], default="auto")
    parser.add_argument("--isolation", choices=["subprocess", "process"], default="subprocess")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="keep everything here (default: a temporary directory)",
    )
    parser.add_argument(
        "-c",
        "--run-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="run-config override (VALUE in TOML syntax), repeatable",
    )
    args = parser.parse_args(argv)

    overrides: dict[str, Any] = {
        "num-server-rounds": args.rounds,
        "num-partitions": args.supernodes,
        "min-available-nodes": args.supernodes,
    }
    for item in args.run_config:
        key, _, value = item.partition("=")
        overrides[key] = tomllib.loads(f"v = {value}")["v"] if value else ""
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fairfl-localfed-"))
    t0 = time.monotonic()
    with LocalFederation(
        workdir, supernodes=args.supernodes, network=args.network, isolation=args.isolation
    ) as fed:
        where = "network namespaces" if fed.mode == "netns" else f"loopback ({fed.fallback_reason})"
        up = time.monotonic() - t0
        print(
            f"federation up on {where} in {up:.1f}s; SuperLink {fed.superlink_addr} "
            f"(server host only), Fleet proxy {fed.fleet_addr}"
        )
        app_run_config(overrides)  # fail early on unknown keys
        res = fed.submit_run(overrides)
        print(f"flwr run exited {res.returncode}; log {workdir}/logs/flwr-run-run.log")
        print(f"results: {fed.out_dir()}")
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())
