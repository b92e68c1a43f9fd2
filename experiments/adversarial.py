"""Adversarial clients: final accuracy of each rule with 0, 1 and 2 attackers out of 10.

Attackers train honestly, then send a manipulated model w_t + s (w_i - w_t):
``scaling`` uses s = 100 (model replacement), ``sign-flip`` uses s = -1 (the negated
update). Against q-FedSGD, whose clients send the gradient ∇F_i(w_t) instead of a model,
the attacker sends s ∇F_i(w_t) (its update, scaled the same way). Everything else
(data, seeds, rounds) is identical across rules. Prints a
Markdown table of the final mean and worst-10% client accuracy (attackers' own test
accuracy included, as they are clients too).

    python experiments/adversarial.py --rounds 10 --out docs/results/adversarial.md
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message

from fairfl.metrics import in_percent
from fairfl.simulation import node_configs_for, run_inprocess
from fairfl.strategies.registry import STRATEGIES

ATTACKS = {"scaling": 100.0, "sign-flip": -1.0}


def attacker_filter(attackers: set[int], scale: float):
    """A reply filter that turns the given nodes' train replies into attacks."""

    def manipulate(instruction: Message, reply: Message) -> Message:
        if instruction.metadata.dst_node_id not in attackers or reply.has_error():
            return reply
        if instruction.metadata.message_type != "train":
            return reply
        if "gradient" in reply.content.array_records:  # q-FedSGD: the update is a gradient
            gradient = reply.content["gradient"]
            reply.content["gradient"] = ArrayRecord(
                {
                    key: Array((scale * gradient[key].numpy()).astype(gradient[key].numpy().dtype))
                    for key in gradient
                }
            )
            return reply
        sent = instruction.content["arrays"]
        local = reply.content["arrays"]
        reply.content["arrays"] = ArrayRecord(
            {
                key: Array(
                    (sent[key].numpy() + scale * (local[key].numpy() - sent[key].numpy())).astype(
                        local[key].numpy().dtype
                    )
                )
                for key in local
            }
        )
        return reply

    return manipulate


def main() -> None:
    """Run the grid and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", nargs="*", default=sorted(STRATEGIES))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", type=Path, default=Path("outputs/adversarial"))
    parser.add_argument("--out", type=Path, help="also write the Markdown table here")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    nodes = node_configs_for(10)
    first_node = min(nodes)
    base: dict[str, Any] = {
        "num-partitions": 10,
        "num-server-rounds": args.rounds,
        "dirichlet-alpha": 0.5,
        "seed": args.seed,
        "checkpoint": False,
        # The work dir is scratch: a rerun replaces its runs (fairfl refuses otherwise).
        "overwrite": True,
    }
    header = (
        "| rule | clean mean / w10 (%) | "
        + " | ".join(f"{attack} ×{k} mean / w10 (%)" for attack in ATTACKS for k in (1, 2))
        + " |"
    )
    rows = [header, "|" + "---|" * (2 + 2 * len(ATTACKS))]
    started = time.perf_counter()
    for rule in args.rules:
        cells = []
        settings = [(None, 0)] + [(attack, k) for attack in ATTACKS for k in (1, 2)]
        for attack, count in settings:
            attackers = {first_node + i for i in range(count)}
            out_dir = args.work_dir / f"{rule}-{attack or 'clean'}-{count}"
            reply_filter = attacker_filter(attackers, ATTACKS[attack]) if attack else None
            outcome = run_inprocess(
                {**base, "strategy": rule, "out-dir": str(out_dir)}, reply_filter=reply_filter
            )
            final = in_percent(outcome.summary["final_metrics"])
            finite = all(np.isfinite(a.numpy()).all() for a in outcome.arrays.values())
            cell = f"{final['acc-mean']:.1f} / {final['acc-worst-10']:.1f}"
            cells.append(cell if finite else "non-finite")
        rows.append(f"| {rule} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    table = "\n".join(rows)
    print()
    print(table)
    timing = (
        f"{len(args.rules)} rules, {args.rounds} rounds, seed {args.seed}: "
        f"{time.perf_counter() - started:.0f} s on {os.cpu_count()} cores"
    )
    print(f"\n{timing}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(f"{table}\n\n{timing}\n")


if __name__ == "__main__":
    main()
