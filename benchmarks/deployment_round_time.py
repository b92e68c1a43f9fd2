"""Seconds per round of a fair rule against Flower's FedAvg in the same real deployment.

One federation (``deploy/localfed.py``: SuperLink + SuperNodes in network namespaces, or
on loopback, TLS and SuperNode authentication on) serves every run, so both rules pay
the same deployment costs. Each run's per-round time comes from the ServerApp's own
``rounds.jsonl`` (``wall_time`` of round R minus that of round 1, over R - 1 rounds:
the first round, which also includes the app's start, is left out). The same runs are
then timed in process (``fairfl.simulation.run_inprocess``: same ServerApp logic and
ClientApp, no Flower runtime), and the difference per round is the overhead of Flower's
deployment runtime itself (message polling, one process per ClientApp call, TLS).

    sudo .venv/bin/python benchmarks/deployment_round_time.py --rounds 4 --strategy semivred

Prints a table and the ratios; never fails on absolute times.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "deploy"))
sys.path.insert(1, str(REPO))  # fairfl, also when not pip-installed

from localfed import LocalFederation, app_run_config  # noqa: E402


def per_round(out_dir: Path) -> float:
    """Mean seconds per round after the first, from the ServerApp's rounds.jsonl."""
    rows = [json.loads(x) for x in (out_dir / "rounds.jsonl").read_text().splitlines() if x]
    times = [r["wall_time"] for r in rows]
    if len(times) < 2:
        raise ValueError("need at least 2 rounds to time rounds after the first")
    return (times[-1] - times[0]) / (len(times) - 1)


def inprocess_per_round(config: dict[str, Any], out_dir: Path, supernodes: int) -> float:
    from fairfl.simulation import run_inprocess

    logging.getLogger("flwr").setLevel(logging.WARNING)  # the deployed runs' logs are enough
    nodes = {
        1001 + p: {"partition-id": p, "num-partitions": supernodes, "device": "cpu"}
        for p in range(supernodes)
    }
    run_inprocess(app_run_config({**config, "out-dir": str(out_dir)}), node_configs=nodes)
    return per_round(out_dir)


def main(argv: list[str] | None = None) -> int:
    from fairfl.strategies.registry import STRATEGIES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategy", default="semivred" if "semivred" in STRATEGIES else "qffl")
    parser.add_argument("--baseline", default="fedavg")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each rule (alternating)")
    parser.add_argument("--supernodes", type=int, default=3)
    parser.add_argument("--network", choices=["auto", "netns", "loopback"], default="auto")
    parser.add_argument("--isolation", choices=["subprocess", "process"], default="subprocess")
    parser.add_argument("-c", "--run-config", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--keep", action="store_true", help="keep logs and results (workdir)")
    args = parser.parse_args(argv)

    import tomllib

    base: dict[str, Any] = {
        "num-server-rounds": args.rounds,
        "num-partitions": args.supernodes,
        "min-available-nodes": args.supernodes,
        "seed": 0,
    }
    for item in args.run_config:
        key, _, value = item.partition("=")
        base[key] = tomllib.loads(f"v = {value}")["v"]
    rules = [args.strategy, args.baseline]
    work = Path(tempfile.mkdtemp(prefix="fairfl-bench-"))
    deployed: dict[str, list[float]] = {r: [] for r in rules}
    t0 = time.monotonic()
    with LocalFederation(
        work / "fed", supernodes=args.supernodes, network=args.network, isolation=args.isolation
    ) as fed:
        where = "network namespaces" if fed.mode == "netns" else f"loopback ({fed.fallback_reason})"
        print(
            f"# federation: {args.supernodes} SuperNodes on {where}, TLS + SuperNode auth, "
            f"{args.isolation} isolation; up in {time.monotonic() - t0:.1f}s"
        )
        # Warm-up: the first run also installs the app bundle on every node.
        fed.submit_run({**base, "strategy": args.baseline, "num-server-rounds": 1}, name="warmup")
        for rep in range(args.repeats):
            for rule in rules:
                name = f"{rule}-{rep}"
                res = fed.submit_run({**base, "strategy": rule}, name=name)
                if res.returncode != 0:
                    print(f"run {name} failed; see {fed.workdir}/logs/flwr-run-{name}.log")
                    return 1
                deployed[rule].append(per_round(fed.out_dir(name)))
    local = {
        r: inprocess_per_round({**base, "strategy": r}, work / f"inproc-{r}", args.supernodes)
        for r in rules
    }

    print(
        f"# {args.rounds} rounds, {args.repeats} run(s) per rule; seconds per round after round 1"
    )
    print(f"{'rule':<12} {'deployed':>10} {'in-process':>11} {'Flower overhead':>16}")
    dep = {r: statistics.median(v) for r, v in deployed.items()}
    for r in rules:
        print(f"{r:<12} {dep[r]:>10.2f} {local[r]:>11.3f} {dep[r] - local[r]:>16.2f}")
    pair = f"{args.strategy}/{args.baseline}"
    print(f"ratio {pair} deployed:   {dep[args.strategy] / dep[args.baseline]:.3f}")
    print(f"ratio {pair} in process: {local[args.strategy] / local[args.baseline]:.3f}")
    share = (dep[args.baseline] - local[args.baseline]) / dep[args.baseline]
    print(
        f"Flower deployment overhead: {dep[args.baseline] - local[args.baseline]:.2f} s/round "
        f"({100 * share:.0f}% of a {args.baseline} round)"
    )
    if args.keep:
        print(f"# workdir: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
