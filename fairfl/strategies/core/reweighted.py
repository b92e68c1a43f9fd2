"""The bases of the unified form ``w^{t+1} = w^t - Σ_i λ_i (w^t - w_i)``.

:class:`ReweightedStrategy` applies a rule's λ (capped at ``max_client_share``), checking
every reply value in the same pass. TERM, GiFair, Δ-FL, AFL, VRed, Semi-VRed, PropFair and
FedAvg compute λ from the round's data shares and losses: such a rule subclasses
:class:`LossRule`, declares its hyperparameters (:mod:`fairfl.strategies.core.params`) and
implements :meth:`LossRule.weights`, which reads the immutable
:class:`~fairfl.strategies.core.rounds.TrainRound` and *returns* the weights with the round's
diagnostics; the base records the diagnostics and applies the weights.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeAlias

import numpy as np
from numpy.typing import NDArray

from fairfl.contract import TrainReply
from fairfl.secagg.forms import SecureForm
from fairfl.strategies.core.aggregation import reweighted_average_and_squared_norms
from fairfl.strategies.core.base import Aggregate, FairStrategy, TrainRoundRecord
from fairfl.strategies.core.defences import share_capped
from fairfl.strategies.core.errors import RejectedReplies
from fairfl.strategies.core.records import weight_diagnostics
from fairfl.strategies.core.rounds import TrainRound

__all__ = ["LossRule", "ReweightedStrategy", "StepsFromWeightedAverage", "TrainRound", "Weights"]

logger = logging.getLogger(__name__)

#: A weights function's result: one λ_i per reply, and the round's diagnostics
#: (scalars by metric name, e.g. ``{"term-tilted-loss": 1.3}``).
Weights: TypeAlias = tuple[NDArray[np.float64], Mapping[str, float | int]]


class ReweightedStrategy(FairStrategy):
    """A rule of the unified form ``w^{t+1} = w^t - Σ_i λ_i (w^t - w_i)``.

    Subclasses implement :meth:`lambdas`; this class applies them with
    :func:`fairfl.strategies.core.aggregation.reweighted_average_and_squared_norms` and
    reports them (:func:`~fairfl.strategies.core.records.weight_diagnostics`). The reply values
    are checked in that same pass: a reply with a NaN/Inf or a ``|value| > max_abs_weight``
    is dropped with the reader's reason, and the round aggregated again without it
    (:func:`fairfl.strategies.core.intake.aggregate_without_rejected`). :meth:`lambdas` may
    run twice in a round then: it defers its state changes (``self.state_updates``).
    """

    #: The weighted average reads every reply value; it checks them (``apply_lambdas``).
    checks_array_values: ClassVar[bool] = True
    caps_client_share: ClassVar[bool] = True

    @abstractmethod
    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """One aggregation weight per reply (replies sorted by node id)."""

    def aggregate(
        self, server_round: int, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> Aggregate | RejectedReplies:
        """Apply the rule's λ, capped at ``max_client_share`` of their sum, to the replies."""
        weights = np.asarray(self.lambdas(server_round, replies), dtype=np.float64)
        return self.weighted_step(server_round, global_arrays, replies, weights, self.apply_lambdas)

    def weighted_step(
        self,
        server_round: int,
        global_arrays: list[NDArray[Any]],
        replies: list[TrainReply],
        weights: NDArray[np.float64],
        apply: Callable[..., list[NDArray[Any]] | RejectedReplies],
    ) -> Aggregate | RejectedReplies:
        """``apply(global_arrays, replies, weights)``, or :meth:`apply_lambdas` of the capped λ.

        ``apply`` may reuse sums of the uncapped λ (q-FFL's pass); the λ used are recorded.
        """
        capped, capped_clients = share_capped(weights, self.share_cap(server_round)), None
        if capped is None:
            new_arrays = apply(global_arrays, replies, weights)
        else:
            new_arrays = self.apply_lambdas(global_arrays, replies, capped)
            weights, capped_clients = capped, int(np.count_nonzero(capped < weights))
        if isinstance(new_arrays, RejectedReplies):
            return new_arrays
        record = self.train_records[server_round]
        record.weights = {r.node_id: float(w) for r, w in zip(replies, weights, strict=True)}
        logger.debug("aggregate_train: round %d weights %s", server_round, record.weights)
        return new_arrays, weight_diagnostics(weights, capped_clients)

    def apply_lambdas(
        self,
        global_arrays: list[NDArray[Any]],
        replies: list[TrainReply],
        weights: NDArray[np.float64],
    ) -> list[NDArray[Any]] | RejectedReplies:
        """``w^t - Σ_i λ_i (w^t - w_i)``, checking every reply value in the same pass.

        :func:`~fairfl.strategies.core.aggregation.reweighted_average_and_squared_norms` gives
        the update and each reply array's ``‖w‖²``; the replies with a NaN/Inf or a
        ``|value| > max_abs_weight`` (:meth:`value_errors`) are returned instead. A rule
        that read every reply in a pass of its own may reuse it instead (q-FFL does,
        :meth:`weighted_step`); the result must equal this one up to float64 rounding.
        """
        new_arrays, squared_norms = reweighted_average_and_squared_norms(
            global_arrays, [r.arrays for r in replies], weights
        )
        errors = self.value_errors(replies, squared_norms)
        return RejectedReplies(errors) if errors else new_arrays


class LossRule(ReweightedStrategy):
    """A rule of the unified form whose λ is a function of the round (and its own state).

    Subclasses set :attr:`needs_loss` (default True), ``rule_name``, ``registry_name``
    and ``Parameters``, and implement :meth:`weights`.
    """

    needs_loss: ClassVar[bool] = True
    #: Under SecAgg+ (issue #48): λ is a function of the clear round, so the server sends
    #: each client its λ_k and the client masks λ_k Δ_k (AFL, Δ-FL, GiFair inherit it).
    secure_form = SecureForm.scalars_in_clear(
        "λ comes from the losses and counts the clients send in the clear"
    )

    @abstractmethod
    def weights(self, round: TrainRound) -> Weights:
        """λ for the round's replies (in their order) and the round's diagnostics."""

    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """Read the round, call :meth:`weights`, record its diagnostics, return λ."""
        loss_key = self.train_loss_key if self.needs_loss else None
        weights, diagnostics = self.weights(TrainRound.of(server_round, replies, loss_key))
        record = self.train_records.setdefault(server_round, TrainRoundRecord())
        record.diagnostics.update(diagnostics)
        return weights


class StepsFromWeightedAverage(ReweightedStrategy):
    """A rule that averages with its λ, then takes a server step from that average.

    FedFa's momentum and FedAdam's / FedYogi's optimisers: :meth:`aggregate` computes the
    weighted average w̄ as every reweighted rule does, then :meth:`step_from_average`.
    The step reads w^t and w̄ only, never a reply, so under secure aggregation
    (:class:`fairfl.strategies.secure.SecureRounds`) it runs on the unmasked average, and
    under central DP on the noised average (w̄ is of the unified form, sensitivity
    C max_k λ_k; the step and the state it keeps are post-processing of that release).
    """

    noises_average: ClassVar[bool] = True

    def aggregate(
        self, server_round: int, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> Aggregate | RejectedReplies:
        """w̄ with the λ of :meth:`lambdas`, noised under central DP, then the step."""
        averaged = super().aggregate(server_round, global_arrays, replies)
        if isinstance(averaged, RejectedReplies):
            return averaged
        average, diagnostics = averaged
        if self.privacy is not None:  # noised before the step (PrivateRounds.noised skips)
            average = self.with_noise(server_round, average, self.train_records[server_round])
        new_arrays, step_diagnostics = self.step_from_average(server_round, global_arrays, average)
        diagnostics.update(step_diagnostics)
        return new_arrays, diagnostics

    @abstractmethod
    def step_from_average(
        self,
        server_round: int,
        global_arrays: list[NDArray[Any]],
        average: list[NDArray[Any]],
    ) -> tuple[list[NDArray[Any]], dict[str, Any]]:
        """w^{t+1} from w^t and the weighted average, and the step's diagnostics."""
