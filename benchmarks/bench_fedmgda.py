"""FedMGDA+ server cost: aggregate_train against Flower's FedAvg, and the QP alone.

Run: ``nice .venv/bin/python benchmarks/bench_fedmgda.py [--clients 50] [--repeats 5]
[--json PATH]``

1. ``aggregate_train`` of :class:`fairfl.strategies.FedMGDAPlus` and of Flower's
   :class:`flwr.serverapp.strategy.FedAvg` on the same 50 replies of a 2M-parameter
   model (float32), timed alternately; prints the best CPU time (``time.process_time``:
   what this process computed, BLAS threads included, not what other processes on a
   shared machine took) and wall time of each, and their CPU-time ratio (target:
   FedMGDA+ within 2.5× of FedAvg), then FedMGDA+'s stages (float32 Gram, the norms
   alone that FedAvg-n computes instead, and the step; the Gram takes the path
   ``FAIRFL_GRAM_KERNEL`` selects, recorded as ``gram_path``) and the floor of numpy's
   path on this machine: its BLAS products alone on updates already packed into one
   array (the compiled kernel replaces both them and the packing). Each run's
   minor page faults are counted too: Flower's FedAvg allocates a fresh array per client
   and layer, and its time depends on whether glibc's malloc hands back reused heap
   pages or fresh ones. In this process it took ~5,800 faults per call (~10 ms, i.e. a
   20 % slower baseline) where ``bench_aggregate_loss_rules.py``'s process took ~0:
   that, not FedMGDA+, is why the two gave 2.2-2.4x and 2.6-2.7x. Run with
   ``MALLOC_MMAP_THRESHOLD_=67108864 MALLOC_TRIM_THRESHOLD_=1073741824`` to pin the
   allocator: Flower then takes ~25 faults here as well, and the ratios agree.
2. Threads, both sides: FedMGDA+ with its BLAS kernels pinned to one thread (the
   default, :func:`fairfl.strategies._ops.blas.one_thread`) and with two; Flower's
   FedAvg with the BLAS pool limited to one thread and to two (its average is NumPy
   ufuncs, which use no BLAS: both should match). Every timed run starts after
   :data:`SETTLE_S` of sleep: after a call on two threads, OpenBLAS's worker thread
   spins for ~50-75 ms of CPU before it parks, and without the pause that CPU was
   charged to whichever run came next (Flower's FedAvg had shown more CPU than wall
   time).
3. :func:`fairfl.strategies.fedmgda_qp.min_norm_weights` for 10, 100 and 500 clients
   (random correlated unit updates), ε = 1 and ε = 0.1 (median wall time).

Only ratios measured in one run are meaningful; absolute times depend on the machine.
``--json PATH`` also writes the run as JSON (the dict :func:`main` returns): the
machine, the 1-minute load before and after, the repeats, the best CPU ms and ratio to
Flower's FedAvg, the thread comparison, the stages and the QP times.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from unittest.mock import Mock

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .`
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import load_1min, machine, write_json  # noqa: E402 (after sys.path)
from threadpoolctl import ThreadpoolController  # noqa: E402

from fairfl._compat import server_task_identity  # noqa: E402
from fairfl.contract import ModelLayout, keys  # noqa: E402
from fairfl.strategies import FairStrategy, FedMGDAPlus  # noqa: E402
from fairfl.strategies._ops import gram as gram_ops  # noqa: E402
from fairfl.strategies._ops.gram import gram_matrix, squared_update_norms  # noqa: E402
from fairfl.strategies._ops.gram_kernel import gram_kernel_description  # noqa: E402
from fairfl.strategies.fedmgda import (  # noqa: E402
    fedmgda_update,
    min_norm_weights,
    normalize_gram,
    prior_weights,
)

# A 2M-parameter MLP-like layout: 1000x1000, 1000, 1000x1000, 1000 (2,002,000 floats).
SHAPES = [(1000, 1000), (1000,), (1000, 1000), (1000,)]


def make_model(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def reply(node_id: int, arrays: list[np.ndarray], num_examples: int) -> Mock:
    """A reply Message mock, as tests/conftest.py builds them."""
    message = Mock(spec=Message)
    message.metadata.src_node_id = node_id
    message.has_error.return_value = False
    content = RecordDict()
    content["arrays"] = ArrayRecord({str(i): Array(a) for i, a in enumerate(arrays)})
    content["metrics"] = MetricRecord({keys.NUM_EXAMPLES: num_examples})
    message.content = content
    return message


def timed(fn, *args, **kwargs) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def cpu_wall_and_faults(fn, *args, **kwargs) -> tuple[float, float, int]:
    """CPU and wall seconds of ``fn(...)``, and the minor page faults it took."""
    gc.collect()  # as the other aggregation benchmarks: no collection inside a timing
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cpu, wall = time.process_time(), time.perf_counter()
    fn(*args, **kwargs)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu, wall, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


#: Seconds of sleep before each timed run, for OpenBLAS workers woken by the previous
#: run to stop spinning (measured: ~50-75 ms of CPU after a two-thread product).
SETTLE_S = 0.3


#: Found once: finding the pools takes ~1 ms, which was inside Flower's timed runs.
CONTROLLER = ThreadpoolController()


def blas_threads(limit: int) -> AbstractContextManager:
    """The BLAS pool limited to ``limit`` threads."""
    return CONTROLLER.limit(limits=limit, user_api="blas")


def two_threads() -> AbstractContextManager:
    """BLAS limited to two threads: the alternative to the one-thread pinning."""
    return blas_threads(2)


def settled(fn: Callable[[], object]) -> tuple[float, float, int]:
    """CPU and wall time of ``fn()`` and its page faults, once the BLAS workers are parked."""
    time.sleep(SETTLE_S)
    return cpu_wall_and_faults(fn)


def bench_aggregate(num_clients: int, repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    global_arrays = make_model(rng)
    locals_ = [
        [g + 0.01 * rng.standard_normal(g.shape).astype(np.float32) for g in global_arrays]
        for _ in range(num_clients)
    ]
    replies = [reply(i + 1, w, int(rng.integers(50, 500))) for i, w in enumerate(locals_)]
    global_record = ArrayRecord({str(i): Array(a) for i, a in enumerate(global_arrays)})
    ours = FedMGDAPlus()
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = list(range(1, num_clients + 1))
    with server_task_identity(1):
        ours.configure_train(1, global_record, ConfigRecord({"lr": 0.1}), grid)
    flower = FlowerFedAvg()
    logging.getLogger("flwr").setLevel(logging.WARNING)

    def ours_two_threads() -> None:
        pinned = gram_ops.one_thread
        gram_ops.one_thread = two_threads  # the pinning, undone for comparison
        try:
            ours.aggregate_train(1, replies)
        finally:
            gram_ops.one_thread = pinned

    def flower_at(limit: int) -> Callable[[], object]:
        def run() -> None:
            with blas_threads(limit):
                flower.aggregate_train(1, replies)

        return run

    runs: dict[str, Callable[[], object]] = {
        "flower": flower_at(1),
        "flower-2-threads": flower_at(2),
        "fedmgda": lambda: ours.aggregate_train(1, replies),
        "fedmgda-2-threads": ours_two_threads,
    }
    # Warm up all (first decodes allocate), then alternate to share machine noise.
    for run in runs.values():
        run()
    times: dict[str, list[tuple[float, float, int]]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(settled(run))
    best = {name: tuple(min(t) for t in zip(*runs_, strict=True)) for name, runs_ in times.items()}
    cpu_flower, wall_flower, faults_flower = best["flower"]
    cpu_ours, wall_ours, faults_ours = best["fedmgda"]
    cpu_two, wall_two, _ = best["fedmgda-2-threads"]
    cpu_flower_two, wall_flower_two, _ = best["flower-2-threads"]
    size = sum(int(np.prod(s)) for s in SHAPES)
    print(f"aggregate_train, {num_clients} replies, {size:,} parameters (best of {repeats}):")
    print(
        f"  Flower FedAvg : {cpu_flower * 1e3:8.1f} ms CPU {wall_flower * 1e3:8.1f} ms wall "
        f"{faults_flower:6d} page faults (BLAS 1 thread)"
    )
    print(
        f"  FedMGDA+      : {cpu_ours * 1e3:8.1f} ms CPU {wall_ours * 1e3:8.1f} ms wall "
        f"{faults_ours:6d} page faults"
    )
    print(
        f"  ratio FedMGDA+/FedAvg = {cpu_ours / cpu_flower:.2f} CPU, "
        f"{wall_ours / wall_flower:.2f} wall  (target <= 2.5)"
    )
    print(
        f"  BLAS threads: 1 (pinned) {cpu_ours * 1e3:.1f} ms CPU {wall_ours * 1e3:.1f} ms wall; "
        f"2 {cpu_two * 1e3:.1f} ms CPU {wall_two * 1e3:.1f} ms wall"
    )
    print(
        f"  Flower FedAvg, BLAS threads: 1 {cpu_flower * 1e3:.1f} ms CPU "
        f"{wall_flower * 1e3:.1f} ms wall; 2 {cpu_flower_two * 1e3:.1f} ms CPU "
        f"{wall_flower_two * 1e3:.1f} ms wall"
    )

    # Stages of FedMGDA+: the reader without its value pass (the Gram pass checks the
    # values), the Gram (at ε = 0 only its diagonal), the QP and the step.
    layout = ModelLayout.of(global_record)
    stages = {
        "read (no values)": lambda: FairStrategy.read_train_replies(ours, 1, replies, layout),
        "gram (float32)": lambda: gram_matrix(global_arrays, locals_),
        "norms (ε = 0)": lambda: squared_update_norms(global_arrays, locals_),
    }
    gram = gram_matrix(global_arrays, locals_)
    k_bar, norms = normalize_gram(gram)
    prior = prior_weights([1] * num_clients, "uniform")
    lam, _ = min_norm_weights(k_bar, prior, 1.0)
    stages["QP"] = lambda: min_norm_weights(k_bar, prior, 1.0)
    stages["step (float32)"] = lambda: fedmgda_update(global_arrays, locals_, lam, 1.0, norms=norms)
    # The floor of numpy's Gram on this machine: its BLAS products alone, on the updates
    # already packed into one float32 (n, d) array (no reading of the replies, no
    # differences), in the same GRAM_CHUNK products as gram_matrix.
    packed = np.stack(
        [
            np.concatenate([np.ravel(w - g) for w, g in zip(local, global_arrays, strict=True)])
            for local in locals_
        ]
    )
    stages["gram products only"] = lambda: products_only(packed)
    stage_ms = {}
    for name, fn in stages.items():
        stage_ms[name] = min(settled(fn)[0] for _ in range(3)) * 1e3
        print(f"    {name:16s}: {stage_ms[name]:8.1f} ms CPU")
    return {
        "replies": num_clients,
        "params": size,
        "baseline": "flower FedAvg aggregate_train (BLAS 1 thread)",
        "baseline_cpu_ms": cpu_flower * 1e3,
        "baseline_wall_ms": wall_flower * 1e3,
        "baseline_page_faults": faults_flower,
        "rules": {
            "fedmgda": {
                "cpu_ms": cpu_ours * 1e3,
                "ratio": cpu_ours / cpu_flower,
                "wall_ms": wall_ours * 1e3,
                "wall_ratio": wall_ours / wall_flower,
                "page_faults": faults_ours,
            }
        },
        "blas_threads": {
            "1": {"cpu_ms": cpu_ours * 1e3, "wall_ms": wall_ours * 1e3},
            "2": {"cpu_ms": cpu_two * 1e3, "wall_ms": wall_two * 1e3},
        },
        "flower_blas_threads": {
            "1": {"cpu_ms": cpu_flower * 1e3, "wall_ms": wall_flower * 1e3},
            "2": {"cpu_ms": cpu_flower_two * 1e3, "wall_ms": wall_flower_two * 1e3},
        },
        "settle_s": SETTLE_S,
        "stages_cpu_ms": stage_ms,
        "gram_path": gram_kernel_description(with_path=False),
    }


def products_only(packed: np.ndarray) -> np.ndarray:
    """The float32 Gram products of ``gram_matrix`` on a packed (n, d) array, one thread."""
    with gram_ops.one_thread():
        return gram_ops._float32_block_gram(packed)


def bench_qp(sizes: list[int], dim: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(1)
    print(f"min_norm_weights (quadprog), random correlated unit updates in R^{dim}:")
    medians: dict[str, float] = {}
    for n in sizes:
        shared = rng.standard_normal(dim)
        g = rng.standard_normal((n, dim)) + shared
        g /= np.linalg.norm(g, axis=1, keepdims=True)
        gram = g @ g.T
        prior = np.full(n, 1.0 / n)
        for epsilon in (1.0, 0.1):
            lam, status = min_norm_weights(gram, prior, epsilon)
            times = [timed(min_norm_weights, gram, prior, epsilon) for _ in range(repeats)]
            medians[f"n={n},eps={epsilon:g}"] = statistics.median(times) * 1e3
            print(
                f"  n = {n:4d}, eps = {epsilon:3.1f}: {statistics.median(times) * 1e3:8.2f} ms "
                f"({status}, {np.count_nonzero(lam > 1e-9)} clients with λ > 0)"
            )
    return medians


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; print the results and return (and with ``--json``, write) them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the run here")
    args = parser.parse_args(argv)
    load_before = load_1min()
    print(f"load average before: {os.getloadavg()}", flush=True)
    aggregate = bench_aggregate(args.clients, args.repeats)
    qp = bench_qp([10, 100, 500], dim=2000, repeats=args.repeats)
    print(f"load average after: {os.getloadavg()}")
    result: dict[str, Any] = {
        "benchmark": "fedmgda",
        "machine": machine(),
        "load_1min_before": load_before,
        "load_1min_after": load_1min(),
        "repeats": args.repeats,
        **aggregate,
        "qp_median_ms": qp,
    }
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
