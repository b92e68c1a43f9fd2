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

from fairfl.strategies._ops.blas import first_cpu_fields, numpy_blas_pool


def machine() -> dict[str, Any]:
    """CPU model, vector ISA, logical cores, BLAS, Python and numpy versions of this machine.

    The vector ISA and the BLAS kernel are recorded because two machines with one CPU
    model name can differ in both, and the Gram-bound rules' ratios move with them.
    """
    return {
        "cpu": cpu_model(),
        "vector_isa": vector_isa(),
        "cores": os.cpu_count(),
        "blas": blas(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def vector_isa() -> str:
    """The widest x86 vector extension in ``/proc/cpuinfo``'s flags (``"unknown"`` if none)."""
    flags = first_cpu_fields().get("flags", "").split()
    for flag, name in (
        ("avx512f", "AVX-512"),
        ("avx2", "AVX2"),
        ("avx", "AVX"),
        ("sse4_2", "SSE4.2"),
    ):
        if flag in flags:
            return name
    return "unknown"


def blas() -> str:
    """numpy's BLAS library, version and the kernel it chose (threadpoolctl)."""
    lib = numpy_blas_pool()
    if lib is None:
        return "unknown"
    kernel = f" ({lib['architecture']} kernels)" if lib.get("architecture") else ""
    return f"{lib.get('internal_api', 'blas')} {lib.get('version', '')}{kernel}".replace("  ", " ")


def cpu_model() -> str:
    """The ``model name`` of ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    return first_cpu_fields().get("model name") or platform.processor() or platform.machine()


def load_1min() -> float:
    """The 1-minute load average (other processes competing for the cores)."""
    return float(os.getloadavg()[0])


def write_json(path: str | Path, result: dict[str, Any]) -> None:
    """Write ``result`` as indented JSON, creating the parent folder."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
