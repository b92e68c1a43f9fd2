"""The orchestrator of a round: :class:`FairStrategy`.

A rule subclasses :class:`FairStrategy` (implementing ``aggregate``) or
:class:`~fairfl.strategies.core.reweighted.ReweightedStrategy` (``lambdas``; loss-reweighting
rules use :class:`~fairfl.strategies.core.reweighted.LossRule`). The classes only orchestrate; each
collaborator is a module of its own (the docs site's rule-kit page lists them).
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import fields, replace
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord
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
    read_evaluate_reply,
)
from fairfl.logs import attach_flower_console
from fairfl.strategies.core import intake
from fairfl.strategies.core._checks import check_fraction, check_positive_int
from fairfl.strategies.core.client_keys import ClientKeys
from fairfl.strategies.core.defences import LossClip, clip_reported_losses
from fairfl.strategies.core.errors import FAIR_TRAIN, RejectedReplies

# Importable from here as before the split; documented once, in fairfl.strategies.
from fairfl.strategies.core.errors import MissingMetricError as MissingMetricError
from fairfl.strategies.core.evaluation import evaluation_metrics, ordered_results
from fairfl.strategies.core.options import ConstructorSignature, StrategyOptions, rule_settings
from fairfl.strategies.core.params import NoParameters, RuleParameters
from fairfl.strategies.core.private_rounds import PrivateRounds
from fairfl.strategies.core.records import (
    CLIENT_REPORT_KEYS,
    MetricValue,
    TrainRoundRecord,
    aggregate_app_metrics,
    app_metrics,
    global_model,
    global_model_problem,
    log_no_usable_reply,
    round_metrics,
    unless_trained_nothing,
)
from fairfl.strategies.core.rounds import DeferredUpdates
from fairfl.strategies.core.sampling import Sampling, SizeSampler, sampled_messages

if TYPE_CHECKING:
    from flwr.serverapp.strategy import Result

logger = logging.getLogger(__name__)

ConfigValue = int | float | str | bool
#: A rule's aggregate of a round: the new arrays (in ``w^t``'s order) and diagnostics.
Aggregate = tuple[list[NDArray[Any]], dict[str, Any]]

__all__ = [
    "CLIENT_REPORT_KEYS",
    "FAIR_TRAIN",
    "ConfigValue",
    "FairStrategy",
    "MetricValue",
    "RejectedReplies",
    "StrategyOptions",
    "TrainRoundRecord",
    "aggregate_app_metrics",
    "check_fraction",
    "check_positive_int",
    "current_options",
    "global_model_problem",
    "log_summary",
    "sampling_keywords",
]


class FairStrategy(PrivateRounds, FlowerFedAvg):
    """Base class of the fairfl rules (Flower Message API): it orchestrates a round.

    It keeps Flower's FedAvg sampling and message construction; each train reply is
    validated alone (:mod:`~fairfl.strategies.core.intake`), a bad one logged and dropped, and
    the rest aggregated by the rule in client-key order. A round with no usable reply, or
    whose aggregate is not finite, keeps the previous model. Every rule takes the keywords
    of :class:`~fairfl.strategies.core.options.StrategyOptions` and its :attr:`Parameters`; the
    rule-kit page of the docs (``explanation/rule-kit``) shows each collaborator's job.
    """

    #: Metric keys the rule needs in every train reply besides ``weighted_by_key``.
    required_train_metrics: ClassVar[tuple[str, ...]] = ()
    #: True for a rule that needs F_k(w^t) (``train_loss_key``) in every train reply.
    needs_loss: ClassVar[bool] = False
    #: True for a rule that checks every reply value in a pass of its own, not the reader.
    checks_array_values: ClassVar[bool] = False
    #: True for a rule of the form ``w - Σ λ_i (w - w_i)``, whose λ ``max_client_share`` caps.
    caps_client_share: ClassVar[bool] = False
    #: Short name used in logs and ``summary()`` (``"TERM"``).
    rule_name: ClassVar[str] = "fair-strategy"
    #: The name in the run config (``strategy = "term"``); set in a class body: registered.
    registry_name: ClassVar[str | None] = None
    #: The rule's hyperparameters (:mod:`~fairfl.strategies.core.params`), keywords too.
    Parameters: ClassVar[type[RuleParameters]] = NoParameters
    #: The validated hyperparameters of this instance.
    params: RuleParameters
    __signature__ = ConstructorSignature()  # keyword-only: Parameters', then the options

    def __init__(self, **keywords: Any) -> None:
        self.params, options = rule_settings(type(self), keywords)  # the settings, checked
        for name, value in self.params.settings().items():
            if not hasattr(type(self), name):  # a property of the rule (QFedSGD's L) wins
                setattr(self, name, value)
        self.options = options  # the settings every rule takes
        options.check_share_cap(self.rule_name, self.caps_client_share)
        attach_flower_console(level=None)
        super().__init__(**options.flower_keywords())
        self.train_loss_key = options.train_loss_key
        self.allow_missing_metrics = options.allow_missing_metrics
        self.max_abs_weight = options.max_abs_weight
        self.max_loss = options.max_loss
        self.loss_clip_mad = options.loss_clip_mad
        self.max_client_share = options.max_client_share
        self.evaluate_every = options.evaluate_every
        self.client_sampling: Sampling = options.client_sampling
        self.loss_clip: LossClip | None = None  # of the round read (None: off, no loss)
        self.last_round: int | None = None  # of the current start(), always evaluated
        self.current_arrays: ArrayRecord | None = None  # w^t, sent by configure_train
        self.train_records: dict[int, TrainRoundRecord] = {}
        self.evaluations: dict[int, list[EvaluateReply]] = {}
        self.evaluation_drops: dict[int, dict[int, str]] = {}
        self.evaluation_unanswered: dict[int, list[int]] = {}  # nodes silent, by round
        self.sampled: dict[int, dict[str, int]] = {}  # messages sent by round and kind
        self.in_flight: list[Message] = []  # the phase's messages: whom an error is about
        self.round_offset = 0  # rounds done before start() (resume): every hook adds it
        self.state_updates = DeferredUpdates()  # the rule's, made once a round is accepted
        self.client_keys = ClientKeys(self.rule_name)  # stable key of each node heard from
        self.objective_warned: set[str] = set()  # clients told they ignored the objective
        self.client_key_timeout: float = 600.0  # learn_client_keys' wait (round-timeout)
        self.sample_timeout: float = 3600.0  # sampling's wait; start() sets its timeout
        sizes = options.client_sampling == "size-proportional"
        self.size_sampler: SizeSampler | None = SizeSampler() if sizes else None

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
        """Log the rule's settings, fairfl's, then Flower's sampling settings."""
        log_summary(logger, self)
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
        """Remember w^t and send it with the round's config (the caller's is not changed).

        Sampling waits at most ``sample_timeout`` seconds for ``min_available_nodes``.
        """
        server_round += self.round_offset
        self.current_arrays = arrays
        round_config = ConfigRecord(dict(config))
        sent = {**self.train_config(server_round), **self.private_train_config()}  # + DP's
        for key, value in sent.items():
            round_config[key] = value
        sampler, keys_of = self.size_sampler, partial(self.learn_client_keys, grid)
        draw = None if sampler is None else partial(sampler.draw, client_keys=keys_of)
        return self.send(grid, MessageType.TRAIN, server_round, arrays, round_config, draw)

    def send(
        self,
        grid: Grid,
        message_type: str,
        server_round: int,
        arrays: ArrayRecord,
        config: ConfigRecord,
        draw: Callable[[list[int], int], list[int]] | None = None,
    ) -> list[Message]:
        """Sample the nodes (:func:`sampled_messages`), build the messages, remember them."""
        train = message_type == MessageType.TRAIN
        messages = sampled_messages(
            grid,
            message_type=message_type,
            server_round=server_round,
            arrays=arrays,
            config=config,
            timeout=self.sample_timeout,
            draw=draw,
            **sampling_keywords(self, train),
        )
        self.sampled.setdefault(server_round, {})["train" if train else "evaluate"] = len(messages)
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
        """Flower's ``Strategy.start``, remembering the last round; raises if none trained."""
        self.last_round, self.sample_timeout = self.round_offset + num_rounds, timeout
        result = super().start(
            grid, initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn
        )
        return unless_trained_nothing(result, self.train_records, self.last_round, num_rounds)

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
        return self.send(grid, MessageType.EVALUATE, server_round, arrays, config)

    def reply_node(self, message: Message) -> int:
        """The node a reply is about (:func:`~fairfl.strategies.core.intake.reply_node`)."""
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
            If every answering reply lacks a metric the rule needs (:attr:`required_metrics`).
        """
        needs = (self.required_metrics, not self.checks_array_values, self.reply_arrays_key)
        read = intake.train_reader(current_options(self), layout, *needs)
        read_round = intake.read_replies("aggregate_train", replies, self.in_flight, read)
        intake.check_missing_metrics(
            "aggregate_train", server_round, read_round, self.rule_name, current_options(self)
        )
        ordered = self.client_keys.order(read_round.accepted, read_round.dropped)
        sent = [k for k in intake.OBJECTIVE_KEYS if k in self.train_config(server_round)]
        intake.warn_ignored_objective(ordered, sent, self.client_key, self.objective_warned)
        ordered, self.loss_clip = clip_reported_losses(
            ordered, self.train_loss_key, self.loss_clip_mad
        )
        return ordered, read_round.dropped

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
        unanswered = intake.unanswered("aggregate_train", messages, self.in_flight)
        record = TrainRoundRecord.of(accepted, dropped, unanswered)
        self.train_records[server_round] = record
        accepted = self.clipped_replies(accepted, record)  # central DP, if on
        record.diagnostics.update(self.client_keys.diagnostics)  # claimed or flagged counts
        if self.loss_clip is not None:
            record.diagnostics.update(self.loss_clip.diagnostics())
        result, deferred = None, self.state_updates
        deferred.discard()
        if accepted:
            global_arrays = [array_view(array) for array in self.current_arrays.values()]
            rule = partial(self.aggregate, server_round, global_arrays)
            accepted, result = intake.aggregate_without_rejected(rule, accepted, record, deferred)
        if result is None:
            log_no_usable_reply(server_round, len(dropped))
            return None, None
        new_arrays = self.noised(server_round, result, record)  # + central DP's noise, if on
        nodes = [r.node_id for r in accepted]
        metrics = app_metrics(
            "aggregate_train", self.train_metrics_aggr_fn, messages, nodes, self.weighted_by_key
        )
        arrays, problem = global_model(layout, new_arrays, self.max_abs_weight)
        if problem is None:
            deferred.apply()  # the round is accepted
        else:
            record.skip(server_round, problem)
        self.account(record, released=problem is None)
        metrics.update(round_metrics(len(accepted), record))
        return arrays, MetricRecord(metrics)

    def value_errors(
        self, replies: list[TrainReply], squared_norms: NDArray[np.float64]
    ) -> list[ReplyError]:
        """The reader's error for each reply whose values are bad (:func:`intake.value_errors`)."""
        assert self.current_arrays is not None  # set by configure_train
        names = list(self.current_arrays.keys())
        return intake.value_errors(replies, squared_norms, names, self.max_abs_weight)

    def sampled_replies(self, accepted: list[TrainReply]) -> list[TrainReply]:
        """The replies as the rule weighs them (:meth:`.SizeSampler.weigh`; uniform: as sent)."""
        sampler = self.size_sampler
        return accepted if sampler is None else sampler.weigh(accepted, self.client_key)

    @abstractmethod
    def aggregate(
        self, server_round: int, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> Aggregate | RejectedReplies:
        """Compute w^{t+1} from w^t and the validated replies (sorted by node id).

        Returns the new arrays (same order as ``global_arrays``) and diagnostics, or the
        replies with bad values found in the rule's own pass (``checks_array_values``).
        It changes the rule's state only through ``self.state_updates.defer``.
        """

    # ---------------------------------------------------------------- evaluation
    def aggregate_evaluate(
        self,
        server_round: int,
        replies: Iterable[Message],
    ) -> MetricRecord | None:
        """Keep every client's test result; return the app's metrics and fairness metrics.

        The record holds what Flower's FedAvg returns (``evaluate_metrics_aggr_fn`` over
        the accepted replies) and :func:`~fairfl.strategies.core.evaluation.evaluation_metrics`.

        Raises
        ------
        MissingMetricError
            If every answering reply lacks ``eval_loss``, ``eval_acc`` or ``weighted_by_key``.
        """
        server_round += self.round_offset
        if not self.evaluates_in(server_round):
            return None
        messages = list(replies)
        read = partial(read_evaluate_reply, weight_key=self.weighted_by_key)
        read_round = intake.read_replies("aggregate_evaluate", messages, self.in_flight, read)
        intake.check_missing_metrics(
            "aggregate_evaluate", server_round, read_round, self.rule_name, current_options(self)
        )
        results = ordered_results(read_round.accepted, read_round.dropped)
        self.evaluations[server_round] = results
        self.evaluation_drops[server_round] = read_round.dropped
        self.evaluation_unanswered[server_round] = intake.unanswered(
            "aggregate_evaluate", messages, self.in_flight
        )
        if not results:
            logger.warning("aggregate_evaluate: round %d has no usable reply", server_round)
            return None
        nodes = [r.node_id for r in results]
        metrics = app_metrics(
            "aggregate_evaluate",
            self.evaluate_metrics_aggr_fn,
            messages,
            nodes,
            self.weighted_by_key,
        )
        metrics.update(evaluation_metrics(results, len(read_round.dropped)))
        return MetricRecord(metrics)


def sampling_keywords(strategy: FairStrategy, train: bool) -> dict[str, Any]:
    """The sampling keywords of :func:`~fairfl.strategies.core.sampling.sampled_messages`.

    ``train``: the training phase's fraction and minimum, else evaluation's. Read from
    the strategy when it samples, not from its :class:`StrategyOptions`: the ServerApp
    sets ``min_available_nodes`` once it knows the federation's size (a simulation with
    fewer SuperNodes than ``num-partitions``), after the strategy was built.
    """
    return {
        "fraction": strategy.fraction_train if train else strategy.fraction_evaluate,
        "min_nodes": strategy.min_train_nodes if train else strategy.min_evaluate_nodes,
        "min_available_nodes": strategy.min_available_nodes,
        "arrayrecord_key": strategy.arrayrecord_key,
        "configrecord_key": strategy.configrecord_key,
    }


def current_options(strategy: FairStrategy) -> StrategyOptions:
    """The strategy's options as its attributes hold them now, checked again if changed.

    Every option is also an attribute (``strategy.max_loss``), as in Flower's FedAvg, and
    code that holds a strategy may set one after building it (the ServerApp sets
    ``min_available_nodes``; a Flower user may set ``max_loss``). Reply intake reads this,
    so such a change is used from the next round on, and a bad value is refused naming
    its field, as the constructor would (``max_loss must be > 0, got -1.0``).
    """
    options = strategy.options
    live = {f.name: getattr(strategy, f.name) for f in fields(options) if hasattr(strategy, f.name)}
    if any(value != getattr(options, name) for name, value in live.items()):
        options = strategy.options = replace(options, **live)
    return options


def log_summary(logger: logging.Logger, strategy: FairStrategy) -> None:
    """Log a rule's settings and fairfl's (``summary()``, before Flower's own lines)."""
    logger.info("\t├──> %s settings:", strategy.rule_name)
    for name, value in strategy.settings().items():
        logger.info("\t│\t├── %s: %s", name, value)
    for name in ("max_abs_weight", "max_loss", "loss_clip_mad", "max_client_share"):
        logger.info("\t│\t├── %s: %s", name, getattr(strategy, name))
    logger.info("\t│\t├── evaluate_every: %s", strategy.evaluate_every)
    logger.info("\t│\t├── train_loss_key: '%s'", strategy.train_loss_key)
    logger.info("\t│\t├── allow_missing_metrics: %s", strategy.allow_missing_metrics)
    logger.info("\t│\t└── required train metrics: %s", list(strategy.required_metrics))
