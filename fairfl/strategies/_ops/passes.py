"""One-pass kernels over the replies: each reply is read from memory once per round.

- :func:`reweighted_sum`: the unified form ``w^t - Σ_i λ_i (w^t - w_i)`` in float64
  blocks, optionally with every reply array's squared norm from the same pass (the fused
  value check of :meth:`fairfl.strategies.core.base.FairStrategy.read_train_replies`);
- :func:`delta_sums_and_squared_distances` and :func:`direction_sums_and_squared_norms`:
  q-FFL's and q-FedSGD's one-difference pass (Li et al. 2020, Algorithms 2 and 1), the step's
  sum and each client's ‖Δw_k‖² together;
- :func:`max_abs`: ``max |w^t|``, the bound a rule's own pass checks reply values with
  (a reply value is at most ``max |w^t| + ‖w_k − w^t‖``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.strategies._ops.blas import one_thread
from fairfl.strategies._ops.gram_kernel import gram_kernel
from fairfl.strategies._ops.sum_kernel import weighted_sum

# Elements per block of reweighted_sum: two float64 buffers of 256 KiB and a client's
# float32 block of 128 KiB stay in a 1 MiB L2 cache. At 50 replies x 2M parameters
# FedAvg's aggregate_train took 2-4 ms less than with 1 MiB buffers (1 << 17), and
# 1 << 14 took ~6 ms more (per-block Python calls).
SUM_BLOCK = 1 << 15
# Elements per block of delta_sums_and_squared_distances, and per row of its dot
# products. Its per-block Python calls cost more than cache misses below 1 << 17.
DISTANCE_BLOCK = 1 << 17
DOT_ROW = 1 << 12
_VECDOT = getattr(np, "vecdot", None)  # numpy >= 2.0


def reweighted_sum(
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    lambdas: ArrayLike,
    squared_norms: NDArray[np.float64] | None,
) -> list[NDArray[Any]]:
    """``w^t - Σ_i λ_i (w^t - w_i)`` in float64 blocks; adds ``‖w_ij‖²`` into ``squared_norms``.

    The pass of :func:`fairfl.strategies.core.aggregation.reweighted_average`
    (``squared_norms`` ``None``) and of
    :func:`~fairfl.strategies.core.aggregation.reweighted_average_and_squared_norms` (the fused
    value check: parameters, result and errors there).
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
    # Σλ = 1 for most rules: skip a pass over w^t when it carries no weight.
    use_global = abs(global_weight) > 1e-15
    new_arrays: list[NDArray[Any]] = []
    # With norms, the caller rejects a client with NaN/Inf and the sum it spoiled.
    quiet = (
        np.errstate(invalid="ignore", over="ignore") if squared_norms is not None else nullcontext()
    )
    # float32 arrays in one call of the compiled kernel each, where it is used: the same
    # sum bit for bit, each value read once, no per-block Python calls.
    kernel = gram_kernel()
    # The norms' BLAS dots on one thread: a block is far too small to be worth waking a pool.
    with quiet, one_thread():
        for index, global_array in enumerate(global_arrays):
            if not np.issubdtype(global_array.dtype, np.floating):
                new_arrays.append(global_array.copy())
                continue
            flat_global = np.asarray(global_array).reshape(-1)
            flat_clients = [np.asarray(client[index]).reshape(-1) for client in local_arrays]
            if kernel is not None and global_array.dtype == np.float32:
                rows = [np.ascontiguousarray(flat, dtype=np.float32) for flat in flat_clients]
                column = np.zeros(len(rows)) if squared_norms is not None else None
                out = weighted_sum(
                    kernel.library,
                    np.ascontiguousarray(flat_global),
                    rows,
                    np.ascontiguousarray(weights),
                    global_weight if use_global else None,
                    column,
                )
                if squared_norms is not None and column is not None:
                    squared_norms[:, index] += column
                new_arrays.append(out.reshape(global_array.shape))
                continue
            out = np.empty(flat_global.size, dtype=global_array.dtype)
            # Accumulate block by block, so the float64 buffers stay in cache and each
            # client array is read once (the sum per element is the same as unblocked).
            total = np.empty(min(flat_global.size, SUM_BLOCK), dtype=np.float64)
            scaled = np.empty_like(total)
            for start in range(0, flat_global.size, SUM_BLOCK):
                stop = min(start + SUM_BLOCK, flat_global.size)
                block_total, block_scaled = total[: stop - start], scaled[: stop - start]
                block_total.fill(0.0)
                for client, (weight, flat) in enumerate(zip(weights, flat_clients, strict=True)):
                    block = flat[start:stop]
                    if squared_norms is not None:
                        # Read from memory by the dot, from cache by the cast below.
                        squared_norms[client, index] += float(np.dot(block, block))
                    if weight == 0.0:
                        continue  # adds nothing (and no NaN of a reply the caller will drop)
                    # Cast, then scale in place (faster than a mixed-dtype multiply). Not
                    # BLAS daxpy: its fused multiply-add rounds differently from the plain
                    # formula, which the sum must equal bit for bit.
                    block_scaled[...] = block
                    block_scaled *= weight
                    block_total += block_scaled
                if use_global:
                    block_scaled[...] = flat_global[start:stop]
                    block_scaled *= global_weight
                    block_total += block_scaled
                out[start:stop] = block_total
            new_arrays.append(out.reshape(global_array.shape))
    return new_arrays


def delta_sums_and_squared_distances(
    global_arrays: Sequence[ArrayLike],
    local_models: Sequence[Sequence[ArrayLike]],
    weights: ArrayLike | None = None,
) -> tuple[list[NDArray[Any] | None] | None, NDArray[np.float64]]:
    """``Σ_k u_k (w^t_j - w_{k,j})`` and ``‖w^t_j - w_{k,j}‖²`` of each client k and array j.

    q-FFL's step ``w^{t+1} = w^t - Σ_k Δ_k / Σ_k h_k`` (Li et al. 2020, Algorithm 2, line 8;
    ``Δ_k = u_k (w^t - w̄_k)`` with ``u_k = s_k L (F_k + ε)^q``) cannot be taken until
    every h_k, and so every squared distance, is known. Summing ``u_k (w^t - w̄_k)``
    while each client block's difference is at hand for its distance, and dividing by
    ``Σ_k h_k`` at the end (:func:`~fairfl.strategies.core.aggregation.apply_summed_step`),
    reads every reply once: each client block is read from memory by the difference,
    which then stays in cache for its dot product and a BLAS axpy into the sum.

    Differences, dot products (rows of 4096) and the sums are taken in the arrays' own
    dtype when it is float32, as Flower's QFedAvg does, else in float64; the dot
    products are added in float64. A float32 sum's rounding is relative to the step,
    not to the weights: it is within ``γ_{K+4} Σ_k u_k |w^t - w̄_k|`` (recursive
    summation; u_k rounded to float32 once). A block whose float32 square sum
    overflows (or holds a reply's NaN/Inf) is redone in float64 (spec §15.21), and then
    no sums are returned; otherwise every block's ``‖w^t - w̄_k‖`` is below
    ``sqrt(max float32)``, so with u_k <= 1 (scale them by ``1/max u``) no float32 sum
    can overflow. Non-floating arrays (counters) are skipped: distance 0 and no sum.

    Parameters
    ----------
    global_arrays : Sequence[ArrayLike]
        w^t.
    local_models : Sequence[Sequence[ArrayLike]]
        w̄_k of each client, arrays in the order (and shapes) of ``global_arrays``.
    weights : ArrayLike | None
        u_k >= 0, one per client, at most 1 (scale them by ``1/max u``); ``None``
        computes the distances only.

    Returns
    -------
    tuple[list[NDArray | None] | None, NDArray[np.float64]]
        The flat sum of each floating array (``None`` for a non-floating array), or
        ``None`` without ``weights`` or after a non-finite square sum; and the
        squared distances, shape (clients, arrays): NaN/Inf where a client's array is
        not finite.

    Raises
    ------
    ValueError
        If a model has another number of arrays or an array another shape, or the
        weights are not one value in [0, 1] per client.
    """
    return _sums_and_squared_norms(global_arrays, local_models, weights, from_global=True)


def direction_sums_and_squared_norms(
    global_arrays: Sequence[ArrayLike],
    directions: Sequence[Sequence[ArrayLike]],
    weights: ArrayLike | None = None,
) -> tuple[list[NDArray[Any] | None] | None, NDArray[np.float64]]:
    """``Σ_k u_k g_{k,j}`` and ``‖g_{k,j}‖²`` of each client k and array j, in one pass.

    q-FedSGD's step ``w^{t+1} = w^t - Σ_k Δ_k / Σ_k h_k`` (Li et al. 2020, Algorithm 1,
    line 7; ``Δ_k = u_k g_k``, g_k = ∇F_k(w^t)), summed while ‖g_k‖² is taken for h_k,
    as :func:`delta_sums_and_squared_distances` does with ``w^t - w̄_k``: the same
    dtypes, rounding bound and overflow rule. ``global_arrays`` give the shapes and the
    arrays to skip (non-floating ones).

    Returns
    -------
    tuple[list[NDArray | None] | None, NDArray[np.float64]]
        As :func:`delta_sums_and_squared_distances`, with ``‖g_k‖²`` for the distances.

    Raises
    ------
    ValueError
        As :func:`delta_sums_and_squared_distances`.
    """
    return _sums_and_squared_norms(global_arrays, directions, weights, from_global=False)


def _sums_and_squared_norms(
    global_arrays: Sequence[ArrayLike],
    local_models: Sequence[Sequence[ArrayLike]],
    weights: ArrayLike | None,
    *,
    from_global: bool,
) -> tuple[list[NDArray[Any] | None] | None, NDArray[np.float64]]:
    """The pass of both: directions ``w^t - w_k`` (``from_global``) or the arrays w_k."""
    globals_ = [np.asarray(g) for g in global_arrays]
    models: list[list[NDArray[Any]]] = []
    for local_arrays in local_models:
        if len(local_arrays) != len(globals_):
            raise ValueError(
                f"global and local models must have the same number of arrays, got "
                f"{len(globals_)} and {len(local_arrays)}"
            )
        local = [np.asarray(a) for a in local_arrays]
        for index, (g, a) in enumerate(zip(globals_, local, strict=True)):
            if g.shape != a.shape:
                raise ValueError(
                    f"array {index} has shape {a.shape} locally and {g.shape} globally"
                )
        models.append(local)
    scales = [0.0] * len(models)
    sums: list[NDArray[Any] | None] | None = None
    if weights is not None:
        u = np.asarray(weights, dtype=np.float64)
        if u.shape != (len(models),) or not np.all((u >= 0) & (u <= 1)):
            raise ValueError(f"weights must be {len(models)} values in [0, 1], got {u.tolist()}")
        scales, sums = u.tolist(), []
    parts = np.zeros((len(models), len(globals_)), dtype=np.float64)
    from scipy.linalg.blas import daxpy, saxpy  # here: keeps `import fairfl.strategies` light

    # float32 overflow and NaN/Inf in a reply are handled below, without warnings; BLAS
    # on one thread, as a block is far too small to be worth waking a pool.
    with np.errstate(over="ignore", invalid="ignore"), one_thread():
        for index, g in enumerate(globals_):
            if not np.issubdtype(g.dtype, np.floating):
                if sums is not None:
                    sums.append(None)
                continue
            flat_g = g.reshape(-1)
            flats = [model[index].reshape(-1) for model in models]
            work = np.dtype(np.float32 if np.result_type(g, *flats) == np.float32 else np.float64)
            axpy = saxpy if work == np.float32 else daxpy
            diff = np.empty(min(flat_g.size, DISTANCE_BLOCK), dtype=work)
            total = np.zeros(flat_g.size, dtype=work) if sums is not None else None
            # Block by block: w^t's block, the direction and the sum's block stay in
            # cache while each client's block is read from memory once.
            for start in range(0, flat_g.size, DISTANCE_BLOCK):
                stop = min(start + DISTANCE_BLOCK, flat_g.size)
                g_block, d_block = flat_g[start:stop], diff[: stop - start]
                for k, flat in enumerate(flats):
                    block = flat[start:stop]
                    if from_global:
                        direction = np.subtract(g_block, block, out=d_block, dtype=work)
                    elif block.dtype == work:
                        direction = block
                    else:
                        direction = d_block
                        direction[...] = block
                    partial = _sum_of_squares(direction)
                    if not math.isfinite(partial):
                        # float32 overflow (or a reply's NaN/Inf): the norm is redone in
                        # float64, and no sums are kept (the caller sums again). A finite
                        # float32 square sum bounds the block's direction's norm by
                        # sqrt(max float32), so with u_k <= 1 no kept sum can overflow.
                        exact = (g_block if from_global else 0.0) - block.astype(np.float64)
                        partial = float(np.sum(exact * exact))
                        sums, total = None, None
                    parts[k, index] += partial
                    if total is not None and scales[k] > 0.0:
                        axpy(direction, total[start:stop], a=scales[k])
            if sums is not None:
                sums.append(total)
    return sums, parts


def _sum_of_squares(values: NDArray[Any]) -> float:
    """``Σ values²`` of a 1-D block: row-wise dot products, the rows summed in float64.

    Rows of 4096 keep each BLAS dot single-threaded (OpenBLAS starts threads above
    10,000 elements, and waking them stalls on a busy machine); a dot is ~3x faster
    than squaring and summing. The tail, and numpy < 2 (no ``vecdot``), square and sum.
    """
    rows = values.size // DOT_ROW if _VECDOT is not None else 0
    total = 0.0
    if rows and _VECDOT is not None:  # rows > 0 only with vecdot: narrows for mypy
        body = values[: rows * DOT_ROW].reshape(rows, DOT_ROW)
        total = float(_VECDOT(body, body).sum(dtype=np.float64))
    tail = values[rows * DOT_ROW :]
    if tail.size:
        total += float(np.sum(tail * tail, dtype=np.float64))
    return total


def max_abs(array: NDArray[Any]) -> float:
    """``max |w|`` of one array (0 for empty or non-floating arrays)."""
    if array.size == 0 or not np.issubdtype(array.dtype, np.floating):
        return 0.0
    return float(max(-array.min(), array.max()))
