"""The fairness signal made private: each client clips and noises F_k(w^t) before sending.

A fair rule weighs client k by its loss F_k(w^t) (q-FFL, TERM, AFL, Δ-FL, ...), which a
client would otherwise send in the clear. With ``dp-loss-noise-multiplier`` z_F > 0 and
``dp-loss-bound`` B, the client sends::

    F̃_k = max(0, min(max(F_k, 0), B) + N(0, (z_F B)²))

(the Gaussian mechanism on a value of sensitivity B; the outer ``max(0, ·)`` is
post-processing, so that the server's reader, which refuses a negative loss, keeps it),
as FedFDP does for losses (arXiv 2402.16028). The server's weights are then a
function of private releases only.

Accounting (:func:`round_noise_multiplier`): one round releases the model, with noise
z_eff over its sensitivity S, and each client's loss, with z_F over B. Dividing each
release by its noise's standard deviation gives one Gaussian mechanism of unit noise whose
sensitivity to one client is ``sqrt(1/z_eff² + 1/z_F²)``, so the round is a Gaussian
mechanism of multiplier ``(z_eff^-2 + z_F^-2)^(-1/2)``, subsampled as the model's round
(Mironov, "Rényi Differential Privacy", CSF 2017: the Gaussian's RDP depends on this
ratio only). A round whose model is not kept still released the losses: z_F alone.

The noise comes from fresh OS entropy: a generator the server could seed would let it
subtract the noise. A run with loss noise is therefore not bit-reproducible.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "DP_LOCAL_CLIPPING_NORM",
    "DP_LOCAL_NOISE_MULTIPLIER",
    "DP_LOSS_BOUND",
    "DP_LOSS_NOISE_MULTIPLIER",
    "local_release",
    "noised_loss",
    "round_noise_multiplier",
]

#: Train-config key: z_F, the loss noise's multiplier (switches the client's step on).
DP_LOSS_NOISE_MULTIPLIER = "dp-loss-noise-multiplier"
#: Train-config key: B, the bound F_k(w^t) is clipped to.
DP_LOSS_BOUND = "dp-loss-bound"
#: Train-config key of ``dp = "local"``: z, the client's update noise over C (switches it on).
DP_LOCAL_NOISE_MULTIPLIER = "dp-local-noise-multiplier"
#: Train-config key of ``dp = "local"``: C, the L2 bound the client clips its update to.
DP_LOCAL_CLIPPING_NORM = "dp-local-clipping-norm"


def noised_loss(
    loss: float, bound: float, noise_multiplier: float, rng: np.random.Generator
) -> float:
    """``max(0, clip(F, 0, B) + N(0, (z_F B)²))``: the loss a client sends (module docstring)."""
    clipped = min(max(loss, 0.0), bound)
    return max(0.0, clipped + float(rng.normal(0.0, noise_multiplier * bound)))


def round_noise_multiplier(model_multiplier: float, loss_multiplier: float) -> float:
    """``(z_eff^-2 + z_F^-2)^(-1/2)``: one round's model and loss releases as one Gaussian.

    ``loss_multiplier`` 0 means no loss release (the model's z_eff alone); an infinite
    ``model_multiplier`` (no model release) leaves z_F.
    """
    if loss_multiplier <= 0:
        return model_multiplier
    inverse = (0.0 if math.isinf(model_multiplier) else model_multiplier**-2) + loss_multiplier**-2
    return float(inverse**-0.5)


def local_release(
    trained: list[NDArray[Any]],
    sent: list[NDArray[Any]],
    clipping_norm: float,
    noise_multiplier: float,
    rng: np.random.Generator,
) -> list[NDArray[np.float64]]:
    """``w^t + Δ min(1, C/‖Δ‖) + N(0, (z C)²)``: a client's model under ``dp = "local"``.

    Δ = w_k - w^t over all arrays flattened together (McMahan et al., ICLR 2018's FlatClip,
    done by the client), then the Gaussian mechanism of multiplier z on the clipped update:
    the server only ever sees this release (local DP; Flower's ``LocalDpMod`` adds its
    noise the same way, its σ set from a per-round (ε, δ) instead of z).

    Raises
    ------
    ValueError
        If an array is not a float one (the noise would be rounded away).
    """
    for array in trained:
        if not np.issubdtype(np.asarray(array).dtype, np.floating):
            raise ValueError(
                f"dp=local noises every model array; one is {np.asarray(array).dtype}: use a "
                "model of float arrays only"
            )
    update = [np.subtract(w, g, dtype=np.float64) for w, g in zip(trained, sent, strict=True)]
    norm = math.sqrt(sum(float(np.sum(u * u)) for u in update))
    scale = 1.0 if norm <= clipping_norm else clipping_norm / norm
    std = noise_multiplier * clipping_norm
    return [
        np.asarray(g, dtype=np.float64) + scale * u + rng.normal(0.0, std, np.shape(u))
        for g, u in zip(sent, update, strict=True)
    ]
