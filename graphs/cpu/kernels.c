/*
 * graphs/cpu/kernels.c - the row kernels of the CPU forward pass: RMSNorm,
 * GELU and SiLU, RoPE, and the fp16 pieces of attention in ggml's order,
 * each in scalar code and, where sd_quant_get_impl() says AVX2, in AVX2 code
 * that gives the same bits.
 */
#include <math.h>
#include <pthread.h>

#include "graphs/cpu/attention.h"
#include "graphs/cpu/forward_internal.h"
#include "graphs/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SD_X86 1
#endif

/* ------------------------------------------- norms, activations, RoPE */

static void rmsnorm(float *out, const float *in, const float *w, int64_t n, float eps);

/* The model's RMSNorm in the order of the graph's kernels: ggml's (double
 * sum) or the fast one (graphs/cpu/attention.h). */
void sd_norm(const struct sd_fwd *f, float *out, const float *in, const float *w, int64_t n) {
    if (f->fast_order) {
        sd_rmsnorm_fast(out, in, w, n, f->m->cfg.norm_eps);
    } else {
        rmsnorm(out, in, w, n, f->m->cfg.norm_eps);
    }
}

/* RMSNorm of n values with weight w (Gemma's (1 + w) is stored in the file
 * already). As ggml computes it: squares in float, summed in double in
 * index order. */
static void rmsnorm(float *out, const float *in, const float *w, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)(in[i] * in[i]);
    float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) out[i] = in[i] * scale * w[i];
}

/* GELU (tanh form) evaluated the way ggml's CPU backend does it: the input
 * rounded to fp16, the result rounded to fp16, saturating beyond +-10. The
 * fp16 rounding (relative 5e-4) is far below the activation quantization
 * that follows, and matching the peer's rounding keeps the two engines'
 * logits close enough that their greedy choices agree. */
static float gelu_tanh_f16(uint16_t x16) {
    float h = sd_fp16_to_fp32(x16);
    const float c = 0.79788456080286535587989211986876f; /* sqrt(2/pi) */
    /* 1 + a h^2 as one fused multiply-add, as the compiler builds ggml's. */
    float g = 0.5f * h * (1.0f + tanhf(c * h * fmaf(0.044715f * h, h, 1.0f)));
    return sd_fp16_to_fp32(sd_fp32_to_fp16(g));
}

/* The input is rounded to fp16 first, so every value GELU can return sits
 * in a table of 65,536 entries, filled once: the same numbers as computing
 * it, without a tanhf per element. */
static float gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_fill(void) {
    for (uint32_t i = 0; i < (1u << 16); i++) gelu_table[i] = gelu_tanh_f16((uint16_t)i);
}

static float gelu_tanh(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return gelu_table[sd_fp32_to_fp16(x)];
}

void sd_gelu_init(void) { pthread_once(&gelu_once, gelu_table_fill); }

/* RoPE's rotations for one position, as ggml computes them: theta advances
 * by repeated multiplication. cs[i], cs[hd / 2 + i] = cos, sin of pair i.
 * Every head of a row at the same position and base shares them. */
void sd_rope_table(float *cs, int32_t hd, int32_t pos, float base, float freq_scale, const float *freq_factors) {
    const float theta_scale = powf(base, -2.0f / (float)hd);
    float theta = (float)pos;
    for (int32_t i = 0; i < hd / 2; i++) {
        float t = theta * freq_scale;
        if (freq_factors) t = theta / freq_factors[i] * freq_scale;
        cs[i] = cosf(t);
        cs[hd / 2 + i] = sinf(t);
        theta *= theta_scale;
    }
}

/* Pair i of one head rotated by sd_rope_table's cs: fused as the compiler
 * fuses ggml's a*c - b*s and a*s + b*c. */
static void rope_pair(float *x, int32_t hd, const float *cs, enum sd_rope_kind kind, int32_t i) {
    const float c = cs[i], s = cs[hd / 2 + i];
    const int32_t i0 = kind == SD_ROPE_NEOX ? i : 2 * i;
    const int32_t i1 = kind == SD_ROPE_NEOX ? i + hd / 2 : 2 * i + 1;
    const float a = x[i0], b = x[i1];
    x[i0] = fmaf(a, c, -(b * s));
    x[i1] = fmaf(a, s, b * c);
}

static void rope_head_scalar(float *x, int32_t hd, const float *cs, enum sd_rope_kind kind) {
    for (int32_t i = 0; i < hd / 2; i++) rope_pair(x, hd, cs, kind, i);
}

/* ------------------------------------------------ fp16 row kernels */

/* Attention is computed the way ggml's CPU backend computes it without
 * flash attention, with its reference kernels (the peer of the conformance
 * tests, built for AVX-512): q is rounded to fp16 for the q.k product; the
 * softmax uses ggml's polynomial exp; the probabilities are rounded to fp16
 * for the product with V; and the sums are ggml_vec_dot_f16's: 64 lanes
 * (four vectors of 16) over the head dimension for q.k and over the key
 * position for p.V, folded to 16 and reduced in _mm512_reduce_add_ps's
 * tree, and the softmax sum in blocks of 16 positions. Every product is
 * of two fp16 values, exact in f32, so the scalar and SIMD versions below
 * give the same bits. Lanes follow the key's position, not its cache
 * slot, so a row's result does not depend on where its keys sit (batch
 * invariance, lossless tree verification). */

/* Sixteen lanes summed as _mm512_reduce_add_ps sums them: halves, then
 * quarters, then (0+2) + (1+3). a[i * stride] is lane i. */
float sd_reduce16(const float *a, size_t stride) {
    float t3[8], t6[4];
    for (int i = 0; i < 8; i++) t3[i] = a[(size_t)(i + 8) * stride] + a[(size_t)i * stride];
    for (int i = 0; i < 4; i++) t6[i] = t3[i + 4] + t3[i];
    return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

/* Sixteen values replaced by ggml_expf(v - mx). */
void sd_expf16(float *v, float mx) { sd_expf_sub(v, 16, mx); }

static float fp16_round(float x) { return sd_fp16_to_fp32(sd_fp32_to_fp16(x)); }

/* SiLU as ggml's SwiGLU computes it past a row's last whole vector of 16
 * (sd_silu_mul does the vectors): with libm's expf. */
static float silu_tail(float x) { return x / (1.0f + expf(-x)); }

/* ggml_vec_dot_f16's fold of its four 16-lane accumulators (a[l * stride]
 * is lane l of 64): (0 + 2) + (1 + 3), then sd_reduce16. */
static float fold64(const float *a, size_t stride) {
    float v[16];
    for (int l = 0; l < 16; l++)
        v[l] = (a[(size_t)l * stride] + a[(size_t)(l + 32) * stride]) +
               (a[(size_t)(l + 16) * stride] + a[(size_t)(l + 48) * stride]);
    return sd_reduce16(v, 1);
}

/* The kernels below take both operands as floats: q (or p) already holds
 * fp16 values and k (or v) is an fp16 row converted once (exactly) for all
 * the query heads that share it, so every product is of two fp16 values
 * and exact in f32, as in ggml_vec_dot_f16. */

/* q . k over n values as ggml_vec_dot_f16: 64 lanes, fold64, and a tail
 * past a multiple of 64 added in double. */
static float dot64_scalar(const float *q, const float *k, int32_t n) {
    float acc[64] = {0};
    int32_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 64; j++) acc[j] += q[i + j] * k[i + j];
    double s = fold64(acc, 1);
    for (; i < n; i++) s += (double)(q[i] * k[i]);
    return (float)s;
}

/* out += p * v over n values. */
static void axpy_scalar(float *out, float p, const float *v, int32_t n) {
    for (int32_t i = 0; i < n; i++) out[i] += p * v[i];
}

/* out[d] = fold64 of the 64 lane vectors acc[l * n + d], d < n. */
static void fold64_rows_scalar(const float *acc, int32_t n, float *out) {
    for (int32_t d = 0; d < n; d++) out[d] = fold64(acc + d, (size_t)n);
}

static void f16_to_f32_row_scalar(const uint16_t *src, float *dst, int32_t n) {
    for (int32_t i = 0; i < n; i++) dst[i] = sd_fp16_to_fp32(src[i]);
}

#ifdef SD_X86
#define TGT_F16 __attribute__((target("avx2,fma,f16c")))

/* fold64 of lanes held as eight vectors (lane l in a[l / 8], slot l % 8),
 * the same additions as the scalar fold64 and sd_reduce16, vector-wide. */
TGT_F16 static inline float fold64_8(const __m256 a[8]) {
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])); /* v[0..8) */
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])); /* v[8..16) */
    const __m256 t3 = _mm256_add_ps(hi, lo);
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 u = _mm_add_ps(t6, _mm_movehl_ps(t6, t6));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

TGT_F16 static float dot64_avx2(const float *q, const float *k, int32_t n) {
    __m256 acc[8];
    for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 8; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8 * j), _mm256_loadu_ps(k + i + 8 * j), acc[j]);
    double s = fold64_8(acc);
    for (; i < n; i++) s += (double)(q[i] * k[i]);
    return (float)s;
}

TGT_F16 static void axpy_avx2(float *out, float p, const float *v, int32_t n) {
    const __m256 pv = _mm256_set1_ps(p);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(out + i)));
    for (; i < n; i++) out[i] += p * v[i];
}

/* Eight outputs at a time: lane vector l of outputs d..d+7 is
 * acc[l * n + d ..]; the additions are fold64's, per output. */
TGT_F16 static void fold64_rows_avx2(const float *acc, int32_t n, float *out) {
    int32_t d = 0;
    for (; d + 8 <= n; d += 8) {
        __m256 v[16];
        for (int l = 0; l < 16; l++) {
            const float *a = acc + d;
            v[l] = _mm256_add_ps(
                _mm256_add_ps(_mm256_loadu_ps(a + (size_t)l * n), _mm256_loadu_ps(a + (size_t)(l + 32) * n)),
                _mm256_add_ps(_mm256_loadu_ps(a + (size_t)(l + 16) * n), _mm256_loadu_ps(a + (size_t)(l + 48) * n)));
        }
        __m256 t3[8], t6[4];
        for (int i = 0; i < 8; i++) t3[i] = _mm256_add_ps(v[i + 8], v[i]);
        for (int i = 0; i < 4; i++) t6[i] = _mm256_add_ps(t3[i + 4], t3[i]);
        _mm256_storeu_ps(out + d, _mm256_add_ps(_mm256_add_ps(t6[0], t6[2]), _mm256_add_ps(t6[1], t6[3])));
    }
    for (; d < n; d++) out[d] = fold64(acc + d, (size_t)n);
}

TGT_F16 static void f16_to_f32_row_avx2(const uint16_t *src, float *dst, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = sd_fp16_to_fp32(src[i]);
}

/* dst[i] = fp16_round(src[i] * scale): F16C rounds to nearest even, as
 * sd_fp32_to_fp16 does. */
TGT_F16 static void fp16_round_scaled_avx2(float *dst, const float *src, float scale, int32_t n) {
    const __m256 s = _mm256_set1_ps(scale);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(src + i), s), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) dst[i] = fp16_round(src[i] * scale);
}

/* gate[i] = gelu_tanh(gate[i]) * up[i] (the table looked up by gather). */
TGT_F16 static void gelu_mul_avx2(float *gate, const float *up, int64_t n) {
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i);
        const __m256i idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        __m256 g = _mm256_i32gather_ps(gelu_table, idx, 4);
        g = _mm256_blendv_ps(g, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
        g = _mm256_blendv_ps(g, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) gate[i] = gelu_tanh(gate[i]) * up[i];
}

/* rope_head_scalar, eight NEOX pairs (values hd / 2 apart) at a time with
 * the same fused operations: without fma instructions each fmaf is a
 * library call. */
TGT_F16 static void rope_head_avx2(float *x, int32_t hd, const float *cs, enum sd_rope_kind kind) {
    const int32_t h = hd / 2;
    int32_t i = 0;
    if (kind == SD_ROPE_NEOX)
        for (; i + 8 <= h; i += 8) {
            const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(cs + h + i);
            const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + h + i);
            const __m256 nbs = _mm256_xor_ps(_mm256_mul_ps(b, s), _mm256_set1_ps(-0.0f)); /* -(b * s) */
            _mm256_storeu_ps(x + i, _mm256_fmadd_ps(a, c, nbs));
            _mm256_storeu_ps(x + h + i, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
        }
    for (; i < h; i++) rope_pair(x, hd, cs, kind, i);
}

TGT_F16 static void f32_to_f16_row_avx2(const float *src, uint16_t *dst, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = sd_fp32_to_fp16(src[i]);
}
#endif

static bool use_avx2(void) { return sd_quant_get_impl() == SD_IMPL_AVX2; }

void sd_rope_head(float *x, int32_t hd, const float *cs, enum sd_rope_kind kind) {
#ifdef SD_X86
    if (use_avx2()) {
        rope_head_avx2(x, hd, cs, kind);
        return;
    }
#endif
    rope_head_scalar(x, hd, cs, kind);
}

float sd_dot64(const float *q, const float *k, int32_t n) {
#ifdef SD_X86
    if (use_avx2()) return dot64_avx2(q, k, n);
#endif
    return dot64_scalar(q, k, n);
}

void sd_axpy(float *out, float p, const float *v, int32_t n) {
#ifdef SD_X86
    if (use_avx2()) {
        axpy_avx2(out, p, v, n);
        return;
    }
#endif
    axpy_scalar(out, p, v, n);
}

void sd_fold64_rows(const float *acc, int32_t n, float *out) {
#ifdef SD_X86
    if (use_avx2()) {
        fold64_rows_avx2(acc, n, out);
        return;
    }
#endif
    fold64_rows_scalar(acc, n, out);
}

void sd_fp16_round_scaled(float *dst, const float *src, float scale, int32_t n) {
#ifdef SD_X86
    if (use_avx2()) {
        fp16_round_scaled_avx2(dst, src, scale, n);
        return;
    }
#endif
    for (int32_t i = 0; i < n; i++) dst[i] = fp16_round(src[i] * scale);
}

void sd_f16_to_f32_row(const uint16_t *src, float *dst, int32_t n) {
#ifdef SD_X86
    if (use_avx2()) {
        f16_to_f32_row_avx2(src, dst, n);
        return;
    }
#endif
    f16_to_f32_row_scalar(src, dst, n);
}

void sd_f32_to_f16_row(const float *src, uint16_t *dst, int32_t n) {
#ifdef SD_X86
    if (use_avx2()) {
        f32_to_f16_row_avx2(src, dst, n);
        return;
    }
#endif
    for (int32_t i = 0; i < n; i++) dst[i] = sd_fp32_to_fp16(src[i]);
}

/* gate[i] = act(gate[i]) * up[i] for i in [b, e) of the batch's values. */
void sd_act_span(struct sd_fwd *f, int64_t b, int64_t e) {
    const bool gelu = f->m->cfg.gelu;
    const int64_t n_vec = f->n_ff / 16 * 16;
#ifdef SD_X86
    if (gelu && use_avx2()) {
        gelu_mul_avx2(f->gate + b, f->up + b, e - b);
        return;
    }
#endif
    if (gelu) {
        for (int64_t i = b; i < e; i++) f->gate[i] = gelu_tanh(f->gate[i]) * f->up[i];
        return;
    }
    /* Row by row: the vector part of each row in one call, its tail with
     * libm's expf. */
    for (int64_t i = b; i < e;) {
        const int64_t row = i / f->n_ff * f->n_ff, v_end = SD_MIN(e, row + n_vec);
        if (i < v_end) {
            sd_silu_mul(f->gate + i, f->up + i, v_end - i);
            i = v_end;
        }
        for (const int64_t r_end = SD_MIN(e, row + f->n_ff); i < r_end; i++) f->gate[i] = silu_tail(f->gate[i]) * f->up[i];
    }
}
