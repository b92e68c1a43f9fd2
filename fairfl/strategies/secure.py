"""A rule's server half under secure aggregation: :class:`SecureRounds`.

With ``secure-aggregation = "secagg+"`` the rule never sees a client's arrays. Each round
its reader screens the clients' clear train metrics (losses, counts: they travel in the
clear), the rule's form (:class:`~fairfl.secagg.forms.SecureForm`, a class attribute
``secure_form`` beside its parameters) says what each client masks, and the new model is
``w^{t+1} = w^t + s · Σ_k a_k u_k / Σ_k a_k`` from the unmasked sum alone
(:mod:`fairfl.secagg.forms`). The protocol is :mod:`fairfl.secagg.server`'s. A two-round
form (Semi-VRed, FedFa) keeps the metric its weights read on the clients: the screen
does not ask for it, and secure sums of scalars (:mod:`fairfl.strategies.secure_sums`)
come before the weighted sum.

A form is inherited only where the subclass changes nothing the aggregate depends on
(:func:`secure_form_of`): a subclass that overrides its parent's aggregation must declare
its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from numpy.typing import NDArray

from fairfl.contract import ModelLayout, TrainReply, array_view
from fairfl.privacy.distributed import DistributedNoise
from fairfl.secagg import forms, noise
from fairfl.secagg.config import SecAggSettings
from fairfl.secagg.forms import SecureForm
from fairfl.secagg.protocol import quantisation_bound, weight_ratio
from fairfl.secagg.server import SecAggPlusDriver, SecureGrid, SecureSum
from fairfl.strategies.core import intake
from fairfl.strategies.core.base import FairStrategy, current_options
from fairfl.strategies.core.defences import share_capped
from fairfl.strategies.core.records import (
    TrainRoundRecord,
    app_metrics,
    global_model,
    round_metrics,
)
from fairfl.strategies.core.reweighted import ReweightedStrategy
from fairfl.strategies.secure_sums import two_round_sums

__all__ = [
    "AGGREGATE_METHODS",
    "BROADCAST_METHODS",
    "NO_ARRAYS",
    "AggregatesClearScalars",
    "SecureAggregationRefusedError",
    "SecureRounds",
    "StepsFromAverage",
    "check_secure",
    "secure_form_of",
    "secure_rounds",
]

logger = logging.getLogger(__name__)

#: The methods a one-round form's aggregate depends on: overriding one voids an inherited form.
AGGREGATE_METHODS = ("aggregate", "aggregate_train", "lambdas", "weights", "read_train_replies")
#: Those of a scalars-in-clear form: the screen calls the rule's own reader and weights.
BROADCAST_METHODS = ("aggregate", "aggregate_train", "lambdas")
#: A reply with no arrays: the screen reads the clear metrics against it.
NO_ARRAYS = ModelLayout(keys=(), shapes=(), dtypes=())


@runtime_checkable
class StepsFromAverage(Protocol):
    """A rule whose new model is a function of w^t and the weighted average alone.

    FedAdam and FedYogi (:class:`~fairfl.strategies.fedopt.FedOptRule`): their server
    optimiser runs on the average, so under SecAgg+ it runs on the unmasked one.
    """

    def step_from_average(
        self,
        server_round: int,
        global_arrays: list[NDArray[Any]],
        average: list[NDArray[Any]],
    ) -> tuple[list[NDArray[Any]], dict[str, Any]]:
        """w^{t+1} from w^t and the average, and the step's diagnostics."""


@runtime_checkable
class AggregatesClearScalars(Protocol):
    """A rule whose state also moves with scalars its clients report in the clear.

    RC-FL (:class:`~fairfl.strategies.rcfl.RCFL`): η^{t+1} is the W-weighted mean of the
    reported η_j, which the server computes from the clear replies of the clients in
    the sum once the secure step is taken.
    """

    def aggregate_scalars(self, server_round: int, replies: list[TrainReply]) -> dict[str, Any]:
        """Defer the state the clear scalars give; return the round's diagnostics."""


class SecureAggregationRefusedError(ValueError):
    """The rule, or one of its settings, cannot run under secure aggregation."""


def secure_form_of(rule: type[FairStrategy]) -> SecureForm | None:
    """The form ``rule`` declares or inherits unchanged; ``None`` if it has none.

    An ``impossible`` form is always inherited; a supported one only if no class between
    ``rule`` and the declaring class overrides a method it depends on: any of
    :data:`AGGREGATE_METHODS` for a one-round form (the clients compute the declared
    weights), any of :data:`BROADCAST_METHODS` for a scalars-in-clear one (the server
    computes them with the rule's own :meth:`weights` and reader).
    """
    for index, cls in enumerate(rule.__mro__):
        form = cls.__dict__.get("secure_form")
        if form is None:
            continue
        if not isinstance(form, SecureForm):
            raise TypeError(f"{rule.__name__}.secure_form must be a SecureForm, got {form!r}")
        methods = BROADCAST_METHODS if form.weight == "broadcast" else AGGREGATE_METHODS
        overridden = any(
            name in below.__dict__ for below in rule.__mro__[:index] for name in methods
        )
        return None if form.supported and overridden else form
    return None


def check_secure(strategy: FairStrategy) -> SecureForm:
    """The rule's form if it runs under SecAgg+ with these settings.

    Raises
    ------
    SecureAggregationRefusedError
        Naming the rule and why: no declared form, a form that needs each update, or
        ``max-client-share`` < 1 with a form whose clients compute their weights.
    """
    name = strategy.registry_name or type(strategy).__name__
    form = secure_form_of(type(strategy))
    if form is None:
        raise SecureAggregationRefusedError(
            f"strategy {name} cannot run with secure-aggregation=secagg+: it declares no "
            "secure form (fairfl.secagg.forms.SecureForm)"
        )
    if not form.supported:
        raise SecureAggregationRefusedError(
            f"strategy {name} cannot run with secure-aggregation=secagg+ ({form.kind}): "
            f"{form.reason}"
        )
    if form.weight == "broadcast" and not isinstance(strategy, ReweightedStrategy):
        raise SecureAggregationRefusedError(
            f"strategy {name}'s form sends each client its weight, which needs weights from "
            "the clear metrics alone (a ReweightedStrategy's lambdas)"
        )
    if form.kind in ("one-round", "two-rounds") and strategy.max_client_share < 1:
        # The cap needs every client's weight, which the clients compute (q-FFL's h_k).
        raise SecureAggregationRefusedError(
            f"strategy {name} with secure-aggregation=secagg+: run config max-client-share "
            "caps weights that its clients compute themselves; leave it at 1"
        )
    if form.weight == "semivred" and strategy.loss_clip_mad:
        raise SecureAggregationRefusedError(
            f"strategy {name} with secure-aggregation=secagg+: run config loss-clip-mad "
            "clips losses that its two-round form keeps on the clients; leave it at 0"
        )
    return form


class SecureRounds:
    """The secure half of one strategy: it screens each round, then steps from the sum.

    Building it checks the rule (:func:`check_secure`) and puts :meth:`aggregate_train` on
    the strategy *instance* (Flower's ``Strategy.start`` calls ``self.aggregate_train``;
    the class, and a clear run of it, are unchanged). :meth:`wrap` gives the Grid the
    rounds go through.

    Parameters
    ----------
    strategy : FairStrategy
        The rule.
    settings : SecAggSettings
        The run's secure-aggregation settings (``secure-aggregation = "secagg+"``).
    """

    def __init__(self, strategy: FairStrategy, settings: SecAggSettings) -> None:
        self.form = check_secure(strategy)
        self.strategy = strategy
        self.settings = settings
        self.grid: SecureGrid | None = None
        self.step_scale: dict[int, float] = {}  # s of each round (Σ λ of broadcast weights)
        self.screened: dict[int, list[TrainReply]] = {}  # each round's admitted clear replies
        # A two-round form: its sums of scalars, and the train metrics its clients keep.
        self.sums = (
            two_round_sums(self.form.weight, strategy, settings)
            if self.form.kind == "two-rounds"
            else None
        )
        self.hidden = () if self.sums is None else self.sums.hidden
        strategy.aggregate_train = self.aggregate_train  # type: ignore[method-assign]
        logger.info(
            "secure aggregation: SecAgg+ for %s (%s form, %s weights): %s",
            strategy.rule_name,
            self.form.kind,
            self.form.weight,
            self.form.reason,
        )

    def wrap(self, grid: Grid) -> SecureGrid:
        """The Grid whose train rounds are secure (:class:`~fairfl.secagg.server.SecureGrid`)."""
        strategy = self.strategy
        driver = SecAggPlusDriver(self.settings)
        key, reply_key = strategy.arrayrecord_key, strategy.reply_arrays_key
        later = None if self.sums is None else self.sums.next
        self.grid = SecureGrid(
            grid, driver, self.client_parts, key, reply_key, hidden=self.hidden, next_parts=later
        )
        return self.grid

    # ------------------------------------------------------------------ the screen
    def client_parts(self, replies: list[Message]) -> dict[int, dict[str, Any]]:
        """Read the clear setup replies as the rule does; each admitted client's part.

        The round's record starts here (accepted, dropped, unanswered): a client the
        reader drops is left out of the masking, so that nothing it sends enters the sum.
        """
        strategy = self.strategy
        server_round = self._round_sent()
        if self.hidden:
            accepted, dropped = self._read_without_hidden(server_round, replies)
        else:
            accepted, dropped = strategy.read_train_replies(server_round, replies, NO_ARRAYS)
        accepted = strategy.sampled_replies(accepted)
        unanswered = intake.unanswered("aggregate_train", replies, strategy.in_flight)
        record = TrainRoundRecord.of(accepted, dropped, unanswered)
        strategy.train_records[server_round] = record
        record.diagnostics.update(strategy.client_keys.diagnostics)
        strategy.state_updates.discard()
        if not accepted:
            return {}
        parts, scale = self._parts(server_round, accepted)
        parts = self._noised_parts(server_round, accepted, parts)
        self.step_scale[server_round] = scale
        self.screened[server_round] = accepted
        return {reply.node_id: part for reply, part in zip(accepted, parts, strict=True)}

    def _read_without_hidden(
        self, server_round: int, replies: list[Message]
    ) -> tuple[list[TrainReply], dict[int, str]]:
        """The rule's reply check, less the metrics a two-round form keeps on the clients.

        Their values are checked by each client (:func:`fairfl.secagg.forms.client_part`).
        """
        strategy = self.strategy
        required = tuple(k for k in strategy.required_metrics if k not in self.hidden)
        needs = (required, not strategy.checks_array_values, strategy.reply_arrays_key)
        options = current_options(strategy)
        read = intake.train_reader(options, NO_ARRAYS, *needs)
        read_round = intake.read_replies("aggregate_train", replies, strategy.in_flight, read)
        intake.check_missing_metrics(
            "aggregate_train", server_round, read_round, strategy.rule_name, options
        )
        return strategy.client_keys.order(read_round.accepted, read_round.dropped), (
            read_round.dropped
        )

    def _round_sent(self) -> int:
        """The round of the train messages in flight (their config's ``server-round``)."""
        message = self.strategy.in_flight[0]
        return int(message.content.config_records[self.strategy.configrecord_key]["server-round"])  # type: ignore[arg-type]

    def _parts(
        self, server_round: int, replies: list[TrainReply]
    ) -> tuple[list[dict[str, Any]], float]:
        """The client parts of the form, and the step scale s."""
        strategy, weight = self.strategy, self.form.weight
        max_weight = self.settings.secagg_max_weight
        counts = np.array([r.num_examples for r in replies], dtype=np.float64)
        if weight == "broadcast":
            lam = np.asarray(strategy.lambdas(server_round, replies), dtype=np.float64)  # type: ignore[attr-defined]
            capped = share_capped(lam, strategy.max_client_share)
            lam = lam if capped is None else capped
            strategy.train_records[server_round].weights = {
                r.node_id: float(w) for r, w in zip(replies, lam, strict=True)
            }
            # A public scale puts the largest weight at a_max: the finest quantisation.
            # VRed's λ_k may be negative (β above β_max): masked with their sign.
            top = float(np.abs(lam).max())
            if not top > 0:
                raise AggregationError(
                    f"secure aggregation: {strategy.rule_name}'s weights {lam} are all 0"
                )
            part_of = [{forms.WEIGHT: float(w) * max_weight / top} for w in lam]
            return [{forms.WEIGHT_KIND: weight, **p} for p in part_of], float(lam.sum())
        if self.sums is not None:
            first = self.sums.first(server_round, replies)
            return [first[reply.node_id] for reply in replies], 1.0
        # n_k are reported in the clear: scaling them so that the largest is a_max is public.
        common: dict[str, Any] = {
            forms.WEIGHT_KIND: weight,
            forms.WEIGHT_SCALE: max_weight / float(counts.max()),
        }
        if weight in ("qffl", "qfedsgd"):
            common[forms.WEIGHT_SCALE] = 1.0  # h_k depends on ‖Δ_k‖, which the server never sees
            common[forms.QFFL_Q] = float(strategy.q)  # type: ignore[attr-defined]
            common[forms.QFFL_LIPSCHITZ] = float(strategy.lipschitz)  # type: ignore[attr-defined]
            common[forms.QFFL_BY_SIZE] = strategy.weighting == "p"  # type: ignore[attr-defined]
        elif weight == "term":
            common[forms.TERM_ALPHA] = float(strategy.params.alpha)  # type: ignore[attr-defined]
            # c = max_k F_k(w^t): public (the losses are), and a_k <= n_k then.
            common[forms.TERM_SHIFT] = float(strategy.losses_of(replies).max())
        # n_k and F_k as the rule read them, after its count and loss defences.
        parts = []
        for reply in replies:
            part = {**common, forms.NUM_EXAMPLES: reply.num_examples}
            if strategy.has_loss(reply):
                part[forms.LOSS] = strategy.loss_of(reply)
            parts.append(part)
        return parts, 1.0

    def _noised_parts(
        self, server_round: int, replies: list[TrainReply], parts: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Under ``dp = "distributed"``, each part with C and the client's noise σ_c.

        The server computes each client's r̂_k as the client will (its form's weight over
        ``secagg-max-weight``, quantised): the forms it admits have weights it knows
        (:func:`fairfl.strategies.private.distributed_refusal`).
        """
        privacy = self.strategy.privacy
        if not isinstance(privacy, DistributedNoise):
            return parts
        quantization = self.settings.secagg_quantization_range
        ratios = {}
        for reply, part in zip(replies, parts, strict=True):
            weight, _ = forms.client_part(part, [])
            max_weight = self.settings.secagg_max_weight
            ratios[reply.node_id] = weight_ratio(weight, max_weight, quantization) / quantization
        plan = privacy.plan(server_round, ratios)
        keys = {noise.DP_CLIPPING_NORM: privacy.clipping_norm, noise.DP_NOISE_STD: plan.std}
        return [{**part, **keys} for part in parts]

    # ------------------------------------------------------------- the aggregate
    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """``w^t + s · mean`` from the round's unmasked sum; the clear replies' metrics.

        ``replies`` are the clear replies of the clients in the sum (no arrays). A round
        the protocol skipped (too few clients for the threshold) keeps the previous model
        and is recorded as skipped; so is one whose new model is not usable.
        """
        strategy = self.strategy
        server_round += strategy.round_offset
        secure = None if self.grid is None else self.grid.last
        record = strategy.train_records.get(server_round)
        if secure is None or strategy.current_arrays is None:
            raise AggregationError(
                "secure aggregation: aggregate_train was called without a secure round; "
                "send the train messages through SecureRounds.wrap(grid)"
            )
        assert self.grid is not None
        self.grid.last = None
        messages = list(replies)
        if record is None:  # nobody answered the setup stage
            record = TrainRoundRecord(unanswered=sorted(secure.lost))
            strategy.train_records[server_round] = record
        scale = self.step_scale.pop(server_round, 1.0)
        screened = self.screened.pop(server_round, [])
        self._record_lost(record, secure, scale, self._extra_bound(server_round))
        self._account(server_round, record, secure)
        deferred = strategy.state_updates
        if secure.skipped is not None or secure.mean is None:
            deferred.discard()
            why = secure.skipped or "no sum"
            record.skipped = f"secure aggregation: {why}"
            record.diagnostics["skipped-aggregate"] = 1
            logger.warning(
                "aggregate_train: round %d skipped: secure aggregation: %s; keeping the "
                "previous global model",
                server_round,
                why,
            )
            return None, None
        layout = ModelLayout.of(strategy.current_arrays)
        current = [array_view(a) for a in strategy.current_arrays.values()]
        new_arrays = [
            np.asarray(w, dtype=np.float64) + scale * m
            for w, m in zip(current, secure.mean, strict=True)
        ]
        if isinstance(strategy, StepsFromAverage):  # the server optimiser, on the average
            new_arrays, diagnostics = strategy.step_from_average(server_round, current, new_arrays)
            record.diagnostics.update(diagnostics)
        if isinstance(strategy, AggregatesClearScalars):  # RC-FL's η, from the clear η_j
            in_sum = set(record.accepted)
            summed = [reply for reply in screened if reply.node_id in in_sum]
            record.diagnostics.update(strategy.aggregate_scalars(server_round, summed))
        arrays, problem = global_model(layout, new_arrays, strategy.max_abs_weight)
        if problem is None:
            deferred.apply()
        else:
            record.skip(server_round, problem)
        nodes = [int(m.metadata.src_node_id) for m in messages]
        metrics = app_metrics(
            "aggregate_train",
            strategy.train_metrics_aggr_fn,
            messages,
            nodes,
            strategy.weighted_by_key,
        )
        metrics.update(round_metrics(len(nodes), record))
        return arrays, MetricRecord(metrics)

    def _account(self, server_round: int, record: TrainRoundRecord, secure: SecureSum) -> None:
        """Under ``dp = "distributed"``: account an unmasked sum at its survivors' z_eff.

        A sum once unmasked is released (even if its model is then not kept); one never
        unmasked released only the losses, if noised.
        """
        privacy = self.strategy.privacy
        if not isinstance(privacy, DistributedNoise):
            return
        if secure.mean is None:
            privacy.forget(server_round)
            record.diagnostics.update(privacy.discard())
            return
        summed = [int(m.metadata.src_node_id) for m in secure.replies]
        record.diagnostics.update(privacy.release_sum(server_round, summed))
        record.diagnostics.update(privacy.commit())

    def _extra_bound(self, server_round: int) -> float:
        """A two-round form's share of the round's bound (0 for other forms)."""
        return 0.0 if self.sums is None else self.sums.extra_bound.pop(server_round, 0.0)

    def _record_lost(
        self, record: TrainRoundRecord, secure: SecureSum, scale: float, extra: float
    ) -> None:
        """The clients lost after the screen leave ``accepted``; the sum's diagnostics.

        ``secagg-bound`` is the documented bound on each coordinate's quantisation error
        (:func:`~fairfl.secagg.protocol.quantisation_bound`, times the step scale s), on
        the new model or, for a :class:`StepsFromAverage` rule, on the average it steps from;
        ``extra`` is a two-round form's share, from the errors of its public statistics.
        """
        in_sum = {int(m.metadata.src_node_id) for m in secure.replies}
        record.accepted = [nid for nid in record.accepted if nid in in_sum]
        for nid, lost in secure.lost.items():
            # A node silent at setup stays unanswered; an error or a later loss is a drop.
            silent_at_setup = nid in record.unanswered and "(" not in lost
            if nid in in_sum or nid in record.dropped or silent_at_setup:
                continue
            record.unanswered = [n for n in record.unanswered if n != nid]
            record.dropped[nid] = f"secure aggregation: lost at stage {lost}"
        settings = self.settings
        record.diagnostics.update(
            {
                "secagg-clients": secure.num_clients,
                "secagg-lost": len(secure.lost),
                "secagg-weight-total": secure.weight_total,
            }
        )
        if secure.weight_total > 0:
            bound = quantisation_bound(
                secure.num_clients,
                settings.secagg_clipping_range,
                secure.weight_total,
                abs_total=secure.abs_total,
            )
            record.diagnostics["secagg-bound"] = scale * bound + extra


def secure_rounds(strategy: FairStrategy, grid: Grid, settings: SecAggSettings) -> Grid:
    """The Grid a run's rounds go through: ``grid``, or a secure one for ``secagg+``.

    Raises
    ------
    SecureAggregationRefusedError
        If the run asks for ``secagg+`` and the rule cannot run under it.
    """
    if not settings.enabled:
        return grid
    return SecureRounds(strategy, settings).wrap(grid)
