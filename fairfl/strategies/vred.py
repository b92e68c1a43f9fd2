"""VRed: Variance Reduction for fair federated learning.

Malekmohammadi & Yu, "Semi-Variance Reduction for Fair Federated Learning"
(spec ``docs/specs/spec-vred-qffl.md`` §3). VRed minimises the
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

What :mod:`fairfl.strategies.semivred` shares with VRed (Algorithm 1 for any loss
deviations, :func:`clip_negative_weights`, the rule base) is in
:mod:`fairfl.strategies.deviations`, re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.strategies.core.params import RuleParameters, flag, real
from fairfl.strategies.deviations import (  # noqa: F401
    MAX_BETA,
    LossDeviationRule,
    algorithm1_update,
    check_beta,
    clip_negative_weights,
    loss_deviations,
)


@dataclass(frozen=True)
class VRedParameters(RuleParameters):
    """VRed's hyperparameters: β and the clipping option (see :class:`VRed`)."""

    # Grid: Malekmohammadi & Yu, App. B.2 (the same for Semi-VRed); best values in its Table 5.
    beta: float = real(
        0.1, key="vred-beta", lower=0.0, upper=MAX_BETA, grid=(0.01, 0.05, 0.1, 0.2, 0.5, 1.0)
    )
    clip_negative_weights: bool = flag(False, key="vred-clip-negative")


class VRed(LossDeviationRule):
    """VRed (Malekmohammadi & Yu, Algorithm 1 with "VRed"): up-weight clients with above-mean loss.

    Parameters
    ----------
    beta : float (default: 0.1)
        β of eq. (3), the weight of the loss variance; >= 0. β = 0 is FedAvg. Paper
        000 Table 5: 0.5 (CIFAR-10), 0.1 (CIFAR-100, StackOverflow), 0.2 (CINIC-10);
        the default follows the spec's recommendation (0.1).
    clip_negative_weights : bool (default: False)
        See :class:`~fairfl.strategies.deviations.LossDeviationRule` (off: faithful to
        Algorithm 1).
    **kwargs
        See :class:`fairfl.strategies.core.base.FairStrategy`.

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

    def unclipped_weights(
        self, p: ArrayLike, losses: ArrayLike, beta: float
    ) -> NDArray[np.float64]:
        """Eq. (8): :func:`vred_weights`."""
        return vred_weights(p, losses, beta)

    def beta_bound(self, p: ArrayLike, losses: ArrayLike) -> float:
        """§4.1.1: :func:`vred_beta_max`."""
        return vred_beta_max(p, losses)


def vred_weights(p: ArrayLike, losses: ArrayLike, beta: float) -> NDArray[np.float64]:
    """VRed weights ``w_i = p_i (1 + 2β (f_i - f̄))`` (Malekmohammadi & Yu, eq. 8, general p).

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


def vred_beta_max(p: ArrayLike, losses: ArrayLike) -> float:
    """VRed's positivity bound ``β_max = 1 / (2 (f̄ - min_i f_i))`` (Malekmohammadi & Yu, §4.1.1).

    Returns ``inf`` when all losses are equal (every β keeps the weights positive).
    """
    gap = -float(loss_deviations(p, losses).min())
    return float("inf") if gap <= 0 else 1.0 / (2.0 * gap)
