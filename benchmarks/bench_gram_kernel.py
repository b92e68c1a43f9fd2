"""FedMGDA+'s Gram: the compiled kernel against numpy's path, on the same updates.

Run: ``nice .venv/bin/python benchmarks/bench_gram_kernel.py [--repeats 7] [--json PATH]``

:func:`fairfl.strategies._ops.gram.gram_matrix` forms the Gram either with the compiled
AVX2 kernel (:mod:`fairfl.strategies._ops.gram_kernel`, built on first use with the system's
C compiler) or with numpy: Python packs blocks of differences and OpenBLAS's syrk
multiplies them. This benchmark calls ``gram_matrix`` on the same 50 float32 updates of
a 2M-parameter model with ``FAIRFL_GRAM_KERNEL=numpy`` and ``=compiled`` in turn.

It prints the best CPU time of each (``time.process_time``, interleaved; both on one
thread: ``gram_matrix`` pins its BLAS and the kernel uses none), their ratio, and each
one's largest relative difference from a float64 Gram of the same updates. Where the
kernel cannot be used (no C compiler, a CPU without AVX2 and FMA) it says why and
records it.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .`
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import load_1min, write_json  # noqa: E402 (after sys.path)

from fairfl.strategies._ops.gram import gram_matrix  # noqa: E402
from fairfl.strategies._ops.gram_kernel import (  # noqa: E402
    MODE_VARIABLE,
    GramKernelUnavailableError,
    gram_kernel,
)

CLIENTS = 50
PARAMETERS = 2_002_000  # bench_fedmgda.py's model, here as one array per client


def gram_with(mode: str, centre: np.ndarray, rows: list[list[np.ndarray]]) -> np.ndarray:
    """``gram_matrix`` with ``FAIRFL_GRAM_KERNEL=mode``."""
    os.environ[MODE_VARIABLE] = mode
    return gram_matrix([centre], rows)


def best_cpu_ms(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Best CPU ms of each run, the runs interleaved ``repeats`` times."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            gc.collect()
            start = time.process_time()
            run()
            times[name].append((time.process_time() - start) * 1e3)
    return {name: round(min(values), 1) for name, values in times.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the comparison; print it, write ``--json`` if given, return the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    args = parser.parse_args(argv)
    load_before = load_1min()
    rng = np.random.default_rng(0)
    centre = rng.standard_normal(PARAMETERS).astype(np.float32)
    rows = [
        centre + 0.01 * rng.standard_normal(PARAMETERS).astype(np.float32) for _ in range(CLIENTS)
    ]
    result: dict[str, Any] = {
        "benchmark": "benchmarks/bench_gram_kernel.py",
        "clients": CLIENTS,
        "params": PARAMETERS,
        "repeats": args.repeats,
    }
    try:
        os.environ[MODE_VARIABLE] = "compiled"
        kernel = gram_kernel()
    except GramKernelUnavailableError as error:
        kernel, result["skipped"] = None, str(error)
        print(f"compiled kernel not measured: {error}")
    if kernel is not None:
        wide = [[row.astype(np.float64)] for row in rows]
        reference = gram_matrix([centre.astype(np.float64)], wide)
        scale = float(np.max(np.abs(reference)))
        local = [[row] for row in rows]
        runs = {
            "numpy": lambda: gram_with("numpy", centre, local),
            "compiled": lambda: gram_with("compiled", centre, local),
        }
        cpu_ms = best_cpu_ms(runs, args.repeats)
        result |= {
            "kernel": str(kernel.path.name),
            "best_cpu_ms": cpu_ms,
            "ratio_compiled_to_numpy": round(cpu_ms["compiled"] / cpu_ms["numpy"], 3),
            "max_relative_difference_from_float64": {
                name: float(np.max(np.abs(run() - reference)) / scale) for name, run in runs.items()
            },
        }
        print(f"Gram of {CLIENTS} updates x {PARAMETERS:,} float32, best of {args.repeats}:")
        for name, ms in cpu_ms.items():
            difference = result["max_relative_difference_from_float64"][name]
            print(f"  {name:9s} {ms:8.1f} ms CPU   max relative difference {difference:.1e}")
        print(f"  compiled / numpy = {result['ratio_compiled_to_numpy']:.2f}")
    result["load_1min_before"], result["load_1min_after"] = load_before, load_1min()
    if args.json is not None:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
