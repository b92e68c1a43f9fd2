"""What VRed and Semi-VRed share: the loss deviations, β's bound, Algorithm 1 and the rule base.

Malekmohammadi & Yu, "Semi-Variance Reduction for Fair Federated Learning" (arXiv:2406.16193,
2024; spec ``docs/specs/spec-vred-qffl.md`` §3-4). Both rules weigh client i by
``w_i = p_i (1 + 2β d_i)`` for loss deviations d_i (VRed: ``f_i - f̄``; Semi-VRed: the
above-mean part, recentred), which is Algorithm 1 of the paper in one pass
(:func:`algorithm1_update` is the algorithm as printed, the reference the weight forms are
tested against). :class:`LossDeviationRule` records each round's bound ``beta-max`` and the
count of negative weights, and optionally clips them.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.strategies.core.reweighted import LossRule, TrainRound, Weights

logger = logging.getLogger(__name__)

#: Largest β of VRed and Semi-VRed. Malekmohammadi & Yu's values are 0.01 to 0.5 (Table 5); up
#: to 1e6, ``2β (f_i - f̄)`` stays finite for every loss below 1e300, so the weights
#: are finite for every loss a reply may report (:mod:`fairfl.contract.bounds`).
MAX_BETA = 1e6


class LossDeviationRule(LossRule):
    """VRed and Semi-VRed: λ from ``(p, f(θ^t), β)`` through the rule's two functions.

    The losses are F_i(θ^t), measured on the client's training split before local
    training (Algorithm 1, line 9). A subclass's parameters declare ``beta`` (β >= 0,
    β = 0 is FedAvg) and ``clip_negative_weights`` (not in the paper: negative weights,
    from a β above the round's β_max, set to 0 and the rest renormalised, so the update
    stays a convex combination of the local models; off as in Algorithm 1), and it
    implements :meth:`unclipped_weights` and :meth:`beta_bound`.

    Each round's diagnostics carry ``beta-max`` (left out of the metrics when all losses
    are equal: no bound) and ``negative-weights`` (counted before any clipping).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._warned_negative = False

    @abstractmethod
    def unclipped_weights(
        self, p: ArrayLike, losses: ArrayLike, beta: float
    ) -> NDArray[np.float64]:
        """``(p, f, β) -> w``, the rule's weights before any clipping (they sum to 1)."""

    @abstractmethod
    def beta_bound(self, p: ArrayLike, losses: ArrayLike) -> float:
        """``(p, f) -> β_max``, the largest β keeping every weight >= 0 (``inf``: none)."""

    def weights(self, round: TrainRound) -> Weights:
        """The round's weights, ``beta-max`` and ``negative-weights``."""
        settings = self.params.settings()
        beta, clip = float(settings["beta"]), bool(settings["clip_negative_weights"])
        weights = self.unclipped_weights(round.shares, round.loss_values, beta)
        bound = self.beta_bound(round.shares, round.loss_values)
        negative = int(np.count_nonzero(weights < 0))
        logger.info(
            "aggregate_train: round %d %s beta %g, beta-max %g, %d negative weights",
            round.server_round,
            self.rule_name,
            beta,
            bound,
            negative,
        )
        if negative and not self._warned_negative:
            self._warned_negative = True
            logger.warning(
                "aggregate_train: %s beta %g is above this round's bound %g: %d weights "
                "are negative (the update extrapolates); %s (logged once)",
                self.rule_name,
                beta,
                bound,
                negative,
                "clipping them to 0 and renormalising"
                if clip
                else "keeping them as Algorithm 1 does",
            )
        if negative and clip:
            weights = clip_negative_weights(weights)
        return weights, {"beta-max": bound, "negative-weights": negative}


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
    shifted: NDArray[np.float64] = f - f.min()
    return shifted - float(np.dot(p_arr, shifted))


def check_beta(beta: float) -> None:
    """Raise ``ValueError`` unless ``0 <= beta <= MAX_BETA`` (a finite number)."""
    if isinstance(beta, bool) or not isinstance(beta, int | float):
        raise ValueError(f"beta must be a number, got {beta!r}")
    if not 0 <= beta <= MAX_BETA:
        raise ValueError(f"beta must be in [0, {MAX_BETA:g}], got {beta!r}")


def clip_negative_weights(weights: ArrayLike) -> NDArray[np.float64]:
    """Set negative weights to 0 and renormalise to sum 1 (an option, not in Malekmohammadi & Yu).

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
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    p: ArrayLike,
    deviations: ArrayLike,
    beta: float,
) -> list[NDArray[np.float64]]:
    """Algorithm 1 of Malekmohammadi & Yu as printed, lines 8-15, in float64.

    ``Δ_i = θ^t - θ_i``, ``Δ̄ = Σ p_i Δ_i``,
    ``Δ = Σ p_i Δ_i + 2β Σ p_i d_i (Δ_i - Δ̄)`` and ``θ^{t+1} = θ^t - Δ``, with
    ``d_i = f_i - f̄`` for VRed (line 11, eq. 5) and ``d_i = (f_i - f̄)_+`` for
    Semi-VRed (line 13, eq. 10). This is the reference the weight form is tested
    against; the strategies use the weight form, which needs one pass over the replies.

    Parameters
    ----------
    global_arrays : Sequence[NDArray[Any]]
        θ^t.
    local_arrays : Sequence[Sequence[NDArray[Any]]]
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


def _check_p_losses(
    p: ArrayLike, losses: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
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
