"""BLAS in the server process: small kernels on one thread, and which OpenBLAS kernels run.

**One thread** (:func:`one_thread`). A pool's threads spin while they wait for work. For
the sizes a server aggregates (a Gram of tens to hundreds of clients, K-means on as many
points) waking them costs more than they save, and on a machine whose cores are busy
(other jobs, a simulation's clients) it is far worse: a 100-client FedMGDA+ Gram took
6x longer on two threads than on one at load 3 on two cores, and Equitable FL's
clustering 7x (``benchmarks/``).

**OpenBLAS's kernels** (:func:`openblas_kernel_advice`): which OpenBLAS kernels numpy
runs, and when another choice is measurably faster. OpenBLAS picks its kernels once,
when the library loads, from the CPU it finds or from ``OPENBLAS_CORETYPE``. On AMD
Zen 4 (x86 family 25 with AVX-512) numpy's OpenBLAS picks its SkylakeX (AVX-512)
kernels, but Zen 4 executes each 512-bit operation as two 256-bit halves, and for the
Gram of FedMGDA+ (tens of rows by millions of float32 columns) the Haswell (AVX2)
kernels were faster there: ``aggregate_train`` at 50 clients x 2M parameters took 199 ms
of CPU against 239 ms on numpy's Gram path, in the same harness, on 2026-11-27
(``docs/results/benchmarks.json``; README, "Benchmarks"). This matters where the Gram
runs in numpy, i.e. where fairfl's compiled Gram kernel (:mod:`.gram_kernel`) cannot be
built or ``FAIRFL_GRAM_KERNEL=numpy``. A library cannot switch kernels once numpy is
loaded, so the Gram rules say so in their summary and the operator sets the variable for
the server process.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any


def one_thread() -> Any:
    """Context manager limiting every loaded BLAS and OpenMP pool to one thread.

    The pools are looked up again when the set of loaded native libraries that bring one
    (numpy's and scipy's BLAS, an OpenMP runtime via torch or scikit-learn) has changed.
    """
    return _controller(frozenset(name for name in _POOL_MODULES if name in sys.modules)).limit(
        limits=1
    )


_POOL_MODULES = ("numpy", "scipy.linalg", "sklearn", "torch")


@functools.cache
def _controller(loaded: frozenset[str]) -> Any:
    # Finding the pools takes ~20 ms, a limit on a found controller ~0.03 ms.
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


#: OpenBLAS kernel families that use 512-bit vectors (threadpoolctl's ``architecture``).
AVX512_KERNELS = frozenset({"SkylakeX", "Cooperlake", "SapphireRapids"})
#: x86 family of AMD Zen 3 and Zen 4; of the two only Zen 4 has AVX-512.
ZEN4_FAMILY = 25


def openblas_kernel_advice() -> str | None:
    """The advice to run OpenBLAS's Haswell kernels, or ``None`` where it does not apply.

    It applies when numpy's BLAS is OpenBLAS running AVX-512 kernels on an AMD CPU of
    family 25 (Zen 4) and ``OPENBLAS_CORETYPE`` is not set. Zen 5 (family 26) executes
    AVX-512 at full width and was not measured, so it gets no advice.

    Returns
    -------
    str | None
        One sentence naming the kernels, the CPU and the variable to set.
    """
    if os.environ.get("OPENBLAS_CORETYPE"):
        return None  # the operator chose
    kernels = numpy_openblas_kernels()
    if kernels not in AVX512_KERNELS or cpu_vendor_family() != ("AuthenticAMD", ZEN4_FAMILY):
        return None
    return (
        f"numpy's OpenBLAS runs its {kernels} (AVX-512) kernels on this AMD Zen 4 CPU, "
        "which splits AVX-512 into 256-bit halves; with OpenBLAS's Haswell kernels the "
        "aggregation took ~1.2x less CPU on such a machine: start the server process with "
        "OPENBLAS_CORETYPE=Haswell (README, Benchmarks)"
    )


def numpy_openblas_kernels() -> str | None:
    """The kernel family of numpy's OpenBLAS (e.g. ``"SkylakeX"``), or ``None``.

    ``None`` when numpy's BLAS is not OpenBLAS or threadpoolctl cannot tell.
    """
    pool = numpy_blas_pool()
    if pool is None or pool.get("internal_api") != "openblas":
        return None
    return pool.get("architecture") or None


def numpy_blas_pool() -> dict[str, Any] | None:
    """The description threadpoolctl gives of numpy's BLAS, or ``None`` if none is loaded.

    numpy's pool is the BLAS pool loaded from numpy's own libraries (wheels bundle one),
    else the first BLAS pool found: scipy's, if loaded, may be listed before it.
    """
    from threadpoolctl import threadpool_info

    pools = [pool for pool in threadpool_info() if pool.get("user_api") == "blas"]
    bundled = [pool for pool in pools if "numpy" in str(pool.get("filepath", ""))]
    pool: dict[str, Any] | None = (bundled or pools or [None])[0]
    return pool


def cpu_vendor_family(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, int] | None:
    """``(vendor_id, cpu family)`` of the first CPU in ``cpuinfo``, or ``None``.

    ``None`` where the file is missing (not Linux) or lacks either field (not x86).
    """
    fields = first_cpu_fields(cpuinfo)
    vendor, family = fields.get("vendor_id"), fields.get("cpu family")
    if vendor is None or family is None or not family.isdigit():
        return None
    return vendor, int(family)


def first_cpu_fields(cpuinfo: str = "/proc/cpuinfo") -> dict[str, str]:
    """The ``name: value`` fields of the first CPU in ``cpuinfo`` (empty if unreadable)."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8") as info:
            for line in info:
                if not line.strip():
                    break  # the first CPU's block ends here
                name, _, value = line.partition(":")
                fields[name.strip()] = value.strip()
    except OSError:
        return {}
    return fields
