"""RC-FL vs FedAvg on Synthetic(1, 1) with 100 devices: worst-10% accuracy at the mean.

Setup (spec ``docs/specs/spec-rcfl.md``; the q-FFL benchmark RC-FL builds on): the 100
natural devices of Synthetic(1, 1) (``dataset="synthetic"``, ``partitioner="natural"``),
multinomial logistic regression (``model="logreg"``), full participation, every client
evaluated on its own test split (30 % of its samples, at least 15) after each round.

Both rules do the same local work, Algorithm 1's protocol: κ = 5 full-batch gradient
steps per round (FedAvg: ``local-epochs=5`` with one batch per epoch), 40 rounds, and
average with the data shares p_i. Each rule has its own step size: FedAvg 0.2, its best
in {0.05, 0.1, 0.2, 0.5} on train loss (0.5 gives a few points more mean accuracy but
a rising loss, and the same 0 worst-10%); RC-FL β = 0.1, lower because a client's model
step is scaled by q_i up to 1/α_i (docs/specs/spec-rcfl.md §9.7). RC-FL uses the spec's
defaults where the paper gives no value (μ = 0.1 for losses of order 1, η₀ = 0, Remark 2's
fallback, with the loss probe ``rcfl-eta-probe`` off, β_η = β)
and a conservativeness α = 0.5. ``rcfl-uniform-cap`` gives every client the same cap
``1/(α n)`` on its mixture weight (α_i = α n p_i, clipped to [p_i, 1]);
``rcfl-shared`` gives every client α_i = α (CVaR_{1−α}), which on this federation
(p_i from 0.002 to 0.22) can at most double a small client's weight.

Printed per rule and seed, then averaged: unweighted mean client accuracy, sample-weighted
accuracy, worst-10% and worst-20% (mean of the 10 / 20 lowest client accuracies),
variance (%²), mean client test loss, the final η and the wall time.

``--results PATH`` also writes the mean over seeds of the mean, worst-10% and worst-20%
accuracy (Markdown), the command and the wall time there
(``docs/results/rcfl-synthetic.md``).

Usage (about 4 minutes for one seed on 2 busy cores)::

    PYTHONPATH=. nice .venv/bin/python experiments/rcfl_synthetic.py
    PYTHONPATH=. nice .venv/bin/python experiments/rcfl_synthetic.py --seeds 0 1 2 \
        --rules fedavg rcfl-uniform-cap rcfl-shared
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fairfl.logs import attach_flower_console
from fairfl.metrics import in_percent
from fairfl.simulation import run_inprocess

RULES: dict[str, dict[str, Any]] = {
    # κ full-batch steps: one batch per epoch (batch larger than any device's split).
    "fedavg": {"strategy": "fedavg", "batch-size": 1_000_000},
    "rcfl-uniform-cap": {"strategy": "rcfl", "rcfl-alpha-rule": "uniform-cap"},
    "rcfl-shared": {"strategy": "rcfl", "rcfl-alpha-rule": "shared"},
}
COLUMNS = ("acc-mean", "acc-weighted-mean", "acc-worst-10", "acc-worst-20", "acc-variance")


def run_one(rule: str, seed: int, args: argparse.Namespace, out_root: Path) -> dict[str, Any]:
    """Run one rule with one seed; return its final fairness metrics and η."""
    config: dict[str, Any] = {
        "dataset": "synthetic",
        "partitioner": "natural",
        "model": "logreg",
        "num-partitions": 100,
        "num-server-rounds": args.rounds,
        "lr": args.fedavg_lr if RULES[rule]["strategy"] == "fedavg" else args.lr,
        "local-epochs": args.local_steps,
        "rcfl-local-steps": args.local_steps,
        "rcfl-alpha": args.alpha,
        "rcfl-mu": args.mu,
        "rcfl-seed": seed,
        "seed": seed,
        "out-dir": str(out_root / f"{rule}-seed{seed}"),
        **RULES[rule],
    }
    started = time.perf_counter()
    outcome = run_inprocess(config)
    metrics = in_percent(outcome.summary["final_metrics"])
    metrics["eta"] = getattr(outcome.strategy, "eta", float("nan"))
    metrics["min-test"] = min(outcome.summary["test_samples_per_client"].values())
    metrics["seconds"] = time.perf_counter() - started
    return metrics


def main() -> None:
    """Run every rule for every seed and print the comparison table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--rules", nargs="+", default=["fedavg", "rcfl-uniform-cap"])
    parser.add_argument("--lr", type=float, default=0.1, help="RC-FL's step size β")
    parser.add_argument("--fedavg-lr", type=float, default=0.2)
    parser.add_argument("--local-steps", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--mu", type=float, default=0.1)
    parser.add_argument("--out-dir", default="", help="keep results here (default: temp)")
    parser.add_argument("--results", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()
    started = time.perf_counter()
    for rule in args.rules:
        if rule not in RULES:
            parser.error(f"--rules must be among {sorted(RULES)}, got {rule!r}")
    torch.set_num_threads(1)  # tiny model: threads only contend on a shared machine
    attach_flower_console()  # once per process; then quieten the per-round lines
    logging.getLogger("flwr").setLevel(logging.WARNING)
    logging.getLogger("fairfl").setLevel(logging.WARNING)

    titles = [f"{c} (%²)" if c == "acc-variance" else f"{c} (%)" for c in COLUMNS]
    header = f"{'rule':18s} {'seed':>4s} " + " ".join(f"{t:>17s}" for t in titles)
    header += f" {'loss-mean':>9s} {'eta':>6s} {'min-test':>8s} {'time':>5s}"
    print(header, flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        out_root = Path(args.out_dir or scratch)
        results: dict[str, list[dict[str, Any]]] = {rule: [] for rule in args.rules}
        for seed in args.seeds:
            for rule in args.rules:
                m = run_one(rule, seed, args, out_root)
                results[rule].append(m)
                row = f"{rule:18s} {seed:4d} " + " ".join(f"{m[c]:17.1f}" for c in COLUMNS)
                row += f" {m['loss-mean']:9.3f} {m['eta']:6.2f} {m['min-test']:8d}"
                print(row + f" {m['seconds']:4.0f}s", flush=True)
    print("\nmean over seeds " + str(args.seeds))
    table = [
        "| rule | mean acc (%) | worst-10% (%) | worst-20% (%) |",
        "|---|---|---|---|",
    ]
    for rule, runs in results.items():
        means = {c: float(np.mean([m[c] for m in runs])) for c in COLUMNS}
        stds = {c: float(np.std([m[c] for m in runs])) for c in COLUMNS}
        print(f"{rule:18s}      " + " ".join(f"{means[c]:10.1f} ± {stds[c]:4.1f}" for c in COLUMNS))
        table.append(
            f"| {rule} | {means['acc-mean']:.1f} | {means['acc-worst-10']:.1f} | "
            f"{means['acc-worst-20']:.1f} |"
        )
    if args.results is not None:
        command = "PYTHONPATH=. python experiments/rcfl_synthetic.py " + " ".join(sys.argv[1:])
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(
            "# RC-FL against FedAvg on Synthetic(1, 1), 100 devices\n\n"
            f"{args.rounds} rounds, seeds {', '.join(map(str, args.seeds))}; FedAvg lr "
            f"{args.fedavg_lr}, RC-FL β {args.lr}, α {args.alpha}, μ {args.mu}, "
            f"{args.local_steps} local steps; final client accuracy, mean over seeds.\n\n"
            + "\n".join(table)
            + f"\n\nCommand: `{command}`\n\nWall time: "
            f"{time.perf_counter() - started:.0f} s on 2 cores.\n",
            encoding="utf-8",
        )


if __name__ == "__main__":
    main()
