r"""How AFL's λ accumulates a loss liar's gain, round by round, under each defence.

AFL (Mohri, Sivek and Suresh, ICML 2019) keeps λ across rounds and moves it by projected
gradient ascent on the clients' reported losses, so a client that reports its loss ×10
gains weight every round. ``loss-clip-mad = 3`` clips each reported loss to the round's
median + 3 MAD before any rule reads it: the lie is cut to the clip's bound, but that bound
still lies above every honest loss, so the ascent goes on pushing λ towards the liar, only
more slowly. ``max-client-share`` caps the share itself.

The federation and the round loop are those of ``experiments/liar_share.py`` (5 synthetic
clients, the strategy built from the run config as a run builds it, one of them lying in
every reply). This script records the liar's share of λ in every one of 50 rounds for
several seeds, with the liar honest (``clean``, the share it would have) beside it, and
renders rounds 1, 5, 20 and 50 (the probe of issue 47 measured 22 % → 49 % → 75 % at
rounds 1, 20 and 50 under ``loss-clip-mad=3``).

    nice -n 10 python experiments/afl_liar_curve.py --out docs/results/afl-liar-curve.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from liar_share import run  # the script's folder: the shared federation and round loop

ROUNDS = 50
SHOWN = (1, 5, 20, 50)
#: (defence, lie) pairs: the liar under each defence, and honest under the clip.
CASES = (
    ("none", "clean"),
    ("none", "loss x10"),
    ("loss-clip-mad=3", "clean"),
    ("loss-clip-mad=3", "loss x10"),
    ("max-client-share=0.4", "loss x10"),
)


def curves(seeds: list[int]) -> list[dict[str, Any]]:
    """The liar's share in every round, for each case and seed."""
    rows = []
    for defence, lie in CASES:
        for seed in seeds:
            outcome = run("afl", lie, defence, ROUNDS, seed)
            if outcome["error"] or outcome["refused"]:
                raise RuntimeError(f"afl, {defence}, {lie}, seed {seed}: {outcome}")
            rows.append({"defence": defence, "lie": lie, "seed": seed, "shares": outcome["shares"]})
    return rows


def render(results: dict[str, Any]) -> str:
    """The table: mean (min-max over seeds) share of the liar at the shown rounds."""
    lines = [
        f"<!-- {results['command']} -->",
        "",
        f"AFL, {results['num_clients']} clients, the liar's share of λ (%), mean (min-max) "
        f"over seeds {results['seeds'][0]}-{results['seeds'][-1]}:",
        "",
        "| defence | liar | " + " | ".join(f"round {r}" for r in SHOWN) + " |",
        "|---|---|" + "---|" * len(SHOWN),
    ]
    for defence, lie in CASES:
        shares = np.array(
            [r["shares"] for r in results["rows"] if (r["defence"], r["lie"]) == (defence, lie)]
        )
        cells = []
        for shown in SHOWN:
            column = 100 * shares[:, shown - 1]
            cells.append(f"{column.mean():.0f} ({column.min():.0f}-{column.max():.0f})")
        lines.append(f"| {defence} | {lie} | " + " | ".join(cells) + " |")
    lines += ["", f"Wall time: {results['wall_s']:.0f} s on {results['cores']} cores."]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Measure every case and write the JSON (``--out``) and its Markdown table beside it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, help="the results JSON file")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    started = time.perf_counter()
    seeds = list(range(args.seeds))
    rows = curves(seeds)
    results = {
        "command": "nice -n 10 python "
        + shlex.join(["experiments/afl_liar_curve.py", *sys.argv[1:]]),
        "wall_s": time.perf_counter() - started,
        "cores": os.cpu_count(),
        "num_clients": 5,
        "seeds": seeds,
        "rounds": ROUNDS,
        "rows": rows,
    }
    table = render(results)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
