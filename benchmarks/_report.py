"""What the aggregation benchmarks' ``--json`` files record besides their timings.

The machine (CPU model, cores), the 1-minute load average, and writing the file. Used
by ``bench_aggregate_loss_rules.py``, ``bench_aggregate_all_rules.py`` and
``bench_fedmgda.py``.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np


def machine() -> dict[str, Any]:
    """CPU model, logical cores, Python and numpy versions of this machine."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def cpu_model() -> str:
    """The ``model name`` of ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_1min() -> float:
    """The 1-minute load average (other processes competing for the cores)."""
    return float(os.getloadavg()[0])


def write_json(path: str | Path, result: dict[str, Any]) -> None:
    """Write ``result`` as indented JSON, creating the parent folder."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
