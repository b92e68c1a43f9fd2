"""The unified form's weighted sum of float32 arrays in C, rounded as numpy's.

:func:`fairfl.strategies._ops.passes.reweighted_sum` computes
``w^t - Σ_i λ_i (w^t - w_i)`` as ``Σ_i λ_i w_i + (1 - Σ_i λ_i) w^t`` in float64 blocks:
for each value, ``acc = 0``, then ``acc = acc + float64(x_i) λ_i`` for each client in
order (one rounding for the product, one for the sum), then the global term, then a cast
to float32. In numpy that is four calls per client and block of 32,768 values, and the
float64 buffers go through the cache three times. :data:`SUM_SOURCE` does the same
operations on each value in one pass, without fused multiply-adds (the library is
compiled with ``-ffp-contract=off``), so the sum is the same bit for bit; each reply
value is read once, and each client's sum of squares (the fused value check) comes
from the same read. The source is compiled into the library of
:mod:`.gram_kernel`, which adds it to its own and loads both.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

#: ``weighted_sum_f32``: the sum of n float32 rows of k values (see the module docstring);
#: ``norms`` (n values, or NULL) gain each row's float32 sum of squares of each chunk of
#: 2,048 values, the chunks added in double. Uses ``lane_sum`` of the Gram's source.
SUM_SOURCE = r"""
/* out = w^t - sum_i lambda_i (w^t - w_i) of float32 arrays, as numpy's blocked float64
   pass computes it: per value acc = 0, then acc = acc + (double)x_i * lambda_i for each
   client in order whose lambda is not 0, then + (double)w^t * global_weight when
   use_global; out = (float)acc. Multiplies and adds are separate (no FMA), so each
   rounds as numpy's. norms (n values, or NULL) gain each client's float32 sum of squares
   of each chunk, added in double. */
#define SUM_CHUNK 2048
#define GROUP 4
__attribute__((target("avx2,fma")))
int weighted_sum_f32(const float **rows, const double *weights, int n, const float *global,
                     double global_weight, int use_global, int64_t k, float *out,
                     double *norms) {
    double *acc = aligned_alloc(64, SUM_CHUNK * sizeof(double));
    if (acc == NULL) return -1;
    int total = n + (use_global ? 1 : 0);
    for (int64_t start = 0; start < k; start += SUM_CHUNK) {
        int m = (int)(k - start < SUM_CHUNK ? k - start : SUM_CHUNK);
        for (int t = 0; t < m; t++) acc[t] = 0.0;
        /* GROUP rows at a time, added to acc in their order while it is in registers;
           a group's missing rows read w^t and add nothing. */
        for (int i0 = 0; i0 < total; i0 += GROUP) {
            const float *x[GROUP];
            double w[GROUP];
            int fold[GROUP], add[GROUP];
            __m256 squares[GROUP];
            float tail[GROUP];
            for (int q = 0; q < GROUP; q++) {
                int i = i0 + q;
                x[q] = (i < n ? rows[i] : global) + start;
                w[q] = i < n ? weights[i] : global_weight;
                fold[q] = i < n && norms != NULL;
                add[q] = i < total && w[q] != 0.0;
                squares[q] = _mm256_setzero_ps();
                tail[q] = 0.0f;
            }
            int t = 0;
            for (; t + 8 <= m; t += 8) {
                __m256d lo = _mm256_load_pd(acc + t), hi = _mm256_load_pd(acc + t + 4);
                for (int q = 0; q < GROUP; q++) {
                    __m256 v = _mm256_loadu_ps(x[q] + t);
                    if (fold[q]) squares[q] = _mm256_add_ps(squares[q], _mm256_mul_ps(v, v));
                    if (add[q]) {
                        __m256d wv = _mm256_set1_pd(w[q]);
                        __m256d vlo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
                        __m256d vhi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
                        lo = _mm256_add_pd(lo, _mm256_mul_pd(vlo, wv));
                        hi = _mm256_add_pd(hi, _mm256_mul_pd(vhi, wv));
                    }
                }
                _mm256_store_pd(acc + t, lo);
                _mm256_store_pd(acc + t + 4, hi);
            }
            for (; t < m; t++)
                for (int q = 0; q < GROUP; q++) {
                    if (fold[q]) tail[q] += x[q][t] * x[q][t];
                    if (add[q]) acc[t] = acc[t] + (double)x[q][t] * w[q];
                }
            for (int q = 0; q < GROUP; q++)
                if (fold[q]) norms[i0 + q] += lane_sum(squares[q]) + (double)tail[q];
        }
        for (int t = 0; t < m; t++) out[start + t] = (float)acc[t];
    }
    free(acc);
    return 0;
}
"""


def declare_weighted_sum(library: Any) -> None:
    """Declare ``weighted_sum_f32``'s argument and result types on the loaded ``library``."""
    function = library.weighted_sum_f32
    function.argtypes = [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_double,
        ctypes.c_int,
        ctypes.c_int64,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    function.restype = ctypes.c_int


def weighted_sum(
    library: Any,
    global_array: NDArray[np.float32],
    rows: Sequence[NDArray[np.float32]],
    weights: NDArray[np.float64],
    global_weight: float | None,
    squared_norms: NDArray[np.float64] | None,
) -> NDArray[np.float32]:
    """``Σ_i λ_i w_i (+ global_weight w^t)`` of flat float32 arrays, rounded as numpy's.

    The pass of :func:`fairfl.strategies._ops.passes.reweighted_sum` for one float32
    array, bit for bit; ``squared_norms`` (one float64 per row, or ``None``) gains each
    row's sum of squares. ``global_array``, the rows and ``weights`` must be
    C-contiguous; ``global_weight`` ``None``: w^t carries no weight. ``library`` is the
    loaded kernel library (:attr:`.gram_kernel.GramKernel.library`).
    """
    n = len(rows)
    out = np.empty(global_array.size, dtype=np.float32)
    pointers = (ctypes.c_void_p * n)(*[row.ctypes.data for row in rows])
    norms = None if squared_norms is None else squared_norms.ctypes.data
    status = library.weighted_sum_f32(
        pointers,
        weights.ctypes.data,
        n,
        global_array.ctypes.data,
        0.0 if global_weight is None else global_weight,
        int(global_weight is not None),
        global_array.size,
        out.ctypes.data,
        norms,
    )
    if status != 0:
        raise MemoryError("the compiled weighted-sum kernel could not allocate its buffer")
    return out
