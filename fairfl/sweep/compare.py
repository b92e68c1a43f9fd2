"""Run rules side by side on identical partitions, initial models and seeds.

A comparison is a list of rules, optional hyperparameter grids, a list of seeds and a
base run config. Every rule variant runs once per seed with the *same* run config apart
from its own keys, so on one seed every variant sees the same partition, the same
train/test split, the same initial model and the same client shuffling (all derive
from ``seed``). Runs go through the in-process runner
(:func:`fairfl.simulation.run_inprocess`) by default, optionally in 2 worker processes,
through Flower's simulation engine (:func:`fairfl.simulation.engine.run_simulation`), or
as tasks on a Ray cluster (:mod:`fairfl.sweep.ray_sweep`, ``--engine ray``).

Output folder layout::

    <out>/manifest.json                      what was run (read by ``fairfl report``)
    <out>/runs/<variant>/seed-<s>/rounds.jsonl, summary.json[, final_model.npz, error.txt]
    <out>/report.md, table6.md/.csv, table2.md/.csv, runs.csv, *.png   (fairfl.report)

Grid and setting syntax: :mod:`fairfl.sweep.plan`.

``fairfl compare --tune`` (:mod:`fairfl.sweep.tune`) runs two comparisons: the grid on
tuning seeds with validation splits, then each rule's chosen setting on ``--seeds``.
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import json
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fairfl.report.results import (
    MANIFEST_FILE,
    ROUNDS_FILE,
    SUMMARY_FILE,
)
from fairfl.server.config_values import (  # re-exported: fairfl.sweep.compare's names
    all_keys,
    known_default,
    parse_value,
    rule_keys,
    shared_keys,
)
from fairfl.sweep.plan import (
    RESERVED_KEYS,
    Assignment,
    PlannedRun,
    Variant,
    check_out,
    check_plan,
    expand_variants,
    parse_assignment,
    plan_runs,
    split_settings,
)
from fairfl.sweep.worker import RunStatus, configure_worker, run_one

if TYPE_CHECKING:
    from fairfl.sweep.ray_sweep import RaySweep

__all__ = [
    "ENGINES",
    "MAX_WORKERS",
    "RESERVED_KEYS",
    "Assignment",
    "PlannedRun",
    "Variant",
    "all_keys",
    "check_out",
    "check_plan",
    "compare",
    "cpu_seconds",
    "execute",
    "expand_variants",
    "known_default",
    "load_average",
    "parse_assignment",
    "parse_value",
    "plan_runs",
    "rule_keys",
    "shared_keys",
    "split_settings",
    "write_manifest",
]

logger = logging.getLogger(__name__)

Engine = Literal["inprocess", "flwr", "ray"]
ENGINES: tuple[str, ...] = ("inprocess", "flwr", "ray")


#: At most this many worker processes (the target machine has 2 cores).
MAX_WORKERS = 2


# --------------------------------------------------------------------------- running


def _finished_wall_time(run: PlannedRun) -> float | None:
    """The wall time that a finished run with this very config recorded, else ``None``.

    A run counts as finished when its ``summary.json`` holds the same config and all its
    rounds; ``--skip-existing`` keeps it, and the manifest keeps its recorded time.
    """
    summary = Path(run.config["out-dir"]) / SUMMARY_FILE
    if not summary.is_file():
        return None
    try:
        saved = json.loads(summary.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None
    # The keys the run was given (older summaries: "config" held only those).
    config = saved.get("config_given", saved.get("config"))
    if isinstance(config, dict):  # runs are started with overwrite=true (compare checks)
        config = {k: v for k, v in config.items() if k != "overwrite"}
    same = json.loads(json.dumps(run.config)) == config
    if not same or saved.get("rounds") != int(run.config.get("num-server-rounds", 0)):
        return None
    return float(saved.get("wall_time") or 0.0)


def _rounds_done(run: PlannedRun) -> int:
    path = Path(run.config["out-dir"]) / ROUNDS_FILE
    try:
        with path.open("rb") as handle:
            return sum(1 for line in handle if line.strip())
    except OSError:
        return 0


ProgressHook = Callable[[int, int, str], None]


def execute(
    plan: Sequence[PlannedRun],
    *,
    engine: Engine = "inprocess",
    workers: int = 1,
    torch_threads: int = 1,
    keep_models: bool = True,
    skip_existing: bool = False,
    progress: bool = True,
    log_level: int = logging.WARNING,
    flwr_home: Path | None = None,
    compress_runs: bool = False,
    ray: RaySweep | None = None,
) -> list[RunStatus]:
    """Run every planned run; a failing run is recorded (``error.txt``) and skipped.

    Parameters
    ----------
    plan : Sequence[PlannedRun]
        From :func:`plan_runs`.
    engine : {"inprocess", "flwr", "ray"}
        The in-process runner, Flower's simulation engine (one ``flwr run`` per run;
        always one run at a time), or the in-process runner as Ray tasks on the
        cluster that ``ray`` is connected to (as many at a time as its CPUs allow).
    workers : int
        Worker processes for in-process runs, 1 or 2 (1: runs in this process; the
        Ray engine ignores it).
    torch_threads : int
        ``torch.set_num_threads`` of each in-process worker (0: leave torch's default).
        One thread per process is much faster on a busy 2-core machine, where torch's
        default thread pool spins against the other processes.
    keep_models : bool
        Keep each run's ``final_model.npz`` (and ``checkpoint.npz``).
    skip_existing : bool
        Do not re-run a run whose ``summary.json`` has the same config and all rounds.
    progress : bool
        Show a progress bar (rich) over all rounds of all runs.
    log_level : int
        Level of the ``fairfl`` logger in the workers (Flower's is at least WARNING).
    flwr_home : Path | None
        Parent of the per-run ``FLWR_HOME`` folders for the Flower engine.
    compress_runs : bool
        Gzip each finished run's ``rounds.jsonl`` into ``rounds.jsonl.gz`` (about 10x
        smaller, e.g. for results kept in git; ``fairfl report`` reads both).
    ray : RaySweep | None
        The Ray driver of ``engine="ray"``.

    Raises
    ------
    ValueError
        If ``engine`` or ``workers`` is invalid, or ``engine="ray"`` comes without ``ray``.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if not 1 <= workers <= MAX_WORKERS:
        raise ValueError(f"workers must be in [1, {MAX_WORKERS}], got {workers}")
    if engine == "flwr":
        workers = 1  # Ray already uses every core; runs go one after another
    if (engine == "ray") != (ray is not None):
        raise ValueError("engine 'ray' needs a RaySweep (ray=...), and only it takes one")
    from fairfl.sweep.ray_sweep import settle

    statuses: dict[str, RunStatus] = {}
    todo = []
    for run in plan:
        wall_time = _finished_wall_time(run) if skip_existing else None
        if wall_time is not None:
            statuses[run.dir] = RunStatus(run.dir, "skipped", wall_time)
        else:
            todo.append(run)
    total_rounds = {run.dir: int(run.config.get("num-server-rounds", 1)) for run in plan}
    finished: set[str] = set(statuses)

    def rounds_completed() -> int:
        return sum(
            total_rounds[r.dir] if r.dir in finished else min(_rounds_done(r), total_rounds[r.dir])
            for r in plan
        )

    executor: futures.Executor
    if ray is not None:
        executor = futures.ThreadPoolExecutor(max_workers=1)  # unused: Ray runs the runs
    elif workers == 1:
        configure_worker(torch_threads if engine == "inprocess" else 0, log_level)
        executor = futures.ThreadPoolExecutor(max_workers=1)
    else:
        executor = futures.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=configure_worker,
            initargs=(torch_threads, log_level),
        )
    home = str(flwr_home) if flwr_home is not None else None
    with executor, _progress_bar(progress, sum(total_rounds.values()), len(plan)) as update:
        pending = {
            (
                ray.submit(run.as_json(), keep_models, compress_runs)
                if ray is not None
                else executor.submit(
                    run_one, run.as_json(), engine, keep_models, home, compress_runs
                )
            ): run
            for run in todo
        }
        submitted = time.perf_counter()
        update(rounds_completed(), len(finished), "")
        while pending:
            done, _ = futures.wait(pending, timeout=0.5, return_when=futures.FIRST_COMPLETED)
            for future in done:
                run = pending.pop(future)
                status = (
                    settle(run.as_json(), future, time.perf_counter() - submitted)
                    if ray is not None
                    else future.result()
                )
                statuses[run.dir] = status
                finished.add(run.dir)
                if status.status == "failed":
                    logger.warning(
                        "compare: %s seed %d failed: %s", run.label, run.seed, status.error
                    )
            running = [r for r in pending.values() if _rounds_done(r) > 0]
            current = ", ".join(f"{r.label} s{r.seed}" for r in running[:2])
            update(rounds_completed(), len(finished), current)
    return [statuses[run.dir] for run in plan]


@contextlib.contextmanager
def _progress_bar(enabled: bool, total_rounds: int, total_runs: int) -> Iterator[ProgressHook]:
    if not enabled:
        yield lambda rounds, runs, current: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    lock = threading.Lock()
    with Progress(
        TextColumn("[bold]rounds"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("runs {task.fields[runs]}/{task.fields[total_runs]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[current]}"),
        transient=False,
    ) as bar:
        task = bar.add_task(
            "compare", total=total_rounds, runs=0, total_runs=total_runs, current=""
        )

        def update(rounds: int, runs: int, current: str) -> None:
            with lock:
                bar.update(task, completed=rounds, runs=runs, current=current)

        yield update


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children (workers)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def write_manifest(out_dir: Path, manifest: Mapping[str, Any]) -> Path:
    """Write ``manifest.json`` (what was run, for ``fairfl report``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / MANIFEST_FILE
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------- top level


def compare(
    *,
    rules: Sequence[str],
    out_dir: Path,
    seeds: Sequence[int],
    grid: Sequence[str] = (),
    settings: Sequence[str] = (),
    engine: Engine = "inprocess",
    workers: int = 1,
    torch_threads: int = 1,
    keep_models: bool = True,
    skip_existing: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    log_level: int = logging.WARNING,
    compress_runs: bool = False,
    baseline: str | None = None,
    weights_label: str | None = None,
    columns: str = "table6",
    title: str | None = None,
    description: str = "",
    reference: Sequence[Mapping[str, Any]] = (),
    command: str = "",
    recipe: str | None = None,
    on_start: Callable[[], Any] | None = None,
    ray_address: str | None = None,
    cpus_per_run: float = 1.0,
) -> Any:
    """Plan, run and report a comparison; returns the :class:`fairfl.report.build.Report`.

    Parameters
    ----------
    rules : Sequence[str]
        Registered rule names.
    out_dir : Path
        Output folder (see the module docstring for its layout).
    seeds : Sequence[int]
        Seeds; each variant runs once per seed.
    grid, settings : Sequence[str]
        ``--grid`` and ``--set`` items (module docstring).
    engine, workers, torch_threads, keep_models, skip_existing, progress, log_level
    compress_runs
        See :func:`execute`.
    overwrite : bool (default: False)
        Run again planned runs whose folders already hold results (``fairfl compare
        --overwrite``). Without it, or ``skip_existing``, such a comparison is refused
        before anything runs, as a single run into a used ``out-dir`` is.
    baseline, weights_label, columns, title
        See :func:`fairfl.report.build.build_report`; stored in the manifest.
    description, reference, command, recipe
        Stored in the manifest and shown in ``report.md``.
    on_start : Callable[[], Any] | None
        Called once every run passed its checks, before the first starts (``fairfl
        compare --dashboard`` starts the live page there).
    ray_address : str | None
        ``engine="ray"``: the cluster's address (None: ``$RAY_ADDRESS``).
    cpus_per_run : float (default: 1.0)
        ``engine="ray"``: CPUs each run's task asks for
        (:class:`fairfl.sweep.ray_sweep.RaySweep`).

    Raises
    ------
    ValueError
        If a rule, grid item, setting or seed is invalid, ``out_dir`` cannot be written,
        any planned run fails its up-front check (:func:`check_plan`), or
        ``engine="ray"`` has no address, before anything runs.
    FileExistsError
        If planned runs already hold results and neither ``overwrite`` nor
        ``skip_existing`` is set (before anything runs).
    """
    from fairfl.report.build import build_report
    from fairfl.server.checkpoint import RESULT_FILES
    from fairfl.telemetry.environment import environment

    base, rule_settings = split_settings(settings)
    if "checkpoint" in shared_keys():
        # Comparison runs are short and reproducible from their seed: no per-round
        # checkpoint unless asked for (--set checkpoint=true).
        base.setdefault("checkpoint", False)
    axes = [parse_assignment(item, multi=True) for item in grid]
    variants = expand_variants(rules, axes, rule_settings)
    plan = check_plan(plan_runs(variants, seeds, base, out_dir), out_dir)
    used = [r.dir for r in plan if any((out_dir / r.dir / n).exists() for n in RESULT_FILES)]
    if used and not (overwrite or skip_existing):
        raise FileExistsError(
            f"--out {out_dir}: {len(used)} planned runs already hold results ({used[0]}, ...): "
            "pass --skip-existing to keep the finished ones or --overwrite to run them again"
        )
    labels = [v.label for v in variants]
    if baseline is not None and baseline not in labels:
        raise ValueError(f"baseline must be one of {labels}, got {baseline!r}")
    if weights_label is not None and weights_label not in labels:
        raise ValueError(f"weights label must be one of {labels}, got {weights_label!r}")
    manifest: dict[str, Any] = {
        "version": 1,
        "title": title or out_dir.resolve().name,
        "description": description,
        "recipe": recipe,
        "command": command,
        "engine": engine,
        "workers": 1 if engine in ("flwr", "ray") else workers,
        "torch_threads": torch_threads,
        "cpu_count": os.cpu_count(),
        "rules": list(dict.fromkeys(rules)),
        "grid": list(grid),
        "settings": list(settings),
        "seeds": list(seeds),
        "base_config": base,
        "baseline": baseline,
        "weights_label": weights_label,
        "columns": columns,
        "reference": [dict(r) for r in reference],
        "variants": [
            {"label": v.label, "rule": v.rule, "overrides": dict(v.overrides)} for v in variants
        ],
        "runs": [run.as_json() for run in plan],
        "load_average_before": load_average(),
        **environment(),
    }
    for run in manifest["runs"]:  # folders relative to the manifest, so it can move
        run["config"] = {k: v for k, v in run["config"].items() if k != "out-dir"}
        run["effective_config"].pop("out-dir", None)
    with contextlib.ExitStack() as stack:
        sweep = None
        if engine == "ray":
            from fairfl.sweep.ray_sweep import RaySweep

            sweep = stack.enter_context(
                RaySweep(
                    ray_address,
                    out_dir,
                    cpus_per_run=cpus_per_run,
                    torch_threads=torch_threads,
                    log_level=log_level,
                )
            )
            manifest["cluster"] = {**sweep.cluster(), "cpus_per_run": cpus_per_run}
        write_manifest(out_dir, manifest)
        if on_start is not None:
            on_start()
        started = time.perf_counter()
        cpu_started = cpu_seconds()
        statuses = execute(
            plan,
            engine=engine,
            workers=workers,
            torch_threads=torch_threads,
            keep_models=keep_models,
            skip_existing=skip_existing,
            progress=progress,
            log_level=log_level,
            compress_runs=compress_runs,
            ray=sweep,
        )
    manifest["wall_time_s"] = round(time.perf_counter() - started, 1)
    manifest["cpu_time_s"] = round(cpu_seconds() - cpu_started, 1)
    manifest["load_average_after"] = load_average()
    for entry, status in zip(manifest["runs"], statuses, strict=True):
        entry["status"] = status.status
        entry["wall_time_s"] = round(status.wall_time, 2)
    write_manifest(out_dir, manifest)
    return build_report(out_dir)
