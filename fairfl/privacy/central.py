"""Central DP with fixed clipping, its noise calibrated to a fair rule's weights.

A fairfl rule of the unified form updates ``w^{t+1} = w^t - Σ_k λ_k (w^t - w_k)``. With
each client's update clipped to ``‖w_k - w^t‖ <= C`` (Flower's FlatClip, McMahan et al.,
"Learning Differentially Private Recurrent Language Models", ICLR 2018, Algorithm 1),
adding or removing client k moves the new model by at most ``|λ_k| C``, so the round's
L2 sensitivity is ``S = C max_k |λ_k|`` given the weights. Flower's
``compute_stdv`` (σ = z C / m) is that bound for λ_k = 1/m only; a fair rule that puts
λ_max ≫ 1/m on one client gets the effective noise multiplier
``z_eff = σ / S = z / (m λ_max)`` from it. Here σ is either

* ``max-weight``: ``σ = z C max_k |λ_k|`` (z_eff = z exactly), or
* ``cap``: the weights capped at κ/m of their sum and ``σ = z C κ / m`` (fixed ahead;
  ``z_eff = σ / (C max_k |λ_k|)``, below z when the cap could not hold).

The weights are those the rule computed from what the clients sent in the clear (losses,
counts): the bound holds *given* that release, which this noise does not protect (the
how-to page ``differential-privacy`` says so).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.supercore.differential_privacy import get_norm
from numpy.typing import NDArray

from fairfl.privacy.accounting import PrivacyAccount
from fairfl.privacy.config import PrivacySettings
from fairfl.privacy.signal import (
    DP_ACCURACY_NOISE_MULTIPLIER,
    DP_LOSS_BOUND,
    DP_LOSS_NOISE_MULTIPLIER,
    round_noise_multiplier,
)

logger = logging.getLogger(__name__)

__all__ = [
    "CentralFixedClipping",
    "clip_update",
    "effective_noise_multiplier",
    "noise_std",
    "signal_diagnostics",
]


def clip_update(
    local: list[NDArray[Any]], global_arrays: list[NDArray[Any]], clipping_norm: float
) -> tuple[list[NDArray[np.float64]], bool]:
    """``w^t + Δ min(1, C/‖Δ‖)`` with ``Δ = w_k - w^t``, and whether it clipped.

    Flower's FlatClip (``flwr.supercore.differential_privacy.compute_clip_model_update``,
    McMahan et al., ICLR 2018), without writing into its inputs and with ‖Δ‖ = 0 kept
    as is (Flower divides by it). The norm is over all arrays flattened together.
    """
    update = [
        np.subtract(w, g, dtype=np.float64) for w, g in zip(local, global_arrays, strict=True)
    ]
    norm = get_norm(update)
    scale = 1.0 if norm <= clipping_norm else clipping_norm / norm
    clipped = [
        np.asarray(g, dtype=np.float64) + scale * u
        for g, u in zip(global_arrays, update, strict=True)
    ]
    return clipped, scale < 1.0


def noise_std(noise_multiplier: float, clipping_norm: float, max_weight: float) -> float:
    """σ = z · C · λ_max: the noise that gives multiplier z at sensitivity C · λ_max.

    With λ_max = 1/m this is Flower's ``compute_stdv`` (z C / m).
    """
    return float(noise_multiplier * clipping_norm * max_weight)


def effective_noise_multiplier(std: float, clipping_norm: float, max_weight: float) -> float:
    """z_eff = σ / (C · λ_max), the noise over the round's actual sensitivity (inf: λ_max = 0)."""
    sensitivity = clipping_norm * max_weight
    return float("inf") if sensitivity == 0 else float(std / sensitivity)


def signal_diagnostics(settings: PrivacySettings, round_multiplier: float) -> dict[str, float]:
    """The scalar releases' multipliers and the round's, for its record (none: no noise).

    ``dp-loss-noise-multiplier`` (z_F) and ``dp-accuracy-noise-multiplier`` (z_A) when on,
    and ``dp-noise-multiplier-round``, the multiplier accounted, when either is.
    """
    found = {
        "dp-loss-noise-multiplier": settings.dp_loss_noise_multiplier,
        "dp-accuracy-noise-multiplier": settings.dp_accuracy_noise_multiplier,
    }
    diagnostics = {key: value for key, value in found.items() if value > 0}
    if diagnostics:  # the model's and the scalars' releases, one Gaussian (signal)
        diagnostics["dp-noise-multiplier-round"] = round_multiplier
    return diagnostics


@dataclass
class CentralFixedClipping:
    """Clip, noise and account the rounds of one run (``dp = "central-fixed"``).

    :class:`~fairfl.strategies.core.base.FairStrategy` calls it: :meth:`clip` on the accepted
    replies before the rule aggregates, :meth:`share_cap` for the cap the rule applies,
    :meth:`release` on the new model, and :meth:`commit` once the round is accepted.

    Attributes
    ----------
    settings : PrivacySettings
        The ``dp-*`` keys.
    sampling_rate : float
        q, ``fraction-train`` (:mod:`~fairfl.privacy.accounting`).
    seed : int
        Seeds the noise generator (the run seed), whose state a checkpoint keeps.
    """

    settings: PrivacySettings
    sampling_rate: float
    seed: int = 0
    account: PrivacyAccount = field(init=False)
    rng: np.random.Generator = field(init=False)
    pending: float | None = field(default=None, init=False)  # z_eff of the round noised
    clipped: list[bool] = field(default_factory=list, init=False)  # the round's, by reply

    def __post_init__(self) -> None:
        self.account = PrivacyAccount(self.settings.dp_delta)
        # Its own stream: Flower samples nodes with the global RNGs.
        self.rng = np.random.default_rng([self.seed, 49])

    def clip(
        self, global_arrays: list[NDArray[Any]], local: Iterable[list[NDArray[Any]]]
    ) -> tuple[list[list[NDArray[np.float64]]], float]:
        """Each client's model with its update clipped to C, and the share that was clipped."""
        results = [clip_update(arrays, global_arrays, self.clipping_norm) for arrays in local]
        self.clipped = [c for _, c in results]
        fraction = sum(c for _, c in results) / len(results) if results else 0.0
        return [arrays for arrays, _ in results], fraction

    @property
    def clipping_norm(self) -> float:
        """C of the current round (fixed: ``dp-clipping-norm``)."""
        return self.settings.dp_clipping_norm

    def model_noise_multiplier(self, sampled: int) -> float:
        """The multiplier of the model's noise (fixed clipping: z itself)."""
        return self.settings.dp_noise_multiplier

    def other_release_multiplier(self) -> float:
        """The multiplier of a further release of the round (0: none; adaptive: the count)."""
        return 0.0

    def train_config(self) -> dict[str, float]:
        """The keys that switch on the clients' loss and accuracy noise (none when 0)."""
        settings = self.settings
        config: dict[str, float] = {}
        if settings.dp_loss_noise_multiplier > 0:
            config[DP_LOSS_NOISE_MULTIPLIER] = settings.dp_loss_noise_multiplier
            config[DP_LOSS_BOUND] = settings.dp_loss_bound
        if settings.dp_accuracy_noise_multiplier > 0:
            config[DP_ACCURACY_NOISE_MULTIPLIER] = settings.dp_accuracy_noise_multiplier
        return config

    def share_cap(self, sampled: int) -> float:
        """The largest share of the weights a client may carry: κ/m in ``cap`` mode, else 1."""
        if self.settings.dp_calibration != "cap" or sampled <= 0:
            return 1.0
        return min(1.0, self.settings.dp_weight_cap / sampled)

    def release(
        self,
        new_arrays: list[NDArray[Any]],
        weights: Iterable[float],
        sampled: int,
        sensitivity_weight: float | None = None,
    ) -> tuple[list[NDArray[np.float64]], dict[str, Any]]:
        """The new model plus N(0, σ²) per value, and the round's DP diagnostics.

        ``sensitivity_weight``: S / C of a rule whose sensitivity is not ``C max_k |λ_k|``
        (q-FFL's, ``qffl_sensitivity_share`` of ``fairfl.strategies.qffl_step``); it then
        takes λ_max's place in σ and z_eff. None: ``max_k |λ_k|``.

        Raises
        ------
        ValueError
            If the model has a non-float array (noise would be rounded away).
        """
        settings, clipping = self.settings, self.clipping_norm
        z_model = self.model_noise_multiplier(sampled)
        lam_actual = max((abs(w) for w in weights), default=0.0)
        lam_max = lam_actual if sensitivity_weight is None else sensitivity_weight
        if settings.dp_calibration == "cap":
            std = noise_std(z_model, clipping, self.share_cap(sampled))
        else:
            std = noise_std(z_model, clipping, lam_max)
        if settings.dp_calibration == "cap" or lam_max == 0:
            z_eff = effective_noise_multiplier(std, clipping, lam_max)
        else:  # σ / (C λ_max) = z by construction; z itself keeps the account's rounds equal
            z_eff = z_model
        noised = []
        for array in new_arrays:
            if not np.issubdtype(np.asarray(array).dtype, np.floating):
                raise ValueError(
                    f"dp=central-fixed noises every model array; one is {np.asarray(array).dtype}, "
                    "which would round the noise away: use a model of float arrays only"
                )
            noised.append(
                np.asarray(array, dtype=np.float64) + self.rng.normal(0.0, std, np.shape(array))
            )
        # z_eff < z only in cap mode: σ was fixed before the weights were known.
        exceeded = z_eff < z_model * (1 - 1e-9)
        if exceeded:
            logger.warning(
                "aggregate_train: the largest weight %.4g exceeds what dp noise σ=%.4g covers "
                "(κ/m = %.4g): effective noise multiplier %.4g < %.4g, accounted as such",
                lam_max,
                std,
                self.share_cap(sampled),
                z_eff,
                z_model,
            )
        z_model_round = round_noise_multiplier(z_eff, self.other_release_multiplier())
        self.pending = round_noise_multiplier(z_model_round, settings.signal_noise_multiplier)
        diagnostics: dict[str, Any] = {
            "dp-calibration": settings.dp_calibration,
            "dp-noise-std": std,
            "dp-lambda-max": lam_actual,
            "dp-noise-multiplier-effective": z_eff,
            "dp-weights-exceed-noise": int(exceeded),
            **signal_diagnostics(settings, self.pending),
        }
        return noised, diagnostics

    def commit(self) -> dict[str, float]:
        """Account the round just released (its model accepted); ε so far at δ."""
        if self.pending is None:
            return {}
        epsilon = self.account.compose(self.sampling_rate, self.pending)
        self.pending = None
        return {"dp-epsilon": epsilon, "dp-delta": self.settings.dp_delta}

    def discard(self) -> dict[str, float]:
        """Forget the model noised but not released (not kept); account the scalars sent.

        Under loss or accuracy noise the clients released them all the same: the round
        is accounted at their multiplier alone (ε so far returned); otherwise nothing.
        """
        self.pending = None
        z_signal = self.settings.signal_noise_multiplier
        if z_signal <= 0:
            return {}
        epsilon = self.account.compose(self.sampling_rate, z_signal)
        return {"dp-epsilon": epsilon, "dp-delta": self.settings.dp_delta}

    def state(self) -> dict[str, Any]:
        """JSON-able state for a checkpoint: the account and the noise generator's state."""
        return {"account": self.account.state(), "rng": self.rng.bit_generator.state}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state` output ({}: a checkpoint without DP, nothing to restore)."""
        if "account" in state:
            self.account.load_state(state["account"])
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]

    def summary(self) -> dict[str, Any]:
        """What ``summary.json`` records: the settings and the final ε at δ."""
        return {
            "dp": self.settings.dp,
            "calibration": self.settings.dp_calibration,
            "clipping_norm": self.settings.dp_clipping_norm,
            "noise_multiplier": self.settings.dp_noise_multiplier,
            "weight_cap": self.settings.dp_weight_cap,
            "loss_noise_multiplier": self.settings.dp_loss_noise_multiplier,
            "loss_bound": self.settings.dp_loss_bound,
            "accuracy_noise_multiplier": self.settings.dp_accuracy_noise_multiplier,
            "delta": self.settings.dp_delta,
            "sampling_rate": self.sampling_rate,
            "released_rounds": len(self.account.rounds),
            "epsilon": self.account.epsilon(),
        }
