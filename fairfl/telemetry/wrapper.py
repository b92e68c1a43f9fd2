"""Per-client records and the telemetry sinks for any Flower strategy, in two lines.

Flower's ``Result`` keeps only per-round aggregates. :func:`with_telemetry` wraps any
``flwr.serverapp.strategy.Strategy`` (Flower's own ``FedAvg`` included) so that its
``start()`` also writes fairfl's per-round record: every client's evaluation, the
fairness metrics, who was sampled, who answered and who was dropped (an error reply,
a missing metric, or no reply before the timeout), hash-chained in ``rounds.jsonl``
and sent to the trackers of the ``telemetry`` run-config key::

    from fairfl.telemetry import with_telemetry                      # + 1 line

    strategy = with_telemetry(FedAvg(fraction_train=0.5), context)  # 1 line changed
    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=3)

It records by watching the Grid: ``start()`` runs the wrapped strategy unchanged on a
Grid that passes every call through and reads the messages and replies. Nothing the
strategy computes changes. A fairfl rule's aggregation weights λ_i, diagnostics and
skipped rounds (its ``train_records``) go into each round's ``train`` record too.

The records go to ``out_dir`` (default: the run config's ``out-dir``, else
``outputs/telemetry`` under the ServerApp's working directory), which ``start()`` names,
as an absolute path, in its first log line. A folder that already holds a run's
``rounds.jsonl`` or ``summary.json`` is refused unless ``overwrite=True`` (or the run
config's ``overwrite``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeGuard

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from fairfl._grid import PassThroughGrid
from fairfl.logs import attach_flower_console
from fairfl.metrics import fairness_metrics
from fairfl.telemetry.config import TelemetrySettings
from fairfl.telemetry.ledger import SUMMARY_KEY, config_fingerprint, json_safe
from fairfl.telemetry.nodes import NodeKeys
from fairfl.telemetry.sinks import build_sinks
from fairfl.telemetry.stream import NO_REPLY_REASON, RecordStream, new_run_id

logger = logging.getLogger(__name__)

#: Flower's message types of a training and an evaluation round.
TRAIN, EVALUATE = "train", "evaluate"
#: Reply metric with the client's partition (fairfl's contract key), used if present.
PARTITION_ID = "partition-id"
#: Files whose presence means an out-dir holds a run's records.
RESULT_FILES = ("rounds.jsonl", "summary.json")


def _finite(value: object) -> TypeGuard[int | float]:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _metrics_of(reply: Message) -> Mapping[str, Any]:
    """The reply's first MetricRecord (Flower's apps send one, under ``metrics``)."""
    records = reply.content.metric_records
    return next(iter(records.values()), MetricRecord()) if records else MetricRecord()


class RoundRecorder:
    """Collects one round's messages and replies; :meth:`entry` makes its record.

    Parameters
    ----------
    run_id : str
        Written on every line.
    acc_key, loss_key, weight_key : str
        The evaluation reply's metric names (Flower's ``eval_acc``, ``eval_loss``,
        ``num-examples``).
    """

    def __init__(self, run_id: str, acc_key: str, loss_key: str, weight_key: str):
        self.run_id = run_id
        self.acc_key = acc_key
        self.loss_key = loss_key
        self.weight_key = weight_key
        self.started = time.perf_counter()
        self._reset()

    def _reset(self) -> None:
        self.sampled: dict[str, int] = {}
        self.clients: list[dict[str, Any]] = []
        self.evaluate_dropped: dict[str, str] = {}
        self.train_accepted: list[int] = []
        self.train_dropped: dict[str, str] = {}
        self.trained = False

    def observe(self, messages: list[Message], replies: list[Message]) -> None:
        """Record one ``send_and_receive``: sampled nodes, replies, drops, timeouts."""
        if not messages:
            return
        phase = messages[0].metadata.message_type
        if phase not in (TRAIN, EVALUATE):
            return
        self.sampled[phase] = self.sampled.get(phase, 0) + len(messages)
        dropped = self.train_dropped if phase == TRAIN else self.evaluate_dropped
        answered: set[int] = set()
        for reply in replies:
            node = int(reply.metadata.src_node_id)
            answered.add(node)
            if reply.has_error():
                error = reply.error
                dropped[str(node)] = f"error reply (code {error.code}): {error.reason}"
            elif phase == TRAIN:
                self.train_accepted.append(node)
            else:
                self._evaluation(node, _metrics_of(reply), dropped)
        for message in messages:
            node = int(message.metadata.dst_node_id)
            if node not in answered:
                dropped[str(node)] = NO_REPLY_REASON
        if phase == TRAIN:
            self.trained = True

    def _evaluation(self, node: int, metrics: Mapping[str, Any], dropped: dict[str, str]) -> None:
        acc = metrics.get(self.acc_key)
        if not _finite(acc) or not 0.0 <= float(acc) <= 1.0:
            dropped[str(node)] = (
                f"metrics[{self.acc_key!r}] is {acc!r}, not a fraction in [0, 1] "
                "(not counted in the fairness metrics)"
            )
            return
        loss = metrics.get(self.loss_key)
        weight = metrics.get(self.weight_key)
        partition = metrics.get(PARTITION_ID)
        self.clients.append(
            {
                "node_id": node,
                "partition_id": int(partition) if _finite(partition) else None,
                "num_examples": int(weight) if _finite(weight) and weight > 0 else None,
                "eval_acc": float(acc),
                "eval_loss": float(loss) if _finite(loss) else None,
            }
        )

    def entry(self, server_round: int, rule_record: Any = None) -> dict[str, Any]:
        """The round's record (fairfl's ``rounds.jsonl`` schema), then start afresh.

        A client without ``num-examples`` weighs 1 in ``acc-weighted-mean``.
        ``rule_record`` is a fairfl rule's ``TrainRoundRecord`` of the round (its
        ``weights``, ``partition_ids``, ``diagnostics``, ``skipped``), ``None`` for
        other strategies: their ``weights`` stay empty.
        """
        clients = sorted(self.clients, key=lambda c: (c["partition_id"] is None, c["node_id"]))
        entry: dict[str, Any] = {
            "run_id": self.run_id,
            "round": server_round,
            "wall_time": time.perf_counter() - self.started,
            "clients": clients,
            "metrics": fairness_metrics(
                [c["eval_acc"] for c in clients],
                [c["num_examples"] or 1 for c in clients],
                [math.nan if c["eval_loss"] is None else c["eval_loss"] for c in clients],
            ),
            "sampled": dict(self.sampled),
            "evaluate_dropped": dict(self.evaluate_dropped),
        }
        if self.trained:
            entry["train"] = {
                "accepted": len(self.train_accepted),
                "dropped": dict(self.train_dropped),
                "weights": [],
                "diagnostics": {},
                "skipped": None,
            }
            if rule_record is not None:
                entry["train"].update(
                    weights=[
                        {
                            "node_id": node,
                            "partition_id": rule_record.partition_ids.get(node),
                            "weight": weight,
                        }
                        for node, weight in rule_record.weights.items()
                    ],
                    diagnostics=dict(rule_record.diagnostics),
                    skipped=rule_record.skipped,
                )
        self._reset()
        safe: dict[str, Any] = json_safe(entry)
        return safe


class RecordingGrid(PassThroughGrid):
    """A Grid that passes every call to ``grid`` and shows rounds to a :class:`RoundRecorder`."""

    def __init__(self, grid: Grid, recorder: RoundRecorder):
        super().__init__(grid)
        self.recorder = recorder

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Send through ``grid``, record the messages and replies, return the replies."""
        sent = list(messages)
        replies = list(self.grid.send_and_receive(sent, timeout=timeout))
        self.recorder.observe(sent, replies)
        return replies


class TelemetryStrategy(Strategy):
    """Any Flower strategy, with fairfl's per-round record and telemetry sinks.

    Every hook is the wrapped strategy's; :meth:`start` runs the wrapped strategy's
    ``start`` on a :class:`RecordingGrid` and writes one record per round to
    ``<out-dir>/rounds.jsonl`` and the configured sinks (:func:`with_telemetry`).

    Parameters
    ----------
    strategy : Strategy
        The strategy to run, unchanged.
    run_config : Mapping[str, Any]
        The run config: ``telemetry*`` keys choose the sinks
        (:class:`~fairfl.telemetry.config.TelemetrySettings`), ``out-dir`` the folder;
        its fingerprint goes on every line.
    out_dir : Path | str | None
        Results folder (default: the run config's ``out-dir``, else
        ``outputs/telemetry``), relative to the ServerApp's working directory.
    overwrite : bool | None
        Replace the records of a previous run in ``out_dir``. ``None``: the run config's
        ``overwrite`` (absent: ``False``, such a folder is refused).
    acc_key, loss_key, weight_key : str
        Metric names in the evaluation replies.
    """

    def __init__(
        self,
        strategy: Strategy,
        run_config: Mapping[str, Any],
        *,
        out_dir: Path | str | None = None,
        overwrite: bool | None = None,
        acc_key: str = "eval_acc",
        loss_key: str = "eval_loss",
        weight_key: str = "num-examples",
    ):
        self.strategy = strategy
        self.run_config = dict(run_config)
        self.settings = TelemetrySettings.from_run_config(self.run_config)
        self.overwrite = bool(
            self.run_config.get("overwrite", False) if overwrite is None else overwrite
        )
        self.out_dir = Path(
            out_dir
            if out_dir is not None
            else self.run_config.get("out-dir", "") or "outputs/telemetry"
        )
        self.acc_key = acc_key
        self.loss_key = loss_key
        self.weight_key = weight_key
        # FAIRFL_RUN_ID when a fairfl runner names the run, as for fairfl's own ServerApp
        self.run_id = new_run_id()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The wrapped strategy's."""
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The wrapped strategy's."""
        return self.strategy.aggregate_train(server_round, replies)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The wrapped strategy's."""
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """The wrapped strategy's."""
        return self.strategy.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        """The wrapped strategy's, then where the records go."""
        self.strategy.summary()
        logger.info(
            "telemetry: per-client records in %s (sinks: %s)",
            self.out_dir / "rounds.jsonl",
            ", ".join(("jsonl", *self.settings.sinks)),
        )

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """The wrapped strategy's ``start``, recording each round (see the class).

        ``summary.json`` gets the outcome (``status`` ``completed`` or ``failed``) and
        the ledger head, also when a round raises.

        Raises
        ------
        FileExistsError
            If ``out_dir`` holds a previous run's records and ``overwrite`` is off (the
            message names the folder and the files); nothing is written then.
        """
        attach_flower_console(level=None)
        logger.info(
            "telemetry: %s's per-client records go to %s",
            type(self.strategy).__name__,
            self.out_dir.resolve(),
        )
        found = [name for name in RESULT_FILES if (self.out_dir / name).exists()]
        if found and not self.overwrite:
            raise FileExistsError(
                f"with_telemetry: {self.out_dir.resolve()} already holds a run's records "
                f"({', '.join(found)}); pass another out_dir (or run config out-dir), or "
                "overwrite=True (run config overwrite=true) to replace them"
            )
        for name in found:
            (self.out_dir / name).unlink()
        records = getattr(self.strategy, "train_records", None)  # a fairfl rule's
        recorder = RoundRecorder(self.run_id, self.acc_key, self.loss_key, self.weight_key)
        stream = RecordStream(
            self.out_dir / "rounds.jsonl",
            config_fingerprint(self.run_config),
            build_sinks(
                self.settings, self.out_dir, run_id=self.run_id, run_config=self.run_config
            ),
            max_clients=self.settings.telemetry_max_clients,
            node_keys=NodeKeys(grid),
            key=self.settings.telemetry_key,
        )
        last: dict[str, Any] = {}

        def round_end(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            result = evaluate_fn(server_round, arrays) if evaluate_fn is not None else None
            if server_round > 0:
                rule_record = records.get(server_round) if records is not None else None
                last.update(stream.record(recorder.entry(server_round, rule_record)))
            return result

        status, error = "failed", None
        try:
            result = self.strategy.start(
                RecordingGrid(grid, recorder),
                initial_arrays,
                num_rounds,
                timeout,
                train_config,
                evaluate_config,
                round_end,
            )
            status = "completed"
            return result
        except BaseException as failure:
            error = f"{type(failure).__name__}: {failure}"
            raise
        finally:
            stream.close()
            summary = {
                "run_id": self.run_id,
                "status": status,
                "error": error,
                "config": self.run_config,
                "strategy": type(self.strategy).__name__,
                "rounds": stream.lines,
                "final_metrics": last.get("metrics", {}),
                SUMMARY_KEY: stream.ledger_head(),
            }
            (self.out_dir / "summary.json").write_text(
                json.dumps(json_safe(summary), indent=2, default=str) + "\n"
            )


def with_telemetry(
    strategy: Strategy, context: Context | Mapping[str, Any], **options: Any
) -> TelemetryStrategy:
    """Wrap ``strategy`` to record per-client results and feed the telemetry sinks.

    Parameters
    ----------
    strategy : Strategy
        Any Flower strategy (``flwr.serverapp.strategy.FedAvg``, a fairfl rule, ...).
    context : Context | Mapping[str, Any]
        The ServerApp's ``Context`` (its run config is read) or a run config.
    **options : Any
        :class:`TelemetryStrategy`'s keyword arguments (``out_dir``, ``acc_key``, ...).
    """
    run_config = context.run_config if isinstance(context, Context) else context
    return TelemetryStrategy(strategy, run_config, **options)
