/* A compiled float32 Gram of model updates, for benchmarks/bench_gram_kernel.py only.
 *
 * gram_f32(rows, centre, n, k, out): out[i][j] (j >= i) += <w_i - c, w_j - c> over k
 * float32 values, rows[i] -> w_i, centre -> c. Each column chunk of GRAM_KERNEL_CHUNK
 * values is packed as differences into a buffer that stays in L2 and multiplied at once
 * by a 4 x 3 tile of AVX2 FMA accumulators (12 of the 16 ymm registers): each product
 * sums GRAM_KERNEL_CHUNK / 8 float32 terms per lane, the lanes and the chunks are added
 * in double, as fairfl.strategies.fedmgda.gram_matrix bounds its own products. Rows are
 * padded with zeros to whole tiles. Build: cc -O3 -mavx2 -mfma -shared -fPIC.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define GRAM_KERNEL_CHUNK 4096
#define MAX_ROWS 256

static float packed[(MAX_ROWS + 4) * GRAM_KERNEL_CHUNK] __attribute__((aligned(64)));

static inline double lane_sum(__m256 v) {
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    __m256d s = _mm256_add_pd(lo, hi);
    double out[4];
    _mm256_storeu_pd(out, s);
    return (out[0] + out[1]) + (out[2] + out[3]);
}

static void pack(const float **rows, const float *centre, int n, int padded, int64_t start,
                 int width, int stride) {
    for (int i = 0; i < padded; i++) {
        float *d = packed + (int64_t)i * GRAM_KERNEL_CHUNK;
        int t = 0;
        if (i < n) {
            const float *r = rows[i] + start, *c = centre + start;
            for (; t + 8 <= width; t += 8)
                _mm256_store_ps(d + t, _mm256_sub_ps(_mm256_loadu_ps(r + t), _mm256_loadu_ps(c + t)));
            for (; t < width; t++) d[t] = r[t] - c[t];
        }
        for (; t < stride; t++) d[t] = 0.0f;
    }
}

#define FMA_ROW(acc0, acc1, acc2, x)                  \
    a = _mm256_load_ps((x) + t);                      \
    acc0 = _mm256_fmadd_ps(a, b0, acc0);              \
    acc1 = _mm256_fmadd_ps(a, b1, acc1);              \
    acc2 = _mm256_fmadd_ps(a, b2, acc2);

int gram_f32(const float **rows, const float *centre, int n, int64_t k, double *out) {
    if (n > MAX_ROWS) return -1;
    int tile_i = (n + 3) / 4 * 4, tile_j = (n + 2) / 3 * 3;
    int padded = tile_i > tile_j ? tile_i : tile_j;
    for (int64_t start = 0; start < k; start += GRAM_KERNEL_CHUNK) {
        int width = (int)(k - start < GRAM_KERNEL_CHUNK ? k - start : GRAM_KERNEL_CHUNK);
        int stride = (width + 7) / 8 * 8;
        pack(rows, centre, n, padded, start, width, stride);
        for (int i0 = 0; i0 < tile_i; i0 += 4) {
            for (int j0 = i0 / 3 * 3; j0 < tile_j; j0 += 3) {
                __m256 z = _mm256_setzero_ps(), a;
                __m256 c00 = z, c01 = z, c02 = z, c10 = z, c11 = z, c12 = z;
                __m256 c20 = z, c21 = z, c22 = z, c30 = z, c31 = z, c32 = z;
                const float *x = packed + (int64_t)i0 * GRAM_KERNEL_CHUNK;
                const float *y = packed + (int64_t)j0 * GRAM_KERNEL_CHUNK;
                for (int t = 0; t < stride; t += 8) {
                    __m256 b0 = _mm256_load_ps(y + t);
                    __m256 b1 = _mm256_load_ps(y + GRAM_KERNEL_CHUNK + t);
                    __m256 b2 = _mm256_load_ps(y + 2 * GRAM_KERNEL_CHUNK + t);
                    FMA_ROW(c00, c01, c02, x)
                    FMA_ROW(c10, c11, c12, x + GRAM_KERNEL_CHUNK)
                    FMA_ROW(c20, c21, c22, x + 2 * GRAM_KERNEL_CHUNK)
                    FMA_ROW(c30, c31, c32, x + 3 * GRAM_KERNEL_CHUNK)
                }
                __m256 tile[4][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22}, {c30, c31, c32}};
                for (int p = 0; p < 4; p++)
                    for (int q = 0; q < 3; q++) {
                        int i = i0 + p, j = j0 + q;
                        if (i < n && j < n && j >= i) out[(int64_t)i * n + j] += lane_sum(tile[p][q]);
                    }
            }
        }
    }
    return 0;
}
