"""Run fairfl through Flower's simulation engine (``flwr run``) and clean up after it.

:func:`simulate` starts its own simulation SuperLink on a free loopback port with a
project-local ``FLWR_HOME``, submits the app with ``flwr run <app> --stream``, waits for
it, and stops the SuperLink it started, with all its descendants and Ray's daemons, by
PID (Flower's managed local SuperLink would otherwise stay alive in the background).
``flwr run`` exits 0 also when the run failed, so the outcome is read from the
``summary.json`` this run wrote under its run id. :func:`stop_on_signals` turns SIGTERM
and SIGINT into an exception, so a stopped runner still stops everything it started.
``scripts/flwr_sim.py`` is the command-line wrapper (:func:`main`); ``fairfl compare
--engine flwr`` calls :func:`run_simulation` once per run.
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
import tomllib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fairfl.metrics import PERCENT
from fairfl.telemetry.environment import RAY_CLUSTER_ENV

logger = logging.getLogger(__name__)

#: Exit codes of the runner (``scripts/flwr_sim.py``); a stop signal gives 128 + signum.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
#: The signals :func:`stop_on_signals` turns into a clean stop.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Run ids of the :func:`simulate` calls in progress in this process (any thread).
_ACTIVE_RUNS: set[str] = set()


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


@dataclass(frozen=True)
class SimulationResult:
    """How one :func:`simulate` call ended.

    Attributes
    ----------
    code : int
        Exit code: :data:`EXIT_OK` only if this run wrote a ``completed`` summary, else
        :data:`EXIT_FAILED` or :data:`EXIT_TIMEOUT` (see the README's exit-code table).
    run_id : str
        The id this run's ServerApp writes into ``summary.json`` and ``rounds.jsonl``.
    out_dir : Path
        The run's ``out-dir``.
    summary : dict[str, Any] | None
        The ``summary.json`` this run wrote, or ``None`` if it wrote none.
    message : str
        One line on the outcome (why it failed).
    """

    code: int
    run_id: str
    out_dir: Path
    summary: dict[str, Any] | None
    message: str


def run_out_dir(run_config: str, app: Path) -> Path:
    """The ``out-dir`` a run writes to: the ``--run-config`` override, else the app's default.

    A relative folder is relative to the app directory (where the ServerApp runs).

    Raises
    ------
    ValueError
        If ``run_config`` is not a valid ``--run-config`` string.
    """
    from flwr.common.config import parse_config_args

    try:
        overrides = parse_config_args([run_config]) if run_config.strip() else {}
    except Exception as error:  # click's ClickException or a TOML error, by flwr version
        raise ValueError(f"cannot parse {run_config!r}: {error}") from error
    out_dir = overrides.get("out-dir")
    if out_dir is None:
        project = tomllib.loads((app / "pyproject.toml").read_text(encoding="utf-8"))
        out_dir = project["tool"]["flwr"]["app"]["config"]["out-dir"]
    path = Path(str(out_dir))
    return path if path.is_absolute() else app / path


#: The environment variable through which Ray finds a running cluster.
RAY_ADDRESS_ENV = "RAY_ADDRESS"

#: Seconds a Ray cluster's GCS gets to accept a connection before it is called absent.
RAY_CONNECT_TIMEOUT = 10.0
#: Seconds a Ray cluster's GCS gets to answer one gRPC call once connected.
RAY_HANDSHAKE_TIMEOUT = 5.0
#: The call of the handshake: what ``ray.init`` itself asks a GCS first (Ray's
#: ``NodeInfoGcsService``), with an empty request, valid for every field's default.
GCS_HANDSHAKE_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"


def check_ray_address(
    address: str,
    timeout: float = RAY_CONNECT_TIMEOUT,
    handshake_timeout: float = RAY_HANDSHAKE_TIMEOUT,
) -> None:
    """Refuse a Ray cluster address where no Ray GCS answers, within seconds.

    ``ray.init(address=...)`` on an address where nothing listens retries for minutes,
    logging only "Failed to connect to GCS"; where another service listens it hung past
    300 s (a listener that never answers) or failed after ~35 s with Ray's raw
    traceback. So the address must accept a TCP connection within ``timeout`` seconds
    and then answer Ray's own first gRPC call (:data:`GCS_HANDSHAKE_METHOD`) within
    ``handshake_timeout`` seconds; an HTTP server, a silent listener or another gRPC
    service fails. A GCS that asks for Ray's token authentication is let through (Ray
    says what it needs). ``auto`` and ``ray://`` (Ray Client) addresses are left to Ray.

    Raises
    ------
    ValueError
        If ``address`` is not ``host:port``, or no Ray GCS answers there in time (the
        message names the address and what was found there).
    """
    import grpc

    if address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(
            f"Ray address {address!r} is not host:port (its GCS, as `ray start` prints)"
        )
    refused = f"no Ray cluster answers at {address} (--ray-address or ${RAY_ADDRESS_ENV})"
    advice = "start one with `ray start --head` or give its GCS address"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as error:
        raise ValueError(f"{refused}: {error}; {advice}") from error
    with grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)]) as channel:
        call = channel.unary_unary(GCS_HANDSHAKE_METHOD)
        try:
            call(b"", timeout=handshake_timeout)
        except grpc.RpcError as error:
            code = error.code()
            if code == grpc.StatusCode.UNAUTHENTICATED:
                return
            found = {
                grpc.StatusCode.UNIMPLEMENTED: "a gRPC service that is not a Ray GCS",
                grpc.StatusCode.DEADLINE_EXCEEDED: (
                    f"something that accepts connections but gave no Ray answer within "
                    f"{handshake_timeout:g} s"
                ),
            }.get(code, f"something that does not speak Ray's gRPC ({code.name})")
            raise ValueError(f"{refused}: {found} listens there; {advice}") from None


#: ``ray.init``'s address of a private Ray: started for the run, whatever else runs here.
PRIVATE_RAY = "local"

#: ``ray.init`` arguments Ray refuses when it connects to an existing cluster.
CLUSTER_OWNED_INIT_ARGS = ("num_cpus", "num_gpus")


def federation_config(
    supernodes: int,
    cpus_per_client: float,
    gpus_per_client: float = 0.0,
    init_args: Mapping[str, Any] | None = None,
    *,
    attached: bool = False,
) -> str:
    """``flwr run --federation-config`` of a simulation: nodes, client resources, init args.

    Raises
    ------
    ValueError
        If a resource is negative, or ``attached`` and ``init_args`` set ``num_cpus`` or
        ``num_gpus`` (Ray fails such a run: "When connecting to an existing cluster,
        num_cpus and num_gpus must not be provided", and ``flwr run`` still exits 0).
    """
    if supernodes < 1:
        raise ValueError(f"supernodes must be at least 1, got {supernodes}")
    if cpus_per_client <= 0 or gpus_per_client < 0:
        raise ValueError(
            "client resources must be positive CPUs and non-negative GPUs, got "
            f"cpus={cpus_per_client}, gpus={gpus_per_client}"
        )
    parts = [f"num-supernodes={supernodes}", f"client-resources-num-cpus={cpus_per_client:g}"]
    if gpus_per_client > 0:
        parts.append(f"client-resources-num-gpus={gpus_per_client:g}")
    for name, value in (init_args or {}).items():
        key = name.replace("-", "_")
        if attached and key in CLUSTER_OWNED_INIT_ARGS:
            raise ValueError(
                f"init arg {name} cannot be set when attaching to a Ray cluster: the "
                "cluster's own resources are used (leave it out, or drop --ray-address)"
            )
        parts.append(toml_overrides({f"init-args-{key.replace('_', '-')}": value}))
    return " ".join(parts)


def parse_init_args(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as init args; values are TOML scalars (``4``, ``true``, ``'x'``).

    Raises
    ------
    ValueError
        If an item has no ``=`` or its value is not a TOML scalar.
    """
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--init-arg must be KEY=VALUE, got {item!r}")
        try:
            parsed[key.strip()] = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            parsed[key.strip()] = value.strip()  # a bare word: a string
    return parsed


#: Where a run on an attached Ray cluster records the cluster (in its out-dir).
CLUSTER_FILE = "cluster.json"

_CLUSTER_PROBE = """
import json, sys
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
nodes = [n for n in ray.nodes() if n.get("Alive")]
print(json.dumps({
    "address": sys.argv[1],
    "nodes": [{"node_id": n["NodeID"], "ip": n["NodeManagerAddress"],
               "cpus": n["Resources"].get("CPU", 0.0), "gpus": n["Resources"].get("GPU", 0.0)}
              for n in nodes],
    "cpus": sum(n["Resources"].get("CPU", 0.0) for n in nodes),
    "gpus": sum(n["Resources"].get("GPU", 0.0) for n in nodes),
}))
ray.shutdown()
"""


def record_cluster(address: str, path: Path, timeout: float = 120.0) -> str:
    """Write the Ray cluster's nodes, CPUs and GPUs to ``path``; a line saying what it is.

    Asked in a child process (connecting a driver to the cluster, as ``ray status``
    does), so this process never holds a Ray connection. A cluster that cannot be asked
    is recorded as such, with the reason: the run's results stand either way.
    """
    try:
        probe = subprocess.run(
            [sys.executable, "-c", _CLUSTER_PROBE, address],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        cluster = json.loads(probe.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as error:
        cluster = {"address": address, "error": f"could not ask the cluster: {error}"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cluster, indent=2) + "\n", encoding="utf-8")
    if "error" in cluster:
        return f"Ray cluster {address}: {cluster['error']}"
    return (
        f"Ray cluster {address}: {len(cluster['nodes'])} nodes, {cluster['cpus']:g} CPUs, "
        f"{cluster['gpus']:g} GPUs (recorded in {path})"
    )


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


def simulate(
    run_config: str,
    supernodes: int,
    flwr_home: Path,
    cpus_per_client: int = 1,
    timeout: float = 1800.0,
    *,
    app_dir: Path | None = None,
    output: IO[bytes] | None = None,
    superlink_started: Any = None,
    summary_path: Path | None = None,
    ray_address: str | None = None,
    gpus_per_client: float = 0.0,
    init_args: Mapping[str, Any] | None = None,
) -> SimulationResult:
    """Start a simulation SuperLink, ``flwr run`` the app on it, stop everything it started.

    With ``ray_address`` the simulation attaches to that running Ray cluster: Ray finds
    it through ``RAY_ADDRESS`` in the SuperLink's environment (``flwr run`` has no option
    for it, and setting it for ``flwr run`` alone starts a private Ray), and the
    cluster's own resources are used, so ``num_cpus``/``num_gpus`` init args are refused
    (Ray would fail the run with them). Without it, ``RAY_ADDRESS`` is ``local`` in the
    SuperLink's environment and a private Ray starts (never a cluster found through
    Ray's address file). Nothing of the cluster is stopped. The run's
    ``summary.json`` names the cluster it ran on (``environment.ray_cluster``: the
    address, or ``local``).

    ``flwr run --stream`` exits 0 also when the ServerApp failed, so the outcome is read
    from the ``summary.json`` the run wrote under its own run id. Whatever happens (also
    a stop signal raised by :func:`stop_on_signals`), the SuperLink, its descendants and
    every process carrying this run's id (Ray's daemons) are stopped by PID.

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
    summary_path : Path | None
        Where the run writes ``summary.json`` (default: in :func:`run_out_dir`).
    ray_address : str | None
        ``host:port`` of a Ray cluster's GCS to run on (``ray start --head`` prints it).
    gpus_per_client : float
        ``client-resources-num-gpus`` (fractional allowed): Ray shows a ClientApp a GPU
        only when this is above 0.
    init_args : Mapping[str, Any] | None
        Flower's ``init-args-*`` for ``ray.init`` (``num_cpus=4`` becomes
        ``init-args-num-cpus=4``).

    Returns
    -------
    SimulationResult
        The exit code, the run id and, if this run wrote one, its summary.

    Raises
    ------
    ValueError
        If ``run_config`` cannot be parsed, or init args name ``num_cpus``/``num_gpus``
        while attaching to a cluster, or ``gpus_per_client`` is negative.
    """
    from fairfl.telemetry.stream import RUN_ID_ENV

    federation = federation_config(
        supernodes, cpus_per_client, gpus_per_client, init_args, attached=ray_address is not None
    )
    app = app_dir if app_dir is not None else find_app_dir()
    out_dir = summary_path.parent if summary_path is not None else run_out_dir(run_config, app)
    run_id = uuid.uuid4().hex
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
    env = {**flower_env(flwr_home), RUN_ID_ENV: run_id}
    # Flower's ray.init() takes no address (its init args have none), so Ray reads
    # RAY_ADDRESS; unset, it would attach to any cluster found through Ray's address
    # file (a `ray start` on this machine), while 'local' always starts a Ray of its own.
    env[RAY_ADDRESS_ENV] = ray_address if ray_address is not None else PRIVATE_RAY
    # The ServerApp records it in summary.json (fairfl.telemetry.environment).
    env[RAY_CLUSTER_ENV] = env[RAY_ADDRESS_ENV]
    command = [
        str(bin_dir / "flwr"),
        "run",
        str(app),
        "fairfl-sim",
        "--stream",
        "--federation-config",
        federation,
    ]
    if run_config:
        command += ["--run-config", run_config]
    started: list[subprocess.Popen[bytes]] = []
    _ACTIVE_RUNS.add(run_id)
    with (flwr_home / "superlink.log").open("wb") as log_file:
        try:
            superlink = _start(
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
                started,
                env=env,
                cwd=app,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            wait_for_port(port, superlink)
            if superlink_started is not None:
                superlink_started(superlink)
            logger.debug("simulate: %s", " ".join(command))
            flwr_run = _start(
                command,
                started,
                env=env,
                cwd=app,
                stdout=output,
                stderr=subprocess.STDOUT if output is not None else None,
            )
            try:
                code = flwr_run.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return SimulationResult(
                    EXIT_TIMEOUT, run_id, out_dir, None, f"flwr run took over {timeout:g} s"
                )
        finally:
            with signals_deferred():  # a stop signal now must not cut the cleanup short
                stop_pids([p.pid for p in started] + processes_of_run(run_id))
                for process in started:
                    process.wait(timeout=15)
                _ACTIVE_RUNS.discard(run_id)
    return run_outcome(out_dir, run_id, code)


def run_outcome(out_dir: Path, run_id: str, code: int) -> SimulationResult:
    """Judge a finished run by the ``summary.json`` it wrote, not by ``flwr run``'s code.

    Parameters
    ----------
    out_dir : Path
        The run's ``out-dir``.
    run_id : str
        The id the run was given (``FAIRFL_RUN_ID``).
    code : int
        ``flwr run``'s exit code (0 also when the ServerApp failed).

    Returns
    -------
    SimulationResult
        :data:`EXIT_OK` with the summary if run ``run_id`` wrote a ``completed`` one;
        otherwise :data:`EXIT_FAILED` (or ``code`` if that is non-zero) and why. A
        summary from another run is never returned.
    """
    from fairfl.server.results import COMPLETED, SummaryError, summary_of_run

    failed = code or EXIT_FAILED
    try:
        summary = summary_of_run(out_dir, run_id)
    except SummaryError as error:
        return SimulationResult(failed, run_id, out_dir, None, str(error))
    if summary.get("status") != COMPLETED:
        reason = summary.get("error")
        return SimulationResult(failed, run_id, out_dir, summary, f"run {run_id} failed: {reason}")
    if code != 0:
        return SimulationResult(code, run_id, out_dir, summary, f"flwr run exited with code {code}")
    return SimulationResult(EXIT_OK, run_id, out_dir, summary, f"run {run_id} completed")


def _start(
    command: list[str], started: list[subprocess.Popen[bytes]], **options: Any
) -> subprocess.Popen[bytes]:
    """Start ``command`` and record it in ``started`` at once (so it is always stopped)."""
    process = subprocess.Popen(command, **options)
    started.append(process)
    return process


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
    """:func:`simulate`, returning only its exit code (0: this run completed)."""
    return simulate(
        run_config,
        supernodes,
        flwr_home,
        cpus_per_client,
        timeout,
        app_dir=app_dir,
        output=output,
        superlink_started=superlink_started,
    ).code


class Stopped(BaseException):
    """A stop signal arrived (raised by :func:`stop_on_signals`'s handler).

    A ``BaseException``, like ``KeyboardInterrupt``, so that ``except Exception`` blocks
    do not swallow it while it unwinds through the ``finally`` blocks that stop the
    processes a run started.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def code(self) -> int:
        """The exit code: 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


@contextlib.contextmanager
def stop_on_signals(signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Turn SIGTERM/SIGINT into a :class:`Stopped` exception inside the block.

    The first signal raises; later ones are ignored, so that the cleanup the exception
    runs (stopping a SuperLink and Ray by PID takes seconds) is not cut short. The
    previous handlers are restored on exit. Main thread only.
    """

    def handler(signum: int, frame: Any) -> None:
        for number in signums:
            signal.signal(number, signal.SIG_IGN)
        raise Stopped(signum)

    previous = {number: signal.signal(number, handler) for number in signums}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def stop_started_processes() -> None:
    """Stop, by PID, every process this one started and those of its runs in progress.

    That is every descendant (found via /proc), plus every process carrying the run id
    of a :func:`simulate` call in progress in any thread (Ray's daemons leave the tree).
    """
    runs = [pid for run_id in list(_ACTIVE_RUNS) for pid in processes_of_run(run_id)]
    stop_pids(descendants(os.getpid()) + runs)


@contextlib.contextmanager
def exit_on_signals(program: str, signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """On SIGTERM/SIGINT inside the block: stop what this process started, exit 128 + signum.

    For programs whose runs go on in worker threads or processes (``fairfl compare``):
    an exception in the main thread would wait for them. The handler says so on stderr,
    runs :func:`stop_started_processes` (a run's checkpoint of its last finished round
    stays on disk) and ends the process with ``os._exit``. Later signals are ignored
    while it stops things. The previous handlers are restored on exit from the block.
    """

    def handler(signum: int, frame: Any) -> None:
        for number in signums:
            signal.signal(number, signal.SIG_IGN)
        print(
            f"{program}: stopped by {signal.Signals(signum).name}; stopping every process "
            "it started",
            file=sys.stderr,
            flush=True,
        )
        stop_started_processes()
        sys.stdout.flush()
        os._exit(128 + signum)

    previous = {number: signal.signal(number, handler) for number in signums}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


@contextlib.contextmanager
def signals_deferred(signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Hold back ``signums`` inside the block; one that arrived is delivered on exit."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def stopped_message(stop: Stopped, out_dir: Path | None) -> str:
    """What a runner stopped by a signal says: the signal and the checkpoint to resume from."""
    text = f"{stop}; every process the run started is stopped"
    if out_dir is None:
        return text
    checkpoint = out_dir / "checkpoint.npz"
    if not checkpoint.is_file():
        return f"{text}; no round finished, so there is no checkpoint in {out_dir}"
    from fairfl.server.checkpoint import load_checkpoint

    finished = load_checkpoint(checkpoint).server_round
    return (
        f"{text}; checkpoint after round {finished}: {checkpoint} "
        f"(continue with -c \"resume-from='{checkpoint}'\")"
    )


def final_line(summary: dict[str, Any]) -> str:
    """The final client accuracies of a summary, in %, with its run id."""
    final = summary.get("final_metrics") or {}
    # 0 clients, or an older run's {}: nobody evaluated (older runs had no count)
    if final.get("num-clients", len(final)) == 0 or "acc-mean" not in final:
        return f"run {summary['run_id']}: no client evaluation in the last round"
    return "run {}: final client accuracy: mean {:.2f} %, worst-10% {:.2f} %, std {:.2f}".format(
        summary["run_id"],
        PERCENT * final["acc-mean"],
        PERCENT * final["acc-worst-10"],
        PERCENT * final["acc-std"],
    )


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point of ``scripts/flwr_sim.py``; exits with the run's code.

    0: this run completed and its summary is printed; 1: the run failed or wrote no
    summary of its own; 2: bad arguments or run config; 124: ``--timeout`` passed;
    130/143: stopped by SIGINT/SIGTERM (everything it started is stopped first).
    """
    parser = argparse.ArgumentParser(
        description="Run fairfl through Flower's simulation engine and clean up after it."
    )
    parser.add_argument("--supernodes", type=int, default=20)
    parser.add_argument("--cpus-per-client", type=float, default=1)
    parser.add_argument(
        "--gpus-per-client",
        type=float,
        default=0.0,
        help="GPUs per ClientApp (fractional: 0.25 puts four clients on a GPU); Ray shows a "
        "ClientApp no GPU at 0",
    )
    parser.add_argument(
        "--ray-address",
        default=os.environ.get(RAY_ADDRESS_ENV) or None,
        help="run on this Ray cluster (host:port of its GCS; default: $RAY_ADDRESS); without "
        "it a private Ray starts and stops with the run",
    )
    parser.add_argument(
        "--init-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a ray.init argument for Flower (init-args-KEY), e.g. logging_level=30; "
        "num_cpus and num_gpus only without --ray-address",
    )
    parser.add_argument("--flwr-home", type=Path, default=None, help="default: <app>/.flwr-home")
    parser.add_argument("-c", "--run-config", default="")
    parser.add_argument(
        "--summary", type=Path, help="where the run writes summary.json (default: in out-dir)"
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds flwr run may take")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the results in out-dir (adds overwrite=true to the run config)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="resume although the checkpoint's run had other settings (adds resume-force=true)",
    )
    args = parser.parse_args(argv)
    if args.overwrite:
        args.run_config = f"{args.run_config} overwrite=true".strip()
    if args.force:
        args.run_config = f"{args.run_config} resume-force=true".strip()
    app = find_app_dir()
    flwr_home = args.flwr_home if args.flwr_home is not None else app / ".flwr-home"
    try:
        out_dir = args.summary.parent if args.summary else run_out_dir(args.run_config, app)
    except ValueError as error:
        print(f"flwr_sim: error: --run-config: {error}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    try:
        init_args = parse_init_args(args.init_arg)
        federation_config(
            args.supernodes,
            args.cpus_per_client,
            args.gpus_per_client,
            init_args,
            attached=args.ray_address is not None,
        )
        if args.ray_address is not None:
            check_ray_address(args.ray_address)
    except ValueError as error:
        print(f"flwr_sim: error: {error}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    try:
        with stop_on_signals():
            result = simulate(
                args.run_config,
                args.supernodes,
                flwr_home,
                args.cpus_per_client,
                args.timeout,
                app_dir=app,
                summary_path=out_dir / "summary.json",
                ray_address=args.ray_address,
                gpus_per_client=args.gpus_per_client,
                init_args=init_args,
            )
        if args.ray_address is not None:
            print(f"flwr_sim: {record_cluster(args.ray_address, out_dir / CLUSTER_FILE)}")
    except Stopped as stop:
        print(f"flwr_sim: {stopped_message(stop, out_dir)}", file=sys.stderr)
        sys.exit(stop.code)
    if result.code == EXIT_OK and result.summary is not None:
        print(final_line(result.summary))
    else:
        print(f"flwr_sim: error: {result.message}", file=sys.stderr)
    sys.exit(result.code)
