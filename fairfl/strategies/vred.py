"""VRed: Variance Reduction for fair federated learning.

Malekmohammadi & Yu, "Semi-Variance Reduction for Fair Federated Learning"
(paper 000 in ``papers/``; spec ``specs/spec-vred-qffl.md`` §3). VRed minimises the
mean loss plus β times the p-weighted variance of the clients' losses (eq. 3)::

    F_VRed(θ) = Σ_i p_i f_i(θ) + β Σ_i p_i (f_i(θ) - f̄(θ))²,    f̄ = Σ_j p_j f_j

and aggregates with Algorithm 1, line 11 (eq. 5)::

    Δ^(t) = Σ_i p_i Δ_i + 2β Σ_i p_i (f_i(θ^t) - f̄(θ^t)) (Δ_i - Δ̄),   θ^{t+1} = θ^t - Δ^(t)

with the pseudo-gradients ``Δ_i = θ^t - θ_i`` and ``Δ̄ = Σ_i p_i Δ_i``. Because
``Σ_i p_i (f_i - f̄) = 0`` the ``Δ̄`` term cancels, and the update is the re-weighted
average ``θ^{t+1} = Σ_i w_i θ_i`` with (Lemma 1, eq. 8, for general p)::

    w_i = p_i (1 + 2β (f_i - f̄)),    Σ_i w_i = 1.

The weights are all >= 0 iff ``β <= β_max = 1 / (2 (f̄ - min_i f_i))`` (§4.1.1). The
bound moves with θ^t, so it is logged every round; Algorithm 1 does not clip, so a β
above it extrapolates (negative weights).

This module also holds what :mod:`fairfl.strategies.semivred` shares with VRed:
:func:`algorithm1_update` (Algorithm 1 for any loss deviations),
:func:`clip_negative_weights` and the strategy base :class:`LossDeviationStrategy`.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import TrainReply
from fairfl.strategies.aggregation import sample_weights
from fairfl.strategies.base import ReweightedStrategy
from fairfl.strategies.params import RuleParameters, flag, real

logger = logging.getLogger(__name__)

#: Largest β of VRed and Semi-VRed. Paper 000's values are 0.01 to 0.5 (Table 5); up
#: to 1e6, ``2β (f_i - f̄)`` stays finite for every loss below 1e300, so the weights
#: are finite for every loss a reply may report (:mod:`fairfl.contract.bounds`).
MAX_BETA = 1e6


@dataclass(frozen=True)
class VRedParameters(RuleParameters):
    """VRed's hyperparameters: β and the clipping option (see :class:`VRed`)."""

    beta: float = real(0.1, key="vred-beta", lower=0.0, upper=MAX_BETA)
    clip_negative_weights: bool = flag(False, key="vred-clip-negative")


class LossDeviationStrategy(ReweightedStrategy):
    """Shared plumbing of VRed and Semi-VRed: weights from ``(p, f(θ^t), β)``.

    Subclasses set :attr:`rule_name` and pass their rule's pure functions. The losses
    are each reply's ``train_loss_key`` metric (default ``loss-before-training``),
    F_i(θ^t) measured on the client's training split
    before local training (Algorithm 1, line 9).

    Parameters
    ----------
    weight_rule : Callable[[ArrayLike, ArrayLike, float], NDArray[np.float64]]
        ``(p, f, β) -> w``, the rule's unclipped weights (they sum to 1).
    bound_rule : Callable[[ArrayLike, ArrayLike], float]
        ``(p, f) -> β_max``, the round's largest β keeping every weight >= 0 (``inf``:
        no bound).
    beta : float
        β of the rule, >= 0 (β = 0 is FedAvg).
    clip_negative_weights : bool (default: False)
        Not in the paper. When True, negative weights (β above the round's β_max) are
        set to 0 and the rest renormalised to sum 1, so the update stays a convex
        combination of the local models. Default False, as in Algorithm 1.
    **kwargs
        Sampling and validation settings of
        :class:`fairfl.strategies.base.FairStrategy`.

    Raises
    ------
    ValueError
        If ``beta`` is not a finite number in ``[0, MAX_BETA]``.
    """

    needs_loss: ClassVar[bool] = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._warned_negative = False

    @abstractmethod
    def weight_rule(self, p: ArrayLike, losses: ArrayLike, beta: float) -> NDArray[np.float64]:
        """``(p, f, β) -> w``, the rule's unclipped weights (they sum to 1)."""

    @abstractmethod
    def bound_rule(self, p: ArrayLike, losses: ArrayLike) -> float:
        """``(p, f) -> β_max``, the round's largest β keeping every weight >= 0 (``inf``: none)."""

    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """Return this round's weights; record ``beta-max`` and ``negative-weights``."""
        p = sample_weights([r.num_examples for r in replies])
        losses = self.losses_of(replies)
        weights = self.weight_rule(p, losses, self.beta)
        bound = self.bound_rule(p, losses)
        negative = int(np.count_nonzero(weights < 0))
        diagnostics = self.train_records[server_round].diagnostics
        # A non-finite beta-max (all losses equal: no bound) is left out of the metrics.
        diagnostics["beta-max"] = bound
        diagnostics["negative-weights"] = negative
        logger.info(
            "aggregate_train: round %d %s beta %g, beta-max %g, %d negative weights",
            server_round,
            self.rule_name,
            self.beta,
            bound,
            negative,
        )
        if negative and not self._warned_negative:
            self._warned_negative = True
            logger.warning(
                "aggregate_train: %s beta %g is above this round's bound %g: %d weights "
                "are negative (the update extrapolates); %s (logged once)",
                self.rule_name,
                self.beta,
                bound,
                negative,
                "clipping them to 0 and renormalising"
                if self.clip_negative_weights
                else "keeping them as Algorithm 1 does",
            )
        if negative and self.clip_negative_weights:
            weights = clip_negative_weights(weights)
        return weights


class VRed(LossDeviationStrategy):
    """VRed (paper 000, Algorithm 1 with "VRed"): up-weight clients with above-mean loss.

    Parameters
    ----------
    beta : float (default: 0.1)
        β of eq. (3), the weight of the loss variance; >= 0. β = 0 is FedAvg. Paper
        000 Table 5: 0.5 (CIFAR-10), 0.1 (CIFAR-100, StackOverflow), 0.2 (CINIC-10);
        the default follows the spec's recommendation (0.1).
    clip_negative_weights : bool (default: False)
        See :class:`LossDeviationStrategy` (off: faithful to Algorithm 1).
    **kwargs
        See :class:`fairfl.strategies.base.FairStrategy`.

    Notes
    -----
    ``p_i = n_i / Σ_j n_j`` over the round's accepted replies (Algorithm 1, line 5), and
    the same p is used for f̄ and Δ̄, so the weight form equals Algorithm 1 exactly
    (spec §4, "Pitfall"). Each round's metrics carry ``beta-max`` (omitted when all
    losses are equal, where there is no bound) and ``negative-weights`` (counted
    before any clipping).
    """

    rule_name = "VRed"
    registry_name = "vred"
    Parameters = VRedParameters

    def weight_rule(self, p: ArrayLike, losses: ArrayLike, beta: float) -> NDArray[np.float64]:
        """Eq. (8): :func:`vred_weights`."""
        return vred_weights(p, losses, beta)

    def bound_rule(self, p: ArrayLike, losses: ArrayLike) -> float:
        """§4.1.1: :func:`vred_beta_max`."""
        return vred_beta_max(p, losses)


def loss_deviations(p: ArrayLike, losses: ArrayLike) -> NDArray[np.float64]:
    """``f_i - f̄`` with ``f̄ = Σ_j p_j f_j`` (Algorithm 1, line 9), in float64.

    f̄ is computed as ``min f + Σ_j p_j (f_j - min f)``, so equal losses give exactly
    zero deviations (and VRed/Semi-VRed give exactly FedAvg's weights).

    Parameters
    ----------
    p : ArrayLike
        Client weights p_i, summing to 1.
    losses : ArrayLike
        Losses f_i(θ^t), one per client.

    Raises
    ------
    ValueError
        If the shapes differ, a value is not finite, or the input is empty.
    """
    p_arr, f = _check_p_losses(p, losses)
    shifted = f - f.min()
    return shifted - float(np.dot(p_arr, shifted))


def vred_weights(p: ArrayLike, losses: ArrayLike, beta: float) -> NDArray[np.float64]:
    """VRed weights ``w_i = p_i (1 + 2β (f_i - f̄))`` (paper 000, eq. 8, general p).

    Parameters
    ----------
    p : ArrayLike
        p_i = n_i / N over the round's participants (Algorithm 1, line 5).
    losses : ArrayLike
        f_i(θ^t), the loss of the broadcast model before local training.
    beta : float
        β >= 0.

    Returns
    -------
    NDArray[np.float64]
        The weights; they sum to 1 (up to rounding relative to their size) and may be
        negative when β > :func:`vred_beta_max`. Finite for losses below 1e300.

    Raises
    ------
    ValueError
        If the inputs are not finite vectors of one length, or β is not in
        ``[0, MAX_BETA]``.
    """
    p_arr = np.asarray(p, dtype=np.float64)
    check_beta(beta)
    return p_arr * (1.0 + 2.0 * beta * loss_deviations(p_arr, losses))


def check_beta(beta: float) -> None:
    """Raise ``ValueError`` unless ``0 <= beta <= MAX_BETA`` (a finite number)."""
    if isinstance(beta, bool) or not isinstance(beta, int | float):
        raise ValueError(f"beta must be a number, got {beta!r}")
    if not 0 <= beta <= MAX_BETA:
        raise ValueError(f"beta must be in [0, {MAX_BETA:g}], got {beta!r}")


def vred_beta_max(p: ArrayLike, losses: ArrayLike) -> float:
    """VRed's positivity bound ``β_max = 1 / (2 (f̄ - min_i f_i))`` (paper 000, §4.1.1).

    Returns ``inf`` when all losses are equal (every β keeps the weights positive).
    """
    gap = -float(loss_deviations(p, losses).min())
    return float("inf") if gap <= 0 else 1.0 / (2.0 * gap)


def clip_negative_weights(weights: ArrayLike) -> NDArray[np.float64]:
    """Set negative weights to 0 and renormalise to sum 1 (an option, not in paper 000).

    Raises
    ------
    ValueError
        If no weight is positive.
    """
    w = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
    total = float(w.sum())
    if not total > 0:
        raise ValueError(f"weights must have a positive entry, got {np.asarray(weights).tolist()}")
    return w / total


def algorithm1_update(
    global_arrays: Sequence[NDArray],
    local_arrays: Sequence[Sequence[NDArray]],
    p: ArrayLike,
    deviations: ArrayLike,
    beta: float,
) -> list[NDArray[np.float64]]:
    """Algorithm 1 of paper 000 as printed, lines 8-15, in float64.

    ``Δ_i = θ^t - θ_i``, ``Δ̄ = Σ p_i Δ_i``,
    ``Δ = Σ p_i Δ_i + 2β Σ p_i d_i (Δ_i - Δ̄)`` and ``θ^{t+1} = θ^t - Δ``, with
    ``d_i = f_i - f̄`` for VRed (line 11, eq. 5) and ``d_i = (f_i - f̄)_+`` for
    Semi-VRed (line 13, eq. 10). This is the reference the weight form is tested
    against; the strategies use the weight form, which needs one pass over the replies.

    Parameters
    ----------
    global_arrays : Sequence[NDArray]
        θ^t.
    local_arrays : Sequence[Sequence[NDArray]]
        θ_i, one list of arrays per client, in the order of ``global_arrays``.
    p : ArrayLike
        p_i, summing to 1.
    deviations : ArrayLike
        d_i, one per client.
    beta : float
        β.

    Returns
    -------
    list[NDArray[np.float64]]
        θ^{t+1}, in float64.
    """
    p_arr = np.asarray(p, dtype=np.float64)
    d = np.asarray(deviations, dtype=np.float64)
    new: list[NDArray[np.float64]] = []
    for index, theta in enumerate(global_arrays):
        g = np.asarray(theta, dtype=np.float64)
        deltas = [g - np.asarray(c[index], dtype=np.float64) for c in local_arrays]
        delta_bar = sum((pi * di for pi, di in zip(p_arr, deltas, strict=True)), np.zeros_like(g))
        step = delta_bar + 2.0 * beta * sum(
            (pi * dev * (di - delta_bar) for pi, dev, di in zip(p_arr, d, deltas, strict=True)),
            np.zeros_like(g),
        )
        new.append(g - step)
    return new


def _check_p_losses(p: ArrayLike, losses: ArrayLike) -> tuple[NDArray, NDArray]:
    p_arr = np.asarray(p, dtype=np.float64)
    f = np.asarray(losses, dtype=np.float64)
    if p_arr.ndim != 1 or p_arr.shape != f.shape or p_arr.size == 0:
        raise ValueError(
            f"p and losses must be non-empty vectors of one length, got shapes "
            f"{p_arr.shape} and {f.shape}"
        )
    if not (np.all(np.isfinite(p_arr)) and np.all(np.isfinite(f))):
        raise ValueError(f"p and losses must be finite, got {p_arr.tolist()} and {f.tolist()}")
    return p_arr, f
