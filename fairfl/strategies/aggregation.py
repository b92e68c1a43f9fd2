"""Shared aggregation machinery of the re-weighted rules (DESIGN.md, "Unified view").

Most fair rules update the global model as

    w^{t+1} = w^t - Σ_i λ_i (w^t - w_i)                                   (unified form)

and differ only in λ. Each rule computes its λ with a pure function; this module applies
it once, in float64 (spec-vred-qffl §15.21), for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray


def sample_weights(num_examples: ArrayLike) -> NDArray[np.float64]:
    """FedAvg's weights ``p_i = n_i / Σ_j n_j`` over the clients given.

    Paper 000, Algorithm 1, line 5: ``p`` is normalised over the round's participants.

    Raises
    ------
    ValueError
        If a count is not positive or the input is empty.
    """
    counts = np.asarray(num_examples, dtype=np.float64)
    if counts.size == 0:
        raise ValueError("num_examples must not be empty")
    if not np.all(counts > 0):
        raise ValueError(f"num_examples must all be > 0, got {counts.tolist()}")
    return counts / counts.sum()


def reweighted_average(
    global_arrays: Sequence[NDArray],
    local_arrays: Sequence[Sequence[NDArray]],
    lambdas: ArrayLike,
) -> list[NDArray]:
    """Apply the unified update ``w^t - Σ_i λ_i (w^t - w_i)``, one array at a time.

    Parameters
    ----------
    global_arrays : Sequence[NDArray]
        The global model w^t that was sent.
    local_arrays : Sequence[Sequence[NDArray]]
        Each client's local model w_i, arrays in the same order as ``global_arrays``.
    lambdas : ArrayLike
        One weight per client. They need not sum to 1 (then w^t keeps weight
        ``1 - Σλ``) and may be negative (VRed's extrapolation).

    Returns
    -------
    list[NDArray]
        The new global model, each array in its original dtype. Floating arrays are
        accumulated in float64; non-floating arrays (counters) keep the global value.

    Raises
    ------
    ValueError
        If the number of weights and clients differ or a weight is not finite.
    """
    weights = np.asarray(lambdas, dtype=np.float64)
    if weights.ndim != 1 or weights.size != len(local_arrays):
        raise ValueError(
            f"lambdas must hold one weight per client ({len(local_arrays)}), "
            f"got shape {weights.shape}"
        )
    if not np.all(np.isfinite(weights)):
        raise ValueError(f"lambdas must be finite, got {weights.tolist()}")
    global_weight = 1.0 - float(weights.sum())
    new_arrays: list[NDArray] = []
    for index, global_array in enumerate(global_arrays):
        if not np.issubdtype(global_array.dtype, np.floating):
            new_arrays.append(global_array.copy())
            continue
        total = np.zeros(global_array.shape, dtype=np.float64)
        scaled = np.empty(global_array.shape, dtype=np.float64)
        for weight, client in zip(weights, local_arrays, strict=True):
            np.multiply(client[index], weight, out=scaled)
            total += scaled
        # Σλ = 1 for most rules: skip a pass over w^t when it carries no weight.
        if abs(global_weight) > 1e-15:
            np.multiply(global_array, global_weight, out=scaled)
            total += scaled
        new_arrays.append(total.astype(global_array.dtype, copy=False))
    return new_arrays


def weight_entropy(weights: ArrayLike) -> float:
    """Shannon entropy (nats) of non-negative weights normalised to sum 1; NaN otherwise."""
    w = np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or w.sum() <= 0:
        return float("nan")
    p = w / w.sum()
    nonzero = p[p > 0]
    return float(-np.sum(nonzero * np.log(nonzero)))
