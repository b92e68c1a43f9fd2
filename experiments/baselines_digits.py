"""The loss-weighted baselines (AFL, TERM, GiFair, Δ-FL, PropFair) next to FedAvg on digits.

A smoke-scale comparison, not a reproduction of Malekmohammadi & Yu's tables: the embedded digits
data set (1,797 8×8 images) split over ``--partitions`` clients by a Dirichlet(0.3)
label partition, the MLP, full participation, the run-config defaults for everything
else (lr 0.1, 2 local epochs, batch 32) and each rule's default hyperparameters
(AFL γ_λ = 0.1, TERM α = 0.5, GiFair coeff = 1, Δ-FL α = 0.5, PropFair M = 3, ε = 0.2).
Every client is evaluated on its own test split after the last round.

Printed per rule (mean over seeds): unweighted mean client accuracy, worst client,
worst-20% (mean of the lowest fifth), std of client accuracies (all in %), mean client
test loss, and wall time.

``--results PATH`` also writes the table (Markdown, the columns the README shows), the
command and the wall time there (``docs/results/baselines-digits.md``).

Usage (a few minutes on 2 busy cores)::

    PYTHONPATH=. nice .venv/bin/python experiments/baselines_digits.py
    PYTHONPATH=. python experiments/baselines_digits.py --seeds 0 1 2 \
        --results docs/results/baselines-digits.md
    PYTHONPATH=. nice .venv/bin/python experiments/baselines_digits.py --seeds 0 1 2 \
        --rounds 30 --rules fedavg term deltafl
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

from fairfl.metrics import in_percent
from fairfl.simulation import run_inprocess

RULES = ("fedavg", "afl", "term", "gifair", "deltafl", "propfair")
COLUMNS = ("acc-mean", "acc-worst", "acc-worst-20", "acc-std", "loss-mean")


def run_one(rule: str, seed: int, args: argparse.Namespace, out_root: Path) -> dict[str, Any]:
    """Run one rule with one seed; return its final fairness metrics and wall time."""
    started = time.perf_counter()
    outcome = run_inprocess(
        {
            "strategy": rule,
            "dataset": "digits",
            "num-partitions": args.partitions,
            "num-server-rounds": args.rounds,
            "seed": seed,
            "out-dir": str(out_root / f"{rule}-{seed}"),
        }
    )
    final = in_percent(outcome.summary["final_metrics"])
    final["wall-s"] = time.perf_counter() - started
    return final


def main() -> None:
    """Parse arguments, run every rule and seed, print one row per rule."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", nargs="+", default=list(RULES), choices=RULES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--results", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()
    started = time.perf_counter()
    torch.set_num_threads(1)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    logging.getLogger("fairfl").setLevel(logging.WARNING)
    titles = [f"{c} %" if c.startswith("acc-") else c for c in (*COLUMNS, "wall-s")]
    header = f"{'rule':<10}" + "".join(f"{t:>14}" for t in titles)
    print(header)
    table = [
        "| rule | mean (%) | worst (%) | worst-20% (%) | std (%) |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for rule in args.rules:
            runs = [run_one(rule, seed, args, Path(tmp)) for seed in args.seeds]
            row = {c: float(np.mean([r[c] for r in runs])) for c in (*COLUMNS, "wall-s")}
            print(f"{rule:<10}" + "".join(f"{row[c]:>14.2f}" for c in (*COLUMNS, "wall-s")))
            table.append(
                f"| {rule} | "
                + " | ".join(f"{row[c]:.2f}" for c in COLUMNS if c != "loss-mean")
                + " |"
            )
    if args.results is not None:
        command = "PYTHONPATH=. python experiments/baselines_digits.py " + " ".join(sys.argv[1:])
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(
            "# Loss-weighted baselines next to FedAvg on digits\n\n"
            f"Digits, Dirichlet(0.3), {args.partitions} clients, MLP, {args.rounds} rounds, "
            f"seeds {', '.join(map(str, args.seeds))}; each rule at its default "
            "hyperparameters; final client accuracy, mean over seeds.\n\n"
            + "\n".join(table)
            + f"\n\nCommand: `{command}`\n\nWall time: "
            f"{time.perf_counter() - started:.0f} s on 2 cores.\n",
            encoding="utf-8",
        )


if __name__ == "__main__":
    main()
