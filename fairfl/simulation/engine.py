"""Run fairfl through Flower's simulation engine (``flwr run``) and clean up after it.

:func:`simulate` starts its own simulation SuperLink on a free loopback port with a
project-local ``FLWR_HOME``, submits the app with ``flwr run <app> --stream``, waits for
it, and stops the SuperLink it started, with all its descendants and Ray's daemons, by
PID (Flower's managed local SuperLink would otherwise stay alive in the background).
``flwr run`` exits 0 also when the run failed, so the outcome is read from the
``summary.json`` this run wrote under its run id. The run has one id on screen, fairfl's
(the one ``summary.json`` and ``rounds.jsonl`` carry): Flower's own run id belongs to the
SuperLink, which stops with the run, so :func:`relay_flower_output` shows fairfl's in its
place.
:func:`~fairfl.simulation.signals.stop_on_signals` turns SIGTERM and SIGINT into an
exception, so a stopped runner still stops everything it started.
``scripts/flwr_sim.py`` is the command-line wrapper
(:func:`fairfl.simulation.engine_cli.main`); ``fairfl compare --engine flwr`` calls
:func:`run_simulation` once per run.

This module runs the processes; its helpers live beside it by job:
:mod:`~fairfl.simulation.processes` (ports, finding and stopping processes by PID),
:mod:`~fairfl.simulation.signals` (stop signals), :mod:`~fairfl.simulation.overrides`
(the app and the ``flwr run`` strings) and :mod:`~fairfl.simulation.ray_probe` (Ray
clusters). The names other code imports from here are re-exported.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fairfl.metrics import PERCENT
from fairfl.simulation.overrides import (
    federation_config,
    find_app_dir,
    parse_init_args,
    run_out_dir,
    toml_overrides,
)
from fairfl.simulation.processes import (
    _ACTIVE_RUNS,
    alive,
    descendants,
    flower_env,
    free_port,
    processes_naming,
    processes_of_run,
    stop,
    stop_pids,
    wait_for_port,
)
from fairfl.simulation.ray_probe import (
    CLUSTER_FILE,
    PRIVATE_RAY,
    RAY_ADDRESS_ENV,
    check_ray_address,
)
from fairfl.simulation.signals import exit_on_signals, signals_deferred
from fairfl.simulation.staging import stage_app
from fairfl.telemetry.environment import RAY_CLUSTER_ENV

__all__ = [
    "CLUSTER_FILE",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "RAY_ADDRESS_ENV",
    "SimulationResult",
    "alive",
    "check_ray_address",
    "descendants",
    "exit_on_signals",
    "federation_config",
    "final_line",
    "find_app_dir",
    "flower_env",
    "free_port",
    "parse_init_args",
    "processes_naming",
    "processes_of_run",
    "relabel_flower_line",
    "relay_flower_output",
    "run_outcome",
    "run_simulation",
    "simulate",
    "stop",
    "stop_pids",
    "toml_overrides",
    "wait_for_port",
]

logger = logging.getLogger(__name__)

#: Exit codes of the runner (``scripts/flwr_sim.py``); a stop signal gives 128 + signum.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124

#: ``flwr run``'s line announcing Flower's run id (the SuperLink's, gone with the run).
_FLOWER_STARTED = re.compile(r"Successfully started run \d+")
#: Flower's log line repeating that id when its log stream starts.
_FLOWER_LOGSTREAM = re.compile(r"Starting logstream for run_id `\d+`")


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
    a stop signal raised by :func:`~fairfl.simulation.signals.stop_on_signals`), the
    SuperLink, its descendants and every process carrying this run's id (Ray's daemons)
    are stopped by PID.

    Parameters
    ----------
    run_config : str
        ``--run-config`` overrides (see
        :func:`~fairfl.simulation.overrides.toml_overrides`); empty for none.
    supernodes : int
        Number of simulated SuperNodes (one data partition each).
    flwr_home : Path
        ``FLWR_HOME`` of this run (created; holds the SuperLink's state and log).
    cpus_per_client : int
        ``client-resources-num-cpus`` of the federation.
    timeout : float
        Seconds ``flwr run`` may take.
    app_dir : Path | None
        The Flower app (default: :func:`~fairfl.simulation.overrides.find_app_dir`).
    output : IO[bytes] | None
        Where ``flwr run``'s output goes, as it is. Default: this process's stdout,
        through :func:`relay_flower_output` (fairfl's run id in place of Flower's).
    superlink_started : Callable[[subprocess.Popen], None] | None
        Called with the SuperLink process once it listens (benchmarks watch its tree).
    summary_path : Path | None
        Where the run writes ``summary.json`` (default: in
        :func:`~fairfl.simulation.overrides.run_out_dir`).
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
    # flwr run packs a staged copy of the app's packed files (fairfl.simulation.staging);
    # the SuperLink still runs in the app folder, where relative out-dirs land.
    staging = Path(tempfile.mkdtemp(prefix="fairfl-fab-"))
    try:
        packed = stage_app(app, staging / app.name)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    command = [
        str(bin_dir / "flwr"),
        "run",
        str(packed),
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
                env={**env, "PYTHONUNBUFFERED": "1"} if output is None else env,
                cwd=app,
                stdout=subprocess.PIPE if output is None else output,
                stderr=subprocess.STDOUT,
            )
            relay = None
            if flwr_run.stdout is not None:
                relay = threading.Thread(
                    target=relay_flower_output,
                    args=(flwr_run.stdout, sys.stdout, run_id),
                    daemon=True,
                )
                relay.start()
            try:
                code = flwr_run.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return SimulationResult(
                    EXIT_TIMEOUT, run_id, out_dir, None, f"flwr run took over {timeout:g} s"
                )
            if relay is not None:
                relay.join(timeout=15)  # the rest of flwr run's output, before the final line
        finally:
            with signals_deferred():  # a stop signal now must not cut the cleanup short
                stop_pids([p.pid for p in started] + processes_of_run(run_id))
                for process in started:
                    process.wait(timeout=15)
                _ACTIVE_RUNS.discard(run_id)
                shutil.rmtree(staging, ignore_errors=True)
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


def relabel_flower_line(line: str, run_id: str) -> str | None:
    """One line of ``flwr run``'s output as fairfl shows it: ``None`` drops it.

    Flower's run id (``Successfully started run 8301``, repeated by its log's
    ``Starting logstream for run_id`` line) is the simulation SuperLink's, which stops
    with the run, so ``flwr log`` cannot use it afterwards: the start line names fairfl's
    ``run_id`` instead (the id of ``summary.json``, ``rounds.jsonl`` and
    :func:`final_line`), the log line is dropped, every other line is kept as it is.
    """
    if _FLOWER_STARTED.search(line):
        return f"run {run_id}: started on Flower's simulation engine\n"
    if _FLOWER_LOGSTREAM.search(line):
        return None
    return line


def relay_flower_output(stream: Iterable[bytes], sink: IO[str], run_id: str) -> None:
    """Copy ``flwr run``'s output to ``sink`` line by line, through :func:`relabel_flower_line`."""
    for raw in stream:
        line = relabel_flower_line(raw.decode(errors="replace"), run_id)
        if line is not None:
            sink.write(line)
            sink.flush()


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


def final_line(summary: dict[str, Any]) -> str:
    """The final client accuracies of a summary, in %, with its (fairfl's) run id."""
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
