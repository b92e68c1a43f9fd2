"""Sinks: where each round's record goes (``rounds.jsonl``, TensorBoard, MLflow, W&B, Prometheus).

One record per round (:class:`RoundRecord`, built from the ``rounds.jsonl`` entry) feeds
every sink, so all outputs agree. A sink is anything with ``open()``, ``record(round)``
and ``close()`` (:class:`Sink`). Each tracker's library is an optional extra
(``pip install "fairfl[telemetry]"``), imported when its sink opens; a missing one
raises :class:`MissingExtraError` naming the extra. A sink that cannot start (a busy
Prometheus port, an unwritable ``telemetry-dir``) raises :class:`SinkStartError`
naming the run-config key to change (:func:`open_sink`).

Scalars every tracker gets (:meth:`RoundRecord.scalars`): the fairness metrics of
:func:`fairfl.metrics.fairness_metrics` under ``fairness/<name>`` (accuracy statistics
as fractions in [0, 1]) and the participation counts under ``clients/<name>``
(``sampled-train``, ``answered-train``, ``dropped-train``, ``sampled-evaluate``,
``answered-evaluate``, ``dropped-evaluate``, ``unlabelled``), plus each client's
accuracy under ``client-acc/<client key>``, for at most ``telemetry-max-clients``
clients (:class:`ClientCap`).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from fairfl.telemetry.config import EXTRA, TelemetrySettings, is_loopback
from fairfl.telemetry.environment import environment_params
from fairfl.telemetry.ledger import encode_line

logger = logging.getLogger(__name__)


class MissingExtraError(ImportError):
    """A sink's library is not installed (the message names the extra)."""


class SinkStartError(ValueError):
    """A sink could not start; the message names the run-config key to change."""


def _require(module: str, sink: str) -> Any:
    """Import ``module`` for ``sink`` or raise :class:`MissingExtraError`."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtraError(
            f"run config telemetry: the {sink} sink needs {module.split('.')[0]!r}, which "
            f'is not installed: pip install "{EXTRA}" (or drop {sink!r} from telemetry)'
        ) from error


class ClientCap:
    """The client keys that get their own series: the first ``limit`` seen, for good.

    A cap on label cardinality: a Prometheus label value, TensorBoard tag or MLflow
    metric per client costs memory in the tracker for the whole run. Within a round
    keys are admitted in sorted order, so the same run admits the same keys.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.admitted: set[str] = set()

    def admit(self, keys: Sequence[str]) -> set[str]:
        """The subset of ``keys`` with a series (admitting new ones while room is left)."""
        for key in sorted(keys):
            if len(self.admitted) >= self.limit:
                break
            self.admitted.add(key)
        return self.admitted.intersection(keys)


def _number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


@dataclass(frozen=True)
class RoundRecord:
    """One round as every sink sees it.

    Attributes
    ----------
    entry : Mapping[str, Any]
        The ``rounds.jsonl`` line (with the ledger keys).
    client_accuracy : Mapping[str, float]
        ``eval_acc`` by client key, for the clients within the cap.
    unlabelled : int
        Clients that answered but are beyond the cap.
    """

    entry: Mapping[str, Any]
    client_accuracy: Mapping[str, float]
    unlabelled: int

    @classmethod
    def of(cls, entry: Mapping[str, Any], cap: ClientCap) -> RoundRecord:
        """Build from a ``rounds.jsonl`` entry, admitting clients through ``cap``."""
        accuracy = {
            str(client["client_key"]): float(client["eval_acc"])
            for client in entry.get("clients", [])
            if "client_key" in client and _number(client.get("eval_acc"))
        }
        kept = cap.admit(list(accuracy))
        return cls(
            entry=entry,
            client_accuracy={key: accuracy[key] for key in sorted(kept)},
            unlabelled=len(accuracy) - len(kept),
        )

    @property
    def round(self) -> int:
        """The server round."""
        return int(self.entry["round"])

    def counts(self) -> dict[str, float]:
        """Participation counts: sampled, answered and dropped, per phase."""
        entry = self.entry
        sampled = entry.get("sampled") or {}
        counts: dict[str, float] = {
            "answered-evaluate": float(len(entry.get("clients", []))),
            "dropped-evaluate": float(len(entry.get("evaluate_dropped") or {})),
            "unlabelled": float(self.unlabelled),
        }
        for phase in ("train", "evaluate"):
            if _number(sampled.get(phase)):
                counts[f"sampled-{phase}"] = float(sampled[phase])
        train = entry.get("train")
        if isinstance(train, Mapping):
            counts["answered-train"] = float(train.get("accepted", 0))
            counts["dropped-train"] = float(len(train.get("dropped") or {}))
        return counts

    def metrics(self) -> dict[str, float]:
        """The round's fairness metrics (finite numbers only).

        A Ditto round's personal-model statistics (``personal_metrics``) come too, named
        ``personal-<metric>`` (``personal-acc-mean``).
        """
        found = {
            str(name): float(value)
            for name, value in (self.entry.get("metrics") or {}).items()
            if _number(value)
        }
        found.update(
            {
                f"personal-{name}": float(value)
                for name, value in (self.entry.get("personal_metrics") or {}).items()
                if _number(value)
            }
        )
        return found

    def scalars(self) -> dict[str, float]:
        """Every scalar a tracker logs for this round, by tag (see the module docstring)."""
        scalars = {f"fairness/{name}": value for name, value in self.metrics().items()}
        scalars.update({f"clients/{name}": value for name, value in self.counts().items()})
        scalars.update({f"client-acc/{key}": acc for key, acc in self.client_accuracy.items()})
        return scalars


@runtime_checkable
class Sink(Protocol):
    """Where round records go: ``open()`` once, ``record()`` each round, ``close()`` once."""

    def open(self) -> None:
        """Acquire files, runs or sockets."""

    def record(self, round_record: RoundRecord) -> None:
        """Take one finished round."""

    def close(self) -> None:
        """Flush and release (safe to call twice)."""


#: The run-config keys that decide where each tracker writes or listens, named when its
#: sink cannot start (by class name; ``telemetry-dir`` holds the trackers' files).
SINK_KEYS = {
    "TensorBoardSink": "telemetry-dir",
    "MlflowSink": "telemetry-dir",
    "WandbSink": "telemetry-dir",
    "PrometheusSink": "telemetry-host / telemetry-port",
    "JsonlSink": "out-dir",
}


def open_sink(sink: Sink) -> None:
    """``sink.open()``, with a failure to start named by its run-config key.

    Raises
    ------
    MissingExtraError
        The sink's library is missing (unchanged).
    SinkStartError
        Anything else ``open`` raised (an ``OSError`` of a busy port or unwritable
        folder, a tracker's own error), with the key (:data:`SINK_KEYS`) and the cause.
    """
    try:
        sink.open()
    except (MissingExtraError, SinkStartError):
        raise
    except Exception as error:
        name = type(sink).__name__
        key = SINK_KEYS.get(name, "telemetry")
        raise SinkStartError(
            f"run config {key}: the {name} could not start ({type(error).__name__}: {error})"
        ) from error


class JsonlSink:
    """Appends each round's line to ``rounds.jsonl`` (today's file, with the ledger keys).

    Parameters
    ----------
    path : Path
        The ``rounds.jsonl`` file; it is rewritten on :meth:`open` with ``previous``.
    previous : Sequence[Mapping[str, Any]]
        Lines of the rounds a resumed run restores (written back byte for byte, so the
        hash chain continues).
    """

    def __init__(self, path: Path, previous: Sequence[Mapping[str, Any]] = ()):
        self.path = path
        self.previous = list(previous)

    def open(self) -> None:
        """Write the restored lines (or an empty file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(encode_line(r) + "\n" for r in self.previous))

    def record(self, round_record: RoundRecord) -> None:
        """Append the round's line."""
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(encode_line(round_record.entry) + "\n")

    def close(self) -> None:
        """Nothing is held open between rounds."""


class TensorBoardSink:
    """TensorBoard event files: every scalar of :meth:`RoundRecord.scalars` by round.

    Written with TensorBoard's own ``EventFileWriter`` (no TensorFlow or torch needed),
    into ``<telemetry-dir>/tensorboard``. ``tensorboard --logdir`` shows the
    ``fairness``, ``clients`` and ``client-acc`` sections.
    """

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self._writer: Any = None

    def open(self) -> None:
        """Create the event file."""
        writer_module = _require("tensorboard.summary.writer.event_file_writer", "tensorboard")
        self._event = _require("tensorboard.compat.proto.event_pb2", "tensorboard").Event
        self._summary = _require("tensorboard.compat.proto.summary_pb2", "tensorboard").Summary
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer = writer_module.EventFileWriter(str(self.log_dir))

    def record(self, round_record: RoundRecord) -> None:
        """One event with every scalar of the round, at step ``round``."""
        values = [
            self._summary.Value(tag=tag, simple_value=value)
            for tag, value in round_record.scalars().items()
        ]
        self._writer.add_event(
            self._event(
                wall_time=time.time(),
                step=round_record.round,
                summary=self._summary(value=values),
            )
        )

    def close(self) -> None:
        """Flush and close the event file."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class MlflowSink:
    """An MLflow run: metrics by step, the run config as params, the run id as a tag.

    ``mlflow-skinny`` is enough (the client and the file store, without the server's
    SQL and UI dependencies). The default store is the local file store
    ``<telemetry-dir>/mlruns``; MLflow 3 keeps that store in maintenance mode and
    refuses it unless ``MLFLOW_ALLOW_FILE_STORE=true``, which this sink sets for its
    process when it uses a ``file:`` URI (it needs no database; ``mlflow ui
    --backend-store-uri`` reads it). Another ``tracking_uri`` is used as given.
    """

    def __init__(
        self,
        tracking_uri: str,
        *,
        experiment: str = "fairfl",
        run_name: str | None = None,
        params: Mapping[str, Any] | None = None,
    ):
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.run_name = run_name
        self.params = dict(params or {})
        self.run_id: str | None = None

    def open(self) -> None:
        """Create (or reuse) the experiment and start a run."""
        if self.tracking_uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        client_module = _require("mlflow.tracking", "mlflow")
        entities = _require("mlflow.entities", "mlflow")
        self._metric = entities.Metric
        self._client = client_module.MlflowClient(tracking_uri=self.tracking_uri)
        found = self._client.get_experiment_by_name(self.experiment)
        experiment_id = (
            found.experiment_id
            if found is not None
            else self._client.create_experiment(self.experiment)
        )
        run = self._client.create_run(experiment_id, run_name=self.run_name)
        self.run_id = run.info.run_id
        params = [
            entities.Param(str(key)[:250], str(value)[:6000])
            for key, value in sorted(self.params.items())
        ]
        for start in range(0, len(params), 100):  # MLflow's batch limit is 100 params
            self._client.log_batch(self.run_id, params=params[start : start + 100])

    def record(self, round_record: RoundRecord) -> None:
        """Log every scalar at step ``round`` in batches of 1000 (MLflow's limit)."""
        stamp = int(time.time() * 1000)
        metrics = [
            self._metric(tag, value, stamp, round_record.round)
            for tag, value in round_record.scalars().items()
        ]
        for start in range(0, len(metrics), 1000):
            self._client.log_batch(self.run_id, metrics=metrics[start : start + 1000])

    def close(self) -> None:
        """Mark the run finished."""
        if self.run_id is not None:
            self._client.set_terminated(self.run_id)
            self.run_id = None


class WandbSink:
    """A Weights & Biases run, **offline** unless ``online`` (then W&B's own settings apply).

    Offline, the run is a folder ``<dir>/wandb/offline-run-*`` that nothing uploads;
    ``wandb sync`` sends it later if the user wants. ``mode="offline"`` is passed to
    ``wandb.init`` explicitly, so a ``WANDB_MODE=online`` in the environment does not
    override it: only ``telemetry-wandb-online = true`` does.
    """

    def __init__(
        self,
        directory: Path,
        *,
        online: bool = False,
        project: str = "fairfl",
        run_name: str | None = None,
        config: Mapping[str, Any] | None = None,
    ):
        self.directory = directory
        self.online = online
        self.project = project
        self.run_name = run_name
        self.config = dict(config or {})
        self._run: Any = None

    def open(self) -> None:
        """Start the run (offline by default)."""
        wandb = _require("wandb", "wandb")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project=self.project,
            name=self.run_name,
            dir=str(self.directory),
            config=self.config,
            mode=None if self.online else "offline",
            reinit="create_new",
        )

    def record(self, round_record: RoundRecord) -> None:
        """Log every scalar at step ``round``."""
        self._run.log(round_record.scalars(), step=round_record.round)

    def close(self) -> None:
        """Finish the run (its files are complete on disk afterwards)."""
        if self._run is not None:
            self._run.finish()
            self._run = None


class PrometheusSink:
    """A Prometheus/OpenMetrics HTTP endpoint with the latest round, for a running ServerApp.

    Gauges (own registry; nothing registered globally): ``fairfl_round``,
    ``fairfl_accuracy_mean``, ``fairfl_accuracy_worst10``, ``fairfl_accuracy_std``,
    ``fairfl_jain_index`` (accuracies as fractions), ``fairfl_clients{phase,state}``
    (``state`` is ``sampled``, ``answered`` or ``dropped``; ``phase`` ``train`` or
    ``evaluate``), ``fairfl_client_accuracy{client}`` (labelled by the stable client key,
    at most ``telemetry-max-clients`` label values) and ``fairfl_clients_unlabelled``.
    It binds ``host`` (127.0.0.1 by default) and ``port`` (0: a free one, in
    :attr:`port` after :meth:`open`).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 9464):
        self.host = host
        self.port = port
        self._server: Any = None

    def open(self) -> None:
        """Create the gauges and start serving."""
        prometheus = _require("prometheus_client", "prometheus")
        self.registry = prometheus.CollectorRegistry()
        gauge = prometheus.Gauge

        def make(name: str, text: str, labels: tuple[str, ...] = ()) -> Any:
            return gauge(name, text, labels, registry=self.registry)

        self.round_gauge = make("fairfl_round", "Last finished server round")
        self.mean = make("fairfl_accuracy_mean", "Mean client accuracy (fraction)")
        self.worst = make(
            "fairfl_accuracy_worst10", "Mean accuracy of the worst 10% of clients (fraction)"
        )
        self.std = make("fairfl_accuracy_std", "Std of client accuracies (fraction)")
        self.jain = make("fairfl_jain_index", "Jain's index of client accuracies")
        self.dp_gap = make(
            "fairfl_dp_gap", "Demographic-parity gap of the pooled predictions (NaN: no counts)"
        )
        self.eo_gap = make(
            "fairfl_eo_gap", "Equalised-odds gap of the pooled predictions (NaN: no counts)"
        )
        self.clients = make(
            "fairfl_clients", "Clients sampled, answered or dropped", ("phase", "state")
        )
        self.client_accuracy = make(
            "fairfl_client_accuracy", "Accuracy of one client (fraction)", ("client",)
        )
        self.unlabelled = make(
            "fairfl_clients_unlabelled", "Clients beyond telemetry-max-clients (no label)"
        )
        if not is_loopback(self.host):
            # The dashboard refuses such a host without a token; this endpoint has no
            # token to give, so the operator is told what it exposes.
            logger.warning(
                "telemetry-host %s is not a loopback address: the Prometheus endpoint "
                "(no authentication) serves other machines; keep it on 127.0.0.1 and use "
                "an SSH tunnel (deploy/README.md), or firewall the port",
                self.host,
            )
        try:
            self._server, self._thread = prometheus.start_http_server(
                self.port, addr=self.host, registry=self.registry
            )
        except OSError as error:
            # A busy or privileged port is the port's fault; anything else (no such
            # local address, a name that does not resolve) the host's.
            key = (
                "telemetry-port"
                if error.errno in (errno.EADDRINUSE, errno.EACCES)
                else "telemetry-host"
            )
            raise SinkStartError(
                f"run config {key}: the Prometheus endpoint cannot listen on "
                f"{self.host}:{self.port} ({error}); choose a free telemetry-port "
                "(0 = any free port, logged) or another telemetry-host"
            ) from error
        self.port = int(self._server.server_port)
        logger.info("telemetry: Prometheus metrics on http://%s:%d/metrics", self.host, self.port)

    def record(self, round_record: RoundRecord) -> None:
        """Set every gauge to this round's value."""
        self.round_gauge.set(round_record.round)
        metrics = round_record.metrics()
        for gauge, name in (
            (self.mean, "acc-mean"),
            (self.worst, "acc-worst-10"),
            (self.std, "acc-std"),
            (self.jain, "jain-index"),
            (self.dp_gap, "dp-diff"),
            (self.eo_gap, "eo-diff"),
        ):
            gauge.set(metrics.get(name, math.nan))
        for name, value in round_record.counts().items():
            state, _, phase = name.partition("-")
            if phase:
                self.clients.labels(phase=phase, state=state).set(value)
        self.unlabelled.set(round_record.unlabelled)
        for key, accuracy in round_record.client_accuracy.items():
            self.client_accuracy.labels(client=key).set(accuracy)

    def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None


def build_sinks(
    settings: TelemetrySettings,
    out_dir: Path,
    *,
    run_id: str,
    run_config: Mapping[str, Any],
) -> list[Sink]:
    """The tracker sinks ``settings`` names (not ``rounds.jsonl``, which is always written).

    Parameters
    ----------
    settings : TelemetrySettings
        The ``telemetry*`` run-config keys.
    out_dir : Path
        The run's results folder (``telemetry-dir`` defaults to ``<out-dir>/telemetry``).
    run_id : str
        Names the TensorBoard run folder, the MLflow and the W&B run.
    run_config : Mapping[str, Any]
        Logged as MLflow params and W&B config, with the versions and the machine
        (:func:`~fairfl.telemetry.environment.environment_params`).
    """
    run_config = {**run_config, **environment_params()}
    base = Path(settings.telemetry_dir) if settings.telemetry_dir else out_dir / "telemetry"
    sinks: list[Sink] = []
    for name in settings.sinks:
        if name == "tensorboard":
            sinks.append(TensorBoardSink(base / "tensorboard" / run_id))
        elif name == "mlflow":
            uri = (base / "mlruns").resolve().as_uri()
            sinks.append(MlflowSink(uri, run_name=run_id, params=run_config))
        elif name == "wandb":
            sinks.append(
                WandbSink(
                    base,
                    online=settings.telemetry_wandb_online,
                    run_name=run_id,
                    config=run_config,
                )
            )
        else:
            sinks.append(PrometheusSink(settings.telemetry_host, settings.telemetry_port))
    return sinks
