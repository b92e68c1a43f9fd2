"""aggregate_train of every registered rule against Flower's FedAvg, over a size matrix.

For each size (10, 50, 100 clients x 0.1M, 2M float32 parameters) the same replies
(built with ``fairfl.contract.write_train_reply``, carrying ``train_loss``,
``activation``, ``rcfl-eta``, ``acc-before-training`` (FedFa), ``group-counts`` (FairFed's
8 counts of a binary attribute) and ``partition-id`` so every rule accepts them) go to
Flower's ``FedAvg.aggregate_train`` and to each registered rule's. Each rule gets a
fresh strategy per call (built and ``configure_train``-ed outside the timing), calls are
interleaved across rules so drifting load hits all alike, and the best of ``--repeats``
CPU times (``time.process_time``: what this process computed, not what the other
processes on a shared machine took) is printed with its ratio to Flower's FedAvg.
Absolute times depend on the machine; only the ratios mean anything.

    nice .venv/bin/python benchmarks/bench_aggregate_all_rules.py
    nice .venv/bin/python benchmarks/bench_aggregate_all_rules.py --clients 10 50 \
        --params 100000 --rules fedavg semivred --repeats 5
    nice .venv/bin/python benchmarks/bench_aggregate_all_rules.py --json out.json

Each timed call follows an untimed call of the same entry (``--no-warm-up`` turns this
off), so that every implementation is timed in its own steady state: the call right
after Flower's FedAvg otherwise lands its output arrays on fresh pages (Flower frees its
decoded arrays and the heap is trimmed), ~5 ms more CPU at 50 x 2M, which fell on
whichever rule came first.

``--json PATH`` also writes the run as JSON (the dict :func:`main` returns): the
machine, the 1-minute load before and after, the repeats, and per size and rule the
best CPU ms and its ratio to Flower's FedAvg measured in the same run.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any
from unittest.mock import Mock

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import load_1min, machine, write_json  # noqa: E402 (after sys.path)

from fairfl._compat import server_task_identity  # noqa: E402 (after sys.path)
from fairfl.contract import keys, write_train_reply  # noqa: E402
from fairfl.strategies.registry import STRATEGIES, build_strategy  # noqa: E402

ACTIVATION_DIM = 16
FIRST_NODE = 1001


def model_shapes(num_params: int) -> dict[str, tuple[int, ...]]:
    """Two square dense layers with biases, about ``num_params`` parameters."""
    width = int(np.sqrt(num_params / 2))
    return {
        "fc1.weight": (width, width),
        "fc1.bias": (width,),
        "fc2.weight": (width, width),
        "fc2.bias": (width,),
    }


def reply_message(node_id: int, content) -> Mock:
    """A reply Message as ``tests/conftest.py::make_reply`` builds it."""
    message = Mock(spec=Message)
    message.metadata.src_node_id = node_id
    message.has_error.return_value = False
    message.content = content
    return message


def make_replies(num_clients: int, num_params: int, seed: int):
    """The global model and ``num_clients`` replies near it (float32)."""
    rng = np.random.default_rng(seed)
    shapes = model_shapes(num_params)
    global_np = {k: (rng.normal(size=s) * 0.1).astype(np.float32) for k, s in shapes.items()}
    global_record = ArrayRecord({k: Array(v) for k, v in global_np.items()})
    replies = []
    for i in range(num_clients):
        local = ArrayRecord(
            {
                k: Array(v + (rng.normal(size=v.shape) * 0.01).astype(np.float32))
                for k, v in global_np.items()
            }
        )
        content = write_train_reply(
            local,
            num_examples=int(rng.integers(20, 500)),
            loss_before_training=float(rng.uniform(0.2, 3.0)),
            partition_id=i,
            activation=rng.normal(size=ACTIVATION_DIM).tolist(),
            rcfl_eta=float(rng.uniform(0.0, 1.0)),
            acc_before_training=float(rng.uniform(0.0, 1.0)),
            group_counts=rng.integers(1, 60, size=8).tolist(),
        )
        replies.append(reply_message(FIRST_NODE + i, content))
    total = sum(int(np.prod(s)) for s in shapes.values())
    return global_record, replies, total


def as_gradient_reply(reply: Message) -> Message:
    """``reply`` as q-FedSGD's ClientApp sends it: its arrays as the gradient record."""
    content = RecordDict(
        {keys.GRADIENT: reply.content[keys.ARRAYS], keys.METRICS: reply.content[keys.METRICS]}
    )
    return reply_message(int(reply.metadata.src_node_id), content)


def configured(name: str, global_record: ArrayRecord, num_clients: int):
    """A fresh rule, after ``configure_train`` on a mock grid of ``num_clients`` nodes."""
    run_config = {key: value for key, value in STRATEGIES[name].defaults().items()}
    run_config["lr"] = 0.1
    strategy = build_strategy(name, run_config, min_available_nodes=1)
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = [FIRST_NODE + i for i in range(num_clients)]
    with server_task_identity(1):
        list(strategy.configure_train(1, global_record, ConfigRecord({"lr": 0.1}), grid))
    return strategy


def measure(
    rules, num_clients: int, num_params: int, repeats: int, seed: int, warm_up: bool = True
):
    """Best CPU and wall seconds per rule (and Flower's FedAvg) on one size.

    With ``warm_up``, each timed call follows an untimed call of the same entry.
    """
    global_record, replies, total = make_replies(num_clients, num_params, seed)
    # q-FedSGD's clients send a full-batch gradient instead of trained weights: the same
    # arrays under that key stand in for it (the cost is reading them, not their values).
    gradient_replies = [as_gradient_reply(reply) for reply in replies]
    makers = {"flower-fedavg": lambda: FlowerFedAvg(min_available_nodes=1)}
    for name in rules:
        makers[name] = lambda name=name: configured(name, global_record, num_clients)
    best = {name: (np.inf, np.inf) for name in makers}
    errors: dict[str, str] = {}
    for _ in range(repeats):
        for name, make in makers.items():
            if name in errors:
                continue
            try:
                these = gradient_replies if name == "qfedsgd" else replies
                if warm_up:
                    make().aggregate_train(1, these)
                strategy = make()
                gc.collect()
                cpu, wall = time.process_time(), time.perf_counter()
                arrays, _ = strategy.aggregate_train(1, these)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                if arrays is None:
                    raise RuntimeError("aggregate_train returned no model")
            except Exception as error:  # report it, go on with the others
                errors[name] = f"{type(error).__name__}: {error}"[:120]
                continue
            best[name] = (min(best[name][0], cpu), min(best[name][1], wall))
    del replies, gradient_replies
    gc.collect()
    return total, best, errors


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; print the table and return (and with ``--json``, write) it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", nargs="+", type=int, default=[10, 50, 100])
    parser.add_argument("--params", nargs="+", type=int, default=[100_000, 2_000_000])
    parser.add_argument("--rules", nargs="+", default=None, help="default: all registered")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the run here")
    parser.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="time each call without an untimed call of the same entry just before it",
    )
    args = parser.parse_args(argv)
    rules = args.rules or list(STRATEGIES)
    logging.getLogger("flwr").setLevel(logging.WARNING)  # Flower logs each aggregation
    logging.getLogger("fairfl").setLevel(logging.WARNING)
    load_before = load_1min()
    print(f"load average before: {os.getloadavg()}", flush=True)

    results = {}
    for num_params in args.params:
        for num_clients in args.clients:
            total, best, errors = measure(
                rules, num_clients, num_params, args.repeats, args.seed, args.warm_up
            )
            results[(num_clients, total)] = (best, errors)
            base = best["flower-fedavg"][0]
            print(
                f"{num_clients:4d} clients x {total / 1e6:.2f}M params: Flower FedAvg "
                f"{base * 1e3:.1f} ms CPU (best of {args.repeats})",
                flush=True,
            )

    sizes = list(results)
    header = "rule".ljust(14) + "".join(f"{c}x{p / 1e6:.1f}M".rjust(11) for c, p in sizes)
    print("\nCPU time of aggregate_train / Flower FedAvg's, same replies")
    print(header)
    print("-" * len(header))
    base_row = "flower ms".ljust(14) + "".join(
        f"{results[s][0]['flower-fedavg'][0] * 1e3:11.1f}" for s in sizes
    )
    print(base_row)
    for name in rules:
        cells = []
        for size in sizes:
            best, errors = results[size]
            if name in errors:
                cells.append("error".rjust(11))
            else:
                cells.append(f"{best[name][0] / best['flower-fedavg'][0]:11.2f}")
        print(name.ljust(14) + "".join(cells))
    for size in sizes:
        for name, error in results[size][1].items():
            print(f"error {name} at {size[0]} clients x {size[1]:,} params: {error}")
    print(f"load average after: {os.getloadavg()}")
    by_size = []
    for clients, params in sizes:
        best, errors = results[(clients, params)]
        base = best["flower-fedavg"][0]
        by_size.append(
            {
                "clients": clients,
                "params": params,
                "baseline_cpu_ms": base * 1e3,
                "rules": {
                    name: {"cpu_ms": cpu * 1e3, "ratio": cpu / base, "wall_ms": wall * 1e3}
                    for name, (cpu, wall) in best.items()
                    if name != "flower-fedavg" and name not in errors
                },
                "errors": errors,
            }
        )
    result: dict[str, Any] = {
        "benchmark": "aggregate_all_rules",
        "machine": machine(),
        "load_1min_before": load_before,
        "load_1min_after": load_1min(),
        "repeats": args.repeats,
        "warm_up": args.warm_up,
        "baseline": "flower FedAvg aggregate_train",
        "sizes": by_size,
    }
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
