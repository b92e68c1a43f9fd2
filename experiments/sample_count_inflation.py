r"""Sample-count inflation: what a client gains by reporting a larger ``num-examples``.

1 of 10 clients (the first node id) trains honestly but reports its ``num-examples``
multiplied by 10, or as 2^64 − 1, in every train reply (its evaluate replies are left
alone: only the train count weighs the aggregate). Every registered rule runs on the same
data and seed, with no defence, with ``max-client-share`` (no client above that share of
the round's weight) and with each ``--defence KEY=VALUE`` given (a rule's own run-config
key: a sample-count bound, once there is one).

For each run the table gives the liar's share of the aggregation weight (its λ_i over
Σ λ, as the rule applied it) averaged over the first 5, 20 and 50 rounds (the columns
``≤5``, ``≤20``, ``≤50``) and in the last round, and the honest clients' final test
accuracy (mean / worst-10 %). In the ``clean`` rows the same client does not lie. One
run of ``--rounds`` rounds gives every column whose horizon it reaches, so a share that
grows over the rounds (AFL's λ under a persistent liar) shows as growth along the row.

    nice -n 10 python experiments/sample_count_inflation.py --rounds 50 \\
        --out docs/results/sample-count-inflation
"""

from __future__ import annotations

import argparse
import json
import logging
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
from fairfl.strategies.registry import STRATEGIES

#: Attack name -> the reported count as a function of the true one.
ATTACKS: dict[str, Callable[[int], int]] = {
    "x10": lambda count: 10 * count,
    "2^64-1": lambda count: 2**64 - 1,
}
HORIZONS = (5, 20, 50)


def parse_defence(text: str) -> tuple[str, dict[str, Any]]:
    """``KEY=VALUE`` (the value read as JSON where it parses, else kept as text)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--defence wants KEY=VALUE, got {text!r}")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return text, {key: parsed}


def main() -> None:
    """Run the grid, print the table and write it (with the raw numbers) to --out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", nargs="*", default=sorted(STRATEGIES))
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--share", type=float, default=0.2, help="max-client-share")
    parser.add_argument("--defence", type=parse_defence, action="append", default=[])
    parser.add_argument("--work-dir", type=Path, default=Path("outputs/sample-count-inflation"))
    parser.add_argument("--out", type=Path, help="folder for results.md and results.json")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    nodes = node_configs_for(NUM_CLIENTS)
    liars = {min(nodes)}
    base = base_config(args.rounds, args.seed)
    defences: dict[str, dict[str, Any]] = {
        "none": {},
        f"max-client-share={args.share:g}": {"max-client-share": args.share},
        **dict(args.defence),
    }
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    for rule in args.rules:
        for defence, overrides in defences.items():
            config = {**base, **overrides, "strategy": rule}
            slug = f"{rule}-{defence.split('=')[0]}"
            for attack in ["clean", *ATTACKS]:
                reply_filter = None
                if attack != "clean":
                    lie = ATTACKS[attack]
                    reply_filter = metric_filter(
                        liars, keys.NUM_EXAMPLES, lambda count, lie=lie: lie(int(count))
                    )
                out_dir = args.work_dir / f"{slug}-{attack.replace('^', '')}"
                strategy = run(config, out_dir, reply_filter)
                results.append(
                    {"rule": rule, "defence": defence, "attack": attack} | outcome(strategy, liars)
                )
            print(f"{rule} / {defence}: done", file=sys.stderr, flush=True)
    wall = time.perf_counter() - started
    command = "nice -n 10 python " + shlex.join(
        ["experiments/sample_count_inflation.py", *sys.argv[1:]]
    )
    text = report(results, args, wall, command)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.md").write_text(text)
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


def _cell(shares: list[float], horizon: int) -> str:
    """Mean share (%) over the first ``horizon`` rounds; "-" when the run is shorter."""
    if len(shares) < horizon:
        return "-"
    return f"{100 * float(np.nanmean(shares[:horizon])):.0f} %"


def report(results: list[dict[str, Any]], args: argparse.Namespace, wall: float, cmd: str) -> str:
    """The Markdown file: set-up, one row per rule, defence and attack, command, wall time."""
    lines = [
        "# Sample-count inflation against every rule",
        "",
        f"Digits, {NUM_CLIENTS} clients (Dirichlet α = 0.5), {args.rounds} rounds, seed "
        f"{args.seed}, every rule at its default hyperparameters. One client trains "
        "honestly and reports its train `num-examples` ×10 or as 2^64 − 1. Each row: the "
        "liar's share of the aggregation weight (λ as applied), mean over the first 5, 20 "
        "and 50 rounds and in the last round, then the honest clients' final test "
        "accuracy, mean / worst-10 % (%). `clean`: the same client, honest. "
        f"`max-client-share={args.share:g}` caps each client at {args.share:g} of the "
        "round's Σ λ. One seed: differences of a point or two in accuracy are noise.",
        "",
        "| rule | defence | attack | "
        + " | ".join(f"≤{h}" for h in HORIZONS)
        + " | last | honest acc |",
        "|---|---|---|" + "---|" * (len(HORIZONS) + 2),
    ]
    for r in results:
        shares = r["shares"]
        last = f"{100 * shares[-1]:.0f} %" if shares else "-"
        lines.append(
            f"| {r['rule']} | {r['defence']} | {r['attack']} | "
            + " | ".join(_cell(shares, h) for h in HORIZONS)
            + f" | {last} | {r['honest_acc_mean']:.1f} / {r['honest_acc_worst10']:.1f} |"
        )
    lines += ["", "Command:", "", "```", cmd, "```", "", f"Wall time: {wall:.0f} s.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
