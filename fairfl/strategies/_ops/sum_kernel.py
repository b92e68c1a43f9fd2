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
from the same read. ``difference_step_f32`` is FedMGDA+'s step
``w^t + Σ_i c_i (w_i − w^t)`` in one pass, each difference and sum in float64. The
source is compiled into the library of :mod:`.gram_kernel`, which adds it to its own
and loads it.
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
/* Rows added per pass over acc. 8 (was 4) read and write acc half as often: with the
   prefetch below, the weighted sum of 40 rows x 1M took ~35 % less CPU (17.6 -> 11.3 ms)
   and the step ~10 % less (10.7 -> 9.4 ms; issue #51). Each value's operations and
   their order are the same for any GROUP, so the results are the same bit for bit. */
#define GROUP 8
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
                    /* This row's next chunk, a cache line per 16 values, as the step's. */
                    if ((t & 15) == 0)
                        _mm_prefetch((const char *)(x[q] + t + SUM_CHUNK), _MM_HINT_T0);
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

/* out = w^t + sum_i c_i (w_i - w^t) of float32 arrays (FedMGDA+'s step): per value each
   difference is taken in double (exact), acc = acc + d_i * c_i in client order, then
   out = (float)((double)w^t + acc). length2 (or NULL) gains the sum of acc^2. */
__attribute__((target("avx2,fma")))
int difference_step_f32(const float **rows, const double *weights, int n, const float *global,
                        int64_t k, float *out, double *length2) {
    double *acc = aligned_alloc(64, SUM_CHUNK * sizeof(double));
    if (acc == NULL) return -1;
    __m256d squares = _mm256_setzero_pd();
    double tail_squares = 0.0;
    for (int64_t start = 0; start < k; start += SUM_CHUNK) {
        int m = (int)(k - start < SUM_CHUNK ? k - start : SUM_CHUNK);
        const float *g = global + start;
        for (int t = 0; t < m; t++) acc[t] = 0.0;
        for (int i0 = 0; i0 < n; i0 += GROUP) {
            const float *x[GROUP];
            double w[GROUP];
            int add[GROUP];
            for (int q = 0; q < GROUP; q++) {
                add[q] = i0 + q < n;
                x[q] = (add[q] ? rows[i0 + q] : global) + start;
                w[q] = add[q] ? weights[i0 + q] : 0.0;
            }
            int t = 0;
            for (; t + 8 <= m; t += 8) {
                __m256 c = _mm256_loadu_ps(g + t);
                __m256d clo = _mm256_cvtps_pd(_mm256_castps256_ps128(c));
                __m256d chi = _mm256_cvtps_pd(_mm256_extractf128_ps(c, 1));
                __m256d lo = _mm256_load_pd(acc + t), hi = _mm256_load_pd(acc + t + 4);
                for (int q = 0; q < GROUP; q++) {
                    if (!add[q]) continue;
                    /* This row's next chunk, one cache line per 16 values: the 40-odd rows
                       are too many streams for the hardware prefetcher (~10 % faster). */
                    if ((t & 15) == 0)
                        _mm_prefetch((const char *)(x[q] + t + SUM_CHUNK), _MM_HINT_T0);
                    __m256 v = _mm256_loadu_ps(x[q] + t);
                    __m256d wv = _mm256_set1_pd(w[q]);
                    __m256d dlo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), clo);
                    __m256d dhi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), chi);
                    lo = _mm256_add_pd(lo, _mm256_mul_pd(dlo, wv));
                    hi = _mm256_add_pd(hi, _mm256_mul_pd(dhi, wv));
                }
                _mm256_store_pd(acc + t, lo);
                _mm256_store_pd(acc + t + 4, hi);
            }
            for (; t < m; t++)
                for (int q = 0; q < GROUP; q++)
                    if (add[q]) acc[t] = acc[t] + ((double)x[q][t] - (double)g[t]) * w[q];
        }
        int t = 0;
        if (length2 != NULL) {
            for (; t + 4 <= m; t += 4) {
                __m256d a = _mm256_load_pd(acc + t);
                squares = _mm256_add_pd(squares, _mm256_mul_pd(a, a));
            }
            for (; t < m; t++) tail_squares += acc[t] * acc[t];
        }
        for (t = 0; t < m; t++) out[start + t] = (float)((double)g[t] + acc[t]);
    }
    if (length2 != NULL) {
        double lanes[4];
        _mm256_storeu_pd(lanes, squares);
        *length2 += ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + tail_squares;
    }
    free(acc);
    return 0;
}
"""


def declare_sums(library: Any) -> None:
    """Declare ``weighted_sum_f32``'s and ``difference_step_f32``'s types on ``library``."""
    rows, pointer = ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p
    library.weighted_sum_f32.argtypes = [
        *(rows, pointer, ctypes.c_int, pointer, ctypes.c_double, ctypes.c_int),
        *(ctypes.c_int64, pointer, pointer),
    ]
    library.weighted_sum_f32.restype = ctypes.c_int
    library.difference_step_f32.argtypes = [
        *(rows, pointer, ctypes.c_int, pointer, ctypes.c_int64, pointer, pointer),
    ]
    library.difference_step_f32.restype = ctypes.c_int


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


def difference_step(
    library: Any,
    global_array: NDArray[np.float32],
    rows: Sequence[NDArray[np.float32]],
    coefficients: NDArray[np.float64],
    squared_length: NDArray[np.float64] | None,
) -> NDArray[np.float32]:
    """``w^t + Σ_i c_i (w_i − w^t)`` of flat float32 arrays, each difference in float64.

    FedMGDA+'s step (:func:`fairfl.strategies._ops.gram.difference_step`) in one pass:
    per value, the differences ``w_i − w^t`` are exact in float64, summed with their
    ``c_i`` in client order in float64, and ``w^t`` plus the sum is rounded once to
    float32. ``squared_length`` (one float64, or ``None``) gains the squared L2 norm of
    the float64 sums. ``global_array``, the rows and ``coefficients`` must be
    C-contiguous; ``library`` is the loaded kernel library.
    """
    out = np.empty(global_array.size, dtype=np.float32)
    pointers = (ctypes.c_void_p * len(rows))(*[row.ctypes.data for row in rows])
    length = None if squared_length is None else squared_length.ctypes.data
    status = library.difference_step_f32(
        pointers,
        coefficients.ctypes.data,
        len(rows),
        global_array.ctypes.data,
        global_array.size,
        out.ctypes.data,
        length,
    )
    if status != 0:
        raise MemoryError("the compiled step kernel could not allocate its buffer")
    return out
