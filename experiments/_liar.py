"""The loop the lying-client experiments share (loss_inflation.py, sample_count_inflation.py).

A reply filter makes chosen nodes report one train metric as a function of the true
value; each run goes through :func:`fairfl.simulation.run_inprocess` on digits, and
:func:`outcome` reads from a run the liars' share of the aggregation weight in each round (their
Σ λ_i over Σ λ, as the rule applied it) and the honest clients' final test accuracy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from flwr.app import Message

from fairfl.metrics import fairness_metrics, in_percent
from fairfl.simulation import run_inprocess

NUM_CLIENTS = 10


def base_config(rounds: int, seed: int) -> dict[str, Any]:
    """The run config every run starts from: digits, 10 clients, Dirichlet α = 0.5."""
    return {
        "num-partitions": NUM_CLIENTS,
        "num-server-rounds": rounds,
        "dirichlet-alpha": 0.5,
        "seed": seed,
        # Only the final accuracies are reported: evaluate in the last round alone.
        "evaluate-every": rounds,
        "checkpoint": False,
        # The work dir is scratch: a rerun replaces its runs (fairfl refuses otherwise).
        "overwrite": True,
    }


def metric_filter(
    liars: set[int], key: str, report: Callable[[Any], Any], drop: Iterable[str] = ()
) -> Callable[[Message, Message], Message]:
    """A reply filter: the liars' train replies report ``report(metrics[key])``.

    The keys in ``drop`` are removed from those replies (a loss liar leaves out the
    ``qffl-h`` that q-FFL would check against the loss it reports).
    """

    def manipulate(instruction: Message, reply: Message) -> Message:
        if instruction.metadata.dst_node_id not in liars or reply.has_error():
            return reply
        if instruction.metadata.message_type != "train":
            return reply
        metrics = reply.content["metrics"]
        metrics[key] = report(metrics[key])
        for name in drop:
            if name in metrics:
                del metrics[name]
        return reply

    return manipulate


def shares_by_round(strategy: Any, liars: set[int]) -> list[float]:
    """The liars' Σ λ_i / Σ λ in each round, in round order (NaN: nothing aggregated)."""
    shares = []
    for server_round in sorted(strategy.train_records):
        weights = strategy.train_records[server_round].weights
        total = sum(weights.values())
        liar = sum(w for node, w in weights.items() if node in liars)
        shares.append(liar / total if weights and total > 0 else float("nan"))
    return shares


def honest_accuracy(strategy: Any, liars: set[int]) -> tuple[float, float]:
    """Mean and worst-10 % final test accuracy (%) of the clients that do not lie."""
    last = max(strategy.evaluations)
    honest = [r for r in strategy.evaluations[last] if r.node_id not in liars]
    stats = in_percent(
        fairness_metrics(
            [r.eval_acc for r in honest],
            [r.num_examples for r in honest],
            [r.eval_loss for r in honest],
        )
    )
    return stats["acc-mean"], stats["acc-worst-10"]


def run(
    config: dict[str, Any],
    out_dir: Path,
    reply_filter: Callable[[Message, Message], Message] | None = None,
) -> Any:
    """Run ``config`` in-process into ``out_dir``, the replies through ``reply_filter``.

    Returns the run's strategy (its ``train_records`` and ``evaluations``).
    """
    return run_inprocess({**config, "out-dir": str(out_dir)}, reply_filter=reply_filter).strategy


def outcome(strategy: Any, liars: set[int]) -> dict[str, Any]:
    """The liars' shares by round and the honest clients' final accuracy in one run."""
    mean, worst = honest_accuracy(strategy, liars)
    return {
        "shares": shares_by_round(strategy, liars),
        "honest_acc_mean": mean,
        "honest_acc_worst10": worst,
    }
