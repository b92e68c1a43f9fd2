"""Semi-VRed: Semi-Variance Reduction for fair federated learning.

Malekmohammadi & Yu, "Semi-Variance Reduction for Fair Federated Learning"
(spec ``docs/specs/spec-vred-qffl.md`` §4). Semi-VRed penalises
only the clients whose loss is above the mean (eq. 9)::

    F_SVRed(θ) = Σ_i p_i f_i(θ) + β Σ_i p_i (f_i(θ) - f̄(θ))_+²

and aggregates with Algorithm 1, line 13 (eq. 10)::

    Δ^(t) = Σ_i p_i Δ_i + 2β Σ_i p_i (f_i(θ^t) - f̄(θ^t))_+ (Δ_i - Δ̄),   θ^{t+1} = θ^t - Δ^(t)

With ``a_i = (f_i - f̄)_+`` and ``A = Σ_j p_j a_j`` this is the re-weighted average
``θ^{t+1} = Σ_i w_i θ_i`` with (Lemma 2, eq. 12, for general p)::

    w_i = p_i (1 + 2β (a_i - A)):   above the mean  p_i (1 + 2β (f_i - f̄) - 2βA),
                                    at or below it  p_i (1 - 2βA).

Every below-mean client is scaled by the same factor ``1 - 2βA`` (Remark 1). All weights
are >= 0 iff ``β <= β_max = 1 / (2A)`` (after Lemma 2; ``n / (2 Σ_{f_j > f̄} (f_j - f̄))``
for p = 1/n), a bound never tighter than VRed's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.secagg.forms import SecureForm
from fairfl.strategies.core.params import RuleParameters, flag, real
from fairfl.strategies.deviations import MAX_BETA, LossDeviationRule, check_beta, loss_deviations


@dataclass(frozen=True)
class SemiVRedParameters(RuleParameters):
    """Semi-VRed's hyperparameters: β and the clipping option (see :class:`SemiVRed`)."""

    # Grid: Malekmohammadi & Yu, App. B.2 (the same as VRed's); best values in its Table 5.
    beta: float = real(
        0.2, key="semivred-beta", lower=0.0, upper=MAX_BETA, grid=(0.01, 0.05, 0.1, 0.2, 0.5, 1.0)
    )
    clip_negative_weights: bool = flag(False, key="semivred-clip-negative")


class SemiVRed(LossDeviationRule):
    """Semi-VRed (Malekmohammadi & Yu, Algorithm 1 with "Semi-VRed"): lift only above-mean clients.

    Parameters
    ----------
    beta : float (default: 0.2)
        β of eq. (9), the weight of the loss semi-variance; >= 0. β = 0 is FedAvg.
        Malekmohammadi & Yu Table 5: 0.5 (CIFAR-10), 0.01 (CIFAR-100), 0.2 (CINIC-10,
        StackOverflow); the default follows the spec's recommendation (0.2).
    clip_negative_weights : bool (default: False)
        Not in the paper: set negative weights (β above the round's β_max) to 0 and
        renormalise. Off by default, as in Algorithm 1.
    **kwargs
        See :class:`fairfl.strategies.core.base.FairStrategy`.

    Notes
    -----
    As for :class:`fairfl.strategies.vred.VRed`: p is normalised over the round's
    accepted replies and used for both f̄ and Δ̄; the round's metrics carry
    ``beta-max`` (omitted when no loss is above the mean) and ``negative-weights``.
    """

    rule_name = "Semi-VRed"
    registry_name = "semivred"
    Parameters = SemiVRedParameters
    secure_form = SecureForm.two_rounds(
        "semivred",
        "the server sees n_k and the sums f̄ = Σ p_k F_k and A = Σ p_k (F_k - f̄)_+, never F_k",
    )

    def unclipped_weights(
        self, p: ArrayLike, losses: ArrayLike, beta: float
    ) -> NDArray[np.float64]:
        """Eq. (12): :func:`semivred_weights`."""
        return semivred_weights(p, losses, beta)

    def beta_bound(self, p: ArrayLike, losses: ArrayLike) -> float:
        """After Lemma 2: :func:`semivred_beta_max`."""
        return semivred_beta_max(p, losses)


def semi_deviations(p: ArrayLike, losses: ArrayLike) -> NDArray[np.float64]:
    """``a_i = (f_i - f̄)_+``, the above-mean part of each loss (Malekmohammadi & Yu, eq. 10)."""
    return np.maximum(loss_deviations(p, losses), 0.0)


def semivred_weights(p: ArrayLike, losses: ArrayLike, beta: float) -> NDArray[np.float64]:
    """Semi-VRed weights ``w_i = p_i (1 + 2β (a_i - A))`` (Malekmohammadi & Yu, eq. 12, general p).

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
        The weights; they sum to 1 (up to rounding relative to their size). Clients at
        or below the mean all get ``p_i (1 - 2βA)``, negative when
        β > :func:`semivred_beta_max`. Finite for losses below 1e300.

    Raises
    ------
    ValueError
        If the inputs are not finite vectors of one length, or β is not in
        ``[0, MAX_BETA]`` (:data:`fairfl.strategies.deviations.MAX_BETA`).
    """
    p_arr = np.asarray(p, dtype=np.float64)
    check_beta(beta)
    a = semi_deviations(p_arr, losses)
    big_a = float(np.dot(p_arr, a))
    return p_arr * (1.0 + 2.0 * beta * (a - big_a))


def semivred_beta_max(p: ArrayLike, losses: ArrayLike) -> float:
    """Semi-VRed's positivity bound ``β_max = 1 / (2A)``, ``A = Σ_j p_j (f_j - f̄)_+``.

    Malekmohammadi & Yu after Lemma 2 gives ``n / (2 Σ_{j: f_j > f̄} (f_j - f̄))`` for p = 1/n, the
    same value. Returns ``inf`` when no loss is above the mean.
    """
    p_arr = np.asarray(p, dtype=np.float64)
    big_a = float(np.dot(p_arr, semi_deviations(p_arr, losses)))
    return float("inf") if big_a <= 0 else 1.0 / (2.0 * big_a)
