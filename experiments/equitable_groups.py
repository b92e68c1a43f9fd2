"""Equitable-FL vs FedAvg on digits with two planted label-disjoint groups of 3 and 7 clients.

The setup of Equitable-FL's MNIST experiment (arXiv:2410.19207, Table 1, §5.1; spec
``docs/specs/spec-activation-clustering.md`` §4), scaled to scikit-learn's digits:

- 10 clients; group 0 = clients 0-2 with classes 0-2, group 1 = clients 3-9 with classes
  3-9 (``partitioner="groups"``, ``group-sizes="3,7"``); every client holds the same
  number of samples of each of its classes, so the minority group also has less data;
- 4 clients per round (``fraction-train=0.4``, the paper's 40 %), every client evaluated
  on its own test split after each round;
- FedAvg, and Equitable-FL with C = 2 in the paper's per-round mode and in registry mode.

Printed per rule, averaged over seeds: NMI between found clusters and planted groups
(mean over rounds with both groups among the participants), accuracy of each planted
group and client disagreement (mean pairwise test-loss gap over all clients, and over
the round's participants as in the paper), each as the final value and as the mean over
all rounds (the paper's cumulative moving average).

Usage (about 2-4 minutes on 2 busy cores)::

    PYTHONPATH=. nice .venv/bin/python experiments/equitable_groups.py --rounds 40 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fairfl.data.groups import parse_group_sizes, planted_groups
from fairfl.group_metrics import run_group_report
from fairfl.metrics import PERCENT
from fairfl.simulation import run_inprocess

RULES: dict[str, dict[str, Any]] = {
    "fedavg": {"strategy": "fedavg"},
    "equitable-round": {"strategy": "equitable", "equitable-scope": "round"},
    "equitable-registry": {"strategy": "equitable", "equitable-scope": "registry"},
}


def run_one(rule: str, seed: int, args: argparse.Namespace, out_root: Path) -> dict[str, Any]:
    """Run one rule with one seed and return its group report."""
    out_dir = out_root / f"{rule}-seed{seed}"
    config = {
        "dataset": "digits",
        "model": "mlp",
        "partitioner": "groups",
        "group-sizes": args.group_sizes,
        "num-partitions": sum(parse_group_sizes(args.group_sizes)),
        "fraction-train": args.fraction_train,
        "num-server-rounds": args.rounds,
        "lr": args.lr,
        "local-epochs": args.local_epochs,
        "batch-size": args.batch_size,
        "seed": seed,
        "out-dir": str(out_dir),
        **RULES[rule],
    }
    if rule != "fedavg":
        config["equitable-seed"] = seed
        config["equitable-proximal-mu"] = args.mu
    outcome = run_inprocess(config)
    rounds = [json.loads(line) for line in (out_dir / "rounds.jsonl").read_text().splitlines()]
    report = run_group_report(rounds, planted_groups(parse_group_sizes(args.group_sizes)).tolist())
    report["acc-mean"] = outcome.summary["final_metrics"]["acc-mean"]
    return report


def main() -> None:
    """Run every rule for every seed and print the comparison table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--group-sizes", default="3,7")
    parser.add_argument("--fraction-train", type=float, default=0.4)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--mu", type=float, default=0.01, help="Equitable-FL's FedProx mu")
    parser.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES))
    parser.add_argument("--out", default="", help="results folder (default: a temp dir)")
    parser.add_argument("--json", default="", help="also write the per-seed reports here")
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    logging.getLogger("fairfl").setLevel(logging.WARNING)
    out_root = Path(args.out or tempfile.mkdtemp(prefix="equitable-groups-"))

    reports: dict[str, list[dict[str, Any]]] = {rule: [] for rule in args.rules}
    for seed in args.seeds:
        for rule in args.rules:
            reports[rule].append(run_one(rule, seed, args, out_root))
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1) + "\n")

    def mean(values: list[float | None]) -> float:
        kept = [v for v in values if v is not None]
        return float(np.mean(kept)) if kept else float("nan")

    print(
        f"digits, groups {args.group_sizes}, fraction-train {args.fraction_train}, "
        f"{args.rounds} rounds, seeds {args.seeds}; accuracy in %, Δ = mean pairwise "
        "test-loss gap (all clients / the round's participants)"
    )
    header = (
        f"{'rule':<19} {'NMI':>5} {'window':>7} | {'minority':>8} {'majority':>8} "
        f"{'all':>6} | {'Δ all':>6} {'Δ part.':>7}"
    )
    print(header)
    print("-" * len(header))
    for rule, runs in reports.items():
        nmi = mean([r["nmi-mean"] for r in runs])
        for window in ("final", "tail", "cma"):
            values = [r[window] for r in runs]
            label = {"final": "final", "tail": "last10", "cma": "CMA"}[window]
            acc_all = mean([r["acc-mean"] for r in runs]) if window == "final" else float("nan")
            print(
                f"{rule if window == 'final' else '':<19} "
                f"{(f'{nmi:.2f}' if window == 'final' else ''):>5} {label:>7} | "
                f"{PERCENT * mean([v['acc-group'][0] for v in values]):>8.1f} "
                f"{PERCENT * mean([v['acc-group'][1] for v in values]):>8.1f} "
                f"{(f'{PERCENT * acc_all:.1f}' if window == 'final' else ''):>6} | "
                f"{mean([v['disagreement-all'] for v in values]):>6.3f} "
                f"{mean([v.get('disagreement-participants') for v in values]):>7.3f}"
            )
    print(f"results: {out_root}")


if __name__ == "__main__":
    main()
