"""aggregate_train of every registered rule vs Flower's FedAvg, on the same replies.

50 replies of a 2M-parameter float32 model (by default), built once and given to each
rule in turn; each timing is the best of ``--repeats`` runs, measured in this one process,
and printed as a ratio to Flower's ``FedAvg.aggregate_train`` on the same replies.
Absolute times depend on the machine; only the ratios mean anything. Beside them, the
reader's value check of every reply alone: what checking the values before the rule
reads the round would add to the rule's own pass, which checks them as it reads them.

    nice .venv/bin/python benchmarks/bench_aggregate_loss_rules.py
    nice .venv/bin/python benchmarks/bench_aggregate_loss_rules.py --rules qffl vred semivred
    nice .venv/bin/python benchmarks/bench_aggregate_loss_rules.py --profile qffl
    nice .venv/bin/python benchmarks/bench_aggregate_loss_rules.py --json out.json

Each timed call follows an untimed call of the same entry (``--no-warm-up`` turns this
off), so that every implementation is timed in its own steady state: the call right
after Flower's FedAvg otherwise took ~2,900 extra minor page faults (Flower's decoded
arrays are freed and the heap trimmed, so the next output arrays land on fresh pages)
and ~5 ms more CPU, which fell on whichever rule came first (``fedavg``).

``--json PATH`` also writes the run as JSON (the dict :func:`main` returns): the
machine, the 1-minute load before and after, the repeats, and per rule the best CPU
and wall ms and their ratios to Flower's FedAvg measured in the same run.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import sys
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest.mock import Mock

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import load_1min, machine, write_json  # noqa: E402 (after sys.path)

from fairfl._compat import server_task_identity  # noqa: E402
from fairfl.contract import check_array_values, keys  # noqa: E402 (after sys.path)
from fairfl.contract.replies import array_view  # noqa: E402 (after sys.path)
from fairfl.strategies._ops.gram_kernel import gram_kernel_description  # noqa: E402
from fairfl.strategies.registry import STRATEGIES, build_strategy  # noqa: E402

RUN_CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
ACTIVATION_DIM = 16


class Reply:
    """The parts of a reply Message that strategies read (a real one needs a run)."""

    def __init__(self, node_id: int, content: RecordDict) -> None:
        self.metadata = SimpleNamespace(src_node_id=node_id)
        self.content = content

    def has_error(self) -> bool:
        return False


def model_shapes(num_params: int) -> dict[str, tuple[int, ...]]:
    """Two dense layers with biases, about ``num_params`` parameters."""
    width = int(np.sqrt(num_params / 2))
    return {
        "fc1.weight": (width, width),
        "fc1.bias": (width,),
        "fc2.weight": (width, width),
        "fc2.bias": (width,),
    }


def make_replies(num_replies: int, shapes: dict, seed: int) -> tuple[ArrayRecord, list[Reply]]:
    rng = np.random.default_rng(seed)
    global_np = {k: rng.normal(size=s).astype(np.float32) * 0.1 for k, s in shapes.items()}
    global_record = ArrayRecord({k: Array(v) for k, v in global_np.items()})
    replies = []
    for i in range(num_replies):
        arrays = ArrayRecord(
            {
                k: Array(v + rng.normal(size=v.shape).astype(np.float32) * 0.01)
                for k, v in global_np.items()
            }
        )
        metrics = MetricRecord(
            {
                keys.NUM_EXAMPLES: int(rng.integers(20, 500)),
                keys.LOSS_BEFORE_TRAINING: float(rng.uniform(0.2, 3.0)),
                keys.ACTIVATION: [float(v) for v in rng.normal(size=ACTIVATION_DIM)],
                keys.RCFL_ETA: float(rng.uniform(0.0, 1.0)),
                # FedFa reads the accuracy after local training by default.
                keys.ACC_AFTER_TRAINING: float(rng.uniform(0.0, 1.0)),
                # FairFed: counts by (binary attribute, label, prediction)
                keys.GROUP_COUNTS: [int(v) for v in rng.integers(1, 60, size=8)],
                keys.PARTITION_ID: i,
            }
        )
        replies.append(Reply(1000 + i, RecordDict({keys.ARRAYS: arrays, keys.METRICS: metrics})))
    return global_record, replies


def fresh_rule(name: str, global_record: ArrayRecord, num_replies: int):
    strategy = build_strategy(name, RUN_CONFIG, min_available_nodes=1)
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = [1000 + i for i in range(num_replies)]
    with server_task_identity(1):
        list(strategy.configure_train(1, global_record, ConfigRecord({"lr": 0.1}), grid))
    return strategy


def timed_value_check(replies: list[Reply]) -> float:
    """CPU seconds of the reader's value check (NaN/Inf, ``max-abs-weight``) of every reply.

    What deciding value drops before a rule reads the round would add to the rule's own
    pass over the replies, which checks the values as it reads them.
    """
    views = [
        (reply.metadata.src_node_id, key, array_view(array))
        for reply in replies
        for key, array in reply.content[keys.ARRAYS].items()
    ]
    bound = float(RUN_CONFIG["max-abs-weight"])
    gc.collect()
    cpu = time.process_time()
    for node, key, value in views:
        check_array_values(node, key, value, bound)
    return time.process_time() - cpu


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; print the table and return (and with ``--json``, write) it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=50)
    parser.add_argument("--params", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rules", nargs="*", default=None, help="registry names (default: all registered)"
    )
    parser.add_argument("--target", type=float, default=1.15)
    parser.add_argument("--profile", default=None, help="cProfile one rule's aggregate_train")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the run here")
    parser.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="time each call without an untimed call of the same entry just before it",
    )
    args = parser.parse_args(argv)

    shapes = model_shapes(args.params)
    total = sum(int(np.prod(s)) for s in shapes.values())
    global_record, replies = make_replies(args.replies, shapes, args.seed)
    print(f"{args.replies} replies x {total:,} float32 parameters; best of {args.repeats}")
    load_before = load_1min()
    print(f"load average before: {os.getloadavg()}", flush=True)

    if args.profile:
        strategy = fresh_rule(args.profile, global_record, args.replies)
        profiler = cProfile.Profile()
        profiler.enable()
        strategy.aggregate_train(1, replies)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        return {"profile": args.profile}

    # q-FedSGD's clients send a full-batch gradient instead of trained weights: the same
    # arrays under that key stand in for it (the cost is reading them, not their values).
    gradient_replies = [
        Reply(
            reply.metadata.src_node_id,
            RecordDict(
                {
                    keys.GRADIENT: reply.content[keys.ARRAYS],
                    keys.METRICS: reply.content[keys.METRICS],
                }
            ),
        )
        for reply in replies
    ]

    def timed(strategy, these: list[Reply]) -> tuple[float, float]:
        gc.collect()
        cpu, wall = time.process_time(), time.perf_counter()
        arrays, _ = strategy.aggregate_train(1, these)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if arrays is None:
            raise RuntimeError("aggregate_train returned no model")
        return cpu, wall

    # A fresh strategy per call (built untimed): rules with state (AFL) start alike.
    makers = {"flower FedAvg": lambda: FlowerFedAvg(min_available_nodes=1)}
    for name in args.rules if args.rules else list(STRATEGIES):
        makers[name] = lambda name=name: fresh_rule(name, global_record, args.replies)
    # Interleave the calls, so that load drifting on a shared machine hits all alike.
    best: dict[str, tuple[float, float]] = {name: (np.inf, np.inf) for name in makers}
    errors: dict[str, str] = {}
    check_cpu = np.inf
    for _ in range(args.repeats):
        check_cpu = min(check_cpu, timed_value_check(replies))
        for name, make in makers.items():
            if name in errors:
                continue
            these = gradient_replies if name == "qfedsgd" else replies
            try:
                if args.warm_up:
                    make().aggregate_train(1, these)
                cpu, wall = timed(make(), these)
            except Exception as error:  # report it and go on with the others
                errors[name] = f"{type(error).__name__}: {error}"
                continue
            best[name] = (min(best[name][0], cpu), min(best[name][1], wall))
    base_cpu, base_wall = best.pop("flower FedAvg")
    print(f"{'rule':>16s}  {'CPU ms':>8s} {'ratio':>6s}  {'wall ms':>8s} {'ratio':>6s}")
    print(
        f"{'flower FedAvg':>16s}  {base_cpu * 1e3:8.1f} {1:6.2f}  {base_wall * 1e3:8.1f} {1:6.2f}"
    )
    worst = 0.0
    rules: dict[str, dict[str, float]] = {}
    for name, (cpu, wall) in best.items():
        if name in errors:
            print(f"{name:>16s}  error: {errors[name]}")
            continue
        ratio = cpu / base_cpu
        worst = max(worst, ratio)
        rules[name] = {
            "cpu_ms": cpu * 1e3,
            "ratio": ratio,
            "wall_ms": wall * 1e3,
            "wall_ratio": wall / base_wall,
        }
        flag = "" if ratio <= args.target else f"  (> {args.target}x)"
        print(
            f"{name:>16s}  {cpu * 1e3:8.1f} {ratio:6.2f}  {wall * 1e3:8.1f} "
            f"{wall / base_wall:6.2f}{flag}"
        )
    print(f"worst CPU-time ratio {worst:.2f}x (target {args.target}x)")
    print(
        f"the reader's value check alone: {check_cpu * 1e3:.1f} ms CPU, "
        f"{check_cpu / base_cpu:.2f}x Flower's FedAvg"
    )
    print(f"load average after: {os.getloadavg()}")
    result: dict[str, Any] = {
        "benchmark": "aggregate_loss_rules",
        "machine": machine(),
        "load_1min_before": load_before,
        "load_1min_after": load_1min(),
        "repeats": args.repeats,
        "warm_up": args.warm_up,
        "replies": args.replies,
        "params": total,
        "baseline": "flower FedAvg aggregate_train",
        "baseline_cpu_ms": base_cpu * 1e3,
        "baseline_wall_ms": base_wall * 1e3,
        "rules": rules,
        "worst_ratio": worst,
        "target": args.target,
        "errors": errors,
        "gram_path": gram_kernel_description(with_path=False),
        "value_check": {"cpu_ms": check_cpu * 1e3, "ratio": check_cpu / base_cpu},
    }
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
