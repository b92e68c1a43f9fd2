"""What a round records: its :class:`TrainRoundRecord`, the metrics returned to Flower.

The orchestrator (:class:`~fairfl.strategies.core.base.FairStrategy`) keeps one record per
training round for results files and diagnostics, and returns the metrics built here:
the app's own (Flower's weighted average, :func:`aggregate_app_metrics`), the round's reply
counts and the rule's diagnostics (:func:`round_metrics`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from io import BytesIO
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.exception import AggregationError
from numpy.lib.format import header_data_from_array_1_0, write_array_header_1_0
from numpy.typing import NDArray

from fairfl.contract import ModelLayout, TrainReply, keys
from fairfl.strategies.core.aggregation import weight_entropy

if TYPE_CHECKING:
    from flwr.serverapp.strategy import Result

logger = logging.getLogger(__name__)

MetricValue = int | float | list[float] | list[int]
MetricsAggregation = Callable[[list[RecordDict], str], MetricRecord]

#: Per-client reports of the wire contract that a weighted average makes meaningless (a
#: mean node's activation, partition id, h_k or η): left out of the app's metrics.
CLIENT_REPORT_KEYS: tuple[str, ...] = (
    keys.ACTIVATION,
    keys.PARTITION_ID,
    keys.QFFL_H,
    keys.RCFL_ETA,
)


@dataclass
class TrainRoundRecord:
    """What one training round did, kept per round for results files and diagnostics.

    Attributes
    ----------
    accepted : list[int]
        Node ids whose replies were aggregated, in aggregation order (sorted).
    partition_ids : dict[int, int]
        Partition id of each accepted node that sent one.
    dropped : dict[int, str]
        Reason each dropped reply was rejected, by node id.
    unanswered : list[int]
        Node ids sent a training message that sent no reply before the round ended.
    weights : dict[int, float]
        The aggregation weight λ_i of each accepted node, for rules that have one.
    diagnostics : dict[str, Any]
        Rule-specific scalars (e.g. ``beta-max``, ``negative-weights``).
    skipped : str | None
        Why the round kept the previous global model although replies were accepted
        (the new one was not finite or broke ``max_abs_weight``); ``None`` otherwise.
    """

    accepted: list[int] = field(default_factory=list)
    partition_ids: dict[int, int] = field(default_factory=dict)
    dropped: dict[int, str] = field(default_factory=dict)
    unanswered: list[int] = field(default_factory=list)
    weights: dict[int, float] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None

    def skip(self, server_round: int, problem: str) -> None:
        """Record (and log at WARNING) that the round kept the previous global model."""
        logger.warning(
            "aggregate_train: round %d skipped: the new global model %s; "
            "keeping the previous global model",
            server_round,
            problem,
        )
        self.skipped = f"the new global model {problem}"
        self.diagnostics["skipped-aggregate"] = 1

    @classmethod
    def of(
        cls, accepted: list[TrainReply], dropped: dict[int, str], unanswered: list[int]
    ) -> TrainRoundRecord:
        """The record of a round that accepted ``accepted`` (its λ and diagnostics to come)."""
        return cls(
            accepted=[r.node_id for r in accepted],
            partition_ids={
                r.node_id: r.partition_id for r in accepted if r.partition_id is not None
            },
            dropped=dropped,
            unanswered=unanswered,
        )


def trained_nothing(records: Mapping[int, TrainRoundRecord], rounds: range) -> str | None:
    """Why ``rounds`` trained nothing, or ``None`` if one of them made a new global model.

    A round made one when it aggregated accepted replies and kept the result (not
    ``skipped``); rounds without a record sent no train message or heard no reply.
    """
    if not rounds or any(
        (r := records.get(number)) is not None and r.accepted and r.skipped is None
        for number in rounds
    ):
        return None
    dropped = sum(len(r.dropped) for number in rounds if (r := records.get(number)) is not None)
    return (
        f"trained nothing: none of its {len(rounds)} rounds aggregated a reply into a new "
        f"global model ({dropped} replies dropped)"
    )


class TrainedNothingError(AggregationError):
    """No round of a ``start()`` aggregated a reply into a new model: not a success.

    Raised by ``FairStrategy.start`` (:func:`unless_trained_nothing`), so a ServerApp of
    one's own that runs a fairfl rule whose every round failed ends non-zero instead of
    returning the initial model as a result; fairfl's ServerApp judges the run itself.
    """


def unless_trained_nothing(
    result: Result, records: Mapping[int, TrainRoundRecord], last: int, count: int
) -> Result:
    """``result`` of the ``count`` rounds up to round ``last``, if one of them trained.

    Raises
    ------
    TrainedNothingError
        If none of the rounds made a new global model (:func:`trained_nothing`).
    """
    if nothing := trained_nothing(records, range(last - count + 1, last + 1)):
        raise TrainedNothingError(f"the run {nothing}; every round's record is in train_records")
    return result


def weight_diagnostics(
    weights: NDArray[np.float64], capped_clients: int | None
) -> dict[str, MetricValue]:
    """A round's diagnostics of its aggregation weights λ (at least one).

    ``lambda-max``, ``lambda-min``, ``lambda-sum``, ``lambda-entropy`` (the entropy of
    the normalised λ, :func:`~fairfl.strategies.core.aggregation.weight_entropy`, when
    finite) and ``capped-clients`` (the replies ``max_client_share`` capped, when on).
    """
    diagnostics: dict[str, MetricValue] = {
        "lambda-max": float(weights.max()),
        "lambda-min": float(weights.min()),
        "lambda-sum": float(weights.sum()),
    }
    entropy = weight_entropy(weights)
    if np.isfinite(entropy):
        diagnostics["lambda-entropy"] = entropy
    if capped_clients is not None:
        diagnostics["capped-clients"] = capped_clients
    return diagnostics


def log_no_usable_reply(server_round: int, dropped: int) -> None:
    """WARNING: a training round with no reply to aggregate keeps the previous model."""
    logger.warning(
        "aggregate_train: round %d has no usable reply (%d dropped); "
        "keeping the previous global model",
        server_round,
        dropped,
    )


def round_metrics(num_replies: int, record: TrainRoundRecord) -> dict[str, MetricValue]:
    """The rule's part of the round's MetricRecord: reply counts and finite diagnostics."""
    metrics: dict[str, MetricValue] = {
        "num-replies": num_replies,
        "dropped-replies": len(record.dropped),
    }
    for name, value in record.diagnostics.items():
        if isinstance(value, bool):
            metrics[name] = int(value)
        elif isinstance(value, int | float) and np.isfinite(value):
            metrics[name] = value
    return metrics


def app_metrics(
    hook: str,
    aggregate: MetricsAggregation,
    messages: list[Message],
    nodes: list[int],
    weighted_by_key: str,
) -> dict[str, Any]:
    """The app's own metrics of the replies of ``nodes``, as Flower's FedAvg returns them.

    ``aggregate`` is ``train_metrics_aggr_fn`` or ``evaluate_metrics_aggr_fn``. If it
    raises (e.g. an app metric that is a float in one reply and a list in another),
    a WARNING names the error and no app metric is reported.
    """
    try:
        return dict(aggregate(contents_of(messages, nodes), weighted_by_key))
    except (ArithmeticError, KeyError, TypeError, ValueError) as error:
        logger.warning(
            "%s: the replies' own metrics could not be aggregated (%s: %s); "
            "reporting fairfl's metrics only",
            hook,
            type(error).__name__,
            error,
        )
        return {}


def aggregate_app_metrics(records: list[RecordDict], weighted_by_key: str) -> MetricRecord:
    """Flower's weighted average of the replies' metrics, less fairfl's per-client reports.

    The arithmetic of :func:`flwr.serverapp.strategy.strategy_utils.aggregate_metricrecords`
    (FedAvg's default), value for value and in the same order, over the replies'
    MetricRecords without :data:`CLIENT_REPORT_KEYS`: every app metric (``train_loss``,
    ``eval_acc``, ``my-metric``), weighted by ``weighted_by_key``, which is left out.
    Each reply's records are read once, as plain dicts, and the result is checked once
    as a MetricRecord: building stripped copies of the replies' records and averaging
    them with Flower's function (which reads ``RecordDict.metric_records`` twice per
    reply and type-checks every intermediate value) took ~2 ms of CPU per round at 40
    replies, where this takes ~0.3 ms (issue #51).
    """
    stripped: list[list[dict[str, Any]]] = []
    weights: list[float] = []
    for record in records:
        metrics: list[dict[str, Any]] = [
            {k: v for k, v in values.items() if k not in CLIENT_REPORT_KEYS}
            for values in record.values()
            if isinstance(values, MetricRecord)
        ]
        # The first MetricRecord's weight, as Flower's (fairfl's reader checked it).
        weights.append(metrics[0][weighted_by_key])
        stripped.append(metrics)
    total_weight = sum(weights)
    factors = [w / total_weight for w in weights]
    aggregated: dict[str, Any] = {}
    for metrics, weight in zip(stripped, factors, strict=True):
        for values in metrics:
            for key, value in values.items():
                if key == weighted_by_key:
                    continue
                if key not in aggregated:
                    if isinstance(value, list):
                        aggregated[key] = [v * weight for v in value]
                    else:
                        aggregated[key] = value * weight
                elif isinstance(value, list):
                    aggregated[key] = [
                        current + v * weight
                        for current, v in zip(aggregated[key], value, strict=True)
                    ]
                else:
                    aggregated[key] = aggregated[key] + value * weight
    return MetricRecord(aggregated)


def contents_of(messages: list[Message], nodes: list[int]) -> list[RecordDict]:
    """The contents of the replies of ``nodes`` (accepted, so one each), in that order."""
    by_node = {int(m.metadata.src_node_id): m.content for m in messages if not m.has_error()}
    return [by_node[node] for node in nodes]


def global_model_problem(
    array_keys: Iterable[str], arrays: Iterable[NDArray[Any]], max_abs_weight: float | None
) -> str | None:
    """What is wrong with a new global model, or ``None``: NaN/Inf or ``|w| > max_abs_weight``.

    Checks the arrays as they would be sent (in the model's dtype, so a float64 value
    that overflows float32 counts as Inf). The reason names the array and the largest
    ``|w|`` (``has |w| 3.2e+07 > max_abs_weight 1e+06 in 'fc.weight'``).
    """
    worst: tuple[float, str] | None = None
    for key, array in zip(array_keys, arrays, strict=True):
        if not np.issubdtype(array.dtype, np.floating) or array.size == 0:
            continue
        low, high = float(array.min()), float(array.max())  # NaN if any element is
        if not (np.isfinite(low) and np.isfinite(high)):
            bad = "NaN" if np.isnan(array).any() else "Inf"
            return f"is not finite ({bad} in {key!r})"
        peak = max(-low, high)
        if worst is None or peak > worst[0]:
            worst = (peak, key)
    if worst is not None and max_abs_weight is not None and worst[0] > max_abs_weight:
        return f"has |w| {worst[0]:.6g} > max_abs_weight {max_abs_weight:g} in {worst[1]!r}"
    return None


def global_model(
    layout: ModelLayout, new_arrays: Iterable[NDArray[Any]], max_abs_weight: float | None
) -> tuple[ArrayRecord | None, str | None]:
    """The new global model in the model's dtypes, or ``None`` and what is wrong with it.

    Each array is cast to its dtype in ``layout`` (C-contiguous), then checked by
    :func:`global_model_problem`.
    """
    cast = [
        np.ascontiguousarray(value, dtype=dtype)
        for value, dtype in zip(new_arrays, layout.dtypes, strict=True)
    ]
    problem = global_model_problem(layout.keys, cast, max_abs_weight)
    if problem is not None:
        return None, problem
    return ArrayRecord({k: saved_array(v) for k, v in zip(layout.keys, cast, strict=True)}), None


def saved_array(value: NDArray[Any]) -> Array:
    """``Array(value)``, the same bytes, with one copy of a C-contiguous array's values.

    Flower's ``Array.from_numpy_ndarray`` writes ``np.save``'s bytes into a ``BytesIO``:
    the values are copied by ``tobytes``, again into the growing buffer and by
    ``getvalue``, each copy into freshly allocated memory (at 1M float32 parameters
    ~1,000 page faults a round). Here ``np.save``'s header (``.npy`` format 1.0) is
    written alone and joined with the array's own buffer. Any other array, and a header
    too long for format 1.0 (``np.save`` then writes 2.0), takes Flower's path.
    """
    if not value.flags.c_contiguous:
        return Array(value)
    header = BytesIO()
    try:
        write_array_header_1_0(header, header_data_from_array_1_0(value))
    except ValueError:
        return Array(value)
    data = b"".join((header.getvalue(), value.reshape(-1).view(np.uint8).data))
    return Array(dtype=str(value.dtype), shape=tuple(value.shape), stype="numpy.ndarray", data=data)
