"""The C source of FedMGDA+'s float32 Gram kernel (:mod:`.gram_kernel` compiles it).

``gram_f32`` adds ``<w_i - c, w_j - c>`` (j >= i) of n float32 rows of k values to
``out`` (n x n, row-major). Each column chunk of at most 4,096 values (as many as keep
the packed rows within 1 MiB, L2) is packed as differences, and each group of 4 rows is
multiplied by itself (a 4 x 4 tile of which only the 10 products j >= i are formed) and
by the rows after it, 3 at a time (4 x 3 tiles of AVX2 FMA accumulators). Each of the 8
float32 lanes of a product sums at most 512 terms in column order, and the lanes and the
chunks are added in double, so the bound of ``gram_matrix`` (at most GRAM_CHUNK float32
terms per sum) holds. Each product is formed once, in the same operations whatever the
tile it falls in, so the result does not depend on the tiling: the diagonal tiles (which
replaced 4 x 3 tiles that also formed products j < i, 21 % more multiply-adds at 40
rows) left the Gram the same bit for bit. While a chunk is multiplied, the next chunk's
rows are prefetched into L2 a cache line at a time, spread over the tiles, so that
reading the replies from memory overlaps the products instead of following them.
Rows are padded with zeros to whole tiles.
"""

#: The Gram's C source; :mod:`.sum_kernel`'s is added to it in one library.
GRAM_SOURCE = r"""
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#define MAX_CHUNK 4096
#define MIN_CHUNK 256
#define PACKED_BYTES (1 << 20)

int gram_kernel_usable(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

__attribute__((target("avx2,fma")))
static inline double lane_sum(__m256 v) {
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    __m256d s = _mm256_add_pd(lo, hi);
    double out[4];
    _mm256_storeu_pd(out, s);
    return (out[0] + out[1]) + (out[2] + out[3]);
}

__attribute__((target("avx2,fma")))
static void pack(float *packed, int64_t pitch, const float **rows, const float *centre,
                 int n, int padded, int64_t start, int width, int stride) {
    for (int i = 0; i < padded; i++) {
        float *d = packed + (int64_t)i * pitch;
        int t = 0;
        if (i < n) {
            const float *r = rows[i] + start, *c = centre + start;
            for (; t + 8 <= width; t += 8)
                _mm256_store_ps(d + t,
                                _mm256_sub_ps(_mm256_loadu_ps(r + t), _mm256_loadu_ps(c + t)));
            for (; t < width; t++) d[t] = r[t] - c[t];
        }
        for (; t < stride; t++) d[t] = 0.0f;
    }
}

#define FMA_ROW(acc0, acc1, acc2, x)       \
    a = _mm256_load_ps((x) + t);           \
    acc0 = _mm256_fmadd_ps(a, b0, acc0);   \
    acc1 = _mm256_fmadd_ps(a, b1, acc1);   \
    acc2 = _mm256_fmadd_ps(a, b2, acc2);

/* Prefetches into L2 one cache line of the next chunk's rows (row r of n + 1: the
   centre last) for every `every` steps of a tile, until `quota` lines are issued. */
#define PREFETCH_STEP                                                               \
    if (++since == every) {                                                         \
        since = 0;                                                                  \
        if (issued < quota) {                                                       \
            int64_t r = issued / lines, l = issued - r * lines;                     \
            _mm_prefetch((const char *)((r < n ? rows[r] : centre) + next + l * 16), \
                         _MM_HINT_T1);                                              \
            issued++;                                                               \
        }                                                                           \
    }

__attribute__((target("avx2,fma")))
int gram_f32(const float **rows, const float *centre, int n, int64_t k, double *out) {
    if (n <= 0 || k <= 0) return 0;
    int tile_i = (n + 3) / 4 * 4, tile_j = (n + 2) / 3 * 3;
    int64_t chunk_rows = tile_i > tile_j ? tile_i : tile_j;
    int padded = tile_i > n + 2 ? tile_i : n + 2;
    int64_t pitch = PACKED_BYTES / (chunk_rows * 4) / 8 * 8;
    if (pitch > MAX_CHUNK) pitch = MAX_CHUNK;
    if (pitch < MIN_CHUNK) pitch = MIN_CHUNK;
    if (pitch > (k + 7) / 8 * 8) pitch = (k + 7) / 8 * 8;
    float *packed = aligned_alloc(64, (size_t)((padded * pitch * 4 + 63) / 64 * 64));
    if (packed == NULL) return -1;
    int tiles = 0;
    for (int i0 = 0; i0 < tile_i; i0 += 4) tiles += 1 + (n - i0 - 4 > 0 ? (n - i0 - 2) / 3 : 0);
    for (int64_t start = 0; start < k; start += pitch) {
        int width = (int)(k - start < pitch ? k - start : pitch);
        int stride = (width + 7) / 8 * 8;
        pack(packed, pitch, rows, centre, n, padded, start, width, stride);
        int64_t next = start + pitch;
        int64_t lines = next < k ? ((k - next < pitch ? k - next : pitch) + 15) / 16 : 0;
        int64_t total = lines * (n + 1), per_tile = total / tiles + 1, issued = 0;
        int every = (int)(stride / 8 / per_tile), since = 0;
        if (every < 1) every = 1;
        for (int i0 = 0; i0 < tile_i; i0 += 4) {
            const float *x = packed + (int64_t)i0 * pitch;
            int64_t quota = issued + per_tile < total ? issued + per_tile : total;
            {   /* the diagonal 4 x 4 tile: its 10 products j >= i */
                __m256 z = _mm256_setzero_ps(), a0, a1, a2, a3;
                __m256 d00 = z, d01 = z, d02 = z, d03 = z, d11 = z, d12 = z, d13 = z;
                __m256 d22 = z, d23 = z, d33 = z;
                for (int t = 0; t < stride; t += 8) {
                    a0 = _mm256_load_ps(x + t);
                    a1 = _mm256_load_ps(x + pitch + t);
                    a2 = _mm256_load_ps(x + 2 * pitch + t);
                    a3 = _mm256_load_ps(x + 3 * pitch + t);
                    d00 = _mm256_fmadd_ps(a0, a0, d00);
                    d01 = _mm256_fmadd_ps(a0, a1, d01);
                    d02 = _mm256_fmadd_ps(a0, a2, d02);
                    d03 = _mm256_fmadd_ps(a0, a3, d03);
                    d11 = _mm256_fmadd_ps(a1, a1, d11);
                    d12 = _mm256_fmadd_ps(a1, a2, d12);
                    d13 = _mm256_fmadd_ps(a1, a3, d13);
                    d22 = _mm256_fmadd_ps(a2, a2, d22);
                    d23 = _mm256_fmadd_ps(a2, a3, d23);
                    d33 = _mm256_fmadd_ps(a3, a3, d33);
                    PREFETCH_STEP
                }
                __m256 diag[10] = {d00, d01, d02, d03, d11, d12, d13, d22, d23, d33};
                for (int p = 0, e = 0; p < 4; p++)
                    for (int q = p; q < 4; q++, e++)
                        if (i0 + q < n) out[(int64_t)(i0 + p) * n + i0 + q] += lane_sum(diag[e]);
            }
            quota = issued + per_tile < total ? issued + per_tile : total;
            for (int j0 = i0 + 4; j0 < n; j0 += 3) {
                __m256 z = _mm256_setzero_ps(), a;
                __m256 c00 = z, c01 = z, c02 = z, c10 = z, c11 = z, c12 = z;
                __m256 c20 = z, c21 = z, c22 = z, c30 = z, c31 = z, c32 = z;
                const float *y = packed + (int64_t)j0 * pitch;
                for (int t = 0; t < stride; t += 8) {
                    __m256 b0 = _mm256_load_ps(y + t);
                    __m256 b1 = _mm256_load_ps(y + pitch + t);
                    __m256 b2 = _mm256_load_ps(y + 2 * pitch + t);
                    FMA_ROW(c00, c01, c02, x)
                    FMA_ROW(c10, c11, c12, x + pitch)
                    FMA_ROW(c20, c21, c22, x + 2 * pitch)
                    FMA_ROW(c30, c31, c32, x + 3 * pitch)
                    PREFETCH_STEP
                }
                __m256 tile[4][3] = {{c00, c01, c02}, {c10, c11, c12},
                                     {c20, c21, c22}, {c30, c31, c32}};
                for (int p = 0; p < 4; p++)
                    for (int q = 0; q < 3; q++) {
                        int i = i0 + p, j = j0 + q;
                        if (i < n && j < n) out[(int64_t)i * n + j] += lane_sum(tile[p][q]);
                    }
                quota = issued + per_tile < total ? issued + per_tile : total;
            }
        }
    }
    free(packed);
    return 0;
}

"""
