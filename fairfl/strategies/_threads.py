"""Run a small numerical kernel on one thread: BLAS and OpenMP pools limited for a call.

A pool's threads spin while they wait for work. For the sizes a server aggregates (a Gram
of tens to hundreds of clients, K-means on as many points) waking them costs more than
they save, and on a machine whose cores are busy (other jobs, a simulation's clients)
it is far worse: a 100-client FedMGDA+ Gram took 6x longer on two threads than on one
at load 3 on two cores, and Equitable FL's clustering 7x (``benchmarks/``).
"""

from __future__ import annotations

import functools
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
