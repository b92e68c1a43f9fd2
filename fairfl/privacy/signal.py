"""The fairness signal made private: each client clips and noises its scalar reports.

A fair rule weighs client k by a value the client reports: its loss F_k(w^t) (q-FFL,
TERM, AFL, Δ-FL, ...) or its training accuracy Acc_k (FedFa), which a client would
otherwise send in the clear. With ``dp-loss-noise-multiplier`` z_F > 0 and
``dp-loss-bound`` B, the client sends::

    F̃_k = max(0, min(max(F_k, 0), B) + N(0, (z_F B)²))

and with ``dp-accuracy-noise-multiplier`` z_A > 0 (an accuracy's range is [0, 1], so its
bound is 1)::

    Ã_k = min(1, max(0, min(max(Acc_k, 0), 1) + N(0, z_A²)))

(the Gaussian mechanism on a value of sensitivity B, or 1; the outer clamps are
post-processing, so that the server's reader, which refuses a negative loss or an
accuracy outside [0, 1], keeps it), as FedFDP does for losses (arXiv 2402.16028). The
server's weights are then a function of private releases only.

Accounting (:func:`round_noise_multiplier`, :func:`scalar_noise_multiplier`): one round
releases the model, with noise z_eff over its sensitivity S, and each client's loss with
z_F over B and accuracy with z_A over 1. Dividing each release by its noise's standard
deviation gives one Gaussian mechanism of unit noise whose sensitivity to one client is
``sqrt(z_eff^-2 + z_F^-2 + z_A^-2)``, so the round is a Gaussian mechanism of multiplier
``(z_eff^-2 + z_F^-2 + z_A^-2)^(-1/2)``, subsampled as the model's round (Mironov,
"Rényi Differential Privacy", CSF 2017: the Gaussian's RDP depends on this ratio only).
A round whose model is not kept still released the scalars: their multiplier alone.

The noise comes from fresh OS entropy: a generator the server could seed would let it
subtract the noise. A run with loss noise is therefore not bit-reproducible.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "DP_ACCURACY_NOISE_MULTIPLIER",
    "DP_LOCAL_CLIPPING_NORM",
    "DP_LOCAL_NOISE_MULTIPLIER",
    "DP_LOSS_BOUND",
    "DP_LOSS_NOISE_MULTIPLIER",
    "local_release",
    "noised_accuracy",
    "noised_loss",
    "round_noise_multiplier",
    "scalar_noise_multiplier",
]

#: Train-config key: z_F, the loss noise's multiplier (switches the client's step on).
DP_LOSS_NOISE_MULTIPLIER = "dp-loss-noise-multiplier"
#: Train-config key: B, the bound F_k(w^t) is clipped to.
DP_LOSS_BOUND = "dp-loss-bound"
#: Train-config key: z_A, the accuracy noise's multiplier (the accuracy's bound is 1).
DP_ACCURACY_NOISE_MULTIPLIER = "dp-accuracy-noise-multiplier"
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


def noised_accuracy(accuracy: float, noise_multiplier: float, rng: np.random.Generator) -> float:
    """``min(1, max(0, clip(Acc, 0, 1) + N(0, z_A²)))``: the accuracy a client sends."""
    clipped = min(max(accuracy, 0.0), 1.0)
    return min(1.0, max(0.0, clipped + float(rng.normal(0.0, noise_multiplier))))


def round_noise_multiplier(model_multiplier: float, loss_multiplier: float) -> float:
    """``(z_eff^-2 + z_S^-2)^(-1/2)``: one round's model and scalar releases as one Gaussian.

    ``loss_multiplier`` z_S is that of the clients' scalars (:func:`scalar_noise_multiplier`;
    the loss's z_F alone when only losses are noised); 0 means no scalar release (the
    model's z_eff alone); an infinite ``model_multiplier`` (no model release) leaves z_S.
    """
    if loss_multiplier <= 0:
        return model_multiplier
    inverse = (0.0 if math.isinf(model_multiplier) else model_multiplier**-2) + loss_multiplier**-2
    return float(inverse**-0.5)


def scalar_noise_multiplier(*multipliers: float) -> float:
    """``(Σ_i z_i^-2)^(-1/2)`` over the noised scalars (z_i > 0), 0 if none is noised.

    Each client's loss (z_F over B) and accuracy (z_A over 1) as one Gaussian mechanism
    (module docstring); a multiplier 0 is a scalar not released privately, left out.
    """
    inverse = sum(z**-2 for z in multipliers if z > 0)
    return 0.0 if inverse == 0 else float(inverse**-0.5)


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
