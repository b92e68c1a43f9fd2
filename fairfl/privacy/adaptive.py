"""Central DP with adaptive clipping (``dp = "central-adaptive"``).

Andrew, Thakkar, McMahan and Ramaswamy, "Differentially Private Learning with Adaptive
Clipping", NeurIPS 2021, Algorithm 1: the clipping norm follows a quantile γ of the
clients' update norms. Each round the server counts the replies whose update was *not*
clipped, ``b_k = 1[‖Δ_k‖ <= C_t]``, releases ``b̃ = (Σ_k (b_k - 1/2) + N(0, σ_b²)) / m + 1/2``
(centred, so that one client moves the sum by at most 1/2) and updates::

    C_{t+1} = C_t exp(-η_C (b̃ - γ))

(the geometric update). The round releases two Gaussian mechanisms on the same clients:
the model with multiplier z_Δ and the count with 2σ_b; with
``z_Δ = (z^-2 - (2σ_b)^-2)^(-1/2)`` (Flower's ``compute_adaptive_noise_params``, reused)
the pair is one Gaussian of multiplier z, as under fixed clipping, so the account is the
same (:mod:`~fairfl.privacy.signal` for the composition). The model's noise is still
calibrated to the rule's weights: ``σ = z_Δ C_t max_k |λ_k|`` (or the cap).

Flower's own adaptive wrappers (flwr 1.42) count the *clipped* replies and update
``C exp(-η (clipped - γ))``, which shrinks C when most updates are clipped; this module
follows the paper (unclipped count, γ the quantile of norms below C).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.supercore.differential_privacy import compute_adaptive_noise_params
from numpy.typing import NDArray

from fairfl.privacy.central import CentralFixedClipping

__all__ = ["AdaptiveClipping", "geometric_update", "noised_unclipped_fraction"]


def noised_unclipped_fraction(unclipped: int, replies: int, sampled: int, noise: float) -> float:
    """``b̃ = (Σ_k (b_k - 1/2) + noise) / m + 1/2``: Andrew et al.'s centred noisy count.

    ``noise`` is the N(0, σ_b²) draw, ``m`` = ``sampled`` (the clients asked).
    """
    return (unclipped - replies / 2 + noise) / sampled + 0.5


def geometric_update(clipping_norm: float, fraction: float, quantile: float, rate: float) -> float:
    """``C exp(-η_C (b̃ - γ))`` (Andrew et al., NeurIPS 2021, Algorithm 1)."""
    return float(clipping_norm * math.exp(-rate * (fraction - quantile)))


@dataclass
class AdaptiveClipping(CentralFixedClipping):
    """Clip at the adaptive C_t, noise the model with z_Δ, release the noisy count.

    The hooks of :class:`~fairfl.privacy.central.CentralFixedClipping`; its state adds
    the current C_t, so a resumed run goes on from the same norm.
    """

    current_norm: float = field(init=False)
    count_stddev: float = field(default=0.0, init=False)  # σ_b of the round
    next_norm: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.current_norm = self.settings.dp_clipping_norm

    @property
    def clipping_norm(self) -> float:
        """C_t, the norm of the current round."""
        return self.current_norm

    def model_noise_multiplier(self, sampled: int) -> float:
        """z_Δ = (z^-2 - (2σ_b)^-2)^(-1/2), σ_b ``dp-clipped-count-stddev`` (0: m/20).

        Raises
        ------
        ValueError
            If z >= 2σ_b: no model noise could keep the round at z.
        """
        given = self.settings.dp_clipped_count_stddev
        try:
            stddev, z_delta = compute_adaptive_noise_params(
                self.settings.dp_noise_multiplier, sampled, given if given > 0 else None
            )
        except ValueError:
            raise ValueError(
                f"run config dp-clipped-count-stddev must exceed dp-noise-multiplier / 2 = "
                f"{self.settings.dp_noise_multiplier / 2:g}; its default m/20 is "
                f"{sampled / 20:g} for the {sampled} clients sampled: set it"
            ) from None
        self.count_stddev = float(stddev)
        return float(z_delta)

    def other_release_multiplier(self) -> float:
        """2σ_b: the count's noise over its sensitivity 1/2."""
        return 2 * self.count_stddev

    def release(
        self,
        new_arrays: list[NDArray[Any]],
        weights: Iterable[float],
        sampled: int,
        sensitivity_weight: float | None = None,
    ) -> tuple[list[NDArray[np.float64]], dict[str, Any]]:
        """The fixed-clipping release at C_t and z_Δ, then the noisy count and C_{t+1}."""
        noised, diagnostics = super().release(new_arrays, weights, sampled, sensitivity_weight)
        settings = self.settings
        unclipped = sum(not c for c in self.clipped)
        draw = float(self.rng.normal(0.0, self.count_stddev))
        fraction = noised_unclipped_fraction(unclipped, len(self.clipped), max(sampled, 1), draw)
        self.next_norm = geometric_update(
            self.current_norm, fraction, settings.dp_target_quantile, settings.dp_clip_lr
        )
        diagnostics.update(
            {
                "dp-clipping-norm": self.current_norm,
                "dp-noise-multiplier-model": self.model_noise_multiplier(sampled),
                "dp-count-noise-std": self.count_stddev,
                "dp-unclipped-fraction-noised": fraction,
            }
        )
        return noised, diagnostics

    def commit(self) -> dict[str, float]:
        """Account the round and move to C_{t+1}."""
        out = super().commit()
        if self.next_norm is not None:
            self.current_norm, self.next_norm = self.next_norm, None
        return out

    def discard(self) -> dict[str, float]:
        """A round not kept leaves C_t as it was."""
        self.next_norm = None
        return super().discard()

    def state(self) -> dict[str, Any]:
        """The fixed-clipping state and C_t."""
        return {**super().state(), "clipping_norm": self.current_norm}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state` output."""
        super().load_state(state)
        if "clipping_norm" in state:
            self.current_norm = float(state["clipping_norm"])

    def summary(self) -> dict[str, Any]:
        """The fixed-clipping summary, with the adaptive settings and the last C_t."""
        return {
            **super().summary(),
            "target_quantile": self.settings.dp_target_quantile,
            "clip_lr": self.settings.dp_clip_lr,
            "final_clipping_norm": self.current_norm,
        }
