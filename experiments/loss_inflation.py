"""Loss inflation: what a client gains by reporting a larger loss to a loss-aware rule.

1 or 2 of 10 clients (the first node ids) train honestly but report their loss before
training (``loss-before-training``, the F_k(w^t) every loss-aware rule reads) multiplied
by 10 or 100, or as the constant 1e5 (inside the contract's ``max-loss`` bound, 1e6). A
liar also leaves out its ``qffl-h``, the optional h_k that q-FFL would check against the
loss it reports (sending one computed from the inflated loss passes the check just the
same). Every loss-aware rule runs on the same data, seed and rounds, with no defence,
with ``loss-clip-mad`` (reported losses clipped to median ± k·MAD) and with
``max-client-share`` (no client above that share of the round's weight).

For each run the table gives the liars' share of the aggregation weight (Σ of their λ_i
over Σ λ, averaged over the rounds; in the "clean" column the same clients' share when
they do not lie) and the final test accuracy of the honest clients: mean / worst-10 %.

    nice -n 10 python experiments/loss_inflation.py --rounds 5 --out docs/results/loss-inflation
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _liar import NUM_CLIENTS, base_config, metric_filter, outcome, run  # the script's folder

from fairfl.contract import keys
from fairfl.simulation import node_configs_for

RULES = ["afl", "term", "qffl", "gifair", "deltafl", "vred", "semivred", "rcfl"]
#: Attack name -> the reported loss as a function of the true one.
ATTACKS: dict[str, Callable[[float], float]] = {
    "x10": lambda loss: 10.0 * loss,
    "x100": lambda loss: 100.0 * loss,
    "const-1e5": lambda loss: 1e5,
}


def main() -> None:
    """Run the grid, print the tables and write them (with the raw numbers) to --out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", nargs="*", default=RULES)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clip-k", type=float, default=3.0, help="loss-clip-mad")
    parser.add_argument("--share", type=float, default=0.2, help="max-client-share")
    parser.add_argument("--work-dir", type=Path, default=Path("outputs/loss-inflation"))
    parser.add_argument("--out", type=Path, help="folder for results.md and results.json")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    nodes = node_configs_for(NUM_CLIENTS)
    first_node = min(nodes)
    base = base_config(args.rounds, args.seed)
    defences: dict[str, dict[str, Any]] = {
        "none": {},
        f"loss-clip-mad={args.clip_k:g}": {"loss-clip-mad": args.clip_k},
        f"max-client-share={args.share:g}": {"max-client-share": args.share},
    }
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    for rule in args.rules:
        for defence, overrides in defences.items():
            config = {**base, **overrides, "strategy": rule}
            slug = f"{rule}-{defence.split('=')[0]}"
            # One clean run serves as the baseline of both liar counts.
            clean = run(config, args.work_dir / f"{slug}-clean")
            for count in (1, 2):
                liars = {first_node + i for i in range(count)}
                for attack in ["clean", *ATTACKS]:
                    if attack == "clean":
                        strategy = clean
                    else:
                        lie = ATTACKS[attack]
                        strategy = run(
                            config,
                            args.work_dir / f"{slug}-{count}-{attack}",
                            metric_filter(
                                liars,
                                keys.LOSS_BEFORE_TRAINING,
                                lambda loss, lie=lie: lie(float(loss)),
                                drop=[keys.QFFL_H],
                            ),
                        )
                    measured = outcome(strategy, liars)
                    results.append(
                        {
                            "rule": rule,
                            "defence": defence,
                            "liars": count,
                            "attack": attack,
                            # Mean over the rounds that aggregated anything.
                            "liar_share": float(np.nanmean(measured["shares"])),
                            "honest_acc_mean": measured["honest_acc_mean"],
                            "honest_acc_worst10": measured["honest_acc_worst10"],
                        }
                    )
            print(f"{rule} / {defence}: done", file=sys.stderr, flush=True)
    wall = time.perf_counter() - started
    command = "nice -n 10 python " + shlex.join(["experiments/loss_inflation.py", *sys.argv[1:]])
    text = report(results, args, wall, command)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.md").write_text(text)
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


def report(results: list[dict[str, Any]], args: argparse.Namespace, wall: float, cmd: str) -> str:
    """The Markdown file: set-up, one table per number of liars, command and wall time."""
    columns = ["clean", *ATTACKS]
    lines = [
        "# Loss inflation against the loss-aware rules",
        "",
        f"Digits, {NUM_CLIENTS} clients (Dirichlet α = 0.5), {args.rounds} rounds, seed "
        f"{args.seed}, every rule at its default hyperparameters. The liars train honestly "
        "and report their loss before training ×10, ×100 or as the constant 1e5 (no "
        "`qffl-h`). Each cell: the liars' share of the aggregation weight (mean over the "
        "rounds of Σ liars' λ / Σ λ; in `clean` the same clients' share when honest) · "
        "the honest clients' final test accuracy, mean / worst-10 % (%). Defences: "
        f"`loss-clip-mad={args.clip_k:g}` clips the round's reported losses to median ± "
        f"{args.clip_k:g}·MAD; `max-client-share={args.share:g}` caps each client at "
        f"{args.share:g} of the round's Σ λ. A share above 100 % means the rule "
        "extrapolates (negative weights for the honest clients).",
        "",
        "Kept small to run in minutes on a shared 2-core machine: one seed and few rounds, "
        "so differences of a point or two in accuracy are noise.",
    ]
    for count in (1, 2):
        lines += [
            "",
            f"## {count} liar{'s' if count > 1 else ''} of {NUM_CLIENTS}",
            "",
            "| rule | defence | " + " | ".join(columns) + " |",
            "|---|---|" + "---|" * len(columns),
        ]
        rows: dict[tuple[str, str], dict[str, str]] = {}
        for r in results:
            if r["liars"] != count:
                continue
            cell = (
                f"{100 * r['liar_share']:.0f} % · "
                f"{r['honest_acc_mean']:.1f} / {r['honest_acc_worst10']:.1f}"
            )
            rows.setdefault((r["rule"], r["defence"]), {})[r["attack"]] = cell
        for (rule, defence), cells in rows.items():
            lines.append(f"| {rule} | {defence} | " + " | ".join(cells[c] for c in columns) + " |")
    lines += [
        "",
        f"Command: `{cmd}`",
        "",
        f"Wall time: {wall:.0f} s on {os.cpu_count()} cores (shared with other jobs), "
        f"{len(args.rules) * 3 * (1 + 2 * len(ATTACKS))} runs.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
