"""Δ-FL: superquantile (CVaR) aggregation over the clients' losses.

Pillutla, Laguel, Malick and Harchaoui, *Federated Learning with Heterogeneous Data: A
Superquantile Optimization Approach*, arXiv 2021, https://arxiv.org/abs/2112.09429.
Objective (Malekmohammadi & Yu, Table 1 and §2.1): ``CVaR_{1-α}(f_1(θ), …, f_n(θ))``, the
p-weighted mean loss of the worst α-fraction of clients, with dual form

    max_{π ∈ Δ_n, π_i <= p_i / α} Σ_i π_i f_i(θ).

Server rule (docs/specs/spec-vred-qffl.md §10, [REC]): the maximising π at θ^t (give ``p_i/α`` to
the highest losses until the mass reaches 1), then ``θ^{t+1} = Σ_i π_i θ_i^{t+1}``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.strategies.core._checks import check_real, check_shares_and_losses
from fairfl.strategies.core.params import RuleParameters, real
from fairfl.strategies.core.reweighted import LossRule, TrainRound, Weights

#: Malekmohammadi & Yu's grid of α (App. B.2).
GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True)
class DeltaFLParameters(RuleParameters):
    """Δ-FL's hyperparameter: the tail fraction α (see :class:`DeltaFL`)."""

    alpha: float = real(0.5, key="deltafl-alpha", lower=0, lower_open=True, upper=1, grid=GRID)


class DeltaFL(LossRule):
    """Average of the worst α-fraction (by data share) of the participants.

    Each client reports f_i(θ^t), measured before local training, under ``train_loss_key``
    (default ``loss-before-training``). The
    round's diagnostics carry the CVaR value (``deltafl-cvar``) and the number of
    clients with a non-zero weight (``deltafl-active-clients``).

    Parameters
    ----------
    alpha : float (default: 0.5)
        α in (0, 1], the **tail fraction**: the share of the data mass (of ``p``) whose
        losses are averaged. α = 1 is FedAvg; α → 0 is the max-loss client (AFL's
        limit). Malekmohammadi & Yu's grid is {0.1, …, 0.9}; its best values (Table 5) are
        0.2 / 0.4 / 0.5 / 0.6, and the default takes the middle one.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.

    Raises
    ------
    ValueError
        If ``alpha`` is not a finite number in (0, 1].

    Notes
    -----
    Convention (spec §15.13): Malekmohammadi & Yu write ``CVaR_{1-α}`` and never says whether α
    is the tail fraction or the quantile level. Here α is the tail fraction: for
    0 < α < 1 the objective is the average loss of the subset of clients with the
    largest losses (Malekmohammadi & Yu, §2.1), that subset holds an α share of the data, and
    α = 1 gives FedAvg. The reference code's ``nonconformity_level`` is the quantile level,
    about ``1 - α``.

    Weights: the exact CVaR maximiser above ([REC] of spec §10), not the reference
    code's hard threshold (keep clients with a loss above the p-weighted quantile and
    weight them ∝ n_i); the two differ only in how the boundary client is weighted.
    Clients with equal losses share the mass of their group in proportion to ``p``, so
    the result does not depend on how ties are ordered, and equal losses give FedAvg.

    Every participant trains, even those that end with weight 0: the losses that pick
    the tail are measured at θ^t in the same round as the training, so the "client
    filtering" of Simplicial-FL would need a second message per round.
    """

    rule_name = "Delta-FL"
    registry_name = "deltafl"
    Parameters = DeltaFLParameters
    params: DeltaFLParameters

    def settings(self) -> dict[str, object]:
        """Return the tail fraction α and its convention."""
        return {"alpha": self.params.alpha, "alpha_convention": "tail fraction"}

    def weights(self, round: TrainRound) -> Weights:
        """The CVaR weights, the CVaR value and the clients with a non-zero weight."""
        weights = cvar_weights(round.shares, round.loss_values, self.params.alpha)
        active = int(np.count_nonzero(weights))
        cvar = float(np.dot(weights, round.loss_values))
        return weights, {"deltafl-cvar": cvar, "deltafl-active-clients": active}


def cvar_weights(p: ArrayLike, losses: ArrayLike, alpha: float) -> NDArray[np.float64]:
    """Return the maximiser π of ``Σ_i π_i f_i`` over ``{π ∈ Δ_n, π_i <= p_i/α}`` (spec §10).

    Clients are taken by decreasing loss; each gets ``p_i/α`` until the total would pass
    1, the boundary client gets what is left, the rest get 0. A group of clients with
    equal losses is treated as one client of share ``Σ p_i`` and splits its mass in
    proportion to ``p``. Then ``Σ_i π_i f_i = CVaR_{1-α}(f)``.

    Parameters
    ----------
    p : ArrayLike
        p_i > 0, the participants' data shares (sum 1).
    losses : ArrayLike
        f_i(θ^t), finite.
    alpha : float
        The tail fraction α in (0, 1].

    Returns
    -------
    NDArray[np.float64]
        Non-negative weights summing to 1 (up to rounding); ``p`` when α = 1 or all
        losses are equal.

    Raises
    ------
    ValueError
        If the inputs are malformed (see :func:`check_shares_and_losses`) or ``alpha``
        is not in (0, 1].
    """
    shares, f = check_shares_and_losses(p, losses)
    check_real("alpha", alpha, lower=0.0, upper=1.0, lower_open=True)
    shares = shares / shares.sum()
    weights: NDArray[np.float64] = np.zeros_like(shares)
    levels, group_of = np.unique(f, return_inverse=True)
    remaining = 1.0
    for level in range(levels.size - 1, -1, -1):  # highest loss first
        members = group_of == level
        group_share = float(shares[members].sum())
        take = min(group_share / alpha, remaining)
        weights[members] = shares[members] * (take / group_share)
        remaining -= take
        if remaining <= 0.0:
            break
    return weights
