// Skinny matrix products (decode: a few activation rows against a whole weight) for AVX-512 CPUs with VNNI
// and BF16, streaming the weight once at close to the memory bandwidth.
//
// int8 and int4 weights are multiplied the way llama.cpp's q8_0 / q4_0 do: the activation rows are quantized
// to int8 in blocks of 128 (one float scale per block), and the products are integer dot products
// (vpdpbusd: unsigned bytes x signed bytes), so a weight byte costs a fraction of an instruction instead of a
// widening, a conversion and a float multiply-add. bf16 weights use vdpbf16ps against bf16 activations.
//
// Layouts (written by the Python side at load time):
// - int8: w[n][k] as signed int8 (the layout torch's own int8 kernels take), one float scale per output row n,
//   and wsum[n][b], the sum of row n's weights in input block b (the activations are offset by 128 to be
//   unsigned; the correction is 128 * wsum).
// - int4: per row, per block of 128 inputs, 64 bytes: byte j holds q[j] in its low nibble and q[64 + j] in
//   its high nibble (q in 0..15); the weight is q * s + c with s, c floats per (row, group), group a
//   multiple of 128 inputs.
// Threads: OpenMP, which resolves to the runtime PyTorch already loaded (same soname), so one thread pool.

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"

#define BLOCK 128

// How far ahead of its reads a product asks for weight bytes (into L2). The hardware prefetcher alone left the
// products of one decode step (a 24-layer Qwen2.5-0.5B shape, two cores) well below the read bandwidth; 8 KB
// ahead took them from 14.1 to 19.8 GB/s in int4, 13.6 to 14.9 in int8 and 20.0 to 22.6 in bf16.
#define PREFETCH_BYTES 8192


static inline __m512 load16(const void *x, int x_bf16, int64_t i) {
    if (x_bf16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)x + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_loadu_ps((const float *)x + i);
}

static inline void store_out(void *y, int y_bf16, int64_t i, float v) {
    if (y_bf16)
        ((uint16_t *)y)[i] = f32_to_bf16(v);
    else
        ((float *)y)[i] = v;
}

// Quantizes M rows of K activations (bf16 or float) to int8 per block of 128: xq[m][k] (plus 128 when
// `offset`, as unsigned bytes), xs[m][b] (the block's scale), xsum[m][b] (the sum of its signed values).
static void sy_quantize_rows(const void *x, int x_bf16, int64_t M, int64_t K, int offset, int8_t *xq, float *xs,
                             int32_t *xsum) {
    const __m128i shift = _mm_set1_epi8(offset ? (char)0x80 : 0);
    const int64_t nb = K / BLOCK;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t b = 0; b < nb; b++) {
            const int64_t base = m * K + b * BLOCK;
            __m512 v[8];
            __m512 amax = _mm512_setzero_ps();
            for (int i = 0; i < 8; i++) {
                v[i] = load16(x, x_bf16, base + 16 * i);
                amax = _mm512_max_ps(amax, _mm512_abs_ps(v[i]));
            }
            const float mx = _mm512_reduce_max_ps(amax);
            const float scale = mx / 127.0f;
            const __m512 inv = _mm512_set1_ps(mx > 0.0f ? 127.0f / mx : 0.0f);
            __m512i sum = _mm512_setzero_si512();
            for (int i = 0; i < 8; i++) {
                __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v[i], inv));
                sum = _mm512_add_epi32(sum, q);
                _mm_storeu_si128((__m128i *)(xq + base + 16 * i), _mm_xor_si128(_mm512_cvtsepi32_epi8(q), shift));
            }
            xs[m * nb + b] = scale;
            xsum[m * nb + b] = _mm512_reduce_add_epi32(sum);
        }
    }
}

// One tile of up to R output rows for activation row m; R a compile-time constant in the hot call below, so
// the row loops unroll and the accumulators stay in registers.
static inline __attribute__((always_inline)) void int8_tile(const uint8_t *xr, const float *xsr, int64_t K,
                                                            const int8_t *w, const int32_t *wsum, int64_t n0,
                                                            int R, float *out) {
    const int64_t nb = K / BLOCK;
    __m512 acc[4];
    __m512 corr[4];
    for (int r = 0; r < R; r++) {
        acc[r] = _mm512_setzero_ps();
        corr[r] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const __m512i xa = _mm512_loadu_si512((const void *)(xr + b * BLOCK));
        const __m512i xb = _mm512_loadu_si512((const void *)(xr + b * BLOCK + 64));
        const __m512 sv = _mm512_set1_ps(xsr[b]);
        for (int r = 0; r < R; r++) {
            const int8_t *wr = w + (n0 + r) * K + b * BLOCK;
            _mm_prefetch((const char *)wr + PREFETCH_BYTES, _MM_HINT_T1);
            __m512i ai = _mm512_dpbusd_epi32(_mm512_setzero_si512(), xa, _mm512_loadu_si512(wr));
            ai = _mm512_dpbusd_epi32(ai, xb, _mm512_loadu_si512(wr + 64));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai), sv, acc[r]);
        }
    }
    // the offset's correction, sum_b s_b * wsum[n][b], sixteen blocks per instruction
    for (int r = 0; r < R; r++) {
        const int32_t *ws = wsum + (n0 + r) * nb;
        int64_t b = 0;
        for (; b + 16 <= nb; b += 16)
            corr[r] = _mm512_fmadd_ps(_mm512_loadu_ps(xsr + b),
                                      _mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)(ws + b))), corr[r]);
        float tail = 0.0f;
        for (; b < nb; b++) tail += xsr[b] * (float)ws[b];
        out[r] = _mm512_reduce_add_ps(acc[r]) - 128.0f * (_mm512_reduce_add_ps(corr[r]) + tail);
    }
}

// y[m][n] = wscale[n] * sum_k x[m][k] * w[n][k] (+ bias[n]), from sy_quantize_rows' output with `offset`.
static void sy_gemv_int8(const uint8_t *xu, const float *xs, int64_t M, int64_t K, const int8_t *w,
                         const int32_t *wsum, const float *wscale, const float *bias, int64_t N, void *y,
                         int y_bf16) {
    const int64_t nb = K / BLOCK;
    const int64_t tiles = (N + 3) / 4;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        const int64_t n0 = t * 4;
        const int rows = (int)(N - n0 < 4 ? N - n0 : 4);
        for (int64_t m = 0; m < M; m++) {
            float dot[4];
            if (rows == 4)
                int8_tile(xu + m * K, xs + m * nb, K, w, wsum, n0, 4, dot);
            else
                int8_tile(xu + m * K, xs + m * nb, K, w, wsum, n0, rows, dot);
            for (int r = 0; r < rows; r++) {
                const int64_t n = n0 + r;
                float v = wscale[n] * dot[r];
                if (bias) v += bias[n];
                store_out(y, y_bf16, m * N + n, v);
            }
        }
    }
}

// y[m][n] = sum_k x[m][k] * (q[n][k] * s[n][g] + c[n][g]) (+ bias[n]), g = k / group; the packed layout above.
static void sy_gemv_int4(const int8_t *xq, const float *xs, const int32_t *xsum, int64_t M, int64_t K,
                  const uint8_t *wp, const float *ws, const float *wc, int64_t group, const float *bias,
                  int64_t N, void *y, int y_bf16) {
    const int64_t nb = K / BLOCK;
    const int64_t ng = K / group;
    const int64_t per_group = group / BLOCK;
    const __m512i low = _mm512_set1_epi8(0x0f);
    const int64_t tiles = (N + 3) / 4;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        const int64_t n0 = t * 4;
        const int rows = (int)(N - n0 < 4 ? N - n0 : 4);
        for (int64_t m = 0; m < M; m++) {
            const int8_t *xr = xq + m * K;
            __m512 acc[4];
            float cterm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                const __m512i xa = _mm512_loadu_si512((const void *)(xr + b * BLOCK));
                const __m512i xb = _mm512_loadu_si512((const void *)(xr + b * BLOCK + 64));
                const float s = xs[m * nb + b];
                const float sx = s * (float)xsum[m * nb + b];
                const int64_t g = b / per_group;
                for (int r = 0; r < rows; r++) {
                    const int64_t n = n0 + r;
                    _mm_prefetch((const char *)(wp + n * (K / 2) + b * 64) + PREFETCH_BYTES, _MM_HINT_T1);
                    const __m512i packed = _mm512_loadu_si512((const void *)(wp + n * (K / 2) + b * 64));
                    const __m512i lo = _mm512_and_si512(packed, low);
                    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
                    __m512i ai = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xa);
                    ai = _mm512_dpbusd_epi32(ai, hi, xb);
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai), _mm512_set1_ps(s * ws[n * ng + g]), acc[r]);
                    cterm[r] += wc[n * ng + g] * sx;
                }
            }
            for (int r = 0; r < rows; r++) {
                const int64_t n = n0 + r;
                float v = _mm512_reduce_add_ps(acc[r]) + cterm[r];
                if (bias) v += bias[n];
                store_out(y, y_bf16, m * N + n, v);
            }
        }
    }
}

// y[m][n] = sum_k x[m][k] * w[n][k] (+ bias[n]), bf16 x and w, float accumulation (vdpbf16ps).
void sy_gemv_bf16(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, const float *bias, int64_t N,
                  void *y, int y_bf16) {
    const int64_t tiles = (N + 3) / 4;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        const int64_t n0 = t * 4;
        const int rows = (int)(N - n0 < 4 ? N - n0 : 4);
        for (int64_t m = 0; m < M; m++) {
            const uint16_t *xr = x + m * K;
            __m512 acc[4];
            for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
            for (int64_t k = 0; k < K; k += 32) {
                const __m512bh xv = (__m512bh)_mm512_loadu_si512((const void *)(xr + k));
                for (int r = 0; r < rows; r++) {
                    _mm_prefetch((const char *)(w + (n0 + r) * K + k) + PREFETCH_BYTES, _MM_HINT_T1);
                    const __m512bh wv = (__m512bh)_mm512_loadu_si512((const void *)(w + (n0 + r) * K + k));
                    acc[r] = _mm512_dpbf16_ps(acc[r], wv, xv);
                }
            }
            for (int r = 0; r < rows; r++) {
                const int64_t n = n0 + r;
                float v = _mm512_reduce_add_ps(acc[r]);
                if (bias) v += bias[n];
                store_out(y, y_bf16, m * N + n, v);
            }
        }
    }
}

// out[n][k] = q[n][k] * s[n][g] + c[n][g] from the packed int4 layout, as bf16 or float: prefill multiplies
// many rows, where a bf16 matrix product over the dequantized weight beats any int4 dot product here.
void sy_dequantize_int4(const uint8_t *wp, const float *ws, const float *wc, int64_t N, int64_t K, int64_t group,
                        void *out, int out_bf16) {
    const int64_t nb = K / BLOCK;
    const int64_t ng = K / group;
    const int64_t per_group = group / BLOCK;
    const __m512i low = _mm512_set1_epi32(0x0f);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        for (int64_t b = 0; b < nb; b++) {
            const int64_t g = b / per_group;
            const __m512 s = _mm512_set1_ps(ws[n * ng + g]);
            const __m512 c = _mm512_set1_ps(wc[n * ng + g]);
            const uint8_t *src = wp + n * (K / 2) + b * 64;
            for (int j = 0; j < 64; j += 16) {
                const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + j)));
                const __m512 lo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(bytes, low)), s, c);
                const __m512 hi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(bytes, 4)), s, c);
                const int64_t at = n * K + b * BLOCK + j;
                if (out_bf16) {
                    _mm256_storeu_si256((__m256i *)((uint16_t *)out + at), (__m256i)_mm512_cvtneps_pbh(lo));
                    _mm256_storeu_si256((__m256i *)((uint16_t *)out + at + 64), (__m256i)_mm512_cvtneps_pbh(hi));
                } else {
                    _mm512_storeu_ps((float *)out + at, lo);
                    _mm512_storeu_ps((float *)out + at + 64, hi);
                }
            }
        }
    }
}

// Scratch for the quantized activations of the calling thread, grown as needed (decode calls it with the same
// few shapes every step, so it is allocated once).
typedef struct {
    int8_t *codes;
    float *scales;
    int32_t *sums;
    int64_t capacity;
} Scratch;

static __thread Scratch scratch = {0, 0, 0, 0};

static int reserve(int64_t elements) {
    if (elements <= scratch.capacity) return 1;
    free(scratch.codes);
    free(scratch.scales);
    free(scratch.sums);
    scratch.codes = (int8_t *)malloc((size_t)elements);
    scratch.scales = (float *)malloc((size_t)(elements / BLOCK + 1) * sizeof(float));
    scratch.sums = (int32_t *)malloc((size_t)(elements / BLOCK + 1) * sizeof(int32_t));
    scratch.capacity = (scratch.codes && scratch.scales && scratch.sums) ? elements : 0;
    return scratch.capacity > 0;
}

// One call per product (the Python side pays one foreign call, not three): quantize x, then the product.
// Returns 0 when the scratch could not be allocated (the caller falls back to PyTorch).
int sy_linear_int8(const void *x, int x_bf16, int64_t M, int64_t K, const int8_t *w, const int32_t *wsum,
                   const float *wscale, const float *bias, int64_t N, void *y, int y_bf16) {
    if (!reserve(M * K)) return 0;
    sy_quantize_rows(x, x_bf16, M, K, 1, scratch.codes, scratch.scales, scratch.sums);
    sy_gemv_int8((const uint8_t *)scratch.codes, scratch.scales, M, K, w, wsum, wscale, bias, N, y, y_bf16);
    return 1;
}

int sy_linear_int4(const void *x, int x_bf16, int64_t M, int64_t K, const uint8_t *wp, const float *ws,
                   const float *wc, int64_t group, const float *bias, int64_t N, void *y, int y_bf16) {
    if (!reserve(M * K)) return 0;
    sy_quantize_rows(x, x_bf16, M, K, 0, scratch.codes, scratch.scales, scratch.sums);
    sy_gemv_int4(scratch.codes, scratch.scales, scratch.sums, M, K, wp, ws, wc, group, bias, N, y, y_bf16);
    return 1;
}

// out[n][k] = w[n][k] * scale[n] as bf16 or float: prefill's many rows multiply a dequantized weight (a bf16
// matrix product runs several times faster here than any int8-weight kernel PyTorch has for CPU).
void sy_dequantize_int8(const int8_t *w, const float *scale, int64_t N, int64_t K, void *out, int out_bf16) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const __m512 s = _mm512_set1_ps(scale[n]);
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
            const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + n * K + k)));
            const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(q), s);
            if (out_bf16)
                _mm256_storeu_si256((__m256i *)((uint16_t *)out + n * K + k), (__m256i)_mm512_cvtneps_pbh(v));
            else
                _mm512_storeu_ps((float *)out + n * K + k, v);
        }
        for (; k < K; k++) store_out(out, out_bf16, n * K + k, (float)w[n * K + k] * scale[n]);
    }
}

// out[m] = x[m] / sqrt(mean(x[m]^2) + eps) * w, accumulated in float and rounded once (as PyTorch's fused CPU
// kernel): one call instead of the thirteen operators F.rms_norm dispatches on CPU, twice per decoder layer.
void sy_rms_norm(const void *x, int x_bf16, int64_t M, int64_t H, const void *w, int w_bf16, float eps, void *out) {
    for (int64_t m = 0; m < M; m++) {
        __m512 sq = _mm512_setzero_ps();
        int64_t h = 0;
        for (; h + 16 <= H; h += 16) {
            const __m512 v = load16(x, x_bf16, m * H + h);
            sq = _mm512_fmadd_ps(v, v, sq);
        }
        float sum = _mm512_reduce_add_ps(sq);
        for (; h < H; h++) {
            const float v = x_bf16 ? bf16_to_f32(((const uint16_t *)x)[m * H + h]) : ((const float *)x)[m * H + h];
            sum += v * v;
        }
        const float inv = 1.0f / sqrtf(sum / (float)H + eps);
        const __m512 scale = _mm512_set1_ps(inv);
        for (h = 0; h + 16 <= H; h += 16) {
            const __m512 v = _mm512_mul_ps(_mm512_mul_ps(load16(x, x_bf16, m * H + h), scale), load16(w, w_bf16, h));
            if (x_bf16)
                _mm256_storeu_si256((__m256i *)((uint16_t *)out + m * H + h), (__m256i)_mm512_cvtneps_pbh(v));
            else
                _mm512_storeu_ps((float *)out + m * H + h, v);
        }
        for (; h < H; h++) {
            const float v = x_bf16 ? bf16_to_f32(((const uint16_t *)x)[m * H + h]) : ((const float *)x)[m * H + h];
            const float g = w_bf16 ? bf16_to_f32(((const uint16_t *)w)[h]) : ((const float *)w)[h];
            store_out(out, x_bf16, m * H + h, v * inv * g);
        }
    }
}
