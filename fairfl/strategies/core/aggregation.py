"""Shared aggregation machinery of the re-weighted rules (docs/specs/design.md, "Unified view").

Most fair rules update the global model as

    w^{t+1} = w^t - Σ_i λ_i (w^t - w_i)                                   (unified form)

and differ only in λ. Each rule computes its λ with a pure function; this module applies
it once, in float64 (docs/specs/spec-vred-qffl.md §15.21), for all of them. q-FFL alone sums its
step
``Σ_i λ_i (w^t - w_i)`` in the models' dtype while it reads the replies
(:func:`apply_summed_step`): its λ wait for every distance, and that sum's rounding is
relative to the step, not to the weights (bounded in its tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.strategies._ops.passes import reweighted_sum


def sample_weights(num_examples: ArrayLike) -> NDArray[np.float64]:
    """FedAvg's weights ``p_i = n_i / Σ_j n_j`` over the clients given.

    Malekmohammadi & Yu, Algorithm 1, line 5: ``p`` is normalised over the round's participants.

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
    weights: NDArray[np.float64] = counts / counts.sum()
    return weights


def reweighted_average(
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    lambdas: ArrayLike,
) -> list[NDArray[Any]]:
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
    return reweighted_sum(global_arrays, local_arrays, lambdas, None)


def reweighted_average_and_squared_norms(
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    lambdas: ArrayLike,
) -> tuple[list[NDArray[Any]], NDArray[np.float64]]:
    """:func:`reweighted_average`, and the squared L2 norm of every local array.

    The norms are taken in the same pass, one BLAS dot product per block of a client's
    array while it is in cache, so that checking the replies' values costs no pass of
    its own: ``‖w_ij‖²`` is NaN or inf if a value is (or if the squares overflow the
    array's dtype), and ``max |w_ij| <= ‖w_ij‖``. A caller that finds a bad norm must
    recompute the average without that client: its values are in the sum.

    Parameters
    ----------
    global_arrays, local_arrays, lambdas
        As :func:`reweighted_average`.

    Returns
    -------
    tuple[list[NDArray], NDArray[np.float64]]
        The new global model, exactly as :func:`reweighted_average` returns it, and the
        squared norms, shape (clients, arrays): each block's squares summed in the
        array's dtype, the blocks in float64; 0 for a non-floating or empty array (no
        value to check). A rounded sum of non-negative terms is never below any of its
        terms (rounded), so ``max |w_ij| <= ‖w_ij‖ (1 + ε)`` with ε the dtype's unit
        roundoff (2^-24 for float32), whatever the summation order.

    Raises
    ------
    ValueError
        As :func:`reweighted_average`.
    """
    squared_norms = np.zeros((len(local_arrays), len(global_arrays)), dtype=np.float64)
    return reweighted_sum(global_arrays, local_arrays, lambdas, squared_norms), squared_norms


def apply_summed_step(
    global_arrays: Sequence[NDArray[Any]],
    sums: Sequence[NDArray[Any] | None],
    divisor: float,
) -> list[NDArray[Any]]:
    """``w^t - sums / divisor``, each array in its own dtype.

    With ``sums = Σ_k u_k (w^t - w_k)`` and ``λ_k = u_k / divisor`` this is the unified
    form's step (:func:`reweighted_average`). ``sums`` come from
    :func:`~fairfl.strategies._ops.passes.delta_sums_and_squared_distances`, flat, in float32
    for float32 arrays (then the division and the difference are float32 too, each
    rounded once) or float64; they are overwritten. Non-floating arrays, and arrays
    without a sum, keep the global value.

    Raises
    ------
    ValueError
        If ``divisor`` is 0 or not finite.
    """
    if not (np.isfinite(divisor) and divisor != 0):
        raise ValueError(f"divisor must be finite and non-zero, got {divisor!r}")
    new_arrays: list[NDArray[Any]] = []
    for global_array, total in zip(global_arrays, sums, strict=True):
        if total is None or not np.issubdtype(global_array.dtype, np.floating):
            new_arrays.append(np.array(global_array, copy=True))
            continue
        with np.errstate(under="ignore", over="ignore"):  # a divisor beyond float32: no step
            np.divide(total, divisor, out=total)
        flat_global = np.asarray(global_array).reshape(-1)
        step = np.subtract(flat_global, total, out=total, dtype=total.dtype)
        new_arrays.append(step.astype(global_array.dtype, copy=False).reshape(global_array.shape))
    return new_arrays


def weight_entropy(weights: ArrayLike) -> float:
    """Shannon entropy (nats) of non-negative weights normalised to sum 1; NaN otherwise."""
    w = np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or w.sum() <= 0:
        return float("nan")
    p = w / w.sum()
    nonzero = p[p > 0]
    return float(-np.sum(nonzero * np.log(nonzero)))
