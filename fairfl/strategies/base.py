"""The orchestrator of a round: :class:`FairStrategy`, and :class:`ReweightedStrategy`.

A rule subclasses :class:`FairStrategy` (and implements ``aggregate``) or
:class:`ReweightedStrategy` (and implements ``lambdas``; loss-reweighting rules use
:class:`~fairfl.strategies.reweighted.LossRule`). The classes only orchestrate; their
collaborators live in their own modules: reply intake (:mod:`~fairfl.strategies.intake`),
client keys (:mod:`~fairfl.strategies.client_keys`), sampling
(:mod:`~fairfl.strategies.sampling`), records and metrics (:mod:`~fairfl.strategies.records`),
errors and their help texts (:mod:`~fairfl.strategies.errors`) and the hyperparameters
(:mod:`~fairfl.strategies.params`). The math lives in pure functions in each rule's module.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from numpy.typing import NDArray

from fairfl.contract import (
    EvaluateReply,
    ModelLayout,
    ReplyError,
    TrainReply,
    array_view,
    client_key,
    client_key_order,
    keys,
    read_evaluate_reply,
    read_train_reply,
)
from fairfl.contract.bounds import MAX_LOSS
from fairfl.contract.objective import objective_dropped, objective_dropped_message
from fairfl.logs import attach_flower_console
from fairfl.metrics import fairness_metrics
from fairfl.strategies import intake
from fairfl.strategies._checks import check_base_settings, check_fraction, check_positive_int
from fairfl.strategies.aggregation import reweighted_average_and_squared_norms, weight_entropy
from fairfl.strategies.client_keys import ClientKeys
from fairfl.strategies.defences import LossClip, clip_reported_losses, share_capped
from fairfl.strategies.errors import (
    FAIR_TRAIN,
    MissingMetricError,
    RejectedRepliesError,
    missing_metric_help,
    missing_metric_message,
)
from fairfl.strategies.params import NoParameters, RuleParameters
from fairfl.strategies.records import (
    CLIENT_REPORT_KEYS,
    MetricsAggregation,
    MetricValue,
    TrainRoundRecord,
    aggregate_app_metrics,
    app_metrics,
    contents_of,
    global_model_problem,
    round_metrics,
)
from fairfl.strategies.sampling import Sampling, SizeSampler, sampled_messages

if TYPE_CHECKING:
    from flwr.serverapp.strategy import Result

logger = logging.getLogger(__name__)

ConfigValue = int | float | str | bool

#: Names other modules import from here, defined in the collaborators.
__all__ = [
    "CLIENT_REPORT_KEYS",
    "FAIR_TRAIN",
    "ConfigValue",
    "FairStrategy",
    "MetricValue",
    "RejectedRepliesError",
    "ReweightedStrategy",
    "TrainRoundRecord",
    "aggregate_app_metrics",
    "check_fraction",
    "check_positive_int",
    "global_model_problem",
]


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

    Every rule takes all of :class:`flwr.serverapp.strategy.FedAvg`'s keyword arguments,
    with Flower's defaults and meaning, plus the ones below.

    Parameters
    ----------
    fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes, \
min_available_nodes
        As in :class:`flwr.serverapp.strategy.FedAvg`, but checked: fractions in
        [0, 1], counts >= 0.
    weighted_by_key : str (default: "num-examples")
        As in FedAvg: the reply metric holding n_k (train) or the test-sample count
        (evaluate). fairfl requires it in every reply, as an int > 0.
    arrayrecord_key, configrecord_key : str (default: "arrays", "config")
        As in FedAvg: the names of the ArrayRecord and ConfigRecord in the messages
        sent. Train replies must carry their ArrayRecord under ``arrayrecord_key``.
    train_metrics_aggr_fn, evaluate_metrics_aggr_fn : Callable | None (default: None)
        As in FedAvg: ``(list[RecordDict], weighted_by_key) -> MetricRecord`` over the
        accepted replies (default: :func:`aggregate_app_metrics`, Flower's weighted
        average of every metric but fairfl's per-client reports). The
        round's MetricRecord holds its result *and* fairfl's metrics and diagnostics
        (fairfl's win on a name clash). If it raises, a WARNING names the error and the
        record holds fairfl's metrics only.
    train_loss_key : str (default: "loss-before-training")
        The reply metric the loss-aware rules read as F_k(w^t), the loss of the
        received global model measured *before* local training (Flower's QFedAvg
        parameter name; Flower's default key ``train_loss`` is the loss *during*
        training in a stock ClientApp). ``train_loss_key="train_loss"`` is for apps
        whose ``train_loss`` is measured before local training; it makes
        :class:`~fairfl.strategies.QFFL` equal Flower's QFedAvg on the same replies.
    allow_missing_metrics : bool (default: False)
        When every reply of a round lacks a metric the rule needs (``required
        metrics`` in :meth:`summary`), the run stops with a
        :class:`MissingMetricError` naming the key and the client helper that reports
        it. True drops such replies with a WARNING instead and goes on (the round
        then keeps the previous model). Replies that lack it while others carry it
        are always dropped.
    max_abs_weight : float | None (default: 1e6)
        Drop replies with a weight larger than this in absolute value (an absurd
        magnitude no trained network has; it would swamp every other client in a
        weighted sum). ``None`` only rejects NaN/Inf. The new global model is held to
        the same bound: a round whose aggregate breaks it (or is not finite) keeps the
        previous model, logs a WARNING and records ``skipped`` in its
        :class:`TrainRoundRecord` (``skipped-aggregate`` in its metrics).
    max_loss : float (default: 1e6, :data:`fairfl.contract.bounds.MAX_LOSS`)
        Drop train replies reporting a loss (``train_loss_key``, ``train_loss``) above
        this, or an ``|rcfl-eta|`` above it; losses must also be
        >= 0. A finite number > 0; raise it for a federation whose honest losses are
        larger (:mod:`fairfl.contract.bounds` says why 1e6).
    evaluate_every : int (default: 1)
        Federated evaluation only every this many rounds, and always in the last round
        of :meth:`start` (long runs: q-FFL's Synthetic trains for thousands of rounds).
    loss_clip_mad : float (default: 0.0, off)
        Not in any paper; a defence against clients inflating ``train_loss_key``
        (:mod:`fairfl.strategies.defences`). k > 0 clips each round's reported losses to
        ``[max(0, m - k·MAD), m + k·MAD]`` (m, MAD: their median and median absolute
        deviation) before the rule reads them. A finite number >= 0.
    max_client_share : float (default: 1.0, off)
        Not in any paper; the other defence of :mod:`fairfl.strategies.defences`. Below
        1, no reply's aggregation weight λ_i may exceed this share of the round's
        ``Σ_j λ_j``; the excess goes to the others. Only for
        :class:`ReweightedStrategy` rules. In (0, 1].
    client_sampling : {"uniform", "size-proportional"} (default: "uniform")
        How the round's training nodes are picked (run-config key ``sampling``).
        ``"uniform"``: Flower's FedAvg sampling, ``fraction_train`` of the connected
        nodes uniformly without replacement. ``"size-proportional"``: the same number
        drawn with probability ∝ n_k without replacement, as q-FFL's experiments
        (paper 002; :class:`fairfl.strategies.sampling.SizeSampler`), the drawn
        replies then counting as n_k = 1 each for the rule (a uniform sum, as the
        reference code's aggregation). Round 1, where no n_k is known yet, trains
        every node. Evaluation always samples uniformly (``fraction_evaluate``).

    Notes
    -----
    Dropped replies are logged at WARNING; the first strategy built attaches Flower's
    console handler to the ``fairfl`` logger (:func:`fairfl.logs.attach_flower_console`),
    so these lines show in Flower's output with no set-up.

    Evaluate MetricRecord units: the app's ``eval_acc`` and fairfl's accuracy statistics
    (``acc-mean``, ``acc-worst-10``, ...) are all fractions in [0, 1]; ``acc-variance`` is
    a fraction squared (:mod:`fairfl.metrics`).
    """

    #: Metric keys the rule needs in every train reply besides ``weighted_by_key``.
    required_train_metrics: ClassVar[tuple[str, ...]] = ()
    #: True for a rule that needs F_k(w^t) (``train_loss_key``) in every train reply.
    needs_loss: ClassVar[bool] = False
    #: True for a rule that reads every reply value in a pass of its own and checks them
    #: there (:func:`fairfl.contract.check_array_values`), saving the reader's pass.
    checks_array_values: ClassVar[bool] = False
    #: Short name used in logs and ``summary()`` (``"TERM"``).
    rule_name: ClassVar[str] = "fair-strategy"
    #: The rule's name in the registry and the run config (``strategy = "term"``); a
    #: class that sets it in its own body is registered (:mod:`fairfl.strategies.registry`).
    registry_name: ClassVar[str | None] = None
    #: The rule's hyperparameters (:mod:`fairfl.strategies.params`): the constructor
    #: takes each field as a keyword, and the rule reads them from :attr:`params`.
    Parameters: ClassVar[type[RuleParameters]] = NoParameters
    #: The validated hyperparameters of this instance.
    params: RuleParameters

    def __init__(
        self,
        *,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        weighted_by_key: str = keys.NUM_EXAMPLES,
        arrayrecord_key: str = keys.ARRAYS,
        configrecord_key: str = keys.CONFIG,
        train_metrics_aggr_fn: MetricsAggregation | None = None,
        evaluate_metrics_aggr_fn: MetricsAggregation | None = None,
        train_loss_key: str = keys.LOSS_BEFORE_TRAINING,
        allow_missing_metrics: bool = False,
        max_abs_weight: float | None = 1e6,
        max_loss: float = MAX_LOSS,
        evaluate_every: int = 1,
        client_sampling: Sampling = "uniform",
        loss_clip_mad: float = 0.0,
        max_client_share: float = 1.0,
        **parameters: Any,
    ) -> None:
        # The rule's own hyperparameters first, as before: its errors name its fields.
        self.params = type(self).Parameters(**parameters)
        for name, value in self.params.settings().items():
            if not hasattr(type(self), name):  # a property of the rule (QFedSGD's L) wins
                setattr(self, name, value)
        check_base_settings(
            fractions={"fraction_train": fraction_train, "fraction_evaluate": fraction_evaluate},
            counts={
                "min_train_nodes": min_train_nodes,
                "min_evaluate_nodes": min_evaluate_nodes,
                "min_available_nodes": min_available_nodes,
            },
            evaluate_every=evaluate_every,
            client_sampling=client_sampling,
            record_keys={
                "weighted_by_key": weighted_by_key,
                "arrayrecord_key": arrayrecord_key,
                "configrecord_key": configrecord_key,
                "train_loss_key": train_loss_key,
            },
            functions={
                "train_metrics_aggr_fn": train_metrics_aggr_fn,
                "evaluate_metrics_aggr_fn": evaluate_metrics_aggr_fn,
            },
            allow_missing_metrics=allow_missing_metrics,
            max_abs_weight=max_abs_weight,
            max_loss=max_loss,
            loss_clip_mad=loss_clip_mad,
            max_client_share=max_client_share,
        )
        if max_client_share < 1 and not isinstance(self, ReweightedStrategy):
            raise ValueError(
                f"max_client_share < 1 caps the weights λ_i of the rules of the form "
                f"w - Σ λ_i (w - w_i); {self.rule_name} is not one, got {max_client_share!r}"
            )
        attach_flower_console(level=None)
        super().__init__(
            fraction_train=fraction_train,
            fraction_evaluate=fraction_evaluate,
            min_train_nodes=min_train_nodes,
            min_evaluate_nodes=min_evaluate_nodes,
            min_available_nodes=min_available_nodes,
            weighted_by_key=weighted_by_key,
            arrayrecord_key=arrayrecord_key,
            configrecord_key=configrecord_key,
            train_metrics_aggr_fn=train_metrics_aggr_fn or aggregate_app_metrics,
            evaluate_metrics_aggr_fn=evaluate_metrics_aggr_fn or aggregate_app_metrics,
        )
        self.train_loss_key = train_loss_key
        self.allow_missing_metrics = allow_missing_metrics
        self.max_abs_weight = max_abs_weight
        self.max_loss = float(max_loss)
        self.loss_clip_mad = float(loss_clip_mad)
        self.max_client_share = float(max_client_share)
        #: The clipping of the round being read (``None``: off, or no loss reported).
        self.loss_clip: LossClip | None = None
        self.evaluate_every = evaluate_every
        # The last round of the current start() call (with the offset): always evaluated.
        self.last_round: int | None = None
        self.current_arrays: ArrayRecord | None = None
        self.train_records: dict[int, TrainRoundRecord] = {}
        self.evaluations: dict[int, list[EvaluateReply]] = {}
        self.evaluation_drops: dict[int, dict[int, str]] = {}
        #: Nodes sent an evaluation message that did not answer, by round.
        self.evaluation_unanswered: dict[int, list[int]] = {}
        # Messages sent per round and kind ("train", "evaluate"): how many could answer.
        self.sampled: dict[int, dict[str, int]] = {}
        # The messages of the phase in progress: the node an error reply is about.
        self.in_flight: list[Message] = []
        # Rounds already done before Strategy.start() was called (resume from a
        # checkpoint): Flower counts from 1 again, every hook adds this offset.
        self.round_offset = 0
        # Stable client key (fairfl.contract.clients) of every node heard from: rules key
        # per-client state by it, so a resume with new node ids finds each client again.
        self.client_keys = ClientKeys(self.rule_name)
        self.objective_warned: set[str] = set()  # clients told they ignored the objective
        #: Seconds :meth:`learn_client_keys` waits for query replies (the ServerApp sets
        #: it to ``round-timeout``).
        self.client_key_timeout: float = 600.0
        # Seconds configure_train/configure_evaluate wait for min_available_nodes before
        # giving up (Flower's sampler waits forever); start() sets it to its timeout.
        self.sample_timeout: float = 3600.0
        self.client_sampling: Sampling = client_sampling
        #: Size-proportional sampling's draws and known n_k (None: uniform sampling).
        self.size_sampler: SizeSampler | None = (
            SizeSampler() if client_sampling == "size-proportional" else None
        )

    # ------------------------------------------------------------------ settings
    @property
    def required_metrics(self) -> tuple[str, ...]:
        """Metric keys every train reply must carry besides ``weighted_by_key``."""
        loss = (self.train_loss_key,) if self.needs_loss else ()
        return (*self.required_train_metrics, *loss)

    @property
    def reply_arrays_key(self) -> str:
        """The ArrayRecord a train reply carries: ``arrayrecord_key`` (q-FedSGD: the gradient)."""
        return self.arrayrecord_key

    def loss_of(self, reply: TrainReply) -> float:
        """F_k(w^t) of a reply: its ``train_loss_key`` metric (validated, >= 0)."""
        return float(reply.metrics[self.train_loss_key])  # type: ignore[arg-type]

    def losses_of(self, replies: list[TrainReply]) -> NDArray[np.float64]:
        """F_k(w^t) of each reply, in order."""
        return np.array([self.loss_of(r) for r in replies], dtype=np.float64)

    def has_loss(self, reply: TrainReply) -> bool:
        """Whether the reply carries F_k(w^t) (for rules that read it when present)."""
        return self.train_loss_key in reply.metrics

    def settings(self) -> dict[str, Any]:
        """The rule's own settings, for ``summary()`` and results files: :attr:`params`."""
        return self.params.settings()

    def summary(self) -> None:
        """Log the rule's settings, then Flower's sampling settings."""
        logger.info("\t├──> %s settings:", self.rule_name)
        for name, value in self.settings().items():
            logger.info("\t│\t├── %s: %s", name, value)
        logger.info("\t│\t├── max_abs_weight: %s", self.max_abs_weight)
        logger.info("\t│\t├── max_loss: %s", self.max_loss)
        logger.info("\t│\t├── loss_clip_mad: %s", self.loss_clip_mad)
        logger.info("\t│\t├── max_client_share: %s", self.max_client_share)
        logger.info("\t│\t├── evaluate_every: %s", self.evaluate_every)
        logger.info("\t│\t├── train_loss_key: '%s'", self.train_loss_key)
        logger.info("\t│\t├── allow_missing_metrics: %s", self.allow_missing_metrics)
        logger.info("\t│\t└── required train metrics: %s", list(self.required_metrics))
        super().summary()

    # --------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """JSON-able state a checkpoint must keep (stateless rules: nothing)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (stateless rules: nothing to do)."""

    def sampling_state(self) -> dict[str, Any]:
        """JSON-able state of the device sampling a checkpoint must keep.

        Size-proportional sampling's learnt n_k by client key (``{"size-counts": ...}``),
        so that a resumed run draws as the uninterrupted one would instead of starting
        with a census round; uniform sampling: nothing.
        """
        if self.size_sampler is None:
            return {}
        return {"size-counts": dict(self.size_sampler.counts)}

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`sampling_state` output."""
        if self.size_sampler is not None:
            counts = state.get("size-counts", {})
            self.size_sampler.counts = {str(k): int(v) for k, v in counts.items()}

    # ------------------------------------------------------------------ training
    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """Rule-specific train-config keys sent to clients this round (none by default)."""
        return {}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Remember w^t and send it with the round's config (the caller's is not changed).

        Sampling waits at most ``sample_timeout`` seconds for ``min_available_nodes``.
        """
        server_round += self.round_offset
        self.current_arrays = arrays
        round_config = ConfigRecord(dict(config))
        for key, value in self.train_config(server_round).items():
            round_config[key] = value
        draw = None
        if self.size_sampler is not None:
            draw = partial(
                self.size_sampler.draw, client_keys=partial(self.learn_client_keys, grid)
            )
        messages = sampled_messages(
            grid,
            message_type=MessageType.TRAIN,
            server_round=server_round,
            arrays=arrays,
            config=round_config,
            fraction=self.fraction_train,
            min_nodes=self.min_train_nodes,
            min_available_nodes=self.min_available_nodes,
            timeout=self.sample_timeout,
            arrayrecord_key=self.arrayrecord_key,
            configrecord_key=self.configrecord_key,
            draw=draw,
        )
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
        self.sample_timeout = timeout
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
        messages = sampled_messages(
            grid,
            message_type=MessageType.EVALUATE,
            server_round=server_round,
            arrays=arrays,
            config=config,
            fraction=self.fraction_evaluate,
            min_nodes=self.min_evaluate_nodes,
            min_available_nodes=self.min_available_nodes,
            timeout=self.sample_timeout,
            arrayrecord_key=self.arrayrecord_key,
            configrecord_key=self.configrecord_key,
        )
        self.sampled.setdefault(server_round, {})["evaluate"] = len(messages)
        self.in_flight = messages
        return messages

    def reply_node(self, message: Message) -> int:
        """The node a reply is about (:func:`~fairfl.strategies.intake.reply_node`)."""
        return intake.reply_node(message, self.in_flight)

    @property
    def node_keys(self) -> dict[int, str]:
        """Client key by node id of every node heard from (:class:`ClientKeys`)."""
        return self.client_keys.node_keys

    @node_keys.setter
    def node_keys(self, value: dict[int, str]) -> None:
        self.client_keys.node_keys = value

    def client_key(self, reply: TrainReply) -> str:
        """The stable key of a reply's client (:meth:`ClientKeys.key_of`)."""
        return self.client_keys.key_of(reply)

    def learn_client_keys(self, grid: Grid, node_ids: Iterable[int]) -> dict[int, str]:
        """The client key of each node, asking the nodes not heard from yet."""
        return self.client_keys.learn(grid, node_ids, self.client_key_timeout)

    def read_train_replies(
        self, server_round: int, replies: Iterable[Message], layout: ModelLayout
    ) -> tuple[list[TrainReply], dict[int, str]]:
        """Validate each reply alone; return the good ones sorted by client key, and drops.

        Raises
        ------
        MissingMetricError
            If every reply that is not an error lacks a metric the rule needs, unless
            ``allow_missing_metrics``.
        """
        read = partial(
            read_train_reply,
            layout=layout,
            required_metrics=self.required_metrics,
            max_abs_weight=self.max_abs_weight,
            check_values=not self.checks_array_values,
            loss_key=self.train_loss_key,
            weight_key=self.weighted_by_key,
            arrays_key=self.reply_arrays_key,
            max_loss=self.max_loss,
        )
        read_round = intake.read_replies("aggregate_train", replies, self.in_flight, read)
        self.check_missing_metrics("aggregate_train", server_round, read_round)
        ordered = self.client_keys.order(read_round.accepted, read_round.dropped)
        self.warn_ignored_objective(server_round, ordered)
        ordered, self.loss_clip = clip_reported_losses(
            ordered, self.train_loss_key, self.loss_clip_mad
        )
        return ordered, read_round.dropped

    def warn_ignored_objective(self, server_round: int, replies: list[TrainReply]) -> None:
        """WARNING once per client whose update ignored the client objective the rule sent.

        The round still aggregates it (it is a valid update), but not under the rule the
        user chose: ``fair_train`` reports ``objective-ignored`` when the app's
        ``train_fn`` never called the loss it was handed.
        """
        sent = [
            k for k in (keys.PROXIMAL_MU, keys.PROPFAIR_M) if k in self.train_config(server_round)
        ]
        for reply in replies:
            key = self.client_key(reply)
            if sent and objective_dropped(reply.metrics) and key not in self.objective_warned:
                self.objective_warned.add(key)
                logger.warning(objective_dropped_message(f"client {key}", ", ".join(sent)))

    def check_missing_metrics(self, hook: str, server_round: int, read: intake.Intake[Any]) -> None:
        """Stop the run if every answering node's reply lacked a metric the rule needs.

        Raises
        ------
        MissingMetricError
            Unless ``allow_missing_metrics`` or some answering node's reply had them.
        """
        missing = read.missing
        if self.allow_missing_metrics or not missing or set(missing) != read.answered:
            return
        helps = " ".join(
            missing_metric_help(
                key,
                hook,
                rule_name=self.rule_name,
                weighted_by_key=self.weighted_by_key,
                train_loss_key=self.train_loss_key,
            )
            for key in sorted(set(missing.values()))
        )
        raise MissingMetricError(
            missing_metric_message(hook, server_round, missing, self.rule_name, helps)
        )

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
        messages = list(replies)
        accepted, dropped = self.read_train_replies(server_round, messages, layout)
        accepted = self.sampled_replies(accepted)
        record = TrainRoundRecord(
            accepted=[r.node_id for r in accepted],
            partition_ids={
                r.node_id: r.partition_id for r in accepted if r.partition_id is not None
            },
            dropped=dropped,
            unanswered=intake.unanswered("aggregate_train", messages, self.in_flight),
        )
        self.train_records[server_round] = record
        if self.loss_clip is not None:
            record.diagnostics.update(self.loss_clip.diagnostics())
        if not accepted:
            logger.warning(
                "aggregate_train: round %d has no usable reply (%d dropped); "
                "keeping the previous global model",
                server_round,
                len(dropped),
            )
            return None, None
        # Read-only views of w^t's payloads, no copy: rules never write into inputs.
        global_arrays = [array_view(array) for array in self.current_arrays.values()]
        # The rule's state before this round: restored if the round is skipped, so that a
        # skipped round changes neither the model nor the rule's state (AFL's λ, ...).
        state = self.state_dict()
        accepted, aggregated = self.aggregate_without_rejected(
            server_round, global_arrays, accepted, state
        )
        if aggregated is None:
            logger.warning(
                "aggregate_train: round %d has no usable reply (%d dropped); "
                "keeping the previous global model",
                server_round,
                len(dropped),
            )
            return None, None
        new_arrays, diagnostics = aggregated
        record.diagnostics.update(diagnostics)
        cast = [
            np.ascontiguousarray(value, dtype=dtype)
            for value, dtype in zip(new_arrays, layout.dtypes, strict=True)
        ]
        contents = contents_of(messages, [r.node_id for r in accepted])
        metrics = app_metrics(
            "aggregate_train", self.train_metrics_aggr_fn, contents, self.weighted_by_key
        )
        problem = global_model_problem(layout.keys, cast, self.max_abs_weight)
        if problem is not None:
            logger.warning(
                "aggregate_train: round %d skipped: the new global model %s; "
                "keeping the previous global model",
                server_round,
                problem,
            )
            self.load_state_dict(state)
            record.skipped = f"the new global model {problem}"
            record.diagnostics["skipped-aggregate"] = 1
            metrics.update(round_metrics(len(accepted), record))
            return None, MetricRecord(metrics)
        arrays = ArrayRecord(
            {key: Array(value) for key, value in zip(layout.keys, cast, strict=True)}
        )
        metrics.update(round_metrics(len(accepted), record))
        return arrays, MetricRecord(metrics)

    def aggregate_without_rejected(
        self,
        server_round: int,
        global_arrays: list[NDArray[Any]],
        accepted: list[TrainReply],
        state: dict[str, Any],
    ) -> tuple[list[TrainReply], tuple[list[NDArray[Any]], dict[str, Any]] | None]:
        """:meth:`aggregate`, dropping the replies it rejects and aggregating the rest again.

        A rule that checks the array values in its own pass (:attr:`checks_array_values`)
        raises :class:`RejectedRepliesError`; each rejected reply is then logged and recorded
        as the reader would have dropped it, the rule's state is restored to ``state``
        (the aborted pass may have changed it: AFL's λ), and the rest is aggregated.

        Returns
        -------
        tuple[list[TrainReply], tuple[list[NDArray[Any]], dict[str, Any]] | None]
            The replies aggregated, and ``aggregate``'s result (``None`` if every reply
            was rejected).
        """
        record = self.train_records[server_round]
        diagnostics = dict(record.diagnostics)
        while accepted:
            try:
                return accepted, self.aggregate(server_round, global_arrays, accepted)
            except RejectedRepliesError as rejected:
                errors = {error.node_id: error for error in rejected.errors}
                assert errors.keys() & {r.node_id for r in accepted}, "rejected no reply"
            for node, error in errors.items():
                intake.drop("aggregate_train", record.dropped, error, node)
                record.partition_ids.pop(node, None)
            accepted = [r for r in accepted if r.node_id not in errors]
            record.accepted = [r.node_id for r in accepted]
            record.weights = {}
            record.diagnostics = dict(diagnostics)
            self.load_state_dict(state)
        return accepted, None

    def value_errors(
        self, replies: list[TrainReply], squared_norms: NDArray[np.float64]
    ) -> list[ReplyError]:
        """The reader's error for each reply whose values are bad (:func:`intake.value_errors`)."""
        assert self.current_arrays is not None  # set by configure_train
        array_keys = list(self.current_arrays.keys())
        return intake.value_errors(replies, squared_norms, array_keys, self.max_abs_weight)

    def sampled_replies(self, accepted: list[TrainReply]) -> list[TrainReply]:
        """The replies as the rule weighs them under the round's sampling.

        Size-proportional sampling records each reply's n_k (for later draws); in a
        round drawn ∝ n_k each reply then counts as n_k = 1, so that every rule sums
        the drawn replies uniformly (paper 002's reference code, ``aggregate`` with
        ``sampling=2``): the draw already weighs device k by p_k. Census rounds and
        uniform sampling leave the replies as they are.
        """
        if self.size_sampler is None:
            return accepted
        for reply in accepted:
            self.size_sampler.record(self.client_key(reply), reply.num_examples)
        if not self.size_sampler.drawn:
            return accepted
        return [replace(reply, num_examples=1) for reply in accepted]

    @abstractmethod
    def aggregate(
        self, server_round: int, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> tuple[list[NDArray[Any]], dict[str, Any]]:
        """Compute w^{t+1} from w^t and the validated replies (sorted by node id).

        Returns the new arrays (same order as ``global_arrays``) and diagnostics.
        """

    # ---------------------------------------------------------------- evaluation
    def aggregate_evaluate(
        self,
        server_round: int,
        replies: Iterable[Message],
    ) -> MetricRecord | None:
        """Keep every client's test result; return the app's metrics and fairness metrics.

        The record holds what Flower's FedAvg returns (``evaluate_metrics_aggr_fn`` over
        the accepted replies), fairfl's weighted ``eval_loss`` and ``eval_acc`` (a
        fraction), and the fairness metrics of :func:`fairfl.metrics.fairness_metrics`
        (accuracy statistics as fractions too, under their plain names: ``acc-mean``).

        Raises
        ------
        MissingMetricError
            If every reply that is not an error lacks ``eval_loss``, ``eval_acc`` or
            ``weighted_by_key``, unless ``allow_missing_metrics``.
        """
        server_round += self.round_offset
        if not self.evaluates_in(server_round):
            return None
        messages = list(replies)
        read = partial(read_evaluate_reply, weight_key=self.weighted_by_key)
        read_round = intake.read_replies("aggregate_evaluate", messages, self.in_flight, read)
        self.check_missing_metrics("aggregate_evaluate", server_round, read_round)
        kept: dict[int, EvaluateReply] = read_round.accepted
        dropped = read_round.dropped
        # In client-key order, like train replies: the same sums whatever the node ids.
        results = sorted(
            (reply for node, reply in kept.items() if node not in dropped),
            key=lambda r: client_key_order(client_key(r.node_id, r.partition_id)),
        )
        self.evaluations[server_round] = results
        self.evaluation_drops[server_round] = dropped
        self.evaluation_unanswered[server_round] = intake.unanswered(
            "aggregate_evaluate", messages, self.in_flight
        )
        if not results:
            logger.warning("aggregate_evaluate: round %d has no usable reply", server_round)
            return None
        contents = contents_of(messages, [r.node_id for r in results])
        metrics = app_metrics(
            "aggregate_evaluate", self.evaluate_metrics_aggr_fn, contents, self.weighted_by_key
        )
        counts = np.array([r.num_examples for r in results], dtype=np.float64)
        metrics[keys.EVAL_LOSS] = float(
            np.dot(counts, [r.eval_loss for r in results]) / counts.sum()
        )
        metrics[keys.EVAL_ACC] = float(np.dot(counts, [r.eval_acc for r in results]) / counts.sum())
        metrics["dropped-replies"] = len(dropped)
        fairness = fairness_metrics(
            [r.eval_acc for r in results],
            [r.num_examples for r in results],
            [r.eval_loss for r in results],
        )
        metrics.update(fairness)
        # Ditto: the same statistics over the clients' personal models, "personal-" first.
        personal = [
            (r.personal_eval_loss, r.personal_eval_acc, r.num_examples)
            for r in results
            if r.personal_eval_loss is not None and r.personal_eval_acc is not None
        ]
        if personal:
            losses = [loss for loss, _, _ in personal]
            accuracies = [acc for _, acc, _ in personal]
            sizes = [size for _, _, size in personal]
            weights = np.array(sizes, dtype=np.float64)
            metrics[keys.PERSONAL_EVAL_LOSS] = float(np.dot(weights, losses) / weights.sum())
            metrics[keys.PERSONAL_EVAL_ACC] = float(np.dot(weights, accuracies) / weights.sum())
            metrics.update(
                {
                    f"personal-{name}": value
                    for name, value in fairness_metrics(accuracies, sizes, losses).items()
                }
            )
        return MetricRecord(metrics)


class ReweightedStrategy(FairStrategy):
    """A rule of the unified form ``w^{t+1} = w^t - Σ_i λ_i (w^t - w_i)``.

    Subclasses implement :meth:`lambdas`; this class applies them with
    :func:`fairfl.strategies.aggregation.reweighted_average_and_squared_norms` and
    reports them. The reply values are checked in that same pass (one read of every reply):
    a reply with a NaN/Inf or a ``|value| > max_abs_weight`` is dropped with the
    reader's reason, and the round is aggregated again without it
    (:meth:`FairStrategy.aggregate_without_rejected`).
    """

    #: The weighted average reads every reply value; it checks them (``apply_lambdas``).
    checks_array_values: ClassVar[bool] = True

    @abstractmethod
    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """One aggregation weight per reply (replies sorted by node id)."""

    def aggregate(
        self, server_round: int, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> tuple[list[NDArray[Any]], dict[str, Any]]:
        """Apply the rule's λ, capped at ``max_client_share`` of their sum, to the replies."""
        weights = np.asarray(self.lambdas(server_round, replies), dtype=np.float64)
        capped = share_capped(weights, self.max_client_share)
        if capped is None:
            new_arrays = self.apply_lambdas(global_arrays, replies, weights)
        else:
            # A rule's own apply_lambdas may reuse sums of its uncapped λ (q-FFL's pass).
            new_arrays = ReweightedStrategy.apply_lambdas(self, global_arrays, replies, capped)
            weights, capped_clients = capped, int(np.count_nonzero(capped < weights))
        record = self.train_records[server_round]
        record.weights = {r.node_id: float(w) for r, w in zip(replies, weights, strict=True)}
        logger.debug("aggregate_train: round %d weights %s", server_round, record.weights)
        diagnostics: dict[str, Any] = {
            "lambda-max": float(weights.max()),
            "lambda-min": float(weights.min()),
            "lambda-sum": float(weights.sum()),
        }
        entropy = weight_entropy(weights)
        if np.isfinite(entropy):
            diagnostics["lambda-entropy"] = entropy
        if capped is not None:
            diagnostics["capped-clients"] = capped_clients
        return new_arrays, diagnostics

    def apply_lambdas(
        self,
        global_arrays: list[NDArray[Any]],
        replies: list[TrainReply],
        weights: NDArray[np.float64],
    ) -> list[NDArray[Any]]:
        """``w^t - Σ_i λ_i (w^t - w_i)``, checking every reply value in the same pass.

        :func:`~fairfl.strategies.aggregation.reweighted_average_and_squared_norms`
        gives the update and each reply array's ``‖w‖²`` (:meth:`value_errors`). A
        rule that already read every reply in a pass of its own may override this to
        reuse that pass (q-FFL does, checking the values there); the result must equal
        this one up to float64 rounding.

        Raises
        ------
        RejectedRepliesError
            If a reply has a NaN/Inf or a ``|value| > max_abs_weight``
            (:meth:`value_errors`); :meth:`aggregate_train` drops it and aggregates
            again.
        """
        new_arrays, squared_norms = reweighted_average_and_squared_norms(
            global_arrays, [r.arrays for r in replies], weights
        )
        errors = self.value_errors(replies, squared_norms)
        if errors:
            raise RejectedRepliesError(errors)
        return new_arrays
