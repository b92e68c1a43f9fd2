"""FedMGDA+ server cost: aggregate_train against Flower's FedAvg, and the QP alone.

Run: ``nice .venv/bin/python benchmarks/bench_fedmgda.py [--clients 50] [--repeats 5]``

1. ``aggregate_train`` of :class:`fairfl.strategies.FedMGDAPlus` and of Flower's
   :class:`flwr.serverapp.strategy.FedAvg` on the same 50 replies of a 2M-parameter
   model (float32), timed alternately; prints the best CPU time (``time.process_time``:
   what this process computed, BLAS threads included, not what other processes on a
   shared machine took) and wall time of each, and their CPU-time ratio (target:
   FedMGDA+ within 2.5× of FedAvg), then FedMGDA+'s stages.
2. :func:`fairfl.strategies.fedmgda.min_norm_weights` for 10, 100 and 500 clients
   (random correlated unit updates), ε = 1 and ε = 0.1 (median wall time).

Only ratios measured in one run are meaningful; absolute times depend on the machine.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from unittest.mock import Mock

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .`

from fairfl._compat import server_task_identity  # noqa: E402
from fairfl.contract import ModelLayout, keys  # noqa: E402
from fairfl.strategies import FairStrategy, FedMGDAPlus  # noqa: E402
from fairfl.strategies.fedmgda import (  # noqa: E402
    fedmgda_step,
    gram_matrix,
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


def cpu_and_wall(fn, *args, **kwargs) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn(*args, **kwargs)
    return time.process_time() - cpu, time.perf_counter() - wall


def bench_aggregate(num_clients: int, repeats: int) -> None:
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

    # Warm up both (first decodes allocate), then alternate to share machine noise.
    ours.aggregate_train(1, replies)
    flower.aggregate_train(1, replies)
    t_ours, t_flower = [], []
    for _ in range(repeats):
        t_flower.append(cpu_and_wall(flower.aggregate_train, 1, replies))
        t_ours.append(cpu_and_wall(ours.aggregate_train, 1, replies))
    cpu_ours, wall_ours = (min(t) for t in zip(*t_ours, strict=True))
    cpu_flower, wall_flower = (min(t) for t in zip(*t_flower, strict=True))
    size = sum(int(np.prod(s)) for s in SHAPES)
    print(f"aggregate_train, {num_clients} replies, {size:,} parameters (best of {repeats}):")
    print(f"  Flower FedAvg : {cpu_flower * 1e3:8.1f} ms CPU {wall_flower * 1e3:8.1f} ms wall")
    print(f"  FedMGDA+      : {cpu_ours * 1e3:8.1f} ms CPU {wall_ours * 1e3:8.1f} ms wall")
    print(
        f"  ratio FedMGDA+/FedAvg = {cpu_ours / cpu_flower:.2f} CPU, "
        f"{wall_ours / wall_flower:.2f} wall  (target <= 2.5)"
    )

    # Stages of FedMGDA+: the reader without its value pass (the Gram pass checks the
    # values), the Gram, the QP and the step.
    layout = ModelLayout.of(global_record)
    stages = {
        "read (no values)": lambda: FairStrategy.read_train_replies(ours, 1, replies, layout),
        "gram (float64)": lambda: gram_matrix(global_arrays, locals_),
    }
    gram = gram_matrix(global_arrays, locals_)
    k_bar, norms = normalize_gram(gram)
    prior = prior_weights([1] * num_clients, "uniform")
    lam, _ = min_norm_weights(k_bar, prior, 1.0)
    stages["QP"] = lambda: min_norm_weights(k_bar, prior, 1.0)
    stages["step (float64)"] = lambda: fedmgda_step(global_arrays, locals_, lam, 1.0, norms=norms)
    for name, fn in stages.items():
        best = min(cpu_and_wall(fn)[0] for _ in range(3))
        print(f"    {name:16s}: {best * 1e3:8.1f} ms CPU")


def bench_qp(sizes: list[int], dim: int, repeats: int) -> None:
    rng = np.random.default_rng(1)
    print(f"min_norm_weights (quadprog), random correlated unit updates in R^{dim}:")
    for n in sizes:
        shared = rng.standard_normal(dim)
        g = rng.standard_normal((n, dim)) + shared
        g /= np.linalg.norm(g, axis=1, keepdims=True)
        gram = g @ g.T
        prior = np.full(n, 1.0 / n)
        for epsilon in (1.0, 0.1):
            lam, status = min_norm_weights(gram, prior, epsilon)
            times = [timed(min_norm_weights, gram, prior, epsilon) for _ in range(repeats)]
            print(
                f"  n = {n:4d}, eps = {epsilon:3.1f}: {statistics.median(times) * 1e3:8.2f} ms "
                f"({status}, {np.count_nonzero(lam > 1e-9)} clients with λ > 0)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    bench_aggregate(args.clients, args.repeats)
    bench_qp([10, 100, 500], dim=2000, repeats=args.repeats)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
