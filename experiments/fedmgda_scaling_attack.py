"""Scaling attack (Hu et al., IEEE TNSE 2022, §6.2.2): one client multiplies its update by 100.

Runs FedAvg, FedAvg-n and FedMGDA+ through the in-process runner, each without and
with one attacker (partition 0 sends ``w_t − 100 (w_t − w_i)`` every round, an honest
local training otherwise), on the same data, seeds and rounds. Plots the mean and the
worst-10% client test accuracy per round and prints the final numbers. Server-side
normalisation makes FedMGDA+ and FedAvg-n see exactly the update they would without the
attack; FedAvg is dominated by the attacker.

    nice .venv/bin/python experiments/fedmgda_scaling_attack.py --rounds 20
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from flwr.app import Array, Message
from matplotlib.ticker import MaxNLocator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .`

from fairfl.metrics import PERCENT  # noqa: E402
from fairfl.simulation import run_inprocess  # noqa: E402
from fairfl.strategies.fedmgda_qp import paper_decay_factor  # noqa: E402

RULES = {"fedavg": "FedAvg", "fedavg-n": "FedAvg-n", "fedmgda": "FedMGDA+"}
COLOURS = {"fedavg": "tab:red", "fedavg-n": "tab:blue", "fedmgda": "tab:green"}


def scaling_attacker(node_id: int, factor: float):
    """Reply filter: ``node_id``'s train replies become ``w_t − factor (w_t − w_i)``."""

    def attack(instruction: Message, reply: Message) -> Message:
        if (
            instruction.metadata.dst_node_id != node_id
            or instruction.metadata.message_type != "train"
            or reply.has_error()
        ):
            return reply
        sent = instruction.content["arrays"]
        arrays = reply.content["arrays"]
        for key in list(arrays.keys()):
            w_t = sent[key].numpy().astype(np.float64)
            w_i = arrays[key].numpy()
            arrays[key] = Array((w_t - factor * (w_t - w_i)).astype(w_i.dtype))
        return reply

    return attack


def curves(out_dir: Path) -> dict[str, list[float]]:
    """Mean and worst-10% client accuracy (fractions) per round from ``rounds.jsonl``."""
    lines = [json.loads(x) for x in (out_dir / "rounds.jsonl").read_text().splitlines()]
    return {
        "acc-mean": [line["metrics"]["acc-mean"] for line in lines],
        "acc-worst-10": [line["metrics"]["acc-worst-10"] for line in lines],
    }


def main() -> None:
    """Run the six federations, save the figure and print the final numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--factor", type=float, default=100.0)
    parser.add_argument("--global-lr", type=float, default=2.0, help="η_g of FedMGDA+/FedAvg-n")
    parser.add_argument(
        "--decay", type=float, default=0.1, help="fraction η_g decays to by the last round"
    )
    parser.add_argument("--decay-every", type=int, default=5, help="rounds per step decay")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("docs/figures/fedmgda_scaling_attack.png"))
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    logging.getLogger("fairfl").setLevel(logging.WARNING)

    base: dict[str, Any] = {
        "num-server-rounds": args.rounds,
        "num-partitions": args.partitions,
        "seed": args.seed,
        "fedmgda-global-lr": args.global_lr,
        # The paper's schedule (§6.1.5): β = decay^{period / T} every period.
        "fedmgda-global-lr-decay": paper_decay_factor(args.decay, args.rounds, args.decay_every),
        "fedmgda-decay-every": args.decay_every,
    }
    attacker = 1001  # partition 0 (node ids start at 1001 in the in-process runner)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as work:
        for rule in RULES:
            for attacked in (False, True):
                name = f"{rule}/{'attacked' if attacked else 'clean'}"
                out_dir = Path(work) / name.replace("/", "-")
                started = time.perf_counter()
                outcome = run_inprocess(
                    {**base, "strategy": rule, "out-dir": str(out_dir)},
                    reply_filter=scaling_attacker(attacker, args.factor) if attacked else None,
                )
                weights = flat_model(outcome.arrays)
                results[name] = {**curves(out_dir), "model": weights}
                print(f"{name:20s} done in {time.perf_counter() - started:5.1f} s", flush=True)

    print(
        f"\nScaling attack x{args.factor:g} by 1 of {args.partitions} clients, "
        f"{args.rounds} rounds, digits/MLP, seed {args.seed}, η_g {args.global_lr:g} "
        f"decaying to {args.decay:g}x every {args.decay_every} rounds:"
    )
    print(
        "| rule | clean mean / worst-10% (%) | attacked mean / worst-10% (%) | ‖w_att − w_clean‖ |"
    )
    print("|---|---|---|---|")
    summary: dict[str, Any] = {}
    for rule, label in RULES.items():
        clean, hit = results[f"{rule}/clean"], results[f"{rule}/attacked"]
        shift = float(np.linalg.norm(hit["model"] - clean["model"]))
        print(
            f"| {label} | {PERCENT * clean['acc-mean'][-1]:.1f} / "
            f"{PERCENT * clean['acc-worst-10'][-1]:.1f} "
            f"| {PERCENT * hit['acc-mean'][-1]:.1f} / {PERCENT * hit['acc-worst-10'][-1]:.1f} "
            f"| {shift:.3g} |"
        )
        summary[label] = {
            "clean": {k: clean[k] for k in ("acc-mean", "acc-worst-10")},
            "attacked": {k: hit[k] for k in ("acc-mean", "acc-worst-10")},
            "final-model-shift": shift,
        }

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharex=True)
    rounds = np.arange(1, args.rounds + 1)
    for ax, metric, title in zip(
        axes,
        ("acc-mean", "acc-worst-10"),
        ("mean client accuracy", "worst-10% clients"),
        strict=True,
    ):
        for rule, label in RULES.items():
            ax.plot(
                rounds,
                PERCENT * np.asarray(results[f"{rule}/clean"][metric]),
                color=COLOURS[rule],
                label=f"{label}, clean",
            )
            ax.plot(
                rounds,
                PERCENT * np.asarray(results[f"{rule}/attacked"][metric]),
                color=COLOURS[rule],
                linestyle="--",
                marker="o",
                markersize=3,
                label=f"{label}, attacked",
            )
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"One client scales its update by {args.factor:g} ({args.partitions} clients, digits/MLP)"
    )
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    args.out.with_suffix(".json").write_text(
        json.dumps(
            {
                "config": {**base, "factor": args.factor, "attacker-node": attacker},
                "results": summary,
            },
            indent=1,
        )
    )
    print(f"\nfigure: {args.out}")


def flat_model(record: Any) -> np.ndarray:
    """All arrays of an ArrayRecord as one float64 vector."""
    return np.concatenate([a.numpy().ravel().astype(np.float64) for a in record.values()])


if __name__ == "__main__":
    main()
