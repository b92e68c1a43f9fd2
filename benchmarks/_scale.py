"""The federation the scale benchmarks time, and how they time it in a child process.

Used by ``bench_scale.py``, ``bench_engine_scale.py`` and ``bench_telemetry.py``: the
same task (Synthetic(1, 1), one device per client, multinomial logistic regression,
FedAvg, 1 local epoch), the per-round seconds from the server's ``rounds.jsonl``, a
process's memory from ``/proc``, and :func:`fairfl.simulation.run_inprocess` run in a
fresh Python process (so that each size's peak RSS is its own). fairfl is imported only
inside the child's function, so ``bench_scale.py --fairfl-path`` can time another
checkout.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from pathlib import Path
from typing import Any


def synthetic_fedavg(num_clients: int, rounds: int, out_dir: Path, **more: Any) -> dict[str, Any]:
    """Run config: FedAvg on Synthetic(1, 1), client k is device k; ``more`` is added."""
    return {
        "strategy": "fedavg",
        "dataset": "synthetic",
        "partitioner": "natural",
        "model": "logreg",
        "num-partitions": num_clients,
        "num-server-rounds": rounds,
        "local-epochs": 1,
        "batch-size": 32,
        "lr": 0.05,
        "seed": 1,
        "out-dir": str(out_dir),
        **more,
    }


def round_times(out_dir: Path) -> list[float]:
    """Seconds each round took, from the server's ``wall_time`` stamps."""
    path = out_dir / "rounds.jsonl"
    if not path.is_file():
        return []
    stamps = [json.loads(line)["wall_time"] for line in path.read_text().splitlines() if line]
    return [b - a for a, b in zip([0.0, *stamps], stamps, strict=False)]


def status_kb(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` field in kB (``"VmRSS:"``, ``"VmHWM:"``); 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def child_run_inprocess(config: dict[str, Any]) -> None:
    """In a fresh process: run ``config`` in process, print one JSON line of results.

    ``total_s``, the process's peak RSS (``peak_mb``, ``ru_maxrss``) and that peak less
    the RSS after the imports (``run_mb``: everything the run held).
    """
    import logging

    import torch

    torch.set_num_threads(1)
    from fairfl.logs import attach_flower_console
    from fairfl.simulation import run_inprocess

    logging.getLogger("flwr").setLevel(logging.WARNING)
    attach_flower_console(logging.WARNING)
    baseline_kb = status_kb(os.getpid(), "VmRSS:")
    started = time.perf_counter()
    run_inprocess(config)
    total = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {"total_s": total, "peak_mb": peak_kb / 1024, "run_mb": (peak_kb - baseline_kb) / 1024}
        )
    )


def measure_child(command: list[str], out_dir: Path, timeout: float) -> dict[str, Any]:
    """Run a child that prints :func:`child_run_inprocess`'s line; add its round times.

    Over ``timeout`` seconds: ``{"error": "over N s"}`` with the rounds done; a failed
    child: ``{"error": <the end of its output>}``.
    """
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s", "round_s": round_times(out_dir)}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr or done.stdout)[-500:]}
    return {**json.loads(lines[-1]), "round_s": round_times(out_dir)}
