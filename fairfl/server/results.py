"""Per-round and final results files of a run: ``rounds.jsonl`` and ``summary.json``.

``rounds.jsonl`` holds one JSON object per round with every client's evaluation (by node
id and partition id), the fairness metrics, and what training did (accepted and dropped
replies, aggregation weights, rule diagnostics). ``summary.json`` holds the config, the
final metrics, the per-client test-set sizes and the wall time.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, MetricRecord

from fairfl.metrics import fairness_metrics
from fairfl.server.checkpoint import (
    CHECKPOINT_FILE,
    Checkpoint,
    capture_random_state,
    save_checkpoint,
)
from fairfl.strategies.base import FairStrategy

logger = logging.getLogger(__name__)

ROUNDS_FILE = "rounds.jsonl"
SUMMARY_FILE = "summary.json"


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


class RoundLog:
    """Writes one ``rounds.jsonl`` line per round, then ``summary.json``.

    Plug :meth:`on_round_end` into ``Strategy.start(evaluate_fn=...)``, which Flower
    calls after each round.

    Parameters
    ----------
    out_dir : Path
        Results folder (created; an existing ``rounds.jsonl`` there is replaced).
    strategy : FairStrategy
        The running strategy, whose per-round records are read.
    run_config : Mapping[str, Any]
        Stored in ``summary.json``.
    """

    def __init__(
        self,
        out_dir: Path,
        strategy: FairStrategy,
        run_config: Mapping[str, Any],
        *,
        checkpoint: bool = True,
        previous_rounds: list[dict[str, Any]] | None = None,
    ):
        self.out_dir = out_dir
        self.strategy = strategy
        self.run_config = dict(run_config)
        self.checkpoint = checkpoint
        self.rounds: list[dict[str, Any]] = list(previous_rounds or [])
        self.started = time.perf_counter()
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / ROUNDS_FILE).write_text("".join(json.dumps(r) + "\n" for r in self.rounds))

    def round_entry(self, server_round: int) -> dict[str, Any]:
        """Assemble the results of one finished round from the strategy's records."""
        evaluations = self.strategy.evaluations.get(server_round, [])
        train = self.strategy.train_records.get(server_round)
        entry: dict[str, Any] = {
            "round": server_round,
            "wall_time": time.perf_counter() - self.started,
            "clients": [
                {
                    "node_id": r.node_id,
                    "partition_id": r.partition_id,
                    "num_examples": r.num_examples,
                    "eval_acc": r.eval_acc,
                    "eval_loss": r.eval_loss,
                }
                for r in evaluations
            ],
            "metrics": fairness_metrics(
                [r.eval_acc for r in evaluations],
                [r.num_examples for r in evaluations],
                [r.eval_loss for r in evaluations],
            )
            if evaluations
            else {},
            "sampled": self.strategy.sampled.get(server_round, {}),
            "evaluate_dropped": {
                str(k): v for k, v in self.strategy.evaluation_drops.get(server_round, {}).items()
            },
        }
        if train is not None:
            entry["train"] = {
                "accepted": len(train.accepted),
                "dropped": {str(k): v for k, v in train.dropped.items()},
                "weights": [
                    {
                        "node_id": node,
                        "partition_id": train.partition_ids.get(node),
                        "weight": weight,
                    }
                    for node, weight in train.weights.items()
                ],
                "diagnostics": dict(train.diagnostics),
            }
        return _json_safe(entry)

    def on_round_end(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Append the round's line, checkpoint, log one summary line (round 0: nothing)."""
        if server_round == 0:
            return None
        server_round += self.strategy.round_offset
        entry = self.round_entry(server_round)
        self.rounds.append(entry)
        with (self.out_dir / ROUNDS_FILE).open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
        if self.checkpoint:
            python_random, numpy_random = capture_random_state()
            save_checkpoint(
                self.out_dir / CHECKPOINT_FILE,
                Checkpoint(
                    server_round=server_round,
                    arrays=arrays,
                    strategy_state=self.strategy.state_dict(),
                    python_random=python_random,
                    numpy_random=numpy_random,
                    rounds=self.rounds,
                ),
            )
        metrics = entry["metrics"]
        if metrics:
            logger.info(
                "round %d: acc mean %.2f | worst-10%% %.2f | std %.2f | %d of %s clients answered",
                server_round,
                metrics["acc-mean"],
                metrics["acc-worst-10"],
                metrics["acc-std"],
                len(entry["clients"]),
                entry["sampled"].get("evaluate", "?"),
            )
        return None

    def finish(self, strategy_settings: Mapping[str, Any]) -> dict[str, Any]:
        """Write ``summary.json`` and return it."""
        final = self.rounds[-1] if self.rounds else {}
        summary = _json_safe(
            {
                "config": self.run_config,
                "strategy": self.strategy.rule_name,
                "strategy_settings": dict(strategy_settings),
                "rounds": len(self.rounds),
                "final_metrics": final.get("metrics", {}),
                "test_samples_per_client": {
                    str(c["partition_id"] if c["partition_id"] is not None else c["node_id"]): c[
                        "num_examples"
                    ]
                    for c in final.get("clients", [])
                },
                "wall_time": time.perf_counter() - self.started,
            }
        )
        (self.out_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
        return summary
