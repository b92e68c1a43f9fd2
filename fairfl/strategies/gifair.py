"""GiFair: global GIFAIR-FL, each client its own group.

Yue, Nouiehed and Al Kontar, *GIFAIR-FL: An Approach for Group and Individual Fairness
in Federated Learning*, arXiv 2021, https://arxiv.org/abs/2108.02741.
Objective (Malekmohammadi & Yu, Table 1 and App. B.2):
``Σ_i p_i f_i(θ) + λ Σ_{i<j} |f_i(θ) - f_j(θ)|``. Server rule of the PropFair reference
code (``GiFair`` in ``FairFL/algs/algorithms.py``; docs/specs/spec-vred-qffl.md §9):

    r_i = Σ_{j≠i} sign(f_i(θ^t) - f_j(θ^t)),    w_i = p_i + λ r_i,    θ^{t+1} = Σ_i w_i θ_i^{t+1}

with ``λ = coeff · min_i p_i / (n - 1)``, the largest λ that keeps every w_i >= 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.strategies.core._checks import check_real, check_shares_and_losses
from fairfl.strategies.core.params import RuleParameters, real
from fairfl.strategies.core.reweighted import LossRule, TrainRound, Weights


@dataclass(frozen=True)
class GiFairParameters(RuleParameters):
    """GiFair's hyperparameter: λ as a fraction of its bound (see :class:`GiFair`)."""

    # Malekmohammadi & Yu (App. B.2) tune "four values in [0, λ_max]" without listing them
    # (no paper grid); `fairfl compare --tune` searches these four.
    coeff: float = real(1.0, key="gifair-coeff", lower=0.0, upper=1.0, tune=(0.25, 0.5, 0.75, 1.0))


class GiFair(LossRule):
    """Rank-shifted averaging: each client's weight moves by λ per client it out-loses.

    Each client reports f_i(θ^t), measured before local training, under ``train_loss_key``
    (default ``loss-before-training``). The
    absolute λ of each round goes into the round's diagnostics (``gifair-lambda``).

    Parameters
    ----------
    coeff : float (default: 1.0)
        λ as a fraction of its bound ``λ_max = min_i p_i / (n - 1)`` (``coeff`` in the
        reference code). Must be in [0, 1], which keeps every weight >= 0; 0 is FedAvg.
        Malekmohammadi & Yu found the bound itself (``coeff = 1``) best on every data set
        (App. B.2; Table 5 lists the resulting absolute λ), hence the default.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.

    Raises
    ------
    ValueError
        If ``coeff`` is not a finite number in [0, 1].

    Notes
    -----
    λ is set relative to its bound, as in the reference code, instead of absolutely as
    in Malekmohammadi & Yu's Table 5: the bound depends on the round's participants, and an
    absolute λ above it would give negative weights. The pairwise sum is over
    ``i < j`` (the usual GIFAIR-FL form), not Table 1's ``i ≠ j``, which would halve λ
    (spec §15.12).

    Ties: the reference code ranks clients with ``argsort``, which breaks ties by
    position. Here ``r_i`` uses ``sign(0) = 0`` (spec §9, [REC]), so clients with equal
    losses get the same shift and equal losses give exactly FedAvg. Without ties the two
    forms agree: ``r_i = 2·rank_i - (n - 1)``.
    """

    rule_name = "GiFair"
    registry_name = "gifair"
    Parameters = GiFairParameters
    params: GiFairParameters

    def weights(self, round: TrainRound) -> Weights:
        """``p_i + λ r_i`` with ``λ = coeff · min p / (n - 1)`` (``gifair-lambda``)."""
        penalty = gifair_lambda(round.shares, self.params.coeff)
        return gifair_weights(round.shares, round.loss_values, penalty), {"gifair-lambda": penalty}


def gifair_lambda(p: ArrayLike, coeff: float) -> float:
    """``λ = coeff · min_i p_i / (n - 1)`` (Malekmohammadi & Yu, App. B.2); 0 for one client.

    Raises
    ------
    ValueError
        If ``p`` is empty or not > 0, or ``coeff`` is not in [0, 1].
    """
    shares = np.asarray(p, dtype=np.float64).reshape(-1)
    if shares.size == 0 or not np.all(shares > 0):
        raise ValueError(f"p must be non-empty and all > 0, got {shares.tolist()}")
    check_real("coeff", coeff, lower=0.0, upper=1.0)
    if shares.size == 1:
        return 0.0
    return coeff * float(shares.min()) / (shares.size - 1)


def loss_ranks(losses: ArrayLike) -> NDArray[np.float64]:
    """``r_i = Σ_{j≠i} sign(f_i - f_j)``: clients below ``f_i`` minus clients above it.

    Computed from one sort (O(n log n)). Without ties ``r_i = 2·rank_i - (n - 1)`` with
    rank 0 for the lowest loss, the reference code's ``linspace(-(n-1), n-1, n)``.
    """
    f = np.asarray(losses, dtype=np.float64).reshape(-1)
    ordered = np.sort(f)
    below = np.searchsorted(ordered, f, side="left")
    above = f.size - np.searchsorted(ordered, f, side="right")
    return (below - above).astype(np.float64)


def gifair_weights(p: ArrayLike, losses: ArrayLike, penalty: float) -> NDArray[np.float64]:
    """GiFair's client weights ``w_i = p_i + λ r_i`` (spec §9; ``Σ r_i = 0`` so Σw = 1).

    Parameters
    ----------
    p : ArrayLike
        p_i > 0, the participants' data shares (sum 1).
    losses : ArrayLike
        f_i(θ^t), finite.
    penalty : float
        The absolute λ >= 0; weights are >= 0 while ``λ <= min p / (n - 1)``.

    Returns
    -------
    NDArray[np.float64]
        The weights; ``p`` when λ = 0 or all losses are equal.

    Raises
    ------
    ValueError
        If the inputs are malformed (see :func:`check_shares_and_losses`) or ``penalty``
        is not a finite number >= 0.
    """
    shares, f = check_shares_and_losses(p, losses)
    check_real("penalty", penalty, lower=0.0)
    return shares + penalty * loss_ranks(f)
