"""Per-round and final results files of a run: ``rounds.jsonl`` and ``summary.json``.

``rounds.jsonl`` holds one JSON object per round with every client's evaluation (by node
id and partition id), the fairness metrics, and what training did (accepted and dropped
replies, aggregation weights, rule diagnostics; ``failed`` with every client's error when
no train reply could be used). ``summary.json`` holds the config, the
final metrics, the per-client test-set sizes, the wall time and the run's outcome
(``status``: ``completed`` or ``failed``, with the ``error``). A client whose reply a
round used at weight 0 (FairFed's weights clipped at 0, AFL's λ_i at 0) is listed in
that round's ``train.silenced``, and one so silenced in every round it took part in is
named in the summary's ``silenced_clients``: such a run never heard that client.

Each line is the single record of its round: :class:`RoundLog` hands it to a
:class:`~fairfl.telemetry.stream.RecordStream`, which chains it into the ledger (the
SHA-256 of the previous line and the run's config fingerprint, ``fairfl verify``) and
feeds it to every sink: ``rounds.jsonl`` always, and the trackers the ``telemetry``
run-config key names (TensorBoard, MLflow, W&B, Prometheus; :mod:`fairfl.telemetry`).

Every line and the summary carry the ``run_id`` of the run that wrote them (a fresh
uuid4, or the ``FAIRFL_RUN_ID`` the simulation runner hands its ServerApp), so a runner
prints only the summary its own run wrote (:func:`summary_of_run`), never one left in
the folder by an earlier run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, MetricRecord

from fairfl.contract.replies import EvaluateReply
from fairfl.metrics import PERCENT, fairness_metrics
from fairfl.server.checkpoint import (
    CHECKPOINT_FILE,
    Checkpoint,
    capture_random_state,
    client_states_of,
    save_checkpoint,
)
from fairfl.server.group_fairness import add_group_fairness
from fairfl.strategies.core.base import FairStrategy
from fairfl.strategies.core.records import TrainRoundRecord
from fairfl.telemetry.config import TelemetrySettings
from fairfl.telemetry.ledger import SUMMARY_KEY, config_fingerprint, json_safe
from fairfl.telemetry.nodes import NodeKeys
from fairfl.telemetry.sinks import build_sinks
from fairfl.telemetry.stream import NO_REPLY_REASON, RecordStream, new_run_id

logger = logging.getLogger(__name__)

ROUNDS_FILE = "rounds.jsonl"
SUMMARY_FILE = "summary.json"
#: ``summary.json`` ``status`` of a run that finished every round and trained.
COMPLETED = "completed"
#: ``summary.json`` ``status`` of a run that raised or trained nothing.
FAILED = "failed"


def silenced(weights: list[dict[str, Any]]) -> list[int]:
    """The clients a round's aggregation used at weight 0, by partition id (else node id).

    ``weights`` is the round record's ``train.weights``: every used reply's weight.
    """
    return sorted(
        w["node_id"] if w["partition_id"] is None else w["partition_id"]
        for w in weights
        if w["weight"] == 0.0
    )


def silenced_throughout(rounds: list[dict[str, Any]]) -> dict[str, int]:
    """Clients at weight 0 in every round whose aggregation used them: key -> rounds.

    A rule can hold a client at weight 0 for a whole run (FairFed's clip, AFL's λ at 0);
    the run then never heard that client, which its results must say.
    """
    used: dict[int, int] = {}
    muted: dict[int, int] = {}
    for entry in rounds:
        weights = entry.get("train", {}).get("weights", [])
        for w in weights:
            key = w["node_id"] if w["partition_id"] is None else w["partition_id"]
            used[key] = used.get(key, 0) + 1
        for key in silenced(weights):
            muted[key] = muted.get(key, 0) + 1
    return {str(key): count for key, count in sorted(muted.items()) if count == used[key]}


def _drops(rejected: Mapping[int, str], unanswered: list[int]) -> dict[str, str]:
    """A phase's ``dropped`` entry: rejected replies, then nodes that never answered.

    With both, every round's record adds up: sampled = answered + dropped.
    """
    drops = {str(node): reason for node, reason in rejected.items()}
    drops.update({str(node): NO_REPLY_REASON for node in unanswered if node not in rejected})
    return drops


def failed_round(train: TrainRoundRecord | None) -> dict[str, Any] | None:
    """A round's ``failed`` entry if no client's train reply could be used, else ``None``.

    ``reason`` says so; ``errors`` holds each sampled client's error by node id (its
    reply's rejection, the error its ClientApp raised, or no reply before the timeout).
    A skipped round (replies used, new model refused) is not failed: it has ``skipped``.
    """
    if train is not None and train.accepted:
        return None
    errors = _drops(train.dropped, train.unanswered) if train is not None else {}
    reason = (
        f"none of the {len(errors)} clients' train replies could be used"
        if errors
        else "no client was sent a train message"
    )
    return {"reason": reason, "errors": errors}


def _client_entry(reply: EvaluateReply) -> dict[str, Any]:
    """One client's evaluation in ``rounds.jsonl``; Ditto's personal model's when sent."""
    entry: dict[str, Any] = {
        "node_id": reply.node_id,
        "partition_id": reply.partition_id,
        "num_examples": reply.num_examples,
        "eval_acc": reply.eval_acc,
        "eval_loss": reply.eval_loss,
    }
    if reply.personal_eval_acc is not None:
        entry["personal_eval_acc"] = reply.personal_eval_acc
        entry["personal_eval_loss"] = reply.personal_eval_loss
    if reply.device_index is not None:  # where the client evaluated (fairfl.client.placement)
        entry["device"] = "cpu" if reply.device_index < 0 else f"cuda:{reply.device_index}"
    return entry


class SummaryError(RuntimeError):
    """The out-dir holds no summary written by the run asked about."""


def summary_of_run(out_dir: Path, run_id: str) -> dict[str, Any]:
    """The ``summary.json`` in ``out_dir`` if run ``run_id`` wrote it.

    Raises
    ------
    SummaryError
        If there is no readable ``summary.json``, or it was written by another run
        (its ``run_id`` differs: a summary left by an earlier run in the same folder).
    """
    path = out_dir / SUMMARY_FILE
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SummaryError(
            f"run {run_id} wrote no summary: cannot read {path} ({error})"
        ) from error
    if not isinstance(summary, dict) or summary.get("run_id") != run_id:
        found = summary.get("run_id") if isinstance(summary, dict) else None
        raise SummaryError(
            f"run {run_id} wrote no summary: {path} is from another run (run_id {found!r})"
        )
    return summary


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
        Stored in ``summary.json``; its ``telemetry*`` keys choose the sinks.
    grid : Any
        The run's Grid, for the SuperNodes' public-key fingerprints (``node_key``) and,
        when its clients run in this process, their state in each checkpoint;
        ``None`` records neither.
    """

    def __init__(
        self,
        out_dir: Path,
        strategy: FairStrategy,
        run_config: Mapping[str, Any],
        *,
        checkpoint: bool = True,
        previous_rounds: list[dict[str, Any]] | None = None,
        run_id: str | None = None,
        fingerprint: Mapping[str, Any] | None = None,
        grid: Any = None,
    ):
        self.run_id = run_id or new_run_id()
        # The run's fingerprint (fairfl.server.checkpoint.run_fingerprint), checkpointed.
        self.fingerprint = dict(fingerprint or {})
        self.out_dir = out_dir
        self.strategy = strategy
        self.run_config = dict(run_config)
        self.checkpoint = checkpoint
        self.grid = grid
        self.rounds: list[dict[str, Any]] = list(previous_rounds or [])
        self.started = time.perf_counter()
        out_dir.mkdir(parents=True, exist_ok=True)
        # An earlier run's summary must not pass for this run's if this one fails.
        (out_dir / SUMMARY_FILE).unlink(missing_ok=True)
        telemetry = TelemetrySettings.from_run_config(self.run_config)
        # rounds.jsonl is rewritten with the restored lines, byte for byte: the chain holds.
        self.stream = RecordStream(
            out_dir / ROUNDS_FILE,
            self.fingerprint.get("sha256") or config_fingerprint(self.run_config),
            build_sinks(telemetry, out_dir, run_id=self.run_id, run_config=self.run_config),
            previous=self.rounds,
            max_clients=telemetry.telemetry_max_clients,
            node_keys=NodeKeys(grid) if grid is not None else None,
            key=telemetry.telemetry_key,
        )

    def round_entry(self, server_round: int) -> dict[str, Any]:
        """Assemble the results of one finished round from the strategy's records."""
        evaluations = self.strategy.evaluations.get(server_round, [])
        train = self.strategy.train_records.get(server_round)
        entry: dict[str, Any] = {
            "run_id": self.run_id,
            "strategy": self.strategy.rule_name,  # a line read alone still names its rule
            "round": server_round,
            "wall_time": time.perf_counter() - self.started,
            "clients": [_client_entry(r) for r in evaluations],
            # Every round has every key: none evaluated -> num-clients 0, NaN statistics.
            "metrics": fairness_metrics(
                [r.eval_acc for r in evaluations],
                [r.num_examples for r in evaluations],
                [r.eval_loss for r in evaluations],
            ),
            "sampled": self.strategy.sampled.get(server_round, {}),
            "evaluate_dropped": _drops(
                self.strategy.evaluation_drops.get(server_round, {}),
                self.strategy.evaluation_unanswered.get(server_round, []),
            ),
        }
        personal = [r for r in evaluations if r.personal_eval_acc is not None]
        if personal:
            # Ditto: every fairness metric over the clients' personal models too.
            entry["personal_metrics"] = fairness_metrics(
                [float(r.personal_eval_acc or 0.0) for r in personal],
                [r.num_examples for r in personal],
                [float(r.personal_eval_loss or 0.0) for r in personal],
            )
        add_group_fairness(entry, evaluations)  # clients' group-counts, when sent
        if self.run_config.get("evaluate-split", "test") == "validation":
            # Tuning runs: the clients' eval_acc / eval_loss are on their validation
            # split (carved from the training data), not on the test split.
            entry["eval_split"] = "validation"
        if train is not None:
            entry["train"] = {
                "accepted": len(train.accepted),
                "dropped": _drops(train.dropped, train.unanswered),
                "weights": [
                    {
                        "node_id": node,
                        "partition_id": train.partition_ids.get(node),
                        "weight": weight,
                    }
                    for node, weight in train.weights.items()
                ],
                "diagnostics": dict(train.diagnostics),
                "skipped": train.skipped,
            }
            failed = failed_round(train)
            if failed is not None:
                entry["failed"] = failed
            entry["train"]["silenced"] = silenced(entry["train"]["weights"])
        safe: dict[str, Any] = json_safe(entry)
        return safe

    def on_round_end(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Append the round's line, checkpoint, log one summary line (round 0: nothing)."""
        if server_round == 0:
            return None
        server_round += self.strategy.round_offset
        entry = self.stream.record(self.round_entry(server_round))
        self.rounds.append(entry)
        if self.checkpoint:
            python_random, numpy_random = capture_random_state()
            sampler, privacy = self.strategy.size_sampler, self.strategy.privacy
            save_checkpoint(
                self.out_dir / CHECKPOINT_FILE,
                Checkpoint(
                    server_round=server_round,
                    arrays=arrays,
                    strategy_state=self.strategy.state_dict(),
                    python_random=python_random,
                    numpy_random=numpy_random,
                    rounds=self.rounds,
                    fingerprint=self.fingerprint,
                    sampling_state=sampler.state() if sampler is not None else {},
                    client_claims=self.strategy.client_keys.claims.state_dict(),
                    client_state=client_states_of(self.grid),
                    privacy_state=privacy.state() if privacy is not None else {},
                ),
            )
        metrics = entry["metrics"]
        if metrics["num-clients"]:
            logger.info(
                "round %d: accuracy (%%) mean %.2f | worst-10%% %.2f | std %.2f | %d of %s "
                "clients answered%s",
                server_round,
                PERCENT * metrics["acc-mean"],
                PERCENT * metrics["acc-worst-10"],
                PERCENT * metrics["acc-std"],
                len(entry["clients"]),
                entry["sampled"].get("evaluate", "?"),
                personal_progress(entry.get("personal_metrics")),
            )
        return None

    def finish(
        self,
        strategy_settings: Mapping[str, Any],
        *,
        status: str = COMPLETED,
        error: str | None = None,
    ) -> dict[str, Any]:
        """Close the sinks, write ``summary.json`` with the run's outcome and return it.

        ``summary.json`` holds the ledger head (``ledger``: lines and the last line's
        SHA-256), so ``fairfl verify`` also catches rounds cut off the end.

        Parameters
        ----------
        strategy_settings : Mapping[str, Any]
            The rule's settings (:meth:`FairStrategy.settings`).
        status : str
            :data:`COMPLETED` or :data:`FAILED`.
        error : str | None
            Why the run failed.
        """
        final = self.rounds[-1] if self.rounds else {}
        summary: dict[str, Any] = json_safe(
            {
                "run_id": self.run_id,
                "status": status,
                "error": error,
                "config": self.run_config,
                "strategy": self.strategy.rule_name,
                "strategy_settings": dict(strategy_settings),
                "rounds": len(self.rounds),
                "failed_rounds": {
                    str(r["round"]): r["failed"]["reason"] for r in self.rounds if "failed" in r
                },
                "skipped_rounds": {
                    str(r["round"]): r["train"]["skipped"]
                    for r in self.rounds
                    if r.get("train", {}).get("skipped")
                },
                "silenced_clients": silenced_throughout(self.rounds),
                # dp = central-fixed: its settings and the final ε at δ (None: off).
                "privacy": None
                if self.strategy.privacy is None
                else self.strategy.privacy.summary(),
                "final_metrics": final.get("metrics", {}),
                # Ditto: the personal models' statistics of the last round.
                **(
                    {"final_personal_metrics": final["personal_metrics"]}
                    if "personal_metrics" in final
                    else {}
                ),
                "test_samples_per_client": {
                    str(c["partition_id"] if c["partition_id"] is not None else c["node_id"]): c[
                        "num_examples"
                    ]
                    for c in final.get("clients", [])
                },
                "wall_time": time.perf_counter() - self.started,
                SUMMARY_KEY: self.stream.ledger_head(),
            }
        )
        self.stream.close()
        (self.out_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
        return summary


def personal_progress(personal: Mapping[str, Any] | None) -> str:
    """`` | personal models: mean .. | worst-10% ..`` for a Ditto round's log line, else ""."""
    if not personal or not personal.get("num-clients"):
        return ""
    return " | personal models: mean {:.2f} | worst-10% {:.2f}".format(
        PERCENT * personal["acc-mean"], PERCENT * personal["acc-worst-10"]
    )
