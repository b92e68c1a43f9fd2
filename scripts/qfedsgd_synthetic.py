"""q-FedSGD vs q-FedAvg on Synthetic(1, 1): paper 002's rounds comparison, measured.

Paper 002 (q-FFL) solves the q-FFL objective with q-FedSGD (Algorithm 1: one full-batch
gradient per device and round) and q-FedAvg (Algorithm 2: E local epochs), and says
q-FedAvg reaches the same fairness in fewer communication rounds. This script runs both
(``strategy=qfedsgd`` and ``strategy=qffl``) on Synthetic(1, 1), 100 devices, 10 per
round, q = 1, over several seeds with fairfl's in-process runner, and writes:

- ``runs/<rule>/seed-<s>/``: each run's ``summary.json`` and ``rounds.jsonl.gz``;
- ``curves.csv``: per evaluated round, rule and seed, the average, worst-10% and
  variance of the device test accuracies (fractions in [0, 1]; variance a fraction²);
- ``results.json``: the same curves, the first round each run reaches each stated
  worst-10% level, the final-round statistics (mean and std over seeds), settings,
  wall time and CPU count;
- ``report.md``: the tables (accuracies in %, variance in %², labelled);
- a plot (``--figure``).

The exact command of the committed results is in their ``results.json`` and in the
README (``--rounds``, ``--evaluate-every``, ``--seeds``, ``--levels``, ``--workers``).

``--report-only`` rebuilds the files from existing ``runs/`` without training.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from fairfl.metrics import worst_fraction_mean

RULES: dict[str, str] = {"qfedsgd": "q-FedSGD", "qffl": "q-FedAvg"}
BASE_CONFIG: dict[str, Any] = {
    "dataset": "synthetic",
    "partitioner": "natural",
    "model": "logreg",
    "num-partitions": 100,
    "fraction-train": 0.1,
    "lr": 0.1,
    "local-epochs": 1,
    "batch-size": 10,
    "test-fraction": 0.2,
    "qffl-q": 1.0,
    "checkpoint": False,
}


def run_one(rule: str, seed: int, rounds: int, evaluate_every: int, out: str) -> float:
    """Run one (rule, seed) in this process; return its wall time in seconds."""
    import torch

    from fairfl.simulation.inprocess import run_inprocess

    torch.set_num_threads(1)
    config = {
        **BASE_CONFIG,
        "strategy": rule,
        "seed": seed,
        "num-server-rounds": rounds,
        "evaluate-every": evaluate_every,
        "out-dir": out,
    }
    start = time.perf_counter()
    run_inprocess(config)
    wall = time.perf_counter() - start
    rounds_file = Path(out) / "rounds.jsonl"
    with rounds_file.open("rb") as src, gzip.open(f"{rounds_file}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    rounds_file.unlink()
    for extra in Path(out).iterdir():  # keep the summary and the rounds only
        if extra.name not in ("summary.json", "rounds.jsonl.gz"):
            if extra.is_dir():
                shutil.rmtree(extra)
            else:
                extra.unlink()
    return wall


def curve(run_dir: Path) -> list[dict[str, float]]:
    """Per evaluated round: average, worst-10% and variance of the device accuracies."""
    points = []
    with gzip.open(run_dir / "rounds.jsonl.gz", "rt") as lines:
        for line in lines:
            record = json.loads(line)
            accuracies = [client["eval_acc"] for client in record.get("clients", [])]
            if not accuracies:
                continue
            acc = np.asarray(accuracies, dtype=np.float64)
            points.append(
                {
                    "round": int(record["round"]),
                    "average": float(acc.mean()),
                    "worst-10": worst_fraction_mean(acc, 0.1),
                    "variance": float(acc.var()),
                }
            )
    return points


def first_round(points: list[dict[str, float]], level: float) -> int | None:
    """The first evaluated round whose worst-10% accuracy is >= ``level``."""
    return next((int(p["round"]) for p in points if p["worst-10"] >= level), None)


def build(
    out: Path,
    args: argparse.Namespace,
    walls: dict[str, float],
    total: float,
    load: dict[str, float],
) -> dict:
    """Read every run under ``out/runs`` and write curves.csv, results.json, report.md."""
    levels = [float(v) for v in args.levels.split(",")]
    curves: dict[str, dict[str, list[dict[str, float]]]] = {}
    for rule in RULES:
        curves[rule] = {
            str(seed): curve(out / "runs" / rule / f"seed-{seed}") for seed in args.seeds
        }
    with (out / "curves.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["rule", "seed", "round", "average", "worst-10", "variance"])
        for rule, by_seed in curves.items():
            for seed, points in by_seed.items():
                for p in points:
                    writer.writerow(
                        [rule, seed, p["round"], p["average"], p["worst-10"], p["variance"]]
                    )
    final: dict[str, dict[str, dict[str, float]]] = {}
    reach: dict[str, dict[str, dict[str, int | None]]] = {}
    for rule, by_seed in curves.items():
        last = [points[-1] for points in by_seed.values()]
        final[rule] = {
            name: {
                "mean": float(np.mean([p[name] for p in last])),
                "std": float(np.std([p[name] for p in last])),
            }
            for name in ("average", "worst-10", "variance")
        }
        reach[rule] = {
            f"{level:g}": {seed: first_round(points, level) for seed, points in by_seed.items()}
            for level in levels
        }
    results = {
        "description": (
            "q-FedSGD (strategy=qfedsgd) vs q-FedAvg (strategy=qffl, E=1 epoch, batch 10) "
            "on Synthetic(1, 1), 100 devices, 10 sampled per round (uniform, Flower's), "
            "q=1, L=1/lr, logistic regression; device test accuracies are fractions in "
            "[0, 1], variance a fraction squared."
        ),
        "command": args.command,
        "config": {**BASE_CONFIG, "num-server-rounds": args.rounds},
        "evaluate_every": args.evaluate_every,
        "seeds": list(args.seeds),
        "levels": levels,
        "final_round": args.rounds,
        "final": final,
        "rounds_to_reach_worst_10": reach,
        "curves": curves,
        "wall_time_s": {"total": total, "runs": walls},
        "load_average_1min": load,
        "workers": args.workers,
        "cpu_count": os.cpu_count(),
    }
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "report.md").write_text(report(results))
    return results


def _pct(stat: dict[str, float], scale: float = 100.0, digits: int = 1) -> str:
    return f"{stat['mean'] * scale:.{digits}f} ± {stat['std'] * scale:.{digits}f}"


def report(results: dict) -> str:
    """The human-facing tables (percent, labelled)."""
    seeds = results["seeds"]
    lines = [
        "# q-FedSGD vs q-FedAvg on Synthetic(1, 1), q = 1",
        "",
        results["description"],
        "",
        "Command:",
        "",
        "```",
        results["command"],
        "```",
        "",
        f"{len(seeds)} seeds ({', '.join(map(str, seeds))}), {results['final_round']} rounds, "
        f"federated evaluation every {results['evaluate_every']} rounds. Wall time "
        f"{results['wall_time_s']['total']:.0f} s with {results['workers']} worker "
        f"process(es) on {results['cpu_count']} CPUs shared with other jobs (1-min load "
        f"average {results['load_average_1min']['start']:.1f} at the start, "
        f"{results['load_average_1min']['end']:.1f} at the end).",
        "",
        f"## Round {results['final_round']}: device test accuracy, mean ± std over seeds",
        "",
        "| Solver | Average (%) | Worst 10% (%) | Variance (%²) |",
        "| --- | --- | --- | --- |",
    ]
    for rule, name in RULES.items():
        stats = results["final"][rule]
        lines.append(
            f"| {name} | {_pct(stats['average'])} | {_pct(stats['worst-10'])} | "
            f"{_pct(stats['variance'], 1e4, 0)} |"
        )
    lines += [
        "",
        "## First evaluated round with worst-10% accuracy >= level (per seed)",
        "",
        "| Solver | "
        + " | ".join(f"worst 10% >= {lv * 100:g}%" for lv in results["levels"])
        + " |",
        "| --- | " + " | ".join("---" for _ in results["levels"]) + " |",
    ]
    for rule, name in RULES.items():
        cells = []
        for level in results["levels"]:
            by_seed = results["rounds_to_reach_worst_10"][rule][f"{level:g}"]
            cells.append(
                ", ".join("not reached" if r is None else f"{r:,}" for r in by_seed.values())
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Per round: [curves.csv](curves.csv); everything: [results.json](results.json).",
        "",
    ]
    return "\n".join(lines)


def plot(results: dict, figure: Path) -> None:
    """Average, worst-10% (%) and variance (%²) against rounds, mean over seeds ± std."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    panels = (
        ("average", "average accuracy (%)", 100.0),
        ("worst-10", "worst-10% accuracy (%)", 100.0),
        ("variance", "variance of accuracies (%²)", 1e4),
    )
    for rule, name in RULES.items():
        by_seed = list(results["curves"][rule].values())
        rounds = [p["round"] for p in by_seed[0]]
        for axis, (key, label, scale) in zip(axes, panels, strict=True):
            values = np.array([[p[key] * scale for p in points] for points in by_seed])
            mean, std = values.mean(axis=0), values.std(axis=0)
            axis.plot(rounds, mean, label=name)
            axis.fill_between(rounds, mean - std, mean + std, alpha=0.2)
            axis.set_xlabel("communication round")
            axis.set_ylabel(label)
    axes[0].legend()
    fig.suptitle(
        f"Synthetic(1,1), q = 1, 100 devices, 10 per round: mean ± std over "
        f"{len(results['seeds'])} seeds"
    )
    fig.tight_layout()
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=110)


def main() -> None:
    """Run every (rule, seed), or only rebuild the files with ``--report-only``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/qfedsgd-synthetic"))
    parser.add_argument("--figure", type=Path, default=Path("docs/figures/qfedsgd_synthetic.png"))
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--evaluate-every", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--levels", default="0.05,0.1", help="worst-10%% levels, fractions")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    args.command = (
        "nice python scripts/qfedsgd_synthetic.py "
        f"--out {args.out} --figure {args.figure} --rounds {args.rounds} "
        f"--evaluate-every {args.evaluate_every} --seeds {' '.join(map(str, args.seeds))} "
        f"--levels {args.levels} --workers {args.workers}"
    )
    walls: dict[str, float] = {}
    total = 0.0
    if args.report_only:
        previous = json.loads((args.out / "results.json").read_text())
        walls, total = previous["wall_time_s"]["runs"], previous["wall_time_s"]["total"]
        load = previous["load_average_1min"]
    else:
        load = {"start": os.getloadavg()[0]}
        start = time.perf_counter()
        # The slower q-FedAvg runs first, so the workers finish together.
        jobs = {
            f"{rule}/seed-{seed}": (rule, seed) for rule in reversed(RULES) for seed in args.seeds
        }
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            futures = {
                name: pool.submit(
                    run_one,
                    rule,
                    seed,
                    args.rounds,
                    args.evaluate_every,
                    str(args.out / "runs" / rule / f"seed-{seed}"),
                )
                for name, (rule, seed) in jobs.items()
            }
            walls = {name: future.result() for name, future in futures.items()}
        total = time.perf_counter() - start
        load["end"] = os.getloadavg()[0]
    results = build(args.out, args, walls, total, load)
    plot(results, args.figure)
    print((args.out / "report.md").read_text())


if __name__ == "__main__":
    main()
