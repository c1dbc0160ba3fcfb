/*
 * graphs/cpu/forward.c - the CPU implementation of graphs/forward.h.
 *
 * Attention runs here, on the CPU side, against the KV cache: mobile NPU
 * engines keep attention over the growing cache off the static graph too
 * (the paper's footnote), because its length changes every step while the
 * projections and FFN have fixed shapes.
 */
#include "graphs/forward.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "graphs/cpu/attention.h"
#include "graphs/matmul.h"
#include "graphs/packed.h"
#include "graphs/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SD_X86 1
#endif

/* Activation buffers, one per form that weights ask for: quantized to the
 * weight type's vec_dot type, or (F16/BF16 weights) floats rounded to the
 * weight's precision, as ggml converts activations for half-precision
 * weights; F32 weights read the floats directly. Packed weights
 * (graphs/packed.h) read their own three classes. */
enum { XQ_Q8_0, XQ_Q8_1, XQ_Q8_K, XQ_F16, XQ_BF16, XQ_P32, XQ_PK, XQ_PF, XQ_N };

/* A weight type of each packed activation class. */
static const enum sd_type xq_packed_type[3] = {SD_TYPE_Q8_0, SD_TYPE_Q4_K, SD_TYPE_F32};

/* RoPE's rotations of a batch's rows for one base (rope_table's values),
 * kept from the layer that computed them for the later layers of the pass
 * with the same base, and for the pass's later blocks (whose graphs share
 * these buffers): Gemma 3 has two bases, and a pass of 18 layers computed
 * the same tables 18 times. A run reads them only when everything
 * rope_table reads is the same. */
enum { ROPE_TABLES = 2 };
struct rope_tables {
    bool valid;
    float base, scale;
    const float *factors;
    int32_t n;
    int32_t *pos; /* [max_rows] */
    float *cs;    /* [max_rows][hd] */
};

/* The buffers a forward pass writes: everything of a run but the weights.
 * A run leaves nothing in them that the next run reads (the backends copy
 * the residual stream in and out; the RoPE tables are read only where
 * their key matches), so graphs that never run at once can share one:
 * those of one backend with the same row count and context do, through
 * struct sd_fwd_share. */
struct sd_fwd_buf {
    int32_t max_rows, n_ctx, n_threads;
    int refs;
    float *x;      /* [max_rows][d] residual stream */
    float *h;      /* [max_rows][max(d, nq)] normed input, attention output */
    float *q;      /* [max_rows][nq] */
    float *k;      /* [max_rows][nkv] */
    float *v;      /* [max_rows][nkv] */
    float *o;      /* [max_rows][d] projection output */
    float *gate;   /* [max_rows][n_ff] */
    float *up;     /* [max_rows][n_ff] */
    void *xq[XQ_N]; /* [max_rows][row bytes of max(d, nq, n_ff) in that type] */
    size_t xq_row[XQ_N];
    float *scores; /* [n_threads][attn_scratch(...)]: see attn_run */
    float *rope_mem; /* the tables' floats: [ROPE_TABLES][max_rows][hd + 1] */
    struct rope_tables rope[ROPE_TABLES];
    int rope_next; /* the table a new key takes */
    size_t bytes;
    struct sd_fwd_buf *next; /* on its share's list */
};

struct sd_fwd_share {
    pthread_mutex_t mu; /* prepares on a loader thread attach while the session's thread releases */
    struct sd_fwd_buf *bufs;
    size_t bytes;
};

/* A graph's forward pass: its model (weights) bound to a set of buffers,
 * whose pointers it copies so that the kernels read them in one step. */
struct sd_fwd {
    const struct sd_model *m;
    struct sd_pool *pool;
    int32_t max_rows, n_ctx, n_threads;
    int32_t d, nq, nkv, n_ff, hd;
    float *x, *h, *q, *k, *v, *o, *gate, *up, *scores; /* buf's, as in struct sd_fwd_buf */
    void *xq[XQ_N];
    size_t xq_row[XQ_N];
    struct sd_fwd_buf *buf;
    struct sd_fwd_share *share; /* NULL: buf is this pass's own */
    bool fast_order; /* attention and RMSNorm in graphs/cpu/attention.h's order, not ggml's */
    struct sd_amax *amax; /* [n_threads][max_rows]: each thread's part of the head's argmax */
};

/* ------------------------------------------------------------ helpers */

static void rmsnorm(float *out, const float *in, const float *w, int64_t n, float eps);

/* The model's RMSNorm in the order of the graph's kernels: ggml's (double
 * sum) or the fast one (graphs/cpu/attention.h). */
static void norm(const struct sd_fwd *f, float *out, const float *in, const float *w, int64_t n) {
    if (f->fast_order) {
        sd_rmsnorm_fast(out, in, w, n, f->m->cfg.norm_eps);
    } else {
        rmsnorm(out, in, w, n, f->m->cfg.norm_eps);
    }
}

static int xq_index(const struct sd_weight *w) {
    const enum sd_type wtype = w->type;
    if (w->packed)
        for (int i = 0; i < 3; i++)
            if (sd_packed_act_same(wtype, xq_packed_type[i])) return XQ_P32 + i;
    if (wtype == SD_TYPE_F16) return XQ_F16;
    if (wtype == SD_TYPE_BF16) return XQ_BF16;
    switch (sd_type_get(wtype)->vec_dot_type) {
    case SD_TYPE_Q8_0: return XQ_Q8_0;
    case SD_TYPE_Q8_1: return XQ_Q8_1;
    case SD_TYPE_Q8_K: return XQ_Q8_K;
    default: return -1;
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


/* RoPE's rotations for one position, as ggml computes them: theta advances
 * by repeated multiplication. cs[i], cs[hd / 2 + i] = cos, sin of pair i.
 * Every head of a row at the same position and base shares them. */
#define SD_ROPE_MAX_HD 1024
static void rope_table(float *cs, int32_t hd, int32_t pos, float base, float freq_scale, const float *freq_factors) {
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

/* Pair i of one head rotated by rope_table's cs: fused as the compiler
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
static float reduce16(const float *a, size_t stride) {
    float t3[8], t6[4];
    for (int i = 0; i < 8; i++) t3[i] = a[(size_t)(i + 8) * stride] + a[(size_t)i * stride];
    for (int i = 0; i < 4; i++) t6[i] = t3[i + 4] + t3[i];
    return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

/* Sixteen values replaced by ggml_expf(v - mx). */
static void expf16(float *v, float mx) { sd_expf_sub(v, 16, mx); }

static float fp16_round(float x) { return sd_fp16_to_fp32(sd_fp32_to_fp16(x)); }

/* SiLU as ggml's SwiGLU computes it: with its exp over whole vectors of 16,
 * and libm's expf for the last n % 16 values of a row. */
static float silu(float x, bool vector_part) { return x / (1.0f + (vector_part ? sd_expf(-x) : expf(-x))); }

/* ggml_vec_dot_f16's fold of its four 16-lane accumulators (a[l * stride]
 * is lane l of 64): (0 + 2) + (1 + 3), then reduce16. */
static float fold64(const float *a, size_t stride) {
    float v[16];
    for (int l = 0; l < 16; l++)
        v[l] = (a[(size_t)l * stride] + a[(size_t)(l + 32) * stride]) +
               (a[(size_t)(l + 16) * stride] + a[(size_t)(l + 48) * stride]);
    return reduce16(v, 1);
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
 * the same additions as the scalar fold64 and reduce16, vector-wide. */
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
 * the same fused operations; without fma instructions each fmaf was a
 * library call, and RoPE took 17 us a layer at 8 rows. */
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

static void rope_head(float *x, int32_t hd, const float *cs, enum sd_rope_kind kind) {
#ifdef SD_X86
    if (use_avx2()) {
        rope_head_avx2(x, hd, cs, kind);
        return;
    }
#endif
    rope_head_scalar(x, hd, cs, kind);
}

static float dot64(const float *q, const float *k, int32_t n) {
#ifdef SD_X86
    if (use_avx2()) return dot64_avx2(q, k, n);
#endif
    return dot64_scalar(q, k, n);
}

static void axpy(float *out, float p, const float *v, int32_t n) {
#ifdef SD_X86
    if (use_avx2()) {
        axpy_avx2(out, p, v, n);
        return;
    }
#endif
    axpy_scalar(out, p, v, n);
}

static void fold64_rows(const float *acc, int32_t n, float *out) {
#ifdef SD_X86
    if (use_avx2()) {
        fold64_rows_avx2(acc, n, out);
        return;
    }
#endif
    fold64_rows_scalar(acc, n, out);
}

static void fp16_round_scaled(float *dst, const float *src, float scale, int32_t n) {
#ifdef SD_X86
    if (use_avx2()) {
        fp16_round_scaled_avx2(dst, src, scale, n);
        return;
    }
#endif
    for (int32_t i = 0; i < n; i++) dst[i] = fp16_round(src[i] * scale);
}

static void f16_to_f32_row(const uint16_t *src, float *dst, int32_t n) {
#ifdef SD_X86
    if (use_avx2()) {
        f16_to_f32_row_avx2(src, dst, n);
        return;
    }
#endif
    f16_to_f32_row_scalar(src, dst, n);
}

static void f32_to_f16_row(const float *src, uint16_t *dst, int32_t n) {
#ifdef SD_X86
    if (use_avx2()) {
        f32_to_f16_row_avx2(src, dst, n);
        return;
    }
#endif
    for (int32_t i = 0; i < n; i++) dst[i] = sd_fp32_to_fp16(src[i]);
}

/* ------------------------------------------------------------ create */

/* Floats of attention scratch per thread, for up to `group` query heads
 * that share a K/V head (see attn_run). One row (attend): per head its
 * scores indexed by key position (a span of up to n_ctx + max_rows, rounded
 * out to whole blocks of 16), 64 lane accumulators, the rounded q and its
 * maximum score; the slots by position; one K or V row converted to
 * floats. A tile of up to ATTN_TILE rows (attend_tile): per row its slots,
 * its heads' scores and q. */
enum { ATTN_TILE = 4 };

static size_t attn_span_cap(int32_t max_rows, int32_t n_ctx) { return (size_t)n_ctx + (size_t)max_rows + 32; }

static size_t attn_tile_row(int32_t max_rows, int32_t n_ctx, int32_t hd, int32_t group) {
    return ((size_t)group + 1) * attn_span_cap(max_rows, n_ctx) + (size_t)group * (size_t)hd;
}

static size_t attn_scratch(int32_t max_rows, int32_t n_ctx, int32_t hd, int32_t group) {
    const size_t one = ((size_t)group + 1) * attn_span_cap(max_rows, n_ctx) + (size_t)group * (65 * (size_t)hd + 1) + (size_t)hd;
    return SD_MAX(one, ATTN_TILE * attn_tile_row(max_rows, n_ctx, hd, group));
}

/* Bytes of one row of activation buffer i for inputs of up to wmax values
 * (a whole number of 256). */
static size_t xq_row_bytes(int i, int64_t wmax) {
    if (i >= XQ_P32) return sd_packed_act_row_bytes(xq_packed_type[i - XQ_P32], wmax);
    const enum sd_type t[] = {SD_TYPE_Q8_0, SD_TYPE_Q8_1, SD_TYPE_Q8_K, SD_TYPE_F32, SD_TYPE_F32};
    size_t rb = 0;
    sd_row_size(t[i], wmax, &rb);
    return rb;
}

/* The floats of each float buffer of struct sd_fwd_buf (x, h, q, k, v, o,
 * gate, up, scores, rope_mem) for these arguments; returns the widest input
 * rounded up to a whole Q8_K block, which sizes the rows of every xq buffer. */
enum { FWD_FLOAT_BUFS = 10 };
static size_t buf_floats(const struct sd_model_config *c, int32_t max_rows, int32_t n_ctx, int n_threads,
                         size_t n[FWD_FLOAT_BUFS]) {
    const size_t R = (size_t)max_rows, d = (size_t)c->d_model, nq = (size_t)c->n_head * (size_t)c->head_dim;
    const size_t nkv = (size_t)c->n_head_kv * (size_t)c->head_dim, ff = (size_t)c->n_ff;
    const size_t sizes[FWD_FLOAT_BUFS] = {
        R * d,  R * SD_MAX(d, nq), R * nq, R * nkv, R * nkv, R * d, R * ff, R * ff,
        (size_t)n_threads * attn_scratch(max_rows, n_ctx, c->head_dim, c->n_head / c->n_head_kv),
        ROPE_TABLES * R * ((size_t)c->head_dim + 1)};
    memcpy(n, sizes, sizeof sizes);
    return (SD_MAX(SD_MAX(d, nq), ff) + 255) / 256 * 256;
}

size_t sd_fwd_estimate(const struct sd_model *m, int32_t max_rows, int32_t n_ctx, int n_threads) {
    size_t n[FWD_FLOAT_BUFS], bytes = 0;
    const size_t wmax = buf_floats(&m->cfg, max_rows, n_ctx, n_threads, n);
    for (int i = 0; i < FWD_FLOAT_BUFS; i++) bytes += n[i] * sizeof(float);
    for (int i = 0; i < XQ_N; i++) bytes += xq_row_bytes(i, (int64_t)wmax) * (size_t)max_rows;
    return bytes;
}

static void buf_free(struct sd_fwd_buf *b) {
    if (!b) return;
    float *bufs[] = {b->x, b->h, b->q, b->k, b->v, b->o, b->gate, b->up, b->scores, b->rope_mem};
    for (size_t i = 0; i < SD_ARRAY_LEN(bufs); i++) sd_aligned_free(bufs[i]);
    for (int i = 0; i < XQ_N; i++) sd_aligned_free(b->xq[i]);
    sd_free(b);
}

/* Allocate every buffer of a pass of max_rows rows over n_ctx slots:
 * exactly sd_fwd_estimate's bytes. NULL when out of memory. */
static struct sd_fwd_buf *buf_alloc(const struct sd_model_config *c, int32_t max_rows, int32_t n_ctx, int n_threads) {
    struct sd_fwd_buf *b = sd_calloc(1, sizeof *b);
    if (!b) return NULL;
    b->max_rows = max_rows;
    b->n_ctx = n_ctx;
    b->n_threads = n_threads;
    const size_t R = (size_t)max_rows;
    size_t sizes[FWD_FLOAT_BUFS];
    const size_t wmax = buf_floats(c, max_rows, n_ctx, n_threads, sizes);
    float **bufs[FWD_FLOAT_BUFS] = {&b->x, &b->h, &b->q, &b->k, &b->v, &b->o, &b->gate, &b->up, &b->scores, &b->rope_mem};
    for (size_t i = 0; i < FWD_FLOAT_BUFS; i++) {
        *bufs[i] = sd_aligned_alloc(sizes[i] * sizeof(float));
        if (!*bufs[i]) goto oom;
        memset(*bufs[i], 0, sizes[i] * sizeof(float));
        b->bytes += sizes[i] * sizeof(float);
    }
    for (int i = 0; i < ROPE_TABLES; i++) {
        b->rope[i].cs = b->rope_mem + (size_t)i * R * ((size_t)c->head_dim + 1);
        b->rope[i].pos = (int32_t *)(b->rope[i].cs + R * (size_t)c->head_dim);
    }
    for (int i = 0; i < XQ_N; i++) {
        b->xq_row[i] = xq_row_bytes(i, (int64_t)wmax);
        b->xq[i] = sd_aligned_alloc(b->xq_row[i] * R);
        if (!b->xq[i]) goto oom;
        b->bytes += b->xq_row[i] * R;
    }
    return b;
oom:
    buf_free(b);
    return NULL;
}

/* The share's buffers for this shape, if it holds them (under its lock). */
static struct sd_fwd_buf *share_find(const struct sd_fwd_share *s, int32_t max_rows, int32_t n_ctx, int n_threads) {
    for (struct sd_fwd_buf *b = s->bufs; b; b = b->next)
        if (b->max_rows == max_rows && b->n_ctx == n_ctx && b->n_threads == n_threads) return b;
    return NULL;
}

/* Buffers for f: the share's of that shape (one more user), new ones added
 * to the share, or, without a share, f's own. */
static struct sd_fwd_buf *buf_get(struct sd_fwd *f, const struct sd_model_config *c) {
    struct sd_fwd_share *s = f->share;
    if (!s) return buf_alloc(c, f->max_rows, f->n_ctx, f->n_threads);
    pthread_mutex_lock(&s->mu);
    struct sd_fwd_buf *b = share_find(s, f->max_rows, f->n_ctx, f->n_threads);
    if (!b && (b = buf_alloc(c, f->max_rows, f->n_ctx, f->n_threads))) {
        b->next = s->bufs;
        s->bufs = b;
        s->bytes += b->bytes;
    }
    if (b) b->refs++;
    pthread_mutex_unlock(&s->mu);
    return b;
}

/* One user fewer; the last frees them. */
static void buf_put(struct sd_fwd_share *s, struct sd_fwd_buf *b) {
    if (!s) {
        buf_free(b);
        return;
    }
    pthread_mutex_lock(&s->mu);
    if (--b->refs == 0) {
        struct sd_fwd_buf **p = &s->bufs;
        while (*p != b) p = &(*p)->next;
        *p = b->next;
        s->bytes -= b->bytes;
        buf_free(b);
    }
    pthread_mutex_unlock(&s->mu);
}

int sd_fwd_create(const struct sd_model *m, int32_t max_rows, int32_t n_ctx, struct sd_pool *pool,
                  struct sd_fwd_share *share, struct sd_fwd **out, struct sd_err *err) {
    *out = NULL;
    if (max_rows <= 0 || max_rows > SD_MAX_BATCH_ROWS)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "batch of %d rows: must be 1..%d", max_rows, SD_MAX_BATCH_ROWS);
    if (m->cfg.head_dim > SD_ROPE_MAX_HD)
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "head dimension %d: at most %d", m->cfg.head_dim, SD_ROPE_MAX_HD);
    pthread_once(&gelu_once, gelu_table_fill);
    struct sd_fwd *f = sd_calloc(1, sizeof *f);
    if (!f) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for forward scratch");
    const struct sd_model_config *c = &m->cfg;
    f->m = m;
    f->pool = pool;
    f->share = share;
    f->max_rows = max_rows;
    f->n_ctx = n_ctx;
    f->n_threads = sd_pool_n_threads(pool);
    f->d = c->d_model;
    f->hd = c->head_dim;
    f->nq = c->n_head * c->head_dim;
    f->nkv = c->n_head_kv * c->head_dim;
    f->n_ff = c->n_ff;
    struct sd_fwd_buf *b = f->buf = buf_get(f, c);
    if (!b) {
        sd_free(f);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for forward scratch (%d rows, %d context)", max_rows,
                          n_ctx);
    }
    f->amax = sd_calloc((size_t)f->n_threads * (size_t)max_rows, sizeof *f->amax);
    if (!f->amax) {
        buf_put(share, b);
        sd_free(f);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for forward scratch (%d rows)", max_rows);
    }
    assert(b->bytes == sd_fwd_estimate(m, max_rows, b->n_ctx, f->n_threads));
    f->x = b->x, f->h = b->h, f->q = b->q, f->k = b->k, f->v = b->v;
    f->o = b->o, f->gate = b->gate, f->up = b->up, f->scores = b->scores;
    memcpy(f->xq, b->xq, sizeof f->xq);
    memcpy(f->xq_row, b->xq_row, sizeof f->xq_row);
    *out = f;
    return SDNPU_OK;
}

void sd_fwd_free(struct sd_fwd *f) {
    if (!f) return;
    buf_put(f->share, f->buf);
    sd_free(f->amax);
    sd_free(f);
}

size_t sd_fwd_bytes(const struct sd_fwd *f) { return f->share ? 0 : f->buf->bytes; }
void sd_fwd_set_fast_order(struct sd_fwd *f, bool on) { f->fast_order = on; }

/* ------------------------------------------------------------ shares */

int sd_fwd_share_create(struct sd_fwd_share **out, struct sd_err *err) {
    struct sd_fwd_share *s = *out = sd_calloc(1, sizeof *s);
    if (!s) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a scratch share");
    if (pthread_mutex_init(&s->mu, NULL)) {
        sd_free(s);
        *out = NULL;
        return sd_err_set(err, SDNPU_ERR_OOM, "cannot make a scratch share's lock");
    }
    return SDNPU_OK;
}

void sd_fwd_share_free(struct sd_fwd_share *s) {
    if (!s) return;
    assert(!s->bufs); /* every pass on it freed first */
    pthread_mutex_destroy(&s->mu);
    sd_free(s);
}

size_t sd_fwd_share_bytes(struct sd_fwd_share *s) {
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    size_t n = s->bytes;
    pthread_mutex_unlock(&s->mu);
    return n;
}

size_t sd_fwd_share_need(struct sd_fwd_share *s, const struct sd_model *m, int32_t max_rows, int32_t n_ctx,
                         int n_threads) {
    if (s) {
        pthread_mutex_lock(&s->mu);
        bool held = share_find(s, max_rows, n_ctx, n_threads) != NULL;
        pthread_mutex_unlock(&s->mu);
        if (held) return 0;
    }
    return sd_fwd_estimate(m, max_rows, n_ctx, n_threads);
}

float *sd_fwd_x(struct sd_fwd *f) { return f->x; }

/* ------------------------------------------------------------ matmul jobs */

/* Up to three projections of the same input, run as one pool job whose
 * output columns are split across the threads. */
struct mm_job {
    int n;
    int32_t n_rows;
    const struct sd_weight *w[3];
    const void *xq[3];
    size_t xq_row[3];
    float *y[3]; /* [n_rows][w->n_out] */
};

/* Columns [lo, hi) of projection i, every row. */
static void mm_cols(const struct mm_job *j, int i, int64_t lo, int64_t hi) {
    const struct sd_weight *w = j->w[i];
    if (lo >= hi) return;
    if (w->packed) {
        sd_packed_matmul(w->type, w->data, w->n_out, w->n_in, j->xq[i], j->xq_row[i], j->n_rows, j->y[i] + lo,
                         (size_t)w->n_out, lo, hi);
    } else {
        sd_matmul(w->type, w->data, w->row_bytes, w->n_out, w->n_in, j->xq[i], j->xq_row[i], j->n_rows, j->y[i], lo,
                  hi);
    }
}

/* This thread's columns of the job's projections taken as one: units of 16
 * columns, so that tiles stay whole. */
static void mm_span(const struct mm_job *j, int ith, int nth, int64_t *cb, int64_t *ce) {
    int64_t total = 0;
    for (int i = 0; i < j->n; i++) total += j->w[i]->n_out;
    int64_t ub, ue;
    sd_split((total + 15) / 16, ith, nth, &ub, &ue);
    *cb = ub * 16, *ce = SD_MIN(ue * 16, total);
}

static void mm_job_run(void *ctx, int ith, int nth) {
    struct mm_job *j = ctx;
    int64_t cb, ce, off = 0;
    mm_span(j, ith, nth, &cb, &ce);
    for (int i = 0; i < j->n && cb < ce; i++) {
        const int64_t n_out = j->w[i]->n_out;
        mm_cols(j, i, SD_MAX(cb, off) - off, SD_MIN(ce, off + n_out) - off);
        off += n_out;
    }
}

/* The head with each row's argmax (base/base.h) taken as its logits are
 * written: a thread's columns in pieces, each scanned while it is still in
 * cache. Scanned afterwards, 8 rows of 262,144 logits come back from
 * memory: 0.9 ms of a 12 ms verification pass on one thread. Where no one
 * reads the logits (greedy verification), a piece goes to the thread's
 * scratch instead, which spares the pass writing them (8 MB at 8 rows:
 * 0.1-0.4 ms of an 11 ms pass at 512 tokens of context). */
struct head_job {
    struct mm_job mm;
    struct sd_amax *amax; /* [nth][n_rows] */
    float *pieces;        /* NULL, or [nth][n_rows][PIECE_STRIDE] */
};

/* A piece's rows are a line more than 4 KiB apart: 4 KiB apart, each row's
 * stores fall in the same L1 set as the others'. */
#define PIECE_STRIDE (SD_FWD_HEAD_PIECE + 16)

size_t sd_fwd_head_piece_bytes(int n_threads, int32_t n_rows) {
    return (size_t)n_threads * (size_t)n_rows * PIECE_STRIDE * sizeof(float);
}

/* Columns [lo, hi) of the head into its piece of scratch, rows
 * PIECE_STRIDE apart. */
static const float *head_piece(const struct head_job *h, int ith, int64_t lo, int64_t hi) {
    const struct mm_job *j = &h->mm;
    const struct sd_weight *w = j->w[0];
    float *p = h->pieces + (size_t)ith * (size_t)j->n_rows * PIECE_STRIDE;
    sd_packed_matmul(w->type, w->data, w->n_out, w->n_in, j->xq[0], j->xq_row[0], j->n_rows, p, PIECE_STRIDE,
                     lo, hi);
    return p;
}

static void head_job_run(void *ctx, int ith, int nth) {
    struct head_job *h = ctx;
    const struct mm_job *j = &h->mm;
    const int64_t n_out = j->w[0]->n_out;
    struct sd_amax *a = h->amax + (size_t)ith * (size_t)j->n_rows;
    int64_t cb, ce;
    mm_span(j, ith, nth, &cb, &ce);
    for (int32_t r = 0; r < j->n_rows; r++) sd_amax_init(&a[r]);
    for (int64_t lo = cb; lo < ce; lo += SD_FWD_HEAD_PIECE) {
        const int64_t hi = SD_MIN(lo + SD_FWD_HEAD_PIECE, ce);
        const float *y = j->y[0] + lo;
        size_t stride = (size_t)n_out;
        if (h->pieces) {
            y = head_piece(h, ith, lo, hi);
            stride = PIECE_STRIDE;
        } else {
            mm_cols(j, 0, lo, hi);
        }
        for (int32_t r = 0; r < j->n_rows; r++) sd_amax_scan(&a[r], y + (size_t)r * stride, hi - lo, lo);
    }
}

struct quant_job {
    bool packed; /* t is then a weight type of the packed class to prepare */
    enum sd_type t;
    const float *x;
    int64_t n_in;
    int32_t n_rows;
    void *xq;
    size_t row;
};

/* Rows [rb, re) of the job. */
static void quant_rows(const struct quant_job *q, int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; r++) {
        const float *x = q->x + r * q->n_in;
        void *dst = (char *)q->xq + (size_t)r * q->row;
        if (q->packed) {
            sd_packed_quantize_act(q->t, x, dst, q->n_in);
        } else if (q->t == SD_TYPE_F16 || q->t == SD_TYPE_BF16) {
            float *y = dst;
            for (int64_t i = 0; i < q->n_in; i++)
                y[i] = q->t == SD_TYPE_F16 ? sd_fp16_to_fp32(sd_fp32_to_fp16(x[i])) : sd_bf16_to_fp32(sd_fp32_to_bf16(x[i]));
        } else {
            sd_quantize_act_row(q->t, x, dst, q->n_in);
        }
    }
}

static void quant_job_run(void *ctx, int ith, int nth) {
    struct quant_job *q = ctx;
    int64_t rb, re;
    sd_split(q->n_rows, ith, nth, &rb, &re);
    quant_rows(q, rb, re);
}

/* The preparation of x [n_rows][n_in] for weight w into its activation
 * buffer (index *idx, rows of q->row bytes); *idx < 0 where w reads x as
 * it is (float weights). */
static struct quant_job quant_for(const struct sd_fwd *f, const struct sd_weight *w, const float *x, int32_t n_rows,
                                  int *idx) {
    *idx = xq_index(w);
    /* For half-precision weights the "quantization" is rounding to the
     * weight's own type, kept as floats for the F32-activation kernel. */
    enum sd_type qt = *idx == XQ_F16 ? SD_TYPE_F16 : *idx == XQ_BF16 ? SD_TYPE_BF16 : sd_type_get(w->type)->vec_dot_type;
    size_t rb = (size_t)w->n_in * sizeof(float);
    if (w->packed) {
        qt = w->type;
        rb = sd_packed_act_row_bytes(qt, w->n_in);
    } else if (*idx >= 0 && qt != SD_TYPE_F16 && qt != SD_TYPE_BF16) {
        sd_row_size(qt, w->n_in, &rb);
    }
    return (struct quant_job){w->packed, qt, x, w->n_in, n_rows, *idx >= 0 ? f->xq[*idx] : NULL, rb};
}

/* Quantize x [n_rows][n_in] for weight w, unless done_mask holds its
 * buffer already; returns the row pointer base and stride to hand to the
 * matmul. Float weights read x as it is. */
static const void *prep_input(struct sd_fwd *f, const struct sd_weight *w, const float *x, int32_t n_rows,
                              size_t *row_bytes, unsigned *done_mask) {
    int idx;
    struct quant_job q = quant_for(f, w, x, n_rows, &idx);
    if (idx < 0) {
        *row_bytes = (size_t)w->n_in * sizeof(float);
        return x;
    }
    *row_bytes = q.row;
    if (!(*done_mask & (1u << idx))) {
        if ((int64_t)n_rows * w->n_in >= 16384) {
            sd_pool_run(f->pool, quant_job_run, &q);
        } else {
            quant_job_run(&q, 0, 1);
        }
        *done_mask |= 1u << idx;
    }
    return f->xq[idx];
}

/* The next projection's inputs, prepared by the row job that wrote them
 * (fused): rows [rb, re) of x for the weights w[0, n), each buffer once.
 * Done there, a row's floats are read while still in the writing core's
 * cache, and the projection skips a pass of its own (on one thread below
 * 16,384 values, which an 8-row batch of 640 is). */
static void prep_rows(const struct sd_fwd *f, const struct sd_weight *const *w, int n, const float *x,
                      int32_t n_rows, int64_t rb, int64_t re) {
    unsigned seen = 0;
    for (int i = 0; i < n; i++) {
        int idx;
        const struct quant_job q = quant_for(f, w[i], x, n_rows, &idx);
        if (idx < 0 || seen & (1u << idx)) continue;
        seen |= 1u << idx;
        quant_rows(&q, rb, re);
    }
}

/* The buffers prep_rows fills for the weights w[0, n). */
static unsigned prep_mask(const struct sd_weight *const *w, int n) {
    unsigned m = 0;
    for (int i = 0; i < n; i++) {
        const int idx = xq_index(w[i]);
        if (idx >= 0) m |= 1u << idx;
    }
    return m;
}

/* y_i = W_i x for up to three weights sharing the input x; the buffers in
 * done hold x prepared already (prep_rows). */
static void project(struct sd_fwd *f, const float *x, int32_t n_rows, int n, const struct sd_weight *const *w,
                    float *const *y, unsigned done) {
    struct mm_job j = {.n = n, .n_rows = n_rows};
    for (int i = 0; i < n; i++) {
        j.w[i] = w[i];
        j.y[i] = y[i];
        j.xq[i] = prep_input(f, w[i], x, n_rows, &j.xq_row[i], &done);
    }
    sd_pool_run(f->pool, mm_job_run, &j);
}

/* ------------------------------------------------------------ row jobs */

struct layer_job {
    struct sd_fwd *f;
    struct sd_kv_cache *kv;
    const struct sd_row *rows;
    int32_t n_rows, base, il;
    float *rope;    /* qkv_post_run: the rows' RoPE tables, [n_rows][hd] */
    bool rope_fill; /* ... which it computes first */
    /* Row jobs that write the next projection's input prepare it for
     * these weights too (prep_rows); ffn_residual_run norms into h with
     * next_norm, the next layer's input norm, where given. */
    const struct sd_weight *const *next_w;
    int n_next;
    const struct sd_vec *next_norm;
};

/* The RoPE tables of this batch's rows for this layer's base: a kept one
 * whose key matches, else the next one, claimed for this key and to be
 * filled (*fill). On the calling thread, before the rows' run. */
static float *rope_lookup(struct sd_fwd *f, const struct sd_row *rows, int32_t n, float base, bool *fill) {
    struct sd_fwd_buf *b = f->buf;
    const float scale = f->m->cfg.rope_freq_scale;
    const float *factors = f->m->rope_freqs;
    for (int i = 0; i < ROPE_TABLES; i++) {
        struct rope_tables *t = &b->rope[i];
        if (!t->valid || t->base != base || t->scale != scale || t->factors != factors || t->n != n) continue;
        int32_t r = 0;
        while (r < n && t->pos[r] == rows[r].pos) r++;
        if (r == n) {
            *fill = false;
            return t->cs;
        }
    }
    struct rope_tables *t = &b->rope[b->rope_next];
    b->rope_next = (b->rope_next + 1) % ROPE_TABLES;
    *t = (struct rope_tables){true, base, scale, factors, n, t->pos, t->cs};
    for (int32_t r = 0; r < n; r++) t->pos[r] = rows[r].pos;
    *fill = true;
    return t->cs;
}

/* After q/k/v: biases, QK-norm, RoPE, and the K/V write into the cache. */
static void qkv_post_run(void *ctx, int ith, int nth) {
    struct layer_job *J = ctx;
    struct sd_fwd *f = J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const struct sd_layer *L = &f->m->layers[J->il];
    int64_t rb, re;
    sd_split(J->n_rows, ith, nth, &rb, &re);
    for (int64_t r = rb; r < re; r++) {
        const struct sd_row *row = &J->rows[r];
        float *q = f->q + r * f->nq, *k = f->k + r * f->nkv, *v = f->v + r * f->nkv;
        if (L->bq.data) {
            for (int32_t i = 0; i < f->nq; i++) q[i] += L->bq.data[i];
            for (int32_t i = 0; i < f->nkv; i++) k[i] += L->bk.data[i];
            for (int32_t i = 0; i < f->nkv; i++) v[i] += L->bv.data[i];
        }
        float *cs = J->rope + r * f->hd;
        if (J->rope_fill) rope_table(cs, f->hd, row->pos, L->rope_base, c->rope_freq_scale, f->m->rope_freqs);
        for (int32_t h = 0; h < c->n_head; h++) {
            float *qh = q + h * f->hd;
            if (L->q_norm.data) norm(f, qh, qh, L->q_norm.data, f->hd);
            rope_head(qh, f->hd, cs, c->rope_kind);
        }
        for (int32_t h = 0; h < c->n_head_kv; h++) {
            float *kh = k + h * f->hd;
            if (L->k_norm.data) norm(f, kh, kh, L->k_norm.data, f->hd);
            rope_head(kh, f->hd, cs, c->rope_kind);
        }
        if (row->token >= 0 && row->slot >= 0 && row->slot < J->kv->n_ctx) {
            size_t off = ((size_t)J->il * (size_t)J->kv->n_ctx + (size_t)row->slot) * (size_t)f->nkv;
            f32_to_f16_row(k, J->kv->k + off, f->nkv);
            f32_to_f16_row(v, J->kv->v + off, f->nkv);
        }
    }
}

/* The slots a row sees in this layer, by position: slot_of[p - base] for
 * the positions p in [base, base + span), -1 where the row sees none. */
struct visible {
    int32_t lo, base, span, n;
};

static struct visible visible_slots(const struct layer_job *J, const struct sd_row *row, int32_t cap,
                                    int32_t *slot_of) {
    const struct sd_model_config *c = &J->f->m->cfg;
    const struct sd_kv_cache *kv = J->kv;
    const int32_t window = J->f->m->layers[J->il].swa ? c->swa_window : 0;
    const int32_t n_pref = SD_MIN(row->n_prefix, kv->n_ctx);
    struct visible vis;
    /* The visible positions lie in [lo, row->pos]; index from lo's block. */
    vis.lo = window ? SD_MAX(0, row->pos - window + 1) : 0;
    vis.base = vis.lo / 16 * 16;
    vis.span = row->pos - vis.base + 1;
    if (vis.span > cap - 16) vis.span = cap - 16; /* cannot happen: pos < n_ctx */
    vis.n = 0;
    for (int32_t i = 0; i < vis.span; i++) slot_of[i] = -1;
#define VISIT(slot_expr)                                                                                     \
    do {                                                                                                     \
        int32_t s_ = (slot_expr);                                                                            \
        int32_t kp_ = kv->slot_pos[s_];                                                                      \
        if (kp_ < vis.lo || kp_ > row->pos || kp_ - vis.base >= vis.span) break;                             \
        slot_of[kp_ - vis.base] = s_;                                                                        \
        vis.n++;                                                                                             \
    } while (0)
    for (int32_t s = 0; s < n_pref; s++) VISIT(s);
    for (int32_t j = 0; j < J->n_rows; j++)
        if (row->anc[j >> 6] >> (j & 63) & 1) {
            int32_t s = J->base + j;
            if (s >= n_pref && s < kv->n_ctx) VISIT(s);
        }
#undef VISIT
    return vis;
}

/* slot_of[0, span) without its gaps: the visible slots in position order;
 * returns their count. */
static int32_t compact_slots(int32_t *slot_of, int32_t span) {
    int32_t m = 0;
    for (int32_t i = 0; i < span; i++)
        if (slot_of[i] >= 0) slot_of[m++] = slot_of[i];
    return m;
}

/* This layer's K or V rows in the cache (kv->k or kv->v). */
static const uint16_t *layer_rows(const struct layer_job *J, const uint16_t *cache) {
    return cache + (size_t)J->il * (size_t)J->kv->n_ctx * (size_t)J->f->nkv;
}

/* The attention scale goes on q or on the scores, as the model says. */
static float attn_qscale(const struct sd_model_config *c) { return c->attn_scale_q ? c->attn_scale : 1.0f; }
static float attn_kscale(const struct sd_model_config *c) { return c->attn_scale_q ? 1.0f : c->attn_scale; }

/* Attention for (row, head) pairs split across threads, in ggml's order
 * (see dot64 above). A row sees the prefix of the cache and its in-batch
 * ancestors; those keys have distinct positions, and everything is indexed
 * by position: scores, the softmax sum in blocks of 16 positions, and the
 * lane (position mod 64) that accumulates p.V. */
/* Attention of heads [h0, h0 + nh) of row r, which share one K/V head
 * (each K and V row is converted once for them all), on this thread's
 * scratch (attn_scratch). */
static void attend(const struct layer_job *J, int32_t r, int32_t h0, int32_t nh, float *scratch) {
    struct sd_fwd *f = J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const struct sd_kv_cache *kv = J->kv;
    const int32_t hd = f->hd, group = c->n_head / c->n_head_kv;
    const int32_t cap = (int32_t)attn_span_cap(f->max_rows, f->n_ctx);
    float *sc = scratch;                                                /* [group][cap] */
    int32_t *slot_of = (int32_t *)(sc + (size_t)group * (size_t)cap);   /* [cap] */
    float *acc = (float *)(slot_of + cap);                              /* [group][64][hd] */
    float *q16 = acc + (size_t)group * 64 * (size_t)hd;                 /* [group][hd] */
    float *mx = q16 + (size_t)group * (size_t)hd;                       /* [group] */
    float *kvrow = mx + group;                                          /* [hd] */
    const float qscale = attn_qscale(c), kscale = attn_kscale(c);
    const uint16_t *kl = layer_rows(J, kv->k), *vl = layer_rows(J, kv->v);
    const struct sd_row *row = &J->rows[r];
    float *out = f->h + (size_t)r * (size_t)f->nq + (size_t)h0 * (size_t)hd; /* [nh][hd] */
    memset(out, 0, (size_t)nh * (size_t)hd * sizeof(float));
    if (row->token < 0) return;
    const size_t kvoff = (size_t)(h0 / group) * (size_t)hd;
    const struct visible vis = visible_slots(J, row, cap, slot_of);
    const int32_t base = vis.base, span = vis.span;
    if (vis.n == 0) return;
    if (f->fast_order) {
        /* The visible slots in position order, then the fast kernels. */
        const int32_t m = compact_slots(slot_of, span);
        const float *qr = f->q + (size_t)r * (size_t)f->nq + (size_t)h0 * (size_t)hd;
        for (int32_t i = 0; i < nh * hd; i++) q16[i] = qr[i] * qscale;
        sd_attn_fast(q16, nh, hd, kl + kvoff, vl + kvoff, (size_t)f->nkv, slot_of, m, kscale, sc, out);
        return;
    }
    fp16_round_scaled(q16, f->q + (size_t)r * (size_t)f->nq + (size_t)h0 * (size_t)hd, qscale, nh * hd);
    /* Scores (masked positions -inf) and each head's maximum. */
    for (int32_t j = 0; j < nh; j++) mx[j] = -INFINITY;
    const int32_t nb = (span + 15) / 16;
    for (int32_t i = 0; i < nb * 16; i++) {
        if (i >= span || slot_of[i] < 0) {
            for (int32_t j = 0; j < nh; j++) sc[(size_t)j * cap + i] = -INFINITY;
            continue;
        }
        f16_to_f32_row(kl + (size_t)slot_of[i] * (size_t)f->nkv + kvoff, kvrow, hd);
        for (int32_t j = 0; j < nh; j++) {
            const float v = dot64(q16 + (size_t)j * hd, kvrow, hd) * kscale;
            sc[(size_t)j * cap + i] = v;
            if (v > mx[j]) mx[j] = v;
        }
    }
    /* exp, summed per block of 16 positions, blocks summed in double. */
    for (int32_t j = 0; j < nh; j++) {
        float *sj = sc + (size_t)j * cap;
        double sum = 0.0;
        for (int32_t b = 0; b < nb; b++) {
            expf16(sj + 16 * b, mx[j]);
            sum += (double)reduce16(sj + 16 * b, 1);
        }
        /* p, rounded to fp16 (masked positions are 0 and skipped below). */
        fp16_round_scaled(sj, sj, (float)(1.0 / sum), span);
    }
    /* p rounded to fp16; p.V accumulated per lane (the key's position
     * mod 64), then fold64. */
    memset(acc, 0, (size_t)nh * 64 * (size_t)hd * sizeof(float));
    for (int32_t i = 0; i < span; i++) {
        if (slot_of[i] < 0) continue;
        f16_to_f32_row(vl + (size_t)slot_of[i] * (size_t)f->nkv + kvoff, kvrow, hd);
        const size_t lane = (size_t)((base + i) & 63) * (size_t)hd;
        for (int32_t j = 0; j < nh; j++)
            axpy(acc + (size_t)j * 64 * (size_t)hd + lane, sc[(size_t)j * cap + i], kvrow, hd);
    }
    for (int32_t j = 0; j < nh; j++) fold64_rows(acc + (size_t)j * 64 * (size_t)hd, hd, out + (size_t)j * hd);
}

/* A tile's shared run (sd_attn_fast_rows): from the latest first position
 * among its rows, the slots that every row holds at the same offsets; sets
 * each row's start a. In a causal prefill chunk that is all of the first
 * row's keys; in a draft tree, the cache and the common ancestors. */
static int32_t shared_run(const struct sd_kv_cache *kv, struct sd_attn_row *rows, int32_t n) {
    int32_t p = 0;
    for (int32_t r = 0; r < n; r++) p = SD_MAX(p, kv->slot_pos[rows[r].slots[0]]);
    for (int32_t r = 0; r < n; r++) {
        int32_t a = 0;
        while (a < rows[r].n && kv->slot_pos[rows[r].slots[a]] < p) a++;
        rows[r].a = a;
    }
    for (int32_t m = 0;; m++)
        for (int32_t r = 0; r < n; r++)
            if (rows[r].a + m >= rows[r].n || rows[r].slots[rows[r].a + m] != rows[0].slots[rows[0].a + m]) return m;
}

/* Row r's unit for K/V head kvh in the fast order, in the tile row at mem
 * (attn_tile_row floats): its output zeroed, its visible slots and its
 * scaled q. False where it attends to nothing (a padding row, no keys). */
static bool attn_unit(const struct layer_job *J, int32_t r, int32_t kvh, float *mem, struct sd_attn_row *u) {
    const struct sd_fwd *f = J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const int32_t hd = f->hd, group = c->n_head / c->n_head_kv, h0 = kvh * group;
    const int32_t cap = (int32_t)attn_span_cap(f->max_rows, f->n_ctx);
    const struct sd_row *row = &J->rows[r];
    float *out = f->h + (size_t)r * (size_t)f->nq + (size_t)h0 * (size_t)hd;
    memset(out, 0, (size_t)group * (size_t)hd * sizeof(float));
    if (row->token < 0) return false;
    int32_t *slots = (int32_t *)(mem + (size_t)group * (size_t)cap); /* after the scores, [group][cap] */
    float *q = (float *)(slots + cap);                              /* [group][hd] */
    const struct visible vis = visible_slots(J, row, cap, slots);
    if (vis.n == 0) return false;
    const float qscale = attn_qscale(c);
    const float *qr = f->q + (size_t)r * (size_t)f->nq + (size_t)h0 * (size_t)hd;
    for (int32_t i = 0; i < group * hd; i++) q[i] = qr[i] * qscale;
    *u = (struct sd_attn_row){q, slots, compact_slots(slots, vis.span), 0, mem, out};
    return true;
}

/* Fast-order attention of rows [r0, r0 + nr) for the query heads of K/V
 * head kvh, as one tile: each row's slots, scores and q in its part of
 * this thread's scratch (attn_tile_row). */
static void attend_tile(const struct layer_job *J, int32_t r0, int32_t nr, int32_t kvh, float *scratch) {
    struct sd_fwd *f = J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const struct sd_kv_cache *kv = J->kv;
    const int32_t hd = f->hd, group = c->n_head / c->n_head_kv;
    const size_t per = attn_tile_row(f->max_rows, f->n_ctx, hd, group);
    const size_t kvoff = (size_t)kvh * (size_t)hd;
    struct sd_attn_row rows[ATTN_TILE];
    int32_t n = 0;
    for (int32_t r = r0; r < r0 + nr; r++) n += attn_unit(J, r, kvh, scratch + (size_t)n * per, &rows[n]);
    if (n == 0) return;
    const int32_t m = shared_run(kv, rows, n);
    sd_attn_fast_rows(rows, n, m, group, hd, layer_rows(J, kv->k) + kvoff, layer_rows(J, kv->v) + kvoff,
                      (size_t)f->nkv, attn_kscale(c));
}

/* Many rows in the fast order: tiles of up to ATTN_TILE consecutive rows
 * (which share most of their keys), as many tiles for each thread, dealt
 * round-robin as attn_run deals rows. */
static void attn_tiles(const struct layer_job *J, int ith, int nth, float *scratch) {
    const int32_t L = J->n_rows, nkvh = J->f->m->cfg.n_head_kv;
    const int64_t nt = (int64_t)nth * ((L + (int64_t)nth * ATTN_TILE - 1) / ((int64_t)nth * ATTN_TILE));
    for (int64_t u = ith; u < nt * nkvh; u += nth) {
        const int64_t t = u / nkvh;
        const int32_t r0 = (int32_t)(t * L / nt), r1 = (int32_t)((t + 1) * L / nt);
        if (r1 > r0) attend_tile(J, r0, r1 - r0, (int32_t)(u % nkvh), scratch);
    }
}

/* A few rows over many keys, in the fast order: each (row, K/V head) unit's
 * keys split between the threads for the scores, one softmax, then the
 * output values split between them for p.V. Splitting heads instead left
 * each thread reading every K and V row (and, with fewer than four heads a
 * thread, the kernels computing four). */
enum { SPLIT_MIN_KEYS = 128, SPLIT_MAX_UNITS = 32 };

struct split_job {
    struct layer_job *J;
    int32_t n;                             /* units */
    struct sd_attn_row u[SPLIT_MAX_UNITS]; /* q, slots, n, scores, out of each unit */
    int32_t kvh[SPLIT_MAX_UNITS];
};

static void split_scores_run(void *ctx, int ith, int nth) {
    struct split_job *S = ctx;
    const struct sd_fwd *f = S->J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const float kscale = attn_kscale(c);
    const uint16_t *kl = layer_rows(S->J, S->J->kv->k);
    for (int32_t i = 0; i < S->n; i++) {
        const struct sd_attn_row *u = &S->u[i];
        int64_t b, e;
        sd_split(u->n, ith, nth, &b, &e);
        sd_attn_fast_scores(u->q, c->n_head / c->n_head_kv, f->hd, kl + (size_t)S->kvh[i] * (size_t)f->hd,
                            (size_t)f->nkv, u->slots, u->n, (int32_t)b, (int32_t)e, kscale, u->scores);
    }
}

static void split_pv_run(void *ctx, int ith, int nth) {
    struct split_job *S = ctx;
    const struct sd_fwd *f = S->J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const uint16_t *vl = layer_rows(S->J, S->J->kv->v);
    int64_t b, e;
    sd_split(f->hd / 16, ith, nth, &b, &e);
    for (int32_t i = 0; i < S->n; i++) {
        const struct sd_attn_row *u = &S->u[i];
        sd_attn_fast_pv(c->n_head / c->n_head_kv, f->hd, vl + (size_t)S->kvh[i] * (size_t)f->hd, (size_t)f->nkv,
                        u->slots, u->n, u->scores, (int32_t)(16 * b), (int32_t)(16 * e), u->out);
    }
}

/* Whether the batch's attention runs split (attn_split): the fast order,
 * more than one thread, fewer units than attn_run deals out whole (and no
 * more than the threads' scratch holds, a tile row each), and keys enough
 * to pay for the second dispatch. */
static bool split_wanted(const struct layer_job *J, int nth) {
    const struct sd_fwd *f = J->f;
    const int64_t units = (int64_t)J->n_rows * f->m->cfg.n_head_kv;
    if (!f->fast_order || nth < 2 || units >= 4 * (int64_t)nth || units > (int64_t)nth * ATTN_TILE ||
        units > SPLIT_MAX_UNITS || f->hd % 16)
        return false;
    for (int32_t r = 0; r < J->n_rows; r++)
        if (J->rows[r].token >= 0 && J->rows[r].pos >= SPLIT_MIN_KEYS) return true;
    return false;
}

/* Each unit's keys and q on the calling thread (the units' scratch is the
 * tiles' scratch of the threads, one tile row each), then the two runs. */
static void attn_split(struct layer_job *J) {
    struct sd_fwd *f = J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const int32_t group = c->n_head / c->n_head_kv;
    const size_t per = attn_tile_row(f->max_rows, f->n_ctx, f->hd, group);
    struct split_job S = {.J = J};
    for (int32_t r = 0; r < J->n_rows; r++)
        for (int32_t kvh = 0; kvh < c->n_head_kv; kvh++)
            if (attn_unit(J, r, kvh, f->scores + (size_t)S.n * per, &S.u[S.n])) S.kvh[S.n++] = kvh;
    if (S.n == 0) return;
    sd_pool_run(f->pool, split_scores_run, &S);
    for (int32_t i = 0; i < S.n; i++) sd_attn_fast_softmax(S.u[i].scores, group, S.u[i].n);
    sd_pool_run(f->pool, split_pv_run, &S);
}

/* The batch's (row, head) pairs over the threads, in runs of one row's
 * heads that share a K/V head. Many rows: whole runs (in the fast order,
 * tiles of runs) dealt round-robin, so that each thread gets rows of every
 * length (in a causal prefill chunk row r sees r more keys than row 0; a
 * contiguous split gave one thread the short rows and the other the long
 * ones). Few rows (decoding): the pairs split evenly, a run's heads shared
 * between threads if need be. */
static void attn_run(void *ctx, int ith, int nth) {
    struct layer_job *J = ctx;
    struct sd_fwd *f = J->f;
    const struct sd_model_config *c = &f->m->cfg;
    const int32_t group = c->n_head / c->n_head_kv;
    float *scratch = f->scores + (size_t)ith * attn_scratch(f->max_rows, f->n_ctx, f->hd, group);
    const int64_t n_runs = (int64_t)J->n_rows * c->n_head_kv;
    if (n_runs >= 4 * (int64_t)nth && f->fast_order) {
        attn_tiles(J, ith, nth, scratch);
        return;
    }
    if (n_runs >= 4 * (int64_t)nth) {
        for (int64_t u = ith; u < n_runs; u += nth)
            attend(J, (int32_t)(u / c->n_head_kv), (int32_t)(u % c->n_head_kv) * group, group, scratch);
        return;
    }
    int64_t pb, pe;
    sd_split((int64_t)J->n_rows * c->n_head, ith, nth, &pb, &pe);
    for (int64_t p = pb; p < pe;) {
        const int32_t r = (int32_t)(p / c->n_head), h0 = (int32_t)(p % c->n_head);
        const int32_t nh = (int32_t)SD_MIN((int64_t)((h0 / group + 1) * group - h0), pe - p);
        p += nh;
        attend(J, r, h0, nh, scratch);
    }
}

/* A block's output in f->o: its optional post-norm (Gemma), the residual
 * add, and, when next_norm is given, the next block's input norm into f->h
 * (prepared for J->next_w). */
static void residual_rows(struct layer_job *J, int ith, int nth, const struct sd_vec *post,
                          const struct sd_vec *next_norm) {
    struct sd_fwd *f = J->f;
    int64_t rb, re;
    sd_split(J->n_rows, ith, nth, &rb, &re);
    for (int64_t r = rb; r < re; r++) {
        float *x = f->x + r * f->d, *o = f->o + r * f->d;
        if (post->data) norm(f, o, o, post->data, f->d);
        for (int32_t i = 0; i < f->d; i++) x[i] += o[i];
        if (next_norm) norm(f, f->h + r * f->d, x, next_norm->data, f->d);
    }
    if (next_norm) prep_rows(f, J->next_w, J->n_next, f->h, J->n_rows, rb, re);
}

static void attn_residual_run(void *ctx, int ith, int nth) {
    struct layer_job *J = ctx;
    const struct sd_layer *L = &J->f->m->layers[J->il];
    residual_rows(J, ith, nth, &L->post_attn_norm, &L->ffn_norm);
}

static void ffn_residual_run(void *ctx, int ith, int nth) {
    struct layer_job *J = ctx;
    residual_rows(J, ith, nth, &J->f->m->layers[J->il].post_ffn_norm, J->next_norm);
}

/* gate[i] = act(gate[i]) * up[i] for i in [b, e) of the batch's values. */
static void act_span(struct sd_fwd *f, int64_t b, int64_t e) {
    const bool gelu = f->m->cfg.gelu;
    const int64_t n_vec = f->n_ff / 16 * 16;
#ifdef SD_X86
    if (gelu && use_avx2()) {
        gelu_mul_avx2(f->gate + b, f->up + b, e - b);
        return;
    }
#endif
    for (int64_t i = b; i < e; i++) {
        float g = f->gate[i];
        f->gate[i] = (gelu ? gelu_tanh(g) : silu(g, i % f->n_ff < n_vec)) * f->up[i];
    }
}

/* By rows, each prepared for the down projection, where the job has as
 * many rows as threads (J->n_next); else the values split evenly. */
static void ffn_act_run(void *ctx, int ith, int nth) {
    struct layer_job *J = ctx;
    struct sd_fwd *f = J->f;
    int64_t b, e;
    if (J->n_next) {
        sd_split(J->n_rows, ith, nth, &b, &e);
        act_span(f, b * f->n_ff, e * f->n_ff);
        prep_rows(f, J->next_w, J->n_next, f->gate, J->n_rows, b, e);
        return;
    }
    sd_split((int64_t)J->n_rows * f->n_ff, ith, nth, &b, &e);
    act_span(f, b, e);
}

static void attn_norm_run(void *ctx, int ith, int nth) {
    struct layer_job *J = ctx;
    struct sd_fwd *f = J->f;
    const struct sd_layer *L = &f->m->layers[J->il];
    int64_t rb, re;
    sd_split(J->n_rows, ith, nth, &rb, &re);
    for (int64_t r = rb; r < re; r++) norm(f, f->h + r * f->d, f->x + r * f->d, L->attn_norm.data, f->d);
    prep_rows(f, J->next_w, J->n_next, f->h, J->n_rows, rb, re);
}

/* Small row jobs are not worth waking the workers for: the threads a row
 * job of this much work runs on. */
static int rows_threads(const struct sd_fwd *f, int64_t work) { return work < 4096 ? 1 : sd_pool_n_threads(f->pool); }

static void run_rows(struct sd_fwd *f, sd_pool_fn fn, void *ctx, int64_t work) {
    if (rows_threads(f, work) == 1) {
        fn(ctx, 0, 1);
    } else {
        sd_pool_run(f->pool, fn, ctx);
    }
}

/* ------------------------------------------------------------ public */

static sd_fwd_trace_fn trace_fn;
static void *trace_ud;

void sd_fwd_set_trace(sd_fwd_trace_fn fn, void *ud) {
    trace_fn = fn;
    trace_ud = ud;
}

#define TRACE(name, il, data, n_rows, width)                                                                  \
    do {                                                                                                      \
        if (trace_fn) trace_fn(trace_ud, name, il, data, n_rows, width);                                     \
    } while (0)

float *sd_fwd_q(struct sd_fwd *f) { return f->q; }
float *sd_fwd_k(struct sd_fwd *f) { return f->k; }
float *sd_fwd_v(struct sd_fwd *f) { return f->v; }
float *sd_fwd_h(struct sd_fwd *f) { return f->h; }

void sd_fwd_attention(struct sd_fwd *f, struct sd_kv_cache *kv, const struct sd_row *rows, int32_t n_rows, int32_t base,
                      int32_t il) {
    struct layer_job J = {f, kv, rows, n_rows, base, il, NULL, false, NULL, 0, NULL};
    J.rope = rope_lookup(f, rows, n_rows, f->m->layers[il].rope_base, &J.rope_fill);
    run_rows(f, qkv_post_run, &J, (int64_t)n_rows * f->nq * 4);
    TRACE("Qrope", il, f->q, n_rows, f->nq);
    TRACE("Krope", il, f->k, n_rows, f->nkv);
    if (split_wanted(&J, sd_pool_n_threads(f->pool))) {
        attn_split(&J);
    } else {
        sd_pool_run(f->pool, attn_run, &J);
    }
    TRACE("kqv_out", il, f->h, n_rows, f->nq);
}

void sd_fwd_layers(struct sd_fwd *f, struct sd_kv_cache *kv, const struct sd_row *rows, int32_t n_rows, int32_t base,
                   int32_t l0, int32_t l1) {
    const struct sd_model *m = f->m;
    sd_kv_mark_rows(kv, rows, n_rows);
    bool normed = false; /* f->h holds this layer's normed input, prepared (the last layer's residual job) */
    for (int32_t il = l0; il < l1; il++) {
        const struct sd_layer *L = &m->layers[il];
        struct layer_job J = {f, kv, rows, n_rows, base, il, NULL, false, NULL, 0, NULL};
        const struct sd_weight *wqkv[3] = {&L->wq, &L->wk, &L->wv};
        TRACE("l_in", il, f->x, n_rows, f->d);
        if (!normed) {
            J.next_w = wqkv;
            J.n_next = 3;
            run_rows(f, attn_norm_run, &J, (int64_t)n_rows * f->d);
        }
        TRACE("attn_norm", il, f->h, n_rows, f->d);
        float *yqkv[3] = {f->q, f->k, f->v};
        project(f, f->h, n_rows, 3, wqkv, yqkv, prep_mask(wqkv, 3));
        TRACE("Qcur", il, f->q, n_rows, f->nq);
        TRACE("Kcur", il, f->k, n_rows, f->nkv);
        TRACE("Vcur", il, f->v, n_rows, f->nkv);
        sd_fwd_attention(f, kv, rows, n_rows, base, il);
        const struct sd_weight *wo[1] = {&L->wo};
        float *yo[1] = {f->o};
        project(f, f->h, n_rows, 1, wo, yo, 0);
        TRACE("attn_out", il, f->o, n_rows, f->d);
        const struct sd_weight *wgu[2] = {&L->w_gate, &L->w_up};
        J.next_w = wgu;
        J.n_next = 2;
        run_rows(f, attn_residual_run, &J, (int64_t)n_rows * f->d * 2);
        TRACE("attn_post_norm", il, f->o, n_rows, f->d);
        TRACE("sa_out", il, f->x, n_rows, f->d);
        TRACE("ffn_norm", il, f->h, n_rows, f->d);
        float *ygu[2] = {f->gate, f->up};
        project(f, f->h, n_rows, 2, wgu, ygu, prep_mask(wgu, 2));
        TRACE("ffn_gate", il, f->gate, n_rows, f->n_ff);
        TRACE("ffn_up", il, f->up, n_rows, f->n_ff);
        const struct sd_weight *wd[1] = {&L->w_down};
        const int64_t act_work = (int64_t)n_rows * f->n_ff * 8;
        const bool act_rows = n_rows >= rows_threads(f, act_work);
        J.next_w = wd;
        J.n_next = act_rows ? 1 : 0;
        run_rows(f, ffn_act_run, &J, act_work);
        TRACE("ffn_act", il, f->gate, n_rows, f->n_ff);
        float *yd[1] = {f->o};
        project(f, f->gate, n_rows, 1, wd, yd, act_rows ? prep_mask(wd, 1) : 0);
        TRACE("ffn_out", il, f->o, n_rows, f->d);
        /* The next layer's input norm, prepared for its q/k/v, in the same job. */
        normed = il + 1 < l1;
        const struct sd_layer *N = normed ? &m->layers[il + 1] : NULL;
        const struct sd_weight *wqkv_next[3] = {N ? &N->wq : NULL, N ? &N->wk : NULL, N ? &N->wv : NULL};
        J.next_w = wqkv_next;
        J.n_next = 3;
        J.next_norm = N ? &N->attn_norm : NULL;
        run_rows(f, ffn_residual_run, &J, (int64_t)n_rows * f->d);
        TRACE("ffn_post_norm", il, f->o, n_rows, f->d);
        TRACE("l_out", il, f->x, n_rows, f->d);
    }
}

void sd_fwd_logits(struct sd_fwd *f, const int32_t *which, int32_t n_which, float *logits, int32_t *argmax,
                   float *pieces) {
    const struct sd_model *m = f->m;
    if (n_which <= 0) return;
    /* Gather the wanted rows, normed, into f->h. */
    for (int32_t i = 0; i < n_which; i++)
        norm(f, f->h + (size_t)i * (size_t)f->d, f->x + (size_t)which[i] * (size_t)f->d, m->output_norm.data, f->d);
    TRACE("result_norm", -1, f->h, n_which, f->d);
    const struct sd_weight *w[1] = {&m->output};
    float *y[1] = {logits};
    if (!argmax) {
        project(f, f->h, n_which, 1, w, y, 0);
        return;
    }
    unsigned done = 0;
    struct head_job h = {.mm = {.n = 1, .n_rows = n_which, .w = {w[0]}, .y = {logits}},
                         .amax = f->amax,
                         .pieces = w[0]->packed ? pieces : NULL};
    h.mm.xq[0] = prep_input(f, w[0], f->h, n_which, &h.mm.xq_row[0], &done);
    sd_pool_run(f->pool, head_job_run, &h);
    /* Threads hold consecutive column spans in thread order. */
    for (int32_t r = 0; r < n_which; r++) {
        struct sd_amax a = f->amax[r];
        for (int t = 1; t < f->n_threads; t++) sd_amax_merge(&a, &f->amax[(size_t)t * (size_t)n_which + (size_t)r]);
        argmax[r] = sd_amax_index(&a);
    }
}
