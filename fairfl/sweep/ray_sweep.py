"""Sweeps on a Ray cluster: each run of a comparison as a Ray task (``--engine ray``).

``fairfl compare --engine ray`` (and ``--tune``, whose two comparisons go the same way)
hands every (rule, seed, setting) run to :class:`RaySweep`, which submits it as one Ray
task with ``num_cpus`` of its own to the cluster at ``--ray-address`` (default
``$RAY_ADDRESS``). Ray places the tasks on whichever nodes have the CPUs free; a task
runs the in-process runner (:func:`fairfl.simulation.run_inprocess`) with the
comparison's own per-process set-up, so each run's results equal ``--engine
inprocess``'s bit for bit.

Where results go. A run writes into its own folder under ``--out``, as with the other
engines, so ``--out`` (and any relative path of the run config, taken from the driver's
working directory) must be on a filesystem every node mounts at the same path: the
usual set-up of a Ray cluster that writes results (Ray Tune asks the same of its
``storage_path``). A node that cannot see ``--out`` fails its runs with that reason.
The driver's progress bar reads the runs' ``rounds.jsonl`` as it does for local runs.

A worker that dies mid-run. Ray retries the task (``max_retries``, :data:`RETRIES`)
on another worker, possibly on another node. The retry starts the run again from its
seed with ``overwrite``: the run's earlier result files are removed first, its
``rounds.jsonl`` is rewritten from round 1 and its ``summary.json`` is written only at
the end, by an atomic rename. Before a finished run enters the report the driver checks
its hash chain (:func:`fairfl.telemetry.ledger.verify_ledger`); a run that fails it, or
whose task fails every retry, is reported as failed with ``error.txt`` saying why, like
any other failed run, and leaves no numbers in the tables.
"""

from __future__ import annotations

import concurrent.futures as futures
import logging
import os
import socket
from pathlib import Path
from typing import Any

from fairfl.report.results import ERROR_FILE, MANIFEST_FILE
from fairfl.sweep.worker import RunStatus, configure_worker, run_one
from fairfl.telemetry.ledger import verify_ledger

#: Times Ray runs a run's task again after the worker running it died.
RETRIES = 3

#: CPUs each run's task asks Ray for (the in-process runner uses one torch thread).
CPUS_PER_RUN = 1.0


def _run_task(
    run: dict[str, Any],
    out_dir: str,
    cwd: str,
    keep_models: bool,
    compress: bool,
    torch_threads: int,
    log_level: int,
) -> RunStatus:
    """One run in a Ray worker: the comparison's worker set-up, then the in-process runner."""
    if not (Path(out_dir) / MANIFEST_FILE).is_file():
        return RunStatus(
            run["dir"],
            "failed",
            0.0,
            f"--out {out_dir} is not visible on Ray node {socket.gethostname()}: "
            "--engine ray needs --out on a filesystem every node mounts at the same path",
        )
    before = os.getcwd()
    os.chdir(cwd if Path(cwd).is_dir() else before)  # relative paths: the driver's
    try:
        configure_worker(torch_threads, log_level)
        return run_one(run, "inprocess", keep_models, None, compress)
    finally:
        os.chdir(before)  # the worker process runs later tasks too


class RaySweep:
    """A Ray driver that runs a comparison's runs as tasks on a cluster.

    Parameters
    ----------
    address : str | None
        The cluster's GCS address (``host:port``); None: ``$RAY_ADDRESS``.
    out_dir : Path
        The comparison's ``--out`` (every node must see it; module docstring).
    cpus_per_run : float (default: :data:`CPUS_PER_RUN`)
        ``num_cpus`` of each run's task (fractions allowed).
    retries : int (default: :data:`RETRIES`)
        ``max_retries`` of each task: runs again after its worker died.
    torch_threads, log_level : int
        The per-process set-up of :func:`fairfl.sweep.compare.execute`'s workers.

    Raises
    ------
    ValueError
        If no address is given (neither ``address`` nor ``$RAY_ADDRESS``) or no cluster
        answers there (:func:`fairfl.simulation.ray_probe.check_ray_address`), or
        ``cpus_per_run`` is not positive, or more than any live node of the cluster has
        (:func:`check_cpus_per_run`; nothing is submitted), or ``retries`` negative.
    ModuleNotFoundError
        If Ray is not installed (the ``[simulation]`` extra).
    """

    def __init__(
        self,
        address: str | None,
        out_dir: Path,
        *,
        cpus_per_run: float = CPUS_PER_RUN,
        retries: int = RETRIES,
        torch_threads: int = 1,
        log_level: int = logging.WARNING,
    ) -> None:
        from fairfl.simulation.ray_probe import RAY_ADDRESS_ENV, check_ray_address

        address = address or os.environ.get(RAY_ADDRESS_ENV) or None
        if address is None:
            raise ValueError(
                f"--engine ray needs the cluster's address: --ray-address or ${RAY_ADDRESS_ENV}"
            )
        if not cpus_per_run > 0:
            raise ValueError(f"--cpus-per-run must be positive, got {cpus_per_run!r}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries!r}")
        check_ray_address(address)
        import ray

        self.address = address
        self.out_dir = out_dir.resolve()
        self._options = (torch_threads, log_level)
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        try:
            # Ray would queue a task no node can hold forever, warning only at the
            # logging level muted above: refused here from the cluster's own inventory.
            check_cpus_per_run(cpus_per_run, self.cluster())
        except ValueError:
            ray.shutdown()
            raise
        self._task = ray.remote(_run_task)
        self._resources = {
            "num_cpus": cpus_per_run,
            "max_retries": retries,
            "retry_exceptions": False,
        }

    def cluster(self) -> dict[str, Any]:
        """The cluster's live nodes with their CPUs and GPUs (as ``cluster.json``)."""
        import ray

        # ray ships nodes() unannotated; it returns one dict per node (read below).
        every: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        nodes = [n for n in every if n.get("Alive")]
        return {
            "address": self.address,
            "nodes": [
                {
                    "node_id": n["NodeID"],
                    "ip": n["NodeManagerAddress"],
                    "cpus": n["Resources"].get("CPU", 0.0),
                    "gpus": n["Resources"].get("GPU", 0.0),
                }
                for n in nodes
            ],
            "cpus": sum(n["Resources"].get("CPU", 0.0) for n in nodes),
            "gpus": sum(n["Resources"].get("GPU", 0.0) for n in nodes),
        }

    def submit(
        self, run: dict[str, Any], keep_models: bool, compress: bool
    ) -> futures.Future[RunStatus]:
        """Submit one run (a manifest entry with its config) as a task named after it."""
        task = self._task.options(name=f"fairfl-run {run['dir']}", **self._resources)
        ref = task.remote(
            run, str(self.out_dir), os.getcwd(), keep_models, compress, *self._options
        )
        future: futures.Future[RunStatus] = ref.future()
        return future

    def close(self) -> None:
        """Disconnect this driver (the cluster keeps running)."""
        import ray

        ray.shutdown()

    def __enter__(self) -> RaySweep:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_cpus_per_run(cpus_per_run: float, cluster: dict[str, Any]) -> None:
    """Refuse ``cpus_per_run`` if no live node of ``cluster`` has that many CPUs.

    ``cluster`` is :meth:`RaySweep.cluster`'s inventory. A task asks for its CPUs on one
    node, so the largest node bounds it, not the cluster's total.

    Raises
    ------
    ValueError
        Naming ``--cpus-per-run``, the cluster's address and each node's CPUs.
    """
    nodes = cluster.get("nodes", [])
    largest = max((float(node["cpus"]) for node in nodes), default=0.0)
    if cpus_per_run > largest:
        listed = ", ".join(f"{node['ip']}: {float(node['cpus']):g}" for node in nodes) or "none"
        raise ValueError(
            f"--cpus-per-run {cpus_per_run:g} is more than any node of the Ray cluster at "
            f"{cluster.get('address')} has (CPUs per live node: {listed}), so no run could "
            "ever start; nothing was submitted. Give at most the largest node's CPUs"
        )


def settle(run: dict[str, Any], future: futures.Future[RunStatus], wall_time: float) -> RunStatus:
    """A finished task's status, checked before its run may enter the report.

    A task that failed every retry (its worker died each time) and a run whose
    ``rounds.jsonl``/``summary.json`` fail their hash chain are failed runs, with the
    reason in the run's ``error.txt``.
    """
    out = Path(run["config"]["out-dir"])
    try:
        status = future.result()
    except Exception as error:  # the task itself failed: its worker died every time
        status = RunStatus(run["dir"], "failed", wall_time, f"{type(error).__name__}: {error}")
    if status.status == "ok":
        try:
            ledger = verify_ledger(out)
            problem = None if ledger.ok else ledger.problem or "the chain does not hold"
        except FileNotFoundError as error:
            problem = str(error)
        if problem is not None:
            status = RunStatus(
                run["dir"], "failed", status.wall_time, f"results do not verify: {problem}"
            )
    if status.status == "failed" and status.error and not (out / ERROR_FILE).is_file():
        out.mkdir(parents=True, exist_ok=True)
        (out / ERROR_FILE).write_text(status.error + "\n", encoding="utf-8")
    return status
