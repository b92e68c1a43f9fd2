"""Reference forms the tests check fairfl's kernels against (test oracles, not library code).

:func:`normalized_pseudo_gradients` is paper 001's ḡ_i in float64 with no blocking (n·d
floats: memory-hungry on purpose), the simple form the blocked Gram of
``fairfl/strategies/_ops/gram.py`` is compared with; :func:`fedmgda_step` is the step
alone, as the tests and the paper write it. :func:`squared_distance` and
:func:`squared_distance_parts` read q-FFL's ‖w^t − w̄_k‖² off the server's one-difference
pass (``fairfl/strategies/_ops/passes.py``), for tests that check the distances alone;
:func:`qfedavg_lambdas` composes q-FedAvg's λ from them as ``QFFL.lambdas`` does, for tests
that check λ alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.strategies._ops.gram import float_mask
from fairfl.strategies._ops.passes import delta_sums_and_squared_distances
from fairfl.strategies.fedmgda_qp import NORM_FLOOR, fedmgda_update
from fairfl.strategies.qffl_step import qfedavg_squared_norms, qffl_coefficients


def normalized_pseudo_gradients(
    global_arrays: Sequence[NDArray],
    local_arrays: Sequence[Sequence[NDArray]],
    *,
    trainable: Sequence[bool] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """ḡ_i = g_i / ‖g_i‖ with g_i = w_t − w_i, flattened (paper 001, Algorithm 1).

    The reference form, one float64 row per client (n·d floats); the strategy never
    builds it and works from :func:`fairfl.strategies._ops.gram.gram_matrix` instead.

    Parameters
    ----------
    global_arrays : Sequence[NDArray]
        w_t.
    local_arrays : Sequence[Sequence[NDArray]]
        Each client's w_i, arrays in the order of ``global_arrays``.
    trainable : Sequence[bool] | None
        Which arrays enter (default: the floating ones).

    Returns
    -------
    tuple[NDArray, NDArray]
        The (n, d) matrix of ḡ_i (a zero row where ‖g_i‖ <= :data:`NORM_FLOOR`) and
        the norms ‖g_i‖ (whole update, L2 over the trainable arrays).
    """
    mask = float_mask(global_arrays, trainable)
    rows = [
        np.concatenate(
            [
                (np.asarray(g, np.float64) - np.asarray(w, np.float64)).ravel()
                for g, w, m in zip(global_arrays, local, mask, strict=True)
                if m
            ]
            or [np.zeros(0)]
        )
        for local in local_arrays
    ]
    vectors = np.stack(rows) if rows else np.zeros((0, 0))
    norms = np.linalg.norm(vectors, axis=1)
    safe = np.where(norms > NORM_FLOOR, norms, np.inf)
    return vectors / safe[:, None], norms


def fedmgda_step(
    global_arrays: Sequence[NDArray],
    local_arrays: Sequence[Sequence[NDArray]],
    lambdas: ArrayLike,
    step: float,
    *,
    norms: ArrayLike | None = None,
    trainable: Sequence[bool] | None = None,
    buffer_weights: ArrayLike | None = None,
) -> list[NDArray]:
    """w_{t+1} = w_t − η_t Σ_i λ_i g_i / s_i (paper 001, Algorithm 1 and eq. (22)).

    The model of :func:`fedmgda_update` (parameters, errors and precision there).
    """
    return fedmgda_update(
        global_arrays,
        local_arrays,
        lambdas,
        step,
        norms=norms,
        trainable=trainable,
        buffer_weights=buffer_weights,
    )[0]


def squared_distance(
    global_arrays: Sequence[ArrayLike], local_arrays: Sequence[ArrayLike]
) -> float:
    """``‖w^t - w̄_k‖²`` of one client; see :func:`squared_distance_parts`."""
    return float(squared_distance_parts(global_arrays, [local_arrays])[0].sum())


def squared_distance_parts(
    global_arrays: Sequence[ArrayLike], local_models: Sequence[Sequence[ArrayLike]]
) -> NDArray[np.float64]:
    """``‖w^t_j - w̄_{k,j}‖²`` of each client k and array j; a row sums to ``‖w^t - w̄_k‖²``.

    ``‖Δw_k‖² = L² ‖w^t - w̄_k‖²`` (paper 002, Algorithm 2, line 6); the reference code's
    ``norm_grad`` and Flower's ``l2_norm`` also return the *squared* norm. Computed as in
    :func:`~fairfl.strategies._ops.passes.delta_sums_and_squared_distances` (float32
    differences, float64 sums). Non-floating arrays (counters) are skipped, as
    :func:`~fairfl.strategies.core.aggregation.reweighted_average` keeps them at the global
    value.

    Parameters
    ----------
    global_arrays : Sequence[ArrayLike]
        w^t.
    local_models : Sequence[Sequence[ArrayLike]]
        w̄_k of each client, arrays in the order of ``global_arrays``.

    Returns
    -------
    NDArray[np.float64]
        Shape (clients, arrays); 0 for non-floating arrays; NaN/Inf where a client's
        array is not finite.

    Raises
    ------
    ValueError
        If a model has another number of arrays, or an array another shape.
    """
    return delta_sums_and_squared_distances(global_arrays, local_models)[1]


def qfedavg_lambdas(
    losses: ArrayLike,
    squared_distances: ArrayLike,
    *,
    q: float,
    lipschitz: float,
    **options: Any,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """q-FedAvg's ``λ_k = L c_k`` on ``w^t - w̄_k`` and the h_k (paper 002, Algorithm 2).

    c_k are :func:`~fairfl.strategies.qffl_step.qffl_coefficients` for the directions
    ``Δw_k = L (w^t - w̄_k)``, whose squared norms are ``L² ‖w^t - w̄_k‖²``; ``options``
    are its keyword arguments (``weights``, ``client_h``, ``epsilon``, ``norms_name``).
    """
    norms = qfedavg_squared_norms(squared_distances, lipschitz)
    coefficients, h = qffl_coefficients(losses, norms, q=q, lipschitz=lipschitz, **options)
    return lipschitz * coefficients, h
