"""FedMGDA+'s cache-blocked kernels: the Gram of the updates, their norms, and the step.

FedMGDA+ (:mod:`fairfl.strategies.fedmgda`, Hu et al., Algorithm 1) needs
``K_ij = ⟨g_i, g_j⟩`` of the pseudo-gradients ``g_i = w_t − w_i`` (eq. (25)) and takes
the step ``w_t + Σ_i c_i (w_i − w_t)`` (eq. (22)). Both read every reply once, in
cache-sized blocks of differences packed across array boundaries
(:func:`_packed_blocks`), so memory stays O(n²) + one block whatever the model size (spec
§7.2.4). Float32 models are computed in float32 blocks with float64 sums; a block whose
float32 result is not finite is redone in float64. Where every array is float32 the Gram
and the step come from the compiled kernel (:mod:`.gram_kernel`) when it is available.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fairfl.strategies._ops.blas import one_thread
from fairfl.strategies._ops.gram_kernel import GramKernel, gram_kernel
from fairfl.strategies._ops.sum_kernel import difference_step as step_kernel

#: Bytes of the block of pseudo-gradients that :func:`gram_matrix` and
#: :func:`difference_step` fill and multiply at a time (last-level-cache-sized; larger
#: blocks mean fewer Python calls per client: 8 MiB measured ~7 % faster than 2 MiB
#: at 50 clients x 2M parameters).
GRAM_BLOCK_BYTES = 8 * 2**20
#: Fewest columns per block (many clients: fewer, longer products).
GRAM_MIN_COLUMNS = 1024
#: Most float32 terms one product of :func:`gram_matrix` sums: a float32 block is
#: multiplied in column chunks this wide, each (n, n) product added in float64. Its
#: relative error is then below ``GRAM_CHUNK · 2^-24`` < :data:`GRAM_RTOL`, and the
#: chunks' rounding errors average out in the float64 sum.
GRAM_CHUNK = 4096
#: Most rows past a multiple of 8 that :func:`_float32_block_gram` multiplies one by
#: one (BLAS gemv) instead of in its syrk: with 4 to 6 it was as slow or slower
#: (n = 12, 20, 52, 53, 54, 100, 101, 102).
GRAM_SPLIT_ROWS = 3
#: Bound on the relative error of a Gram diagonal ``‖g_i‖²`` computed in float32 blocks
#: (float32 differences, products of at most :data:`GRAM_CHUNK` terms, summed in
#: float64): the reply reader's bound on the values uses it as its margin.
GRAM_RTOL = 1e-3


def gram_matrix(
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    *,
    trainable: Sequence[bool] | None = None,
) -> NDArray[np.float64]:
    """K_ij = ⟨g_i, g_j⟩ of the raw pseudo-gradients g_i = w_t − w_i, summed in float64.

    The models are packed into cache-sized blocks of :data:`GRAM_BLOCK_BYTES` across
    array boundaries, and each block's differences are multiplied at once (``D Dᵀ``),
    so memory stays O(n²) + one block whatever the model size (spec §7.2.4).

    Float32 models (and smaller floats) are computed in float32 blocks: the
    differences are exact when w_i and w_t agree within a factor 2 (Sterbenz) and
    otherwise rounded once; each BLAS product sums at most :data:`GRAM_CHUNK` float32
    terms and the (n, n) products are added in float64. ``K`` is then within a relative
    :data:`GRAM_RTOL` of the exact Gram on the diagonal, and in practice within ~1e-7
    (K̄ within 1e-7 of the float64 one at 50 × 2M: ``tests/strategies``). A block whose
    float32 product is not finite (float32 overflow, or a NaN/Inf value) is redone in
    float64. Models with wider floats are computed in float64 blocks.

    Where every selected array is float32 and the compiled kernel is available
    (:mod:`fairfl.strategies._ops.gram_kernel`, ``FAIRFL_GRAM_KERNEL``), each array's
    products come from it instead, at the same precision (float32 differences and
    products, at most 512 terms per float32 sum, added in double); an array whose
    product is not finite goes through the blocks above.
    The norms are ``sqrt(diag K)``; :func:`fairfl.strategies.fedmgda_qp.normalize_gram` gives
    the Gram of the ḡ_i.

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
    NDArray[np.float64]
        The symmetric (n, n) Gram matrix. A client with a NaN/Inf value gets a
        non-finite row and column; the other entries are unaffected.

    Raises
    ------
    ValueError
        If a client's arrays do not match ``global_arrays`` in number or shape.
    """
    mask = float_mask(global_arrays, trainable)
    check_shapes(global_arrays, local_arrays)
    n = len(local_arrays)
    gram = np.zeros((n, n))
    kernel = gram_kernel() if n and _all_float32(global_arrays, local_arrays, mask) else None
    if kernel is not None:
        mask = _compiled_gram(kernel, global_arrays, local_arrays, mask, gram)
    # A NaN/Inf value only spoils its client's row and column; callers check them. One
    # BLAS thread: with two, the products took 6x longer at 100 clients on a busy
    # machine (fairfl.strategies._ops.blas).
    with np.errstate(invalid="ignore", over="ignore"), one_thread():
        for block, centre, segments in _packed_blocks(global_arrays, local_arrays, mask):
            # Row i: w_i − w_t (the Gram does not see the sign).
            if block.dtype == np.float64:
                gram += block @ block.T
                continue
            product = _float32_block_gram(block)
            if not np.all(np.isfinite(product)):  # float32 overflow, or a NaN/Inf value
                exact = _float64_differences(global_arrays, local_arrays, segments, centre.size)
                product = exact @ exact.T
            gram += product
    return (gram + gram.T) / 2


def _all_float32(
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    mask: list[bool],
) -> bool:
    """Whether every selected array, global and local, is float32 (the kernel's input)."""
    selected = [i for i, m in enumerate(mask) if m]
    return all(np.asarray(global_arrays[i]).dtype == np.float32 for i in selected) and all(
        np.asarray(local[i]).dtype == np.float32 for local in local_arrays for i in selected
    )


def _compiled_gram(
    kernel: GramKernel,
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    mask: list[bool],
    gram: NDArray[np.float64],
) -> list[bool]:
    """Add the compiled kernel's Gram of each selected array to ``gram``, in place.

    Returns the mask of the arrays left for numpy's blocks: those whose float32 product
    is not finite (float32 overflow, or a NaN/Inf value), which numpy's path redoes in
    float64 as it does its own blocks, so the result keeps :func:`gram_matrix`'s
    guarantees whichever path ran.
    """
    redo = [False] * len(mask)
    for index, selected in enumerate(mask):
        if not selected or np.size(global_arrays[index]) == 0:
            continue
        rows = [np.ravel(local[index]) for local in local_arrays]
        product = kernel.gram(np.ravel(global_arrays[index]), rows)
        if np.all(np.isfinite(product)):
            gram += product
        else:
            redo[index] = True
    return redo


def squared_update_norms(
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    *,
    trainable: Sequence[bool] | None = None,
) -> NDArray[np.float64]:
    """‖g_i‖² = K_ii, the diagonal of :func:`gram_matrix`, without its other products.

    The same blocks and the same precision as :func:`gram_matrix`: float32 blocks give
    per-chunk sums of at most :data:`GRAM_CHUNK` float32 squares, added in float64
    (within :data:`GRAM_RTOL`); a block whose sum is not finite is redone in float64; a
    NaN/Inf value spoils only its client's entry. It costs a pass over the replies plus
    ``n·d`` multiply-adds instead of ``n²·d / 2``: FedAvg-n (ε = 0) needs no more.

    Parameters
    ----------
    global_arrays, local_arrays, trainable
        As :func:`gram_matrix`.

    Returns
    -------
    NDArray[np.float64]
        The n squared norms.

    Raises
    ------
    ValueError
        If a client's arrays do not match ``global_arrays`` in number or shape.
    """
    mask = float_mask(global_arrays, trainable)
    check_shapes(global_arrays, local_arrays)
    total = np.zeros(len(local_arrays))
    with np.errstate(invalid="ignore", over="ignore"), one_thread():
        for block, centre, segments in _packed_blocks(global_arrays, local_arrays, mask):
            if block.dtype == np.float64:
                total += _row_squares(block)
                continue
            squares = np.zeros_like(total)
            for start in range(0, centre.size, GRAM_CHUNK):
                squares += _row_squares(block[:, start : start + GRAM_CHUNK])  # float32 sums
            if not np.all(np.isfinite(squares)):  # float32 overflow, or a NaN/Inf value
                exact = _float64_differences(global_arrays, local_arrays, segments, centre.size)
                squares = _row_squares(exact)
            total += squares
    return total


def _row_squares(block: NDArray[Any]) -> NDArray[Any]:
    """``Σ_j block_ij²`` per row, in the block's dtype: one BLAS dot per row, in one call.

    A stack of (1, w) @ (w, 1) products; twice as fast as ``einsum("ij,ij->i")`` on a
    float32 (50, 4096) chunk (6.9 ms against 13-14 ms for 2M parameters).
    """
    squares: NDArray[Any] = np.matmul(block[:, None, :], block[:, :, None])[:, 0, 0]
    return squares


def diagonal(products: NDArray[np.float64]) -> NDArray[np.float64]:
    """‖g_i‖²: the diagonal of a Gram matrix, or the squared norms themselves (1-D)."""
    return products if products.ndim == 1 else np.diag(products)


def _float32_block_gram(block: NDArray[np.float32]) -> NDArray[np.float64]:
    """``block @ blockᵀ``: products of at most :data:`GRAM_CHUNK` columns, added in float64.

    OpenBLAS's syrk is slow on its edge tiles when n is not a multiple of 8: with
    ``n mod 8 <= GRAM_SPLIT_ROWS`` the first ``8 ⌊n / 8⌋`` rows go through syrk and each
    remaining row through one gemv against all rows (per chunk). On float32 blocks of
    32,768 columns this took 76-98 % of the time of one syrk on all n rows (n = 9, 10,
    17, 25, 26, 33, 49, 50, 51); FedMGDA+'s Gram at 50 x 2M went from 100.6 to 98.1 ms,
    at 51 x 2M from 117.0 to 102.1 ms. Each product still sums at most GRAM_CHUNK
    float32 terms: the bound of :func:`gram_matrix` holds.
    """
    n, width = block.shape
    aligned = n - n % 8 if n >= 8 and n % 8 <= GRAM_SPLIT_ROWS else n
    product = np.zeros((n, n))
    head_product = product[:aligned, :aligned]
    for start in range(0, width, GRAM_CHUNK):
        chunk = block[:, start : start + GRAM_CHUNK]
        head = chunk[:aligned]
        head_product += head @ head.T  # float32 terms, summed in float64
        for row in range(aligned, n):
            product[row] += chunk @ chunk[row]
    product[:aligned, aligned:] = product[aligned:, :aligned].T
    return product


def difference_step(
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    coefficients: NDArray[np.float64],
    mask: Sequence[bool],
    *,
    measure: bool = False,
) -> tuple[dict[int, NDArray[Any]], float]:
    """``w_t + Σ_i c_i (w_i − w_t)`` of each array in ``mask``, by index, in w_t's dtype.

    Where every selected array is float32 and the compiled kernel is available
    (:func:`.sum_kernel.difference_step`), each array is stepped in one pass, the
    differences and their weighted sum in float64, rounded once to float32. Otherwise
    each block of :func:`_packed_blocks` is turned into differences and combined by one
    matrix-vector product ``cᵀ D`` in the block's dtype; a block whose ``cᵀ D`` is not
    finite is redone in float64 (see :func:`fairfl.strategies.fedmgda_qp.fedmgda_update`).
    With ``measure``, also ``‖cᵀ D‖²`` over all blocks, summed in float64 (else 0.0).
    """
    selected = [bool(m) for m in mask]
    all_float32 = bool(local_arrays) and _all_float32(global_arrays, local_arrays, selected)
    kernel = gram_kernel() if all_float32 else None
    if kernel is not None:
        return _compiled_step(kernel, global_arrays, local_arrays, coefficients, selected, measure)
    stepped = {
        index: np.empty(np.shape(array), dtype=np.asarray(array).dtype)
        if local_arrays  # filled block by block below
        else np.array(array, copy=True)  # no client: nothing moves
        for index, (array, m) in enumerate(zip(global_arrays, mask, strict=True))
        if m
    }
    weights: NDArray[Any] | None = None
    squared_length = 0.0
    with np.errstate(invalid="ignore", over="ignore"), one_thread():
        for block, centre, segments in _packed_blocks(global_arrays, local_arrays, mask):
            if weights is None:  # c in the blocks' dtype
                weights = coefficients.astype(block.dtype)
            update = weights @ block
            if update.dtype != np.float64 and not np.all(np.isfinite(update)):
                exact = _float64_differences(global_arrays, local_arrays, segments, centre.size)
                update = coefficients @ exact
            new = centre + update
            if measure:
                wide = update.astype(np.float64)
                squared_length += float(wide @ wide)
            for index, start, stop, offset in segments:
                stepped[index].reshape(-1)[start:stop] = new[offset : offset + stop - start]
    return stepped, squared_length


def _compiled_step(
    kernel: GramKernel,
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    coefficients: NDArray[np.float64],
    mask: list[bool],
    measure: bool,
) -> tuple[dict[int, NDArray[Any]], float]:
    """:func:`difference_step` of float32 arrays by the compiled kernel, array by array."""
    weights = np.ascontiguousarray(coefficients, dtype=np.float64)
    squared_length = np.zeros(1) if measure else None
    stepped: dict[int, NDArray[Any]] = {}
    for index, selected in enumerate(mask):
        if selected:
            rows = [np.ravel(local[index]) for local in local_arrays]
            centre = np.ravel(global_arrays[index])
            new = step_kernel(kernel.library, centre, rows, weights, squared_length)
            stepped[index] = new.reshape(np.shape(global_arrays[index]))
    return stepped, 0.0 if squared_length is None else float(squared_length[0])


def _float64_differences(
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    segments: list[tuple[int, int, int, int]],
    width: int,
) -> NDArray[np.float64]:
    """The (n, width) block ``w_i − w_t`` of ``segments`` (:func:`_packed_blocks`), float64."""
    exact = np.empty((len(local_arrays), width))
    for index, start, stop, offset in segments:
        centre = np.ravel(global_arrays[index])[start:stop].astype(np.float64)
        for i, local in enumerate(local_arrays):
            np.subtract(
                np.ravel(local[index])[start:stop],
                centre,
                out=exact[i, offset : offset + stop - start],
                dtype=np.float64,
            )
    return exact


def check_shapes(
    global_arrays: Sequence[NDArray[Any]], local_arrays: Sequence[Sequence[NDArray[Any]]]
) -> None:
    """Raise ``ValueError`` unless every client's arrays match ``global_arrays`` in shape."""
    for local in local_arrays:
        if len(local) != len(global_arrays) or any(
            np.shape(w) != np.shape(g) for w, g in zip(local, global_arrays, strict=True)
        ):
            raise ValueError("every client must send arrays shaped like global_arrays")


def _packed_blocks(
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    mask: Sequence[bool],
) -> Iterator[tuple[NDArray[Any], NDArray[Any], list[tuple[int, int, int, int]]]]:
    """The updates ``w_i − w_t`` of the selected arrays, packed into blocks across arrays.

    Yields ``(block, centre, segments)``: the (n, width) block whose row i is
    ``w_i − w_t``, w_t's values packed alike, and where they come from, ``(array index,
    start, stop, offset in the block)`` per array slice. The blocks are float32 if
    every selected array is a float of at most 4 bytes (a difference of two float32 is
    exact when they agree within a factor 2, and otherwise rounded once), float64
    otherwise. They are reused: a consumer must be done with one before asking for the
    next.
    """
    selected = [i for i, m in enumerate(mask) if m]
    n = len(local_arrays)
    size = sum(int(np.size(global_arrays[i])) for i in selected)
    if n == 0 or size == 0:
        return
    dtypes = [np.asarray(global_arrays[i]).dtype for i in selected]
    dtypes += [np.asarray(local[i]).dtype for local in local_arrays for i in selected]
    small = all(np.issubdtype(d, np.floating) and d.itemsize <= 4 for d in dtypes)
    dtype = np.float32 if small else np.float64
    itemsize = np.dtype(dtype).itemsize
    columns = min(size, max(GRAM_MIN_COLUMNS, GRAM_BLOCK_BYTES // (itemsize * n)))
    block = np.empty((n, columns), dtype=dtype)
    centre = np.empty(columns, dtype=dtype)
    segments: list[tuple[int, int, int, int]] = []
    filled = 0
    for index in selected:
        flat = np.ravel(global_arrays[index])
        local_flat = [np.ravel(local[index]) for local in local_arrays]
        start = 0
        while start < flat.size:
            take = min(columns - filled, flat.size - start)
            stop = start + take
            packed = centre[filled : filled + take]
            packed[...] = flat[start:stop]
            # One ufunc call per client and segment (~1 µs each, its Python part: the
            # rows come from iterating the block, the slices from one itemgetter).
            sources = map(itemgetter(slice(start, stop)), local_flat)
            for source, row in zip(sources, block[:, filled : filled + take], strict=True):
                np.subtract(source, packed, row)
            segments.append((index, start, stop, filled))
            filled += take
            start = stop
            if filled == columns:
                yield block, centre, segments
                filled, segments = 0, []
    if filled:
        yield block[:, :filled], centre[:filled], segments


def float_mask(
    global_arrays: Sequence[NDArray[Any]], trainable: Sequence[bool] | None
) -> list[bool]:
    """``trainable`` as a list of bools, by default the floating arrays.

    Raises
    ------
    ValueError
        If ``trainable`` has not one flag per array.
    """
    if trainable is None:
        return [bool(np.issubdtype(np.asarray(g).dtype, np.floating)) for g in global_arrays]
    if len(trainable) != len(global_arrays):
        raise ValueError(
            f"trainable must have one flag per array ({len(global_arrays)}), got {len(trainable)}"
        )
    return [bool(m) for m in trainable]
