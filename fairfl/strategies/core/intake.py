"""Reply intake: one pass over a phase's replies that validates each one alone.

For train and evaluate alike, :func:`read_replies` reads every reply with the contract's
reader, and returns what was accepted, what was dropped (with the reader's reason), which
replies lacked a metric the rule needs and which nodes answered at all. A bad reply is
logged with its node and reason and dropped; the round goes on with the rest. Error replies
the SuperLink writes for a node it cannot reach are mapped back to that node
(:func:`reply_node`), and nodes that sent nothing are listed (:func:`unanswered`).
A round whose every answering reply lacks a metric the rule needs stops the run
(:func:`check_missing_metrics`). Replies a rule rejects in its own value pass are dropped
and the rest aggregated again (:func:`aggregate_without_rejected`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
from flwr.app import Message
from numpy.typing import NDArray

from fairfl._compat import SERVER_NODE_ID
from fairfl.contract import (
    ModelLayout,
    ReplyError,
    TrainReply,
    check_array_values,
    keys,
    read_train_reply,
)
from fairfl.contract.objective import objective_dropped, objective_dropped_message
from fairfl.strategies._ops.gram import GRAM_RTOL
from fairfl.strategies._ops.passes import max_abs
from fairfl.strategies.core.errors import (
    MissingMetricError,
    RejectedReplies,
    missing_metric_help,
    missing_metric_message,
)
from fairfl.strategies.core.records import TrainRoundRecord
from fairfl.strategies.core.rounds import DeferredUpdates

if TYPE_CHECKING:
    from fairfl.strategies.core.options import StrategyOptions

logger = logging.getLogger(__name__)

ReplyT = TypeVar("ReplyT")
AggregateT = TypeVar("AggregateT")

#: The client objective's train-config keys: a reply that ignored them is warned about
#: (:func:`warn_ignored_objective`).
OBJECTIVE_KEYS = (keys.PROXIMAL_MU, keys.PROPFAIR_M)


@dataclass
class Intake(Generic[ReplyT]):
    """What one phase's replies gave.

    Attributes
    ----------
    accepted : dict[int, ReplyT]
        The validated replies by node id (a node that sent two has none here).
    dropped : dict[int, str]
        Why each dropped reply was rejected, by node id.
    missing : dict[int, str]
        The metric key each reply dropped for lacking one lacked, by node id.
    answered : set[int]
        Nodes that sent a reply that is not an error.
    """

    accepted: dict[int, ReplyT] = field(default_factory=dict)
    dropped: dict[int, str] = field(default_factory=dict)
    missing: dict[int, str] = field(default_factory=dict)
    answered: set[int] = field(default_factory=set)


def reply_node(message: Message, in_flight: Sequence[Message]) -> int:
    """The node a reply is about: its sender, or the node an error reply stands in for.

    For a node it cannot reach (heartbeats lapsed) the SuperLink answers itself, an
    error reply from node 1 (the SuperLink) to the instruction's message id; that is
    mapped back to the instruction's node (the Grid sets the message ids of the
    messages the strategy returned when it pushes them).
    """
    node = int(message.metadata.src_node_id)
    if node != SERVER_NODE_ID or not message.has_error():
        return node
    instruction = message.metadata.reply_to_message_id
    for sent in in_flight:
        if instruction and sent.metadata.message_id == instruction:
            return int(sent.metadata.dst_node_id)
    return node


def unanswered(hook: str, replies: Iterable[Message], in_flight: Sequence[Message]) -> list[int]:
    """The nodes sent a message this phase that sent nothing back, sorted.

    Flower's Grid returns only the replies that came before the round's timeout (a
    straggler, a node that died before the SuperLink noticed): these nodes make
    each round's record add up, sampled = accepted + dropped + unanswered.
    """
    heard = {reply_node(message, in_flight) for message in replies}
    missing = sorted({int(sent.metadata.dst_node_id) for sent in in_flight} - heard)
    if missing:
        logger.warning(
            "%s: no reply from node(s) %s before the phase ended (round-timeout)",
            hook,
            ", ".join(map(str, missing)),
        )
    return missing


def read_replies(
    hook: str,
    messages: Iterable[Message],
    in_flight: Sequence[Message],
    read: Callable[[Message], ReplyT],
) -> Intake[ReplyT]:
    """Validate each reply alone with ``read``; drop a bad one, and both of a node's two.

    Parameters
    ----------
    hook : str
        ``"aggregate_train"`` or ``"aggregate_evaluate"``, for the log lines.
    messages : Iterable[Message]
        The phase's replies.
    in_flight : Sequence[Message]
        The messages sent this phase (:func:`reply_node`).
    read : Callable[[Message], ReplyT]
        The contract's reader with the rule's settings; raises :class:`ReplyError`.
    """
    intake: Intake[ReplyT] = Intake()
    for message in messages:
        node_id = reply_node(message, in_flight)
        if not message.has_error():
            intake.answered.add(node_id)
        if node_id in intake.accepted or node_id in intake.dropped:
            intake.accepted.pop(node_id, None)
            intake.dropped[node_id] = "duplicate reply from the same node in one round"
            continue
        try:
            intake.accepted[node_id] = read(message)
        except ReplyError as error:
            intake.dropped[node_id] = f"{error.field} {error.reason}"
            if error.missing_key is not None:
                intake.missing[node_id] = error.missing_key
    log_drops(hook, intake.dropped)
    return intake


def log_drops(hook: str, dropped: dict[int, str]) -> None:
    """One WARNING per distinct reason: a failure every client shares is one line.

    A misconfigured federation (every ClientApp raising the same error) would otherwise
    write a line per client per round; the line names the first node, the count and
    every node.
    """
    by_reason: dict[str, list[int]] = {}
    for node_id, reason in dropped.items():
        by_reason.setdefault(reason, []).append(node_id)
    for reason, nodes in by_reason.items():
        if len(nodes) == 1:
            logger.warning("%s: dropped reply from node %d: %s", hook, nodes[0], reason)
        else:
            logger.warning(
                "%s: dropped reply from node %d and %d more for the same reason "
                "(%d replies: nodes %s): %s",
                hook,
                nodes[0],
                len(nodes) - 1,
                len(nodes),
                ", ".join(map(str, nodes)),
                reason,
            )


def drop(hook: str, dropped: dict[int, str], error: ReplyError, node_id: int) -> None:
    """Log and record a reply the reader (or a value pass) rejected, under ``node_id``."""
    logger.warning(
        "%s: dropped reply from node %d: %s %s", hook, node_id, error.field, error.reason
    )
    dropped[node_id] = f"{error.field} {error.reason}"


def drop_failing(
    hook: str,
    accepted: list[TrainReply],
    dropped: dict[int, str],
    error_of: Callable[[TrainReply], ReplyError | None],
) -> list[TrainReply]:
    """The replies a rule's own check passes; each other one is logged and dropped.

    For a check only the rule knows (RC-FL's η reach, FairFed's counts): it
    runs at intake, so a dropped reply is decided before the rule reads the round.
    """
    kept = []
    for reply in accepted:
        error = error_of(reply)
        if error is None:
            kept.append(reply)
        else:
            drop(hook, dropped, error, reply.node_id)
    return kept


def value_errors(
    replies: Sequence[TrainReply],
    squared_norms: NDArray[np.float64],
    array_keys: Sequence[str],
    max_abs_weight: float | None,
) -> list[ReplyError]:
    """The reader's error for each reply whose array values break the contract.

    ``max |w| <= ‖w‖``: an array whose norm is finite and, with a margin for its
    rounding, within ``max_abs_weight`` is good. Any other array (rare: a NaN/Inf, a
    huge value, or an array whose norm alone exceeds the bound) goes through
    :func:`fairfl.contract.check_array_values`, the reader's own check.

    Parameters
    ----------
    replies : Sequence[TrainReply]
        Replies read without their value check.
    squared_norms : NDArray[np.float64]
        ``‖w‖²`` of each reply's arrays, shape (replies, arrays).
    array_keys : Sequence[str]
        The model's array names, in order.
    max_abs_weight : float | None
        The bound on ``|w|`` (``None``: only NaN/Inf are bad).

    Returns
    -------
    list[ReplyError]
        For each reply with a NaN/Inf or a ``|value| > max_abs_weight``, the error of
        :func:`fairfl.contract.check_array_values` on its first such array.
    """
    bad = ~np.isfinite(squared_norms)
    if max_abs_weight is not None:
        with np.errstate(invalid="ignore"):
            # max |w| <= ‖w‖ (1 + ε) for the rounded norm; 1 % covers ε of any float.
            bad |= np.sqrt(squared_norms) * 1.01 > max_abs_weight
    errors: list[ReplyError] = []
    for client in np.flatnonzero(bad.any(axis=1)):
        reply = replies[int(client)]
        for index in np.flatnonzero(bad[client]):
            try:
                check_array_values(
                    reply.node_id, array_keys[int(index)], reply.arrays[index], max_abs_weight
                )
            except ReplyError as error:
                errors.append(error)
                break
    return errors


def update_value_errors(
    replies: Sequence[TrainReply],
    array_keys: Sequence[str],
    global_arrays: Sequence[NDArray[Any]],
    trainable: Sequence[bool],
    squared_norms: NDArray[np.float64],
    max_abs_weight: float | None,
) -> list[ReplyError]:
    """The reader's error for each reply whose values are bad, from its update's norm.

    For a rule that takes ``‖g_i‖² = ‖w^t - w_i‖²`` over the ``trainable`` arrays in a
    pass of its own (a Gram's diagonal) and lets the reader skip its value check: the
    norm is NaN/Inf when a value is, and bounds every value by ``max|w^t| + ‖g_i‖``
    (with the Gram's relative error :data:`GRAM_RTOL`). Only a reply that fails this
    bound goes through :func:`fairfl.contract.check_array_values`, which names the
    reason exactly as the reader would; arrays outside the norm are checked directly.
    """
    peak = max((max_abs(g) for g, m in zip(global_arrays, trainable, strict=True) if m), default=0)
    errors: list[ReplyError] = []
    for reply, squared_norm in zip(replies, squared_norms, strict=True):
        bounded = math.isfinite(squared_norm) and (
            max_abs_weight is None
            or (peak + math.sqrt(squared_norm)) * (1 + GRAM_RTOL) <= max_abs_weight
        )
        try:
            for key, value, in_norm in zip(array_keys, reply.arrays, trainable, strict=True):
                if not (in_norm and bounded):
                    check_array_values(reply.node_id, key, value, max_abs_weight)
        except ReplyError as error:
            errors.append(error)
            continue
        if not math.isfinite(squared_norm):  # finite values whose squares overflow
            errors.append(
                ReplyError(reply.node_id, "arrays:", "the update's squared norm overflows float64")
            )
    return errors


def check_missing_metrics(
    hook: str,
    server_round: int,
    read: Intake[ReplyT],
    rule_name: str,
    options: StrategyOptions,
) -> None:
    """Stop the run if every answering node's reply lacked a metric the rule needs.

    Raises
    ------
    MissingMetricError
        If some reply lacked a metric and every answering node's did, naming each key
        and what reports it (:func:`~fairfl.strategies.core.errors.missing_metric_help`),
        unless ``options.allow_missing_metrics``.
    """
    missing = read.missing
    if options.allow_missing_metrics or not missing or set(missing) != read.answered:
        return
    helps = " ".join(
        missing_metric_help(
            key,
            hook,
            rule_name=rule_name,
            weighted_by_key=options.weighted_by_key,
            train_loss_key=options.train_loss_key,
        )
        for key in sorted(set(missing.values()))
    )
    raise MissingMetricError(missing_metric_message(hook, server_round, missing, rule_name, helps))


def warn_ignored_objective(
    replies: Iterable[TrainReply],
    sent: Sequence[str],
    key_of: Callable[[TrainReply], str],
    warned: set[str],
) -> None:
    """WARNING once per client whose update ignored the client objective the rule sent.

    ``sent`` names the objective's config keys sent this round (``proximal-mu``,
    ``propfair-m``); ``warned`` holds the clients already told, and gains the new ones.
    The round still aggregates such an update (it is a valid one), but not under the
    rule the user chose: ``fair_train`` reports ``objective-ignored`` when the app's
    ``train_fn`` never called the loss it was handed.
    """
    for reply in replies:
        key = key_of(reply)
        if sent and objective_dropped(reply.metrics) and key not in warned:
            warned.add(key)
            logger.warning(objective_dropped_message(f"client {key}", ", ".join(sent)))


def train_reader(
    options: StrategyOptions,
    layout: ModelLayout,
    required_metrics: tuple[str, ...],
    check_values: bool,
    arrays_key: str,
) -> Callable[[Message], TrainReply]:
    """:func:`fairfl.contract.read_train_reply` for one round's model and the rule's needs."""
    return partial(
        read_train_reply,
        layout=layout,
        required_metrics=required_metrics,
        max_abs_weight=options.max_abs_weight,
        check_values=check_values,
        loss_key=options.train_loss_key,
        weight_key=options.weighted_by_key,
        arrays_key=arrays_key,
        max_loss=options.max_loss,
    )


def aggregate_without_rejected(
    aggregate: Callable[[list[TrainReply]], AggregateT | RejectedReplies],
    accepted: list[TrainReply],
    record: TrainRoundRecord,
    deferred: DeferredUpdates,
) -> tuple[list[TrainReply], AggregateT | None]:
    """``aggregate(accepted)``, dropping the replies it rejects and aggregating the rest again.

    A rule that checks the array values in its own pass returns
    :class:`~fairfl.strategies.core.errors.RejectedReplies` instead of a model; each rejected
    reply is then logged and recorded in ``record`` as the reader would have dropped it,
    and the rest is aggregated. ``aggregate`` leaves the rule's state alone and defers its
    changes (``deferred``): those of a rejected pass are discarded, nothing is restored.

    Returns
    -------
    tuple[list[TrainReply], AggregateT | None]
        The replies aggregated, and ``aggregate``'s result (``None`` if every reply
        was rejected).
    """
    diagnostics = dict(record.diagnostics)
    while accepted:
        result = aggregate(accepted)
        if not isinstance(result, RejectedReplies):
            return accepted, result
        errors = {error.node_id: error for error in result.errors}
        assert errors.keys() & {r.node_id for r in accepted}, "rejected no reply"
        for node, error in errors.items():
            drop("aggregate_train", record.dropped, error, node)
            record.partition_ids.pop(node, None)
        accepted = [r for r in accepted if r.node_id not in errors]
        record.accepted = [r.node_id for r in accepted]
        record.weights = {}
        record.diagnostics = dict(diagnostics)
        deferred.discard()
    return accepted, None
