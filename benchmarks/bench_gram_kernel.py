"""What a compiled Gram kernel would buy FedMGDA+: ``benchmarks/gram_kernel.c`` against
:func:`fairfl.strategies.fedmgda.gram_matrix` on the same updates.

Run: ``nice .venv/bin/python benchmarks/bench_gram_kernel.py [--repeats 7] [--json PATH]``

fairfl is a pure-Python package: FedMGDA+'s Gram is numpy's float32 syrk (OpenBLAS) on
blocks that Python packs from the replies. On some CPUs OpenBLAS's own kernel choice is
slow for this shape (tens of rows, millions of columns; README, "Benchmarks"), and the
packing is a separate pass through the cache. This benchmark measures what a small AVX2
kernel in C (packing each 4,096-column chunk into L2 and multiplying it at once, float32
products added in double, as ``gram_matrix`` does) does on the same 50 updates of a
2M-parameter model, built here with the system's C compiler. It is evidence for a
packaging decision (a compiled extension, or not), not code fairfl runs.

It prints the best CPU time of each (``time.process_time``, interleaved; both on one
thread, as ``gram_matrix`` pins its BLAS), their ratio, and each one's largest relative
difference from a float64 Gram of the same updates. Without a C compiler, or on a CPU
without AVX2 and FMA, it says so and records why.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .`
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import load_1min, write_json  # noqa: E402 (after sys.path)

from fairfl.strategies._blas_kernels import first_cpu_fields  # noqa: E402
from fairfl.strategies.fedmgda import gram_matrix  # noqa: E402

SOURCE = ROOT / "benchmarks" / "gram_kernel.c"
CLIENTS = 50
PARAMETERS = 2_002_000  # bench_fedmgda.py's model, here as one array per client
BUILD = ["-O3", "-mavx2", "-mfma", "-shared", "-fPIC"]


def build(folder: Path) -> tuple[ctypes.CDLL | None, str]:
    """The compiled kernel and the command that built it, or ``None`` and the reason."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    flags = set(first_cpu_fields().get("flags", "").split())
    if compiler is None:
        return None, "no C compiler (cc, gcc or clang) on PATH"
    if not {"avx2", "fma"} <= flags:
        return None, "the CPU lacks AVX2 or FMA (/proc/cpuinfo flags)"
    library = folder / "gram_kernel.so"
    argv = [compiler, *BUILD, "-o", str(library), str(SOURCE)]
    subprocess.run(argv, check=True)
    kernel = ctypes.CDLL(str(library))
    kernel.gram_f32.argtypes = [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int64,
        ctypes.c_void_p,
    ]
    kernel.gram_f32.restype = ctypes.c_int
    return kernel, " ".join([Path(compiler).name, *BUILD, "-o gram_kernel.so", SOURCE.name])


def compiled_gram(kernel: ctypes.CDLL, centre: np.ndarray, rows: list[np.ndarray]) -> np.ndarray:
    """The kernel's Gram of ``rows[i] - centre``, symmetrised (float64)."""
    n = len(rows)
    pointers = (ctypes.c_void_p * n)(*[row.ctypes.data for row in rows])
    out = np.zeros((n, n))
    status = kernel.gram_f32(pointers, centre.ctypes.data, n, centre.size, out.ctypes.data)
    if status != 0:
        raise RuntimeError(f"gram_f32 refused {n} rows")
    return np.triu(out) + np.triu(out, 1).T


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
    with tempfile.TemporaryDirectory(prefix="fairfl-gram-kernel-") as folder:
        kernel, built = build(Path(folder))
        if kernel is None:
            result["skipped"] = built
            print(f"compiled kernel not measured: {built}")
        else:
            wide = [[row.astype(np.float64)] for row in rows]
            reference = gram_matrix([centre.astype(np.float64)], wide)
            scale = float(np.max(np.abs(reference)))
            local = [[row] for row in rows]
            runs = {
                "fairfl": lambda: gram_matrix([centre], local),
                "compiled": lambda: compiled_gram(kernel, centre, rows),
            }
            cpu_ms = best_cpu_ms(runs, args.repeats)
            result |= {
                "built_with": built,
                "best_cpu_ms": cpu_ms,
                "ratio_compiled_to_fairfl": round(cpu_ms["compiled"] / cpu_ms["fairfl"], 3),
                "max_relative_difference_from_float64": {
                    name: float(np.max(np.abs(run() - reference)) / scale)
                    for name, run in runs.items()
                },
            }
            print(f"Gram of {CLIENTS} updates x {PARAMETERS:,} float32, best of {args.repeats}:")
            for name, ms in cpu_ms.items():
                difference = result["max_relative_difference_from_float64"][name]
                print(f"  {name:9s} {ms:8.1f} ms CPU   max relative difference {difference:.1e}")
            print(f"  compiled / fairfl = {result['ratio_compiled_to_fairfl']:.2f} ({built})")
    result["load_1min_before"], result["load_1min_after"] = load_before, load_1min()
    if args.json is not None:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
