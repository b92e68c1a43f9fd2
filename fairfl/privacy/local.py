"""Local DP (``dp = "local"``): each client clips and noises its own update before sending.

The server sends ``dp-local-clipping-norm`` C and ``dp-local-noise-multiplier`` z; each
client's ``after`` step (``fairfl.client.private_signal``) replaces its model by
``w^t + clip_C(w_k - w^t) + N(0, (z C)²)``. Whatever the rule then does with the replies is
post-processing, so any rule whose reply is the model is covered, whatever its weights.

Accounting: a client's release in a round is the Gaussian mechanism of multiplier z on an
update of sensitivity C. The server knows who took part, so no amplification by sampling
is claimed (q = 1), and a client is accounted as if it took part in every round: the ε
of the client that trained most, an upper bound for the others. With loss noise z_F the
round composes as one Gaussian of ``(z^-2 + z_F^-2)^(-1/2)`` (and z_A^-2 under accuracy
noise), as under central DP
(:mod:`~fairfl.privacy.signal`). The aggregate carries the clients' noise summed with the
rule's weights: ``Σ λ_k² (z C)²`` per value, ``z C / √m`` for a mean of m, where central
DP adds ``z C / m``: the price of not trusting the server.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fairfl.privacy.central import CentralFixedClipping, signal_diagnostics
from fairfl.privacy.signal import (
    DP_LOCAL_CLIPPING_NORM,
    DP_LOCAL_NOISE_MULTIPLIER,
    round_noise_multiplier,
)

__all__ = ["LocalNoise"]


@dataclass
class LocalNoise(CentralFixedClipping):
    """The server's side of ``dp = "local"``: sends the keys, adds nothing, accounts.

    The same hooks as :class:`~fairfl.privacy.central.CentralFixedClipping`; the
    clients clip and noise, so :meth:`clip` and :meth:`release` leave the models as they
    came, and the account's sampling rate is 1.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sampling_rate = 1.0  # the server sees who took part: no amplification

    def train_config(self) -> dict[str, float]:
        """The keys of the clients' clipping and noise, with the loss noise's."""
        return {
            DP_LOCAL_CLIPPING_NORM: self.settings.dp_clipping_norm,
            DP_LOCAL_NOISE_MULTIPLIER: self.settings.dp_noise_multiplier,
            **super().train_config(),
        }

    def clip(
        self, global_arrays: list[NDArray[Any]], local: Iterable[list[NDArray[Any]]]
    ) -> tuple[list[list[NDArray[np.float64]]], float]:
        """The models as the clients released them (clipped there); 0: nothing clipped here."""
        return [[np.asarray(a, dtype=np.float64) for a in arrays] for arrays in local], 0.0

    def release(
        self,
        new_arrays: list[NDArray[Any]],
        weights: Iterable[float],
        sampled: int,
        sensitivity_weight: float | None = None,
    ) -> tuple[list[NDArray[np.float64]], dict[str, Any]]:
        """The rule's new model as it is; the noise each client added, in the diagnostics."""
        settings = self.settings
        lam = np.array([abs(w) for w in weights], dtype=np.float64)
        client_std = settings.dp_noise_multiplier * settings.dp_clipping_norm
        self.pending = round_noise_multiplier(
            settings.dp_noise_multiplier, settings.signal_noise_multiplier
        )
        diagnostics: dict[str, Any] = {
            "dp-calibration": "local",
            "dp-noise-std": client_std,
            # σ of the noise the clients' releases leave in the aggregate, Σ λ_k² (z C)².
            "dp-aggregate-noise-std": float(client_std * np.sqrt(np.sum(lam**2))),
            "dp-lambda-max": float(lam.max(initial=0.0)),
            "dp-noise-multiplier-effective": settings.dp_noise_multiplier,
            "dp-weights-exceed-noise": 0,
            **signal_diagnostics(settings, self.pending),
        }
        return [np.asarray(a, dtype=np.float64) for a in new_arrays], diagnostics

    def discard(self) -> dict[str, float]:
        """The clients released their updates all the same: the round is accounted."""
        if self.pending is None:
            return {}
        return self.commit()
