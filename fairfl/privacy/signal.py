"""The fairness signal made private: each client clips and noises F_k(w^t) before sending.

A fair rule weighs client k by its loss F_k(w^t) (q-FFL, TERM, AFL, Δ-FL, ...), which a
client would otherwise send in the clear. With ``dp-loss-noise-multiplier`` z_F > 0 and
``dp-loss-bound`` B, the client sends::

    F̃_k = max(0, min(max(F_k, 0), B) + N(0, (z_F B)²))

(the Gaussian mechanism on a value of sensitivity B; the outer ``max(0, ·)`` is
post-processing, so that the server's reader, which refuses a negative loss, keeps it),
as FedFDP does for losses (Ling et al., arXiv 2402.16028). The server's weights are then a
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

import numpy as np

__all__ = [
    "DP_LOSS_BOUND",
    "DP_LOSS_NOISE_MULTIPLIER",
    "noised_loss",
    "round_noise_multiplier",
]

#: Train-config key: z_F, the loss noise's multiplier (switches the client's step on).
DP_LOSS_NOISE_MULTIPLIER = "dp-loss-noise-multiplier"
#: Train-config key: B, the bound F_k(w^t) is clipped to.
DP_LOSS_BOUND = "dp-loss-bound"


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
