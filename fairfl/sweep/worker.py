"""One run of a sweep, in this process, a worker process or a Ray task.

:mod:`fairfl.sweep.compare` plans and schedules the runs, :mod:`fairfl.sweep.ray_sweep`
sends them to a Ray cluster; both execute each run here, so neither imports the other's
internals.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

from fairfl.report.results import ERROR_FILE, SUMMARY_FILE, compress_rounds
from fairfl.settings import RunSettings

#: Model files a run leaves (final model, resumable checkpoint): dropped by --no-models.
MODEL_FILES = ("final_model.npz", "checkpoint.npz")


@dataclasses.dataclass(frozen=True)
class RunStatus:
    """How one run went: ``ok``, ``failed`` or ``skipped`` (already done), and its time.

    A skipped run's time is the one it recorded when it ran.
    """

    dir: str
    status: str
    wall_time: float
    error: str | None = None


def configure_worker(torch_threads: int, log_level: int) -> None:
    """Per-process set-up: torch threads and quiet Flower logs."""
    import torch

    from fairfl.logs import attach_flower_console

    if torch_threads > 0:
        torch.set_num_threads(torch_threads)
    attach_flower_console(log_level)  # the ClientApp's later call is then a no-op
    logging.getLogger("flwr").setLevel(max(log_level, logging.WARNING))
    logging.getLogger("fairfl").setLevel(log_level)


def run_one(
    run: dict[str, Any],
    engine: str,
    keep_models: bool,
    flwr_home: str | None,
    compress: bool = False,
) -> RunStatus:
    """Execute one planned run (in this process or a worker); never raises."""
    out = Path(run["config"]["out-dir"])
    out.mkdir(parents=True, exist_ok=True)
    (out / ERROR_FILE).unlink(missing_ok=True)
    started = time.perf_counter()
    try:
        if engine == "inprocess":
            from fairfl.simulation import run_inprocess

            run_inprocess({**run["config"], "overwrite": True})  # compare() checked the folder
        else:
            from fairfl.simulation.engine import run_simulation, toml_overrides

            home = (
                Path(flwr_home or out / ".flwr-home")
                / f"{Path(run['dir']).as_posix().replace('/', '_')}"
            )
            with (out / "flwr.log").open("wb") as log:
                code = run_simulation(
                    toml_overrides({**run["config"], "overwrite": True}),
                    int(run["config"].get("num-partitions", RunSettings.num_partitions)),
                    home,
                    output=log,
                )
            shutil.rmtree(home, ignore_errors=True)
            if code != 0 or not (out / SUMMARY_FILE).is_file():
                raise RuntimeError(f"flwr run exited with code {code}; see {out / 'flwr.log'}")
        if not keep_models:
            for name in MODEL_FILES:
                (out / name).unlink(missing_ok=True)
        if compress:
            compress_rounds(out)
        return RunStatus(run["dir"], "ok", time.perf_counter() - started)
    except Exception as error:  # one failed rule must not stop the comparison
        (out / ERROR_FILE).write_text(
            traceback.format_exc() + f"\n{type(error).__name__}: {error}\n"
        )
        return RunStatus(
            run["dir"], "failed", time.perf_counter() - started, f"{type(error).__name__}: {error}"
        )
