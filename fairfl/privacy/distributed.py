"""Distributed DP (``dp = "distributed"``): the clients noise what SecAgg+ masks.

Under ``secure-aggregation = "secagg+"`` the server learns only the sum
``V = Σ_k r̂_k u_k`` of the clients' weighted payloads (and ``Σ_k r̂_k``), never one
client's update (:mod:`fairfl.secagg`). Central DP cannot clip what it cannot see, so each
client clips its own update to C and adds Gaussian noise to ``r̂_k u_k`` before masking it
(the distributed-noise pattern of Kairouz, Liu and Steinke, "The Distributed Discrete
Gaussian Mechanism for Federated Learning with Secure Aggregation", ICML 2021, here with
the continuous Gaussian). With the weights fixed, zeroing one client's update moves V by at
most ``C r̂_max`` (McMahan et al., ICLR 2018's adjacency, as under central DP:
:mod:`~fairfl.privacy.central`), so the sum needs noise of standard deviation
``σ = z C r̂_max``. The server computes r̂_k for every client it gives a part of the sum
(only rules whose weights it knows: counts, TERM's tilt of the clear losses, weights it
broadcasts) and sends each client the standard deviation of its share:

    σ_c = z C r̂_max / √t,        t = ceil((1 - ρ) m)                       (1)

with m the clients given a part and ρ = ``dp-dropout-tolerance``: t of them summed give
variance ``t σ_c² = σ²``. The mean ``V / Σ r̂_k`` and any step the rule takes from it are
post-processing, so the ratio σ / S is the same for the model as for V.

Accounting (:func:`distributed_noise_multiplier`): n clients' vectors reach the sum; the
noise of at most t of them is counted (a client beyond t may be the server's: its noise
is not relied on), over the sensitivity of the clients actually summed:

    z_eff = z √(min(n, t) / t) · r̂_max / r̂_max,sum                          (2)

so a round with fewer survivors than t records z_eff < z and is accounted at it, with a
warning. The server sees who took part, so no amplification by sampling is claimed
(q = 1, as under ``dp = "local"``); the loss noise, if any, composes as under central DP
(:mod:`~fairfl.privacy.signal`). Each client's noise alone is σ / √t: against the other
clients and the server it protects one client's update only as well as multiplier z / √t.
Two approximations: the noisy values are quantised by stochastic rounding (unbiased, with
steps 2 C_s / Q, Q = 2^22 by default) and clipped to the secure sum's range C_s; the start
check (``fairfl.settings``) makes C_s at least ``C (1 + 6 z)``, so a value is clipped with
probability below 2e-9.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fairfl.privacy.central import CentralFixedClipping, signal_diagnostics
from fairfl.privacy.signal import round_noise_multiplier

__all__ = [
    "DistributedNoise",
    "NoisePlan",
    "client_noise_std",
    "distributed_noise_multiplier",
    "expected_survivors",
]

logger = logging.getLogger(__name__)


def expected_survivors(admitted: int, dropout_tolerance: float) -> int:
    """The survivors eq. (1) sizes the noise for: t = ceil((1 - ρ) m), at least 1."""
    # round(): (1 - 0.25) * 4 is 3.0 exactly, but (1 - 0.1) * 10 is 9.000000000000002.
    return max(1, math.ceil(round((1.0 - dropout_tolerance) * admitted, 9)))


def client_noise_std(
    noise_multiplier: float, clipping_norm: float, max_ratio: float, expected: int
) -> float:
    """σ_c = z C r̂_max / √t, eq. (1): one client's share of the sum's noise."""
    return float(noise_multiplier * clipping_norm * max_ratio / math.sqrt(expected))


def distributed_noise_multiplier(
    noise_multiplier: float, expected: int, summed: int, max_ratio: float, max_ratio_summed: float
) -> float:
    """z_eff = z √(min(n, t)/t) r̂_max / r̂_max,sum, eq. (2) (inf: no weight in the sum)."""
    if max_ratio_summed <= 0:
        return float("inf")
    counted = min(summed, expected) / expected
    return float(noise_multiplier * math.sqrt(counted) * (max_ratio / max_ratio_summed))


_CLEAR_ROUND = (
    "dp='distributed' aggregated a round in the clear: it needs secure-aggregation='secagg+' "
    "(fairfl.strategies.secure.secure_rounds), under which the clients add the noise"
)


@dataclass(frozen=True)
class NoisePlan:
    """One round's noise, fixed when the parts of the secure sum are sent.

    Attributes
    ----------
    std : float
        σ_c, each client's standard deviation.
    expected : int
        t, the survivors it is sized for.
    ratios : dict[int, float]
        r̂_k of each client given a part, by node id.
    """

    std: float
    expected: int
    ratios: dict[int, float]

    @property
    def max_ratio(self) -> float:
        """``r̂_max = max_k |r̂_k|`` over the clients given a part (a weight may be negative)."""
        return max((abs(r) for r in self.ratios.values()), default=0.0)


@dataclass
class DistributedNoise(CentralFixedClipping):
    """The server's side of ``dp = "distributed"``: sizes the clients' noise, accounts.

    The rounds go through :class:`fairfl.strategies.secure.SecureRounds`, which calls
    :meth:`plan` when it sends the parts and :meth:`release_sum` once the sum is unmasked;
    :meth:`commit` and :meth:`discard` are central DP's.
    """

    plans: dict[int, NoisePlan] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sampling_rate = 1.0  # the server sees who took part: no amplification

    def clip(
        self, global_arrays: list[NDArray[Any]], local: Iterable[list[NDArray[Any]]]
    ) -> tuple[list[list[NDArray[np.float64]]], float]:
        """Refused: a clear round would hand the server each update (see :meth:`release`)."""
        raise ValueError(_CLEAR_ROUND)

    def release(
        self,
        new_arrays: list[NDArray[Any]],
        weights: Iterable[float],
        sampled: int,
        sensitivity_weight: float | None = None,
    ) -> tuple[list[NDArray[np.float64]], dict[str, Any]]:
        """Refused: the clients noise under SecAgg+, the server adds nothing to a clear round.

        Raises
        ------
        ValueError
            Always: a rule with ``dp = "distributed"`` aggregates through
            :class:`fairfl.strategies.secure.SecureRounds` only.
        """
        raise ValueError(_CLEAR_ROUND)

    def plan(self, server_round: int, ratios: dict[int, float]) -> NoisePlan:
        """Eq. (1) for the clients given a part (their r̂_k by node id); kept for the round."""
        settings = self.settings
        expected = expected_survivors(len(ratios), settings.dp_dropout_tolerance)
        top = max(ratios.values(), default=0.0)
        std = client_noise_std(
            settings.dp_noise_multiplier, settings.dp_clipping_norm, top, expected
        )
        self.plans[server_round] = plan = NoisePlan(std, expected, dict(ratios))
        return plan

    def release_sum(self, server_round: int, summed: Iterable[int]) -> dict[str, Any]:
        """Eq. (2) for the nodes whose vectors are in the unmasked sum; the round's record.

        Sets the multiplier :meth:`commit` accounts (with the loss noise's, if any).
        """
        settings = self.settings
        plan = self.plans.pop(server_round)
        nodes = [nid for nid in summed if nid in plan.ratios]
        top_summed = max((abs(plan.ratios[nid]) for nid in nodes), default=0.0)
        z = settings.dp_noise_multiplier
        z_eff = distributed_noise_multiplier(
            z, plan.expected, len(nodes), plan.max_ratio, top_summed
        )
        exceeded = z_eff < z * (1 - 1e-9)
        if exceeded:
            logger.warning(
                "aggregate_train: %d clients summed, the noise was sized for %d: effective "
                "noise multiplier %.4g < %.4g, accounted as such",
                len(nodes),
                plan.expected,
                z_eff,
                z,
            )
        self.pending = round_noise_multiplier(z_eff, settings.signal_noise_multiplier)
        diagnostics: dict[str, Any] = {
            "dp-calibration": "distributed",
            "dp-noise-std": plan.std,
            "dp-aggregate-noise-std": plan.std * math.sqrt(len(nodes)),
            # r̂_max of the parts sent and of the vectors summed (ratios, not shares λ).
            "dp-weight-ratio-max": plan.max_ratio,
            "dp-weight-ratio-max-summed": top_summed,
            "dp-expected-survivors": plan.expected,
            "dp-survivors": len(nodes),
            "dp-noise-multiplier-effective": z_eff,
            "dp-weights-exceed-noise": int(exceeded),
            **signal_diagnostics(settings, self.pending),
        }
        return diagnostics

    def forget(self, server_round: int) -> None:
        """Drop a round's plan whose sum was never unmasked (nothing of it released)."""
        self.plans.pop(server_round, None)

    def summary(self) -> dict[str, Any]:
        """Central DP's summary, with the dropout tolerance the noise was sized for."""
        return {**super().summary(), "dropout_tolerance": self.settings.dp_dropout_tolerance}
