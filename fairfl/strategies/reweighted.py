"""The loss-reweighting base: a rule is its weights function plus its parameters.

TERM, GiFair, Δ-FL, AFL, VRed, Semi-VRed, PropFair and FedAvg all aggregate as
``w^{t+1} = w^t - Σ_i λ_i (w^t - w_i)`` with λ computed from the round's data shares and
losses. A rule of this form subclasses :class:`LossRule`, declares its hyperparameters
(:mod:`fairfl.strategies.params`) and implements :meth:`LossRule.weights`, which reads the
immutable :class:`~fairfl.strategies.rounds.TrainRound` and *returns* the weights with
the round's diagnostics; the base records the diagnostics, applies the weights and
checks every reply value in the same pass (:class:`~fairfl.strategies.base.ReweightedStrategy`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import ClassVar, TypeAlias

import numpy as np
from numpy.typing import NDArray

from fairfl.contract import TrainReply
from fairfl.strategies.base import ReweightedStrategy, TrainRoundRecord
from fairfl.strategies.rounds import TrainRound

__all__ = ["LossRule", "TrainRound", "Weights"]

#: A weights function's result: one λ_i per reply, and the round's diagnostics
#: (scalars by metric name, e.g. ``{"term-tilted-loss": 1.3}``).
Weights: TypeAlias = tuple[NDArray[np.float64], Mapping[str, float | int]]


class LossRule(ReweightedStrategy):
    """A rule of the unified form whose λ is a function of the round (and its own state).

    Subclasses set :attr:`needs_loss` (default True), ``rule_name``, ``registry_name``
    and ``Parameters``, and implement :meth:`weights`.
    """

    needs_loss: ClassVar[bool] = True

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
