"""TERM: client-level tilted empirical risk minimisation.

Li, Beirami, Sanjabi and Smith, *Tilted Empirical Risk Minimization*, ICLR 2021,
https://openreview.net/forum?id=K5YasWXZT3O. Objective (Malekmohammadi & Yu, Table 1 and App. B.2,
client-level tilt only): ``(1/α) log Σ_i p_i exp(α f_i(θ))``. Server rule of the
PropFair reference code (``TERM`` in ``FairFL/algs/algorithms.py``; docs/specs/spec-vred-qffl.md
§7):

    w_i = p_i exp(α f_i(θ^t)) / Σ_j p_j exp(α f_j(θ^t)),    θ^{t+1} = Σ_i w_i θ_i^{t+1}
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.secagg.forms import SecureForm
from fairfl.strategies.core._checks import check_real, check_shares_and_losses
from fairfl.strategies.core.params import RuleParameters, real
from fairfl.strategies.core.reweighted import LossRule, TrainRound, Weights


@dataclass(frozen=True)
class TERMParameters(RuleParameters):
    """TERM's hyperparameter: the tilt α (see :class:`TERM`)."""

    alpha: float = real(0.5, key="term-alpha", lower=0.0, grid=(0.01, 0.1, 0.5, 1.0))


class TERM(LossRule):
    """Tilted averaging: a softmax of the clients' losses, tilted by α.

    Each client reports f_i(θ^t), measured before local training, under ``train_loss_key``
    (default ``loss-before-training``).

    Parameters
    ----------
    alpha : float (default: 0.5)
        α, the tilt (``t`` in the TERM paper). 0 is FedAvg; larger values move weight
        to the clients with the highest loss, α → ∞ is the max-loss client. Malekmohammadi & Yu's
        grid is {0.01, 0.1, 0.5, 1}; the default is the best value on three of its four
        data sets (Table 5: 0.01 / 0.5 / 0.5 / 0.5).
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.

    Raises
    ------
    ValueError
        If ``alpha`` is not a finite number >= 0.

    Notes
    -----
    The weights are the exact softmax over the round's participants ([REC] of spec §7).
    The original federated TERM code (``litian96/TERM``) instead keeps a running
    estimate of the normaliser; with full participation the exact form is cheaper and
    has no lag. Negative tilts (TERM's robustness setting) are not offered: this is a
    fairness baseline.
    """

    rule_name = "TERM"
    registry_name = "term"
    #: Under SecAgg+ (issue #48) each client masks n_k e^{α(F_k - c)}, c the top reported loss.
    secure_form = SecureForm.one_round("term", "the server sees F_k and n_k in the clear")
    Parameters = TERMParameters
    params: TERMParameters

    def weights(self, round: TrainRound) -> Weights:
        """``softmax_i(α f_i + log p_i)``, and the objective (``term-tilted-loss``)."""
        p, losses, alpha = round.shares, round.loss_values, self.params.alpha
        return term_weights(p, losses, alpha), {"term-tilted-loss": tilted_loss(p, losses, alpha)}


def term_weights(p: ArrayLike, losses: ArrayLike, alpha: float) -> NDArray[np.float64]:
    """TERM's client weights ``w_i = p_i e^{α f_i} / Σ_j p_j e^{α f_j}`` (spec §7).

    Computed as ``exp(α (f_i - max f) + log p_i)``, shifted by its maximum, so large
    ``α f`` cannot overflow: the weights are finite for any finite input.

    Parameters
    ----------
    p : ArrayLike
        p_i > 0, the data shares of the participants (sum 1).
    losses : ArrayLike
        f_i(θ^t), finite.
    alpha : float
        The tilt α >= 0.

    Returns
    -------
    NDArray[np.float64]
        Non-negative weights summing to 1; ``p`` when α = 0 or all losses are equal.

    Raises
    ------
    ValueError
        If the shapes differ or are empty, a ``p`` is not > 0, a loss is not finite or
        ``alpha`` is not a finite number >= 0.
    """
    shares, f = check_shares_and_losses(p, losses)
    check_real("alpha", alpha, lower=0.0)
    # α (f_i - max f) <= 0 may overflow to -inf (weight 0); the top client's logit is
    # log p_top, finite, so the shift below is finite.
    with np.errstate(over="ignore", invalid="ignore"):
        logits = (alpha * (f - f.max()) if alpha > 0 else np.zeros_like(f)) + np.log(shares)
        logits -= logits.max()
        weights: NDArray[np.float64] = np.exp(logits)
    return weights / float(weights.sum())


def tilted_loss(p: ArrayLike, losses: ArrayLike, alpha: float) -> float:
    """TERM's objective ``(1/α) log Σ_i p_i e^{α f_i}`` (its α → 0 limit ``Σ p_i f_i``).

    Finite for any finite input: the value lies between the mean ``Σ p_i f_i`` and the
    largest loss (Jensen), and is clipped to that interval where ``log(·)/α`` loses it
    (tiny α, or ``α (f - max f)`` beyond float64).

    Raises
    ------
    ValueError
        As :func:`term_weights`.
    """
    shares, f = check_shares_and_losses(p, losses)
    check_real("alpha", alpha, lower=0.0)
    top = float(f.max())
    mean = min(float(np.dot(shares / shares.sum(), f)), top)  # rounding may pass the top
    if alpha == 0:
        return mean
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        value = top + float(np.log(np.dot(shares, np.exp(alpha * (f - top))))) / alpha
    return float(np.clip(np.nan_to_num(value, nan=mean), min(mean, top), top))
