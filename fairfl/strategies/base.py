"""Plumbing shared by every fairfl rule: reply validation, bookkeeping, evaluation.

A rule subclasses :class:`FairStrategy` (and implements ``aggregate``) or
:class:`ReweightedStrategy` (and implements ``lambdas``). The classes only move records;
the math lives in pure functions in each rule's module.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from numpy.typing import NDArray

from fairfl._compat import SERVER_NODE_ID
from fairfl.contract import (
    EvaluateReply,
    ModelLayout,
    ReplyError,
    TrainReply,
    keys,
    read_evaluate_reply,
    read_train_reply,
)
from fairfl.metrics import fairness_metrics
from fairfl.strategies.aggregation import reweighted_average, weight_entropy

if TYPE_CHECKING:
    from flwr.serverapp.strategy import Result

logger = logging.getLogger(__name__)

ConfigValue = int | float | str | bool
MetricValue = int | float | list[float] | list[int]


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
    weights : dict[int, float]
        The aggregation weight λ_i of each accepted node, for rules that have one.
    diagnostics : dict[str, Any]
        Rule-specific scalars (e.g. ``beta-max``, ``negative-weights``).
    """

    accepted: list[int] = field(default_factory=list)
    partition_ids: dict[int, int] = field(default_factory=dict)
    dropped: dict[int, str] = field(default_factory=dict)
    weights: dict[int, float] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)


def check_fraction(name: str, value: float) -> None:
    """Raise ``ValueError`` unless ``0 <= value <= 1``."""
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


def check_positive_int(name: str, value: int, minimum: int = 1) -> None:
    """Raise ``ValueError`` unless ``value`` is an int ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


class FairStrategy(FlowerFedAvg):
    """Base class of the fairfl rules (Flower Message API).

    It keeps Flower's FedAvg sampling and message construction and replaces reply
    handling: each train reply is validated alone against the wire contract and the
    global model that was sent (:func:`fairfl.contract.read_train_reply`); a bad reply
    is logged with its node and reason and dropped, and the round goes on with the rest.
    Replies are sorted by node id before any sum. When every reply is bad, or the
    aggregate is not finite, the round keeps the previous model.

    Evaluation replies are kept per client and round in :attr:`evaluations`, and the
    aggregated MetricRecord carries the fairness metrics of :mod:`fairfl.metrics`.

    Parameters
    ----------
    fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes, \
min_available_nodes
        As in :class:`flwr.serverapp.strategy.FedAvg`, but checked: fractions in
        [0, 1], counts >= 0.
    max_abs_weight : float | None (default: 1e6)
        Drop replies with a weight larger than this in absolute value (an absurd
        magnitude no trained network has; it would swamp every other client in a
        weighted sum). ``None`` only rejects NaN/Inf.
    evaluate_every : int (default: 1)
        Federated evaluation only every this many rounds, and always in the last round
        of :meth:`start` (long runs: q-FFL's Synthetic trains for thousands of rounds).

    Notes
    -----
    ``weighted_by_key``, ``arrayrecord_key`` and ``configrecord_key`` are fixed to the
    contract's ``num-examples``, ``arrays`` and ``config``: the readers rely on them.
    """

    #: Metric keys the rule needs in every train reply besides ``num-examples``.
    required_train_metrics: ClassVar[tuple[str, ...]] = ()
    #: True for a rule that reads every reply value in a pass of its own and checks them
    #: there (:func:`fairfl.contract.check_array_values`), saving the reader's pass.
    checks_array_values: ClassVar[bool] = False
    #: Short name used in logs and the registry.
    rule_name: ClassVar[str] = "fair-strategy"

    def __init__(
        self,
        *,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        max_abs_weight: float | None = 1e6,
        evaluate_every: int = 1,
    ) -> None:
        check_fraction("fraction_train", fraction_train)
        check_fraction("fraction_evaluate", fraction_evaluate)
        check_positive_int("min_train_nodes", min_train_nodes, minimum=0)
        check_positive_int("min_evaluate_nodes", min_evaluate_nodes, minimum=0)
        check_positive_int("min_available_nodes", min_available_nodes, minimum=0)
        check_positive_int("evaluate_every", evaluate_every)
        if max_abs_weight is not None and not max_abs_weight > 0:
            raise ValueError(f"max_abs_weight must be > 0 or None, got {max_abs_weight}")
        super().__init__(
            fraction_train=fraction_train,
            fraction_evaluate=fraction_evaluate,
            min_train_nodes=min_train_nodes,
            min_evaluate_nodes=min_evaluate_nodes,
            min_available_nodes=min_available_nodes,
            weighted_by_key=keys.NUM_EXAMPLES,
            arrayrecord_key=keys.ARRAYS,
            configrecord_key=keys.CONFIG,
        )
        self.max_abs_weight = max_abs_weight
        self.evaluate_every = evaluate_every
        # The last round of the current start() call (with the offset): always evaluated.
        self.last_round: int | None = None
        self.current_arrays: ArrayRecord | None = None
        self.train_records: dict[int, TrainRoundRecord] = {}
        self.evaluations: dict[int, list[EvaluateReply]] = {}
        self.evaluation_drops: dict[int, dict[int, str]] = {}
        # Messages sent per round and kind ("train", "evaluate"): how many could answer.
        self.sampled: dict[int, dict[str, int]] = {}
        # The messages of the phase in progress: the node an error reply is about.
        self.in_flight: list[Message] = []
        # Rounds already done before Strategy.start() was called (resume from a
        # checkpoint): Flower counts from 1 again, every hook adds this offset.
        self.round_offset = 0

    # ------------------------------------------------------------------ settings
    def settings(self) -> dict[str, Any]:
        """The rule's own settings, for ``summary()`` and results files."""
        return {}

    def summary(self) -> None:
        """Log the rule's settings, then Flower's sampling settings."""
        logger.info("\t├──> %s settings:", self.rule_name)
        for name, value in self.settings().items():
            logger.info("\t│\t├── %s: %s", name, value)
        logger.info("\t│\t├── max_abs_weight: %s", self.max_abs_weight)
        logger.info("\t│\t├── evaluate_every: %s", self.evaluate_every)
        logger.info("\t│\t└── required train metrics: %s", list(self.required_train_metrics))
        super().summary()

    # --------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """JSON-able state a checkpoint must keep (stateless rules: nothing)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (stateless rules: nothing to do)."""

    # ------------------------------------------------------------------ training
    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """Rule-specific train-config keys sent to clients this round (none by default)."""
        return {}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Remember w^t and send it with the round's config (the caller's is not changed)."""
        server_round += self.round_offset
        self.current_arrays = arrays
        round_config = ConfigRecord(dict(config))
        for key, value in self.train_config(server_round).items():
            round_config[key] = value
        messages = list(super().configure_train(server_round, arrays, round_config, grid))
        self.sampled.setdefault(server_round, {})["train"] = len(messages)
        self.in_flight = messages
        return messages

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
        """Flower's ``Strategy.start``, remembering the last round (always evaluated)."""
        self.last_round = self.round_offset + num_rounds
        return super().start(
            grid, initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn
        )

    def evaluates_in(self, server_round: int) -> bool:
        """Whether round ``server_round`` (with the offset) has a federated evaluation."""
        return server_round % self.evaluate_every == 0 or server_round == self.last_round

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send the global model for evaluation (the caller's config is not changed)."""
        server_round += self.round_offset
        if not self.evaluates_in(server_round):
            self.sampled.setdefault(server_round, {})["evaluate"] = 0
            self.in_flight = []
            return []
        messages = list(
            super().configure_evaluate(server_round, arrays, ConfigRecord(dict(config)), grid)
        )
        self.sampled.setdefault(server_round, {})["evaluate"] = len(messages)
        self.in_flight = messages
        return messages

    def reply_node(self, message: Message) -> int:
        """The node a reply is about: its sender, or the node an error reply stands in for.

        For a node it cannot reach (heartbeats lapsed) the SuperLink answers itself, an
        error reply from node 1 (the SuperLink) to the instruction's message id; that is
        mapped back to the instruction's node (the Grid sets the message ids of the
        messages this strategy returned when it pushes them).
        """
        node = int(message.metadata.src_node_id)
        if node != SERVER_NODE_ID or not message.has_error():
            return node
        instruction = message.metadata.reply_to_message_id
        for sent in self.in_flight:
            if instruction and sent.metadata.message_id == instruction:
                return int(sent.metadata.dst_node_id)
        return node

    def read_train_replies(
        self, server_round: int, replies: Iterable[Message], layout: ModelLayout
    ) -> tuple[list[TrainReply], dict[int, str]]:
        """Validate each reply alone; return the good ones sorted by node id, and drops."""
        accepted: dict[int, TrainReply] = {}
        dropped: dict[int, str] = {}
        for message in replies:
            node_id = self.reply_node(message)
            if node_id in accepted or node_id in dropped:
                reason = "duplicate reply from the same node in one round"
                logger.info("aggregate_train: dropped reply from node %d: %s", node_id, reason)
                accepted.pop(node_id, None)
                dropped[node_id] = reason
                continue
            try:
                accepted[node_id] = read_train_reply(
                    message,
                    layout,
                    self.required_train_metrics,
                    self.max_abs_weight,
                    check_values=not self.checks_array_values,
                )
            except ReplyError as error:
                logger.info(
                    "aggregate_train: dropped reply from node %d: %s %s",
                    node_id,
                    error.field,
                    error.reason,
                )
                dropped[node_id] = f"{error.field} {error.reason}"
        return [accepted[node] for node in sorted(accepted)], dropped

    def aggregate_train(
        self,
        server_round: int,
        replies: Iterable[Message],
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate replies, aggregate the good ones with the rule, report diagnostics."""
        server_round += self.round_offset
        if self.current_arrays is None:
            raise AggregationError(
                "aggregate_train was called before configure_train: the global model "
                "w^t that the replies are checked against is unknown."
            )
        layout = ModelLayout.of(self.current_arrays)
        accepted, dropped = self.read_train_replies(server_round, replies, layout)
        record = TrainRoundRecord(
            accepted=[r.node_id for r in accepted],
            partition_ids={
                r.node_id: r.partition_id for r in accepted if r.partition_id is not None
            },
            dropped=dropped,
        )
        self.train_records[server_round] = record
        if not accepted:
            logger.warning(
                "aggregate_train: round %d has no usable reply (%d dropped); "
                "keeping the previous global model",
                server_round,
                len(dropped),
            )
            return None, None
        global_arrays = self.current_arrays.to_numpy_ndarrays()
        new_arrays, diagnostics = self.aggregate(server_round, global_arrays, accepted)
        record.diagnostics.update(diagnostics)
        bad = [k for k, a in zip(layout.keys, new_arrays, strict=True) if not _all_finite(a)]
        if bad:
            logger.warning(
                "aggregate_train: round %d aggregate is not finite in %s; "
                "keeping the previous global model",
                server_round,
                bad,
            )
            record.diagnostics["non-finite-aggregate"] = 1
            return None, None
        arrays = ArrayRecord(
            {
                key: Array(np.ascontiguousarray(value, dtype=dtype))
                for key, value, dtype in zip(layout.keys, new_arrays, layout.dtypes, strict=True)
            }
        )
        return arrays, MetricRecord(self.train_metrics(accepted, record))

    def train_metrics(
        self, accepted: list[TrainReply], record: TrainRoundRecord
    ) -> dict[str, MetricValue]:
        """The round's MetricRecord: counts, mean pre-training loss and diagnostics."""
        metrics: dict[str, MetricValue] = {
            "num-replies": len(accepted),
            "dropped-replies": len(record.dropped),
        }
        losses = [r.metrics[keys.TRAIN_LOSS] for r in accepted if keys.TRAIN_LOSS in r.metrics]
        if len(losses) == len(accepted):
            counts = np.array([r.num_examples for r in accepted], dtype=np.float64)
            loss_values = np.array(losses, dtype=np.float64)
            metrics[keys.TRAIN_LOSS] = float(np.dot(counts, loss_values) / counts.sum())
        for name, value in record.diagnostics.items():
            if isinstance(value, bool):
                metrics[name] = int(value)
            elif isinstance(value, int | float) and np.isfinite(value):
                metrics[name] = value
        return metrics

    @abstractmethod
    def aggregate(
        self, server_round: int, global_arrays: list[NDArray], replies: list[TrainReply]
    ) -> tuple[list[NDArray], dict[str, Any]]:
        """Compute w^{t+1} from w^t and the validated replies (sorted by node id).

        Returns the new arrays (same order as ``global_arrays``) and diagnostics.
        """

    # ---------------------------------------------------------------- evaluation
    def aggregate_evaluate(
        self,
        server_round: int,
        replies: Iterable[Message],
    ) -> MetricRecord | None:
        """Keep every client's test result; return weighted means and fairness metrics."""
        server_round += self.round_offset
        if not self.evaluates_in(server_round):
            return None
        kept: dict[int, EvaluateReply] = {}
        dropped: dict[int, str] = {}
        for message in replies:
            node_id = self.reply_node(message)
            try:
                reply = read_evaluate_reply(message)
            except ReplyError as error:
                logger.info(
                    "aggregate_evaluate: dropped reply from node %d: %s %s",
                    node_id,
                    error.field,
                    error.reason,
                )
                dropped[node_id] = f"{error.field} {error.reason}"
                continue
            if node_id in kept:
                dropped[node_id] = "duplicate reply from the same node in one round"
                kept.pop(node_id)
                continue
            kept[node_id] = reply
        results = [kept[node] for node in sorted(kept) if node not in dropped]
        self.evaluations[server_round] = results
        self.evaluation_drops[server_round] = dropped
        if not results:
            logger.warning("aggregate_evaluate: round %d has no usable reply", server_round)
            return None
        counts = np.array([r.num_examples for r in results], dtype=np.float64)
        metrics: dict[str, MetricValue] = {
            keys.EVAL_LOSS: float(np.dot(counts, [r.eval_loss for r in results]) / counts.sum()),
            keys.EVAL_ACC: float(np.dot(counts, [r.eval_acc for r in results]) / counts.sum()),
            "dropped-replies": len(dropped),
        }
        metrics.update(
            fairness_metrics(
                [r.eval_acc for r in results],
                [r.num_examples for r in results],
                [r.eval_loss for r in results],
            )
        )
        return MetricRecord(metrics)


class ReweightedStrategy(FairStrategy):
    """A rule of the unified form ``w^{t+1} = w^t - Σ_i λ_i (w^t - w_i)``.

    Subclasses implement :meth:`lambdas`; this class applies them with
    :func:`fairfl.strategies.aggregation.reweighted_average` and reports them.
    """

    @abstractmethod
    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """One aggregation weight per reply (replies sorted by node id)."""

    def aggregate(
        self, server_round: int, global_arrays: list[NDArray], replies: list[TrainReply]
    ) -> tuple[list[NDArray], dict[str, Any]]:
        """Apply the rule's λ to the replies."""
        weights = np.asarray(self.lambdas(server_round, replies), dtype=np.float64)
        record = self.train_records[server_round]
        record.weights = {r.node_id: float(w) for r, w in zip(replies, weights, strict=True)}
        logger.debug("aggregate_train: round %d weights %s", server_round, record.weights)
        new_arrays = self.apply_lambdas(global_arrays, replies, weights)
        diagnostics: dict[str, Any] = {
            "lambda-max": float(weights.max()),
            "lambda-min": float(weights.min()),
            "lambda-sum": float(weights.sum()),
        }
        entropy = weight_entropy(weights)
        if np.isfinite(entropy):
            diagnostics["lambda-entropy"] = entropy
        return new_arrays, diagnostics

    def apply_lambdas(
        self, global_arrays: list[NDArray], replies: list[TrainReply], weights: NDArray[np.float64]
    ) -> list[NDArray]:
        """``w^t - Σ_i λ_i (w^t - w_i)`` (:func:`reweighted_average`).

        A rule that already read every reply in a pass of its own may override this to
        reuse that pass (q-FFL does); the result must equal this one up to float64
        rounding.
        """
        return reweighted_average(global_arrays, [r.arrays for r in replies], weights)


def _all_finite(array: NDArray) -> bool:
    if not np.issubdtype(array.dtype, np.floating):
        return True
    return bool(np.isfinite(np.sum(array, dtype=np.float64)))
