"""The client's side of distributed DP: clip the update, noise what is masked.

With ``dp = "distributed"`` (:mod:`fairfl.privacy.distributed`) the server adds two keys
to a client's part of the secure sum: :data:`DP_CLIPPING_NORM` C and :data:`DP_NOISE_STD`
σ_c. The client clips its update ``Δ_k = w_k - w^t`` to L2 norm C (McMahan et al., ICLR
2018's FlatClip, over all arrays together) before its form computes the payload
(:func:`fairfl.secagg.forms.client_part`), and adds N(0, σ_c²) to every value of
``r̂_k u_k`` before it is quantised and masked. The noise comes from the client's secret
generator (OS entropy), as the quantisation's rounding does: the server cannot remove it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["DP_CLIPPING_NORM", "DP_NOISE_STD", "clip_to_norm", "noised"]

#: Client-part key: C, the L2 bound of the client's update (switches the client's DP on).
DP_CLIPPING_NORM = "dp-clipping-norm"
#: Client-part key: σ_c, the standard deviation of the client's noise on each masked value.
DP_NOISE_STD = "dp-noise-std"


def clip_to_norm(part: Mapping[str, Any], update: list[NDArray[Any]]) -> list[NDArray[np.float64]]:
    """``Δ min(1, C/‖Δ‖)`` when the part carries C; the update as it is otherwise."""
    arrays = [np.asarray(u, dtype=np.float64) for u in update]
    if DP_CLIPPING_NORM not in part:
        return arrays
    clipping_norm = float(part[DP_CLIPPING_NORM])
    norm = math.sqrt(sum(float(np.vdot(u, u)) for u in arrays))
    scale = 1.0 if norm <= clipping_norm else clipping_norm / norm
    return [scale * u for u in arrays]


def noised(
    part: Mapping[str, Any], values: list[NDArray[np.float64]], rng: np.random.Generator
) -> list[NDArray[np.float64]]:
    """``values + N(0, σ_c²)`` per value when the part carries σ_c; as they are otherwise.

    Raises
    ------
    ValueError
        If σ_c is negative or not finite.
    """
    if DP_NOISE_STD not in part:
        return values
    std = float(part[DP_NOISE_STD])
    if not (math.isfinite(std) and std >= 0):
        raise ValueError(f"secure aggregation: the server sent a dp noise std of {std!r}")
    return [v + rng.normal(0.0, std, np.shape(v)) for v in values]
