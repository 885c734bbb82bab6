// A decode step's decoder layers in one foreign call: for a few rows (one token per decoding sequence), each
// layer's norms (q/k norms too, as Qwen3 has), projections, rotary embedding, KV-cache write, paged attention,
// feed-forward (a SwiGLU, or an expert mixture's router, top-k experts and shared expert) and residual adds,
// layer after layer, with no Python between them.
//
// Why: at batch 1 a Llama layer is ~100 PyTorch operators and five products; on two cores the operators and
// their Python cost ~0.5 ms a layer, a quarter of a bf16 step and a third of an int8 one. The products are
// gemv.c's (the same kernels the layers call one by one), so only the glue between them is new here.
//
// Numerics follow the PyTorch path step for step: every intermediate the operators round to bf16 is rounded
// here at the same point (projection outputs, the rotated q and k, x * cos before its fused add, the attention
// output, silu(gate) before its product with up, each residual sum). Attention accumulates in float with an
// exact (not online) softmax; as PyTorch's CPU attention kernel does, the exponentials are summed in float and
// rounded to bf16 for the product with the values, and the sum divides the result. A mixture follows moe.py:
// router logits in bf16, softmax and top-k in float, weights rounded to bf16; each expert multiplies the rows
// routed to it in row order, its output is scaled by the row's weight (rounded) and added into the row's sum
// (rounded after each add) in expert order, then the shared expert's sigmoid-gated output is added.
//
// Layouts: activations bf16 [rows][features]; KV cache bf16 [blocks][block_size][kv_heads][head_dim]; query
// head h reads KV head h / (heads / kv_heads); cos and the sign-folded sin [rows][head_dim] (rope.py's
// `cos_sin`), rotating by halves: x * cos + (x2, x1) * sin.

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"

void sy_gemv_bf16(const uint16_t *x, int64_t M, int64_t K, const uint16_t *w, const float *bias, int64_t N,
                  void *y, int y_bf16);
int sy_linear_int8(const void *x, int x_bf16, int64_t M, int64_t K, const int8_t *w, const int32_t *wsum,
                   const float *wscale, const float *bias, int64_t N, void *y, int y_bf16);
int sy_linear_int4(const void *x, int x_bf16, int64_t M, int64_t K, const uint8_t *wp, const float *ws,
                   const float *wc, int64_t group, const float *bias, int64_t N, void *y, int y_bf16);
void sy_rms_norm(const void *x, int x_bf16, int64_t M, int64_t H, const void *w, int w_bf16, float eps, void *out);

enum { SY_BF16 = 0, SY_INT8 = 1, SY_INT4 = 2 };

// One projection's weight, as its layer holds it (decode_layers.py fills these from the modules).
typedef struct {
    int64_t kind;        // SY_BF16, SY_INT8 or SY_INT4
    int64_t n, k;        // outputs, inputs
    int64_t group;       // int4: inputs per scale group
    const void *weight;  // bf16 [n][k]; int8 [n][k]; int4 packed (gemv.c's layout)
    const void *aux1;    // int8: block sums; int4: group scales
    const void *aux2;    // int8: row scales; int4: group offsets
    const float *bias;   // float [n], or NULL
} sy_projection;

// An expert mixture's weights (moe.SparseMoeBlock): the router, each expert's projections, the shared expert.
typedef struct {
    int64_t experts, top_k, normalize, inner;  // routed experts, per token, weights renormalised, width
    sy_projection router;                      // [experts][hidden]
    const sy_projection *gate_up;              // per expert: [2 * inner][hidden]
    const sy_projection *down;                 // per expert: [hidden][inner]
    int64_t shared_inner;                      // the shared expert's width; 0 when there is none
    sy_projection shared_gate_up, shared_down, shared_gate;
    int64_t *routed_tokens;                    // [experts]: rows routed to each, added to
} sy_moe;

typedef struct {
    const void *input_norm;  // [hidden], bf16 or float (sy_decode_batch.norm_bf16)
    const void *post_norm;
    const void *q_norm;      // [head_dim], applied to every q head before the rotation; or NULL
    const void *k_norm;      // [head_dim], the same for k heads; NULL when q_norm is
    sy_projection qkv, o, gate_up, down;  // gate_up and down: the dense feed-forward (unused with moe)
    int64_t inner;           // the dense feed-forward's width
    const sy_moe *moe;       // NULL for a dense layer
    uint16_t *k_cache;
    uint16_t *v_cache;
} sy_decoder_layer;

typedef struct {
    int64_t rows, hidden, heads, kv_heads, head_dim;
    int64_t block_size, table_width;
    const int64_t *block_tables;  // [rows][table_width]
    const int64_t *context_lens;  // [rows], this step's token included
    const int64_t *slots;         // [rows], where this step's key and value go
    const uint16_t *cos;          // [rows][head_dim]
    const uint16_t *sin;          // [rows][head_dim], sign-folded
    int64_t norm_bf16;
    float eps;
    float scale;  // attention's softmax scale
} sy_decode_batch;

static inline __m512 load_bf16x16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

static inline void store_bf16x16(uint16_t *p, __m512 v) {
    _mm256_storeu_si256((__m256i *)p, (__m256i)_mm512_cvtneps_pbh(v));
}

static inline __m512 round_bf16x16(__m512 v) {
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// e^x for x <= 0 (softmax, silu): 2^(x log2 e) as 2^n * p(f), f in [-0.5, 0.5], p a degree-6 polynomial
// (relative error ~2e-7, far below the bf16 rounding that follows).
static inline __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

static int project(const sy_projection *p, const uint16_t *x, int64_t rows, uint16_t *y) {
    switch (p->kind) {
    case SY_BF16:
        sy_gemv_bf16(x, rows, p->k, (const uint16_t *)p->weight, p->bias, p->n, y, 1);
        return 1;
    case SY_INT8:
        return sy_linear_int8(x, 1, rows, p->k, (const int8_t *)p->weight, (const int32_t *)p->aux1,
                              (const float *)p->aux2, p->bias, p->n, y, 1);
    case SY_INT4:
        return sy_linear_int4(x, 1, rows, p->k, (const uint8_t *)p->weight, (const float *)p->aux1,
                              (const float *)p->aux2, p->group, p->bias, p->n, y, 1);
    }
    return 0;
}

// Rotates one head in place: x * cos, rounded, then + (x2, x1) * sin, rounded (apply_rotary's mul, addcmul).
static void rotate(uint16_t *x, const uint16_t *cos, const uint16_t *sin, int64_t head_dim) {
    const int64_t half = head_dim / 2;
    float in[512];
    for (int64_t i = 0; i < head_dim; i++) in[i] = bf16_to_f32(x[i]);
    for (int64_t i = 0; i < head_dim; i++) {
        const float swapped = i < half ? in[i + half] : in[i - half];
        const float scaled = bf16_to_f32(f32_to_bf16(in[i] * bf16_to_f32(cos[i])));
        x[i] = f32_to_bf16(scaled + swapped * bf16_to_f32(sin[i]));
    }
}

// Normalises (with q/k norms) and rotates q and k of every row in `qkv` and stores k and v in the cache slots
// of this step.
static void rotate_and_store(const sy_decode_batch *b, const sy_decoder_layer *layer, uint16_t *qkv) {
    const int64_t hd = b->head_dim, q_size = b->heads * hd, kv_size = b->kv_heads * hd;
    const int64_t width = q_size + 2 * kv_size;
    for (int64_t m = 0; m < b->rows; m++) {
        uint16_t *row = qkv + m * width;
        if (layer->q_norm && layer->k_norm) {  // per head, in place (each row is read before it is written)
            sy_rms_norm(row, 1, b->heads, hd, layer->q_norm, (int)b->norm_bf16, b->eps, row);
            sy_rms_norm(row + q_size, 1, b->kv_heads, hd, layer->k_norm, (int)b->norm_bf16, b->eps, row + q_size);
        }
        for (int64_t h = 0; h < b->heads + b->kv_heads; h++)
            rotate(row + h * hd, b->cos + m * hd, b->sin + m * hd, hd);
        const int64_t slot = b->slots[m];
        memcpy(layer->k_cache + slot * kv_size, row + q_size, (size_t)kv_size * 2);
        memcpy(layer->v_cache + slot * kv_size, row + q_size + kv_size, (size_t)kv_size * 2);
    }
}

// Attention of each row's query heads over its cached keys and values, one (row, KV head) per work item: the
// heads sharing a KV head read each key and value once. Returns 0 when scratch cannot be allocated.
static int attend(const sy_decode_batch *b, const sy_decoder_layer *layer, const uint16_t *qkv, uint16_t *out) {
    const int64_t hd = b->head_dim, group = b->heads / b->kv_heads, kv = b->kv_heads;
    const int64_t q_size = b->heads * hd, width = q_size + 2 * kv * hd, chunks = hd / 16;
    const int64_t items = b->rows * kv;
    int failed = 0;
#pragma omp parallel for schedule(static) reduction(| : failed)
    for (int64_t item = 0; item < items; item++) {
        const int64_t m = item / kv, h = item % kv, length = b->context_lens[m], bs = b->block_size;
        const int64_t *table = b->block_tables + m * b->table_width;
        float *scores = (float *)malloc((size_t)(group * length + group * hd + 16) * sizeof(float));
        if (!scores) {
            failed = 1;
            continue;
        }
        float *acc = scores + group * length;
        __m512 q[16][8];  // [group <= 16][head_dim / 16 <= 8]
        for (int64_t g = 0; g < group; g++)
            for (int64_t c = 0; c < chunks; c++)
                q[g][c] = load_bf16x16(qkv + m * width + (h * group + g) * hd + 16 * c);
        float best[16], total[16];
        for (int64_t g = 0; g < group; g++) best[g] = -INFINITY;
        for (int64_t start = 0; start < length; start += bs) {
            const uint16_t *keys = layer->k_cache + (table[start / bs] * bs * kv + h) * hd;
            const int64_t end = start + bs < length ? start + bs : length;
            for (int64_t p = start; p < end; p++) {
                const uint16_t *key = keys + (p - start) * kv * hd;
                __m512 k[8];
                for (int64_t c = 0; c < chunks; c++) k[c] = load_bf16x16(key + 16 * c);
                for (int64_t g = 0; g < group; g++) {
                    __m512 dot = _mm512_mul_ps(q[g][0], k[0]);
                    for (int64_t c = 1; c < chunks; c++) dot = _mm512_fmadd_ps(q[g][c], k[c], dot);
                    const float s = _mm512_reduce_add_ps(dot) * b->scale;
                    scores[g * length + p] = s;
                    if (s > best[g]) best[g] = s;
                }
            }
        }
        for (int64_t g = 0; g < group; g++) {
            float *row = scores + g * length;
            const __m512 top = _mm512_set1_ps(best[g]);
            __m512 sum = _mm512_setzero_ps();
            int64_t p = 0;
            for (; p + 16 <= length; p += 16) {
                const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + p), top));
                _mm512_storeu_ps(row + p, e);
                sum = _mm512_add_ps(sum, e);
            }
            if (p < length) {
                const __mmask16 tail = (__mmask16)((1u << (length - p)) - 1u);
                const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + p), top));
                _mm512_mask_storeu_ps(row + p, tail, e);
                sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(tail, e));
            }
            total[g] = _mm512_reduce_add_ps(sum);
            for (p = 0; p < length; p++) row[p] = bf16_to_f32(f32_to_bf16(row[p]));
        }
        for (int64_t i = 0; i < group * hd; i++) acc[i] = 0.0f;
        for (int64_t start = 0; start < length; start += bs) {
            const uint16_t *values = layer->v_cache + (table[start / bs] * bs * kv + h) * hd;
            const int64_t end = start + bs < length ? start + bs : length;
            for (int64_t p = start; p < end; p++) {
                const uint16_t *value = values + (p - start) * kv * hd;
                __m512 v[8];
                for (int64_t c = 0; c < chunks; c++) v[c] = load_bf16x16(value + 16 * c);
                for (int64_t g = 0; g < group; g++) {
                    const __m512 weight = _mm512_set1_ps(scores[g * length + p]);
                    for (int64_t c = 0; c < chunks; c++) {
                        float *a = acc + g * hd + 16 * c;
                        _mm512_storeu_ps(a, _mm512_fmadd_ps(weight, v[c], _mm512_loadu_ps(a)));
                    }
                }
            }
        }
        for (int64_t g = 0; g < group; g++) {
            const __m512 inv = _mm512_set1_ps(1.0f / total[g]);
            for (int64_t c = 0; c < chunks; c++)
                store_bf16x16(out + m * q_size + (h * group + g) * hd + 16 * c,
                              _mm512_mul_ps(_mm512_loadu_ps(acc + g * hd + 16 * c), inv));
        }
        free(scores);
    }
    return !failed;
}

// x += y, rounded to bf16 (a residual add of two bf16 tensors).
static void add_into(uint16_t *x, const uint16_t *y, int64_t count) {
    int64_t i = 0;
    for (; i + 16 <= count; i += 16) store_bf16x16(x + i, _mm512_add_ps(load_bf16x16(x + i), load_bf16x16(y + i)));
    for (; i < count; i++) x[i] = f32_to_bf16(bf16_to_f32(x[i]) + bf16_to_f32(y[i]));
}

// out = silu(gate) * up per row of [gate | up], silu rounded to bf16 first (F.silu, then the product).
static void silu_and_mul(const uint16_t *gate_up, int64_t rows, int64_t inner, uint16_t *out) {
    for (int64_t m = 0; m < rows; m++) {
        const uint16_t *gate = gate_up + m * 2 * inner, *up = gate + inner;
        uint16_t *o = out + m * inner;
        int64_t i = 0;
        for (; i + 16 <= inner; i += 16) {
            const __m512 g = load_bf16x16(gate + i);
            const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
            const __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
            store_bf16x16(o + i, _mm512_mul_ps(round_bf16x16(s), load_bf16x16(up + i)));
        }
        for (; i < inner; i++) {
            const float g = bf16_to_f32(gate[i]);
            o[i] = f32_to_bf16(bf16_to_f32(f32_to_bf16(g / (1.0f + expf(-g)))) * bf16_to_f32(up[i]));
        }
    }
}

// Scratch for one mixture layer, sized for the widest in the model.
typedef struct {
    uint16_t *logits;   // [rows][experts]
    uint16_t *rows_in;  // [rows][hidden], the rows routed to one expert
    uint16_t *gate_up;  // [rows][2 * inner]
    uint16_t *act;      // [rows][inner]
    uint16_t *rows_out; // [rows][hidden]
    uint16_t *gate;     // [rows][1], the shared expert's gate
} sy_moe_scratch;

// The mixture's output for `x` (the normed rows, bf16 [rows][hidden]) into `out`, as moe.py computes it.
static int mixture(const sy_decode_batch *b, const sy_moe *moe, const uint16_t *x, uint16_t *out,
                   const sy_moe_scratch *s) {
    const int64_t rows = b->rows, hidden = b->hidden, experts = moe->experts, k = moe->top_k;
    if (!project(&moe->router, x, rows, s->logits)) return 0;
    int64_t chosen[8][16];
    uint16_t weight[8][16];
    for (int64_t m = 0; m < rows; m++) {
        const uint16_t *logits = s->logits + m * experts;
        float top = -INFINITY, total = 0.0f, picked[16], sum = 0.0f;
        for (int64_t e = 0; e < experts; e++) top = fmaxf(top, bf16_to_f32(logits[e]));
        for (int64_t e = 0; e < experts; e++) total += expf(bf16_to_f32(logits[e]) - top);
        for (int64_t j = 0; j < k; j++) {  // the j-th largest logit; ties to the lower expert
            int64_t best = -1;
            for (int64_t e = 0; e < experts; e++) {
                int taken = 0;
                for (int64_t i = 0; i < j; i++) taken |= chosen[m][i] == e;
                if (!taken && (best < 0 || bf16_to_f32(logits[e]) > bf16_to_f32(logits[best]))) best = e;
            }
            chosen[m][j] = best;
            picked[j] = expf(bf16_to_f32(logits[best]) - top) / total;
            sum += picked[j];
        }
        for (int64_t j = 0; j < k; j++) weight[m][j] = f32_to_bf16(moe->normalize ? picked[j] / sum : picked[j]);
    }
    for (int64_t i = 0; i < rows * hidden; i++) out[i] = 0;
    for (int64_t e = 0; e < experts; e++) {
        int64_t routed[8], slot[8], n = 0;
        for (int64_t m = 0; m < rows; m++)
            for (int64_t j = 0; j < k; j++)
                if (chosen[m][j] == e) {
                    routed[n] = m;
                    slot[n++] = j;
                }
        if (!n) continue;
        moe->routed_tokens[e] += n;
        for (int64_t i = 0; i < n; i++) memcpy(s->rows_in + i * hidden, x + routed[i] * hidden, (size_t)hidden * 2);
        if (!project(moe->gate_up + e, s->rows_in, n, s->gate_up)) return 0;
        silu_and_mul(s->gate_up, n, moe->inner, s->act);
        if (!project(moe->down + e, s->act, n, s->rows_out)) return 0;
        for (int64_t i = 0; i < n; i++) {
            const float w = bf16_to_f32(weight[routed[i]][slot[i]]);
            uint16_t *sum_row = out + routed[i] * hidden;
            const uint16_t *y = s->rows_out + i * hidden;
            for (int64_t h = 0; h < hidden; h++)
                sum_row[h] = f32_to_bf16(bf16_to_f32(sum_row[h]) + bf16_to_f32(f32_to_bf16(bf16_to_f32(y[h]) * w)));
        }
    }
    if (moe->shared_inner) {
        if (!project(&moe->shared_gate_up, x, rows, s->gate_up)) return 0;
        silu_and_mul(s->gate_up, rows, moe->shared_inner, s->act);
        if (!project(&moe->shared_down, s->act, rows, s->rows_out) || !project(&moe->shared_gate, x, rows, s->gate))
            return 0;
        for (int64_t m = 0; m < rows; m++) {
            const float g = bf16_to_f32(f32_to_bf16(1.0f / (1.0f + expf(-bf16_to_f32(s->gate[m])))));
            for (int64_t h = 0; h < hidden; h++) {
                const float y = bf16_to_f32(f32_to_bf16(g * bf16_to_f32(s->rows_out[m * hidden + h])));
                out[m * hidden + h] = f32_to_bf16(bf16_to_f32(out[m * hidden + h]) + y);
            }
        }
    }
    return 1;
}

// Runs `count` decoder layers over `hidden` [rows][hidden] (bf16, updated in place) and writes each layer's
// keys and values for this step. Returns 0 (before any layer ran, in practice) when scratch memory could not
// be had; the caller then takes the operator-by-operator path, which writes the same cache slots again.
int sy_decode_layers(const sy_decoder_layer *layers, int64_t count, const sy_decode_batch *b, uint16_t *hidden) {
    const int64_t rows = b->rows, hd = b->head_dim;
    if (b->heads % b->kv_heads || hd % 16 || hd > 128 || b->heads / b->kv_heads > 16 || rows > 8) return 0;
    int64_t inner = 0, experts = 0;  // the widest feed-forward, and the most experts, of any layer
    for (int64_t i = 0; i < count; i++) {
        const sy_moe *moe = layers[i].moe;
        if (!moe) {
            inner = layers[i].inner > inner ? layers[i].inner : inner;
            continue;
        }
        if (moe->top_k > 16 || moe->top_k > moe->experts) return 0;
        inner = moe->inner > inner ? moe->inner : inner;
        inner = moe->shared_inner > inner ? moe->shared_inner : inner;
        experts = moe->experts > experts ? moe->experts : experts;
    }
    const int64_t q_size = b->heads * hd, qkv_size = q_size + 2 * b->kv_heads * hd;
    enum { PARTS = 10 };
    const int64_t sizes[PARTS] = {
        b->hidden, qkv_size, q_size, b->hidden, 2 * inner, inner, experts, b->hidden, b->hidden, 1,
    };
    int64_t total = 0;
    for (int i = 0; i < PARTS; i++) total += rows * sizes[i] + 32;
    uint16_t *memory = (uint16_t *)malloc((size_t)total * 2);
    if (!memory) return 0;
    uint16_t *parts[PARTS];
    parts[0] = memory;
    for (int i = 1; i < PARTS; i++) parts[i] = parts[i - 1] + rows * sizes[i - 1] + 32;
    uint16_t *normed = parts[0], *qkv = parts[1], *attention = parts[2], *projected = parts[3];
    uint16_t *gate_up = parts[4], *act = parts[5];
    const sy_moe_scratch scratch = {parts[6], parts[7], gate_up, act, parts[8], parts[9]};
    const int norm_bf16 = (int)b->norm_bf16;
    int ok = 1;
    for (int64_t i = 0; i < count && ok; i++) {
        const sy_decoder_layer *layer = layers + i;
        sy_rms_norm(hidden, 1, rows, b->hidden, layer->input_norm, norm_bf16, b->eps, normed);
        ok = project(&layer->qkv, normed, rows, qkv);
        if (!ok) break;
        rotate_and_store(b, layer, qkv);
        ok = attend(b, layer, qkv, attention) && project(&layer->o, attention, rows, projected);
        if (!ok) break;
        add_into(hidden, projected, rows * b->hidden);
        sy_rms_norm(hidden, 1, rows, b->hidden, layer->post_norm, norm_bf16, b->eps, normed);
        if (layer->moe) {
            ok = mixture(b, layer->moe, normed, projected, &scratch);
        } else {
            ok = project(&layer->gate_up, normed, rows, gate_up);
            if (!ok) break;
            silu_and_mul(gate_up, rows, layer->inner, act);
            ok = project(&layer->down, act, rows, projected);
        }
        if (ok) add_into(hidden, projected, rows * b->hidden);
    }
    free(memory);
    return ok;
}
