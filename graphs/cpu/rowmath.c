/* graphs/cpu/rowmath.c - the fast order's row-wise float math, each in fixed
 * lanes with the same bits on every path: ggml's exp, SiLU, RMSNorm and
 * attention's softmax with its own exponential (graphs/cpu/attention.h). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "graphs/cpu/attn_internal.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------ exp */

/* 2^e for -126 <= e <= 127. */
static float pow2i(int32_t e) {
    const uint32_t u = (uint32_t)(e + 127) << 23;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ggml_v_expf, the AVX-512 form, one lane: exp(x) = 2^n * poly(b), the
 * scaling (vscalefps) one correctly rounded product: by 2^e1, exact, then by
 * 2^e2, where n = e1 + e2 with e1 in [-125, 127]. */
float sd_expf(float x) {
    if (x != x) return x;
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    const float u = b * b;
    const float j =
        fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
             fmaf(0x1.ffffecp-1f, b, 1.0f));
    const int32_t ni = (int32_t)n, e1 = SD_MAX(-125, SD_MIN(127, ni));
    return (j * pow2i(e1)) * pow2i(ni - e1);
}

#ifdef SD_X86
/* sd_expf on eight lanes, the same operations; inlined, so that its loops
 * keep its constants in registers (as a call it took 4.9% of a 3,906-token
 * prefill of the 0.5B on the Zen 3, inlined 3.1%). */
static inline __attribute__((always_inline, target("avx2,fma"))) __m256 expf8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    const __m256i ni = _mm256_cvttps_epi32(n);
    const __m256i e1 =
        _mm256_max_epi32(_mm256_set1_epi32(-125), _mm256_min_epi32(_mm256_set1_epi32(127), ni));
    const __m256i e2 = _mm256_sub_epi32(ni, e1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e1, bias), 23));
    const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e2, bias), 23));
    const __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, p1), p2);
    const __m256 big =
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n), _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 neg = _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ);
    const __m256 alt = _mm256_andnot_ps(neg, _mm256_set1_ps(INFINITY));
    return _mm256_blendv_ps(res, alt, big);
}

/* sd_expf on sixteen lanes, the same operations; inlined as expf8 (as a
 * call it was 12% of a 4-row tile's attention on the Zen 4, its constants
 * reloaded a vector; inlined, the tile 265 -> 251 us). */
static inline __attribute__((always_inline, target("avx512f,fma"))) __m512 expf16(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const __m512i ni = _mm512_cvttps_epi32(n);
    const __m512i e1 =
        _mm512_max_epi32(_mm512_set1_epi32(-125), _mm512_min_epi32(_mm512_set1_epi32(127), ni));
    const __m512i e2 = _mm512_sub_epi32(ni, e1);
    const __m512i bias = _mm512_set1_epi32(127);
    const __m512 p1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e1, bias), 23));
    const __m512 p2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e2, bias), 23));
    const __m512 res = _mm512_mul_ps(_mm512_mul_ps(j, p1), p2);
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    const __mmask16 neg = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512 alt = _mm512_mask_blend_ps(neg, _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(big, res, alt);
}

/* Every value, the last few under a mask: left to sd_expf, whose fmaf is a
 * library call on baseline x86-64, a tail of up to 15 cost an 8-row
 * verification's short attention more than its whole keys (a 4-row tile
 * over 20 keys 7.8 us, a fifth of it in sd_expf and fmaf). */
__attribute__((target("avx512f,fma"))) static int32_t expf_sub_avx512(float *v, int32_t n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(v + i, expf16(_mm512_sub_ps(_mm512_loadu_ps(v + i), mv)));
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(v + i, k, expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, v + i), mv)));
    }
    return n;
}

/* -x, as the scalar's negation (the sign bit flipped). */
__attribute__((target("avx512f,fma"))) static inline __m512 neg(__m512 x) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
}

/* gate[i] = silu(gate[i]) * up[i], sixteen lanes at a time. */
__attribute__((target("avx512f,fma"))) static int64_t silu_mul_avx512(float *gate, const float *up,
                                                                      int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(gate + i);
        const __m512 s = _mm512_div_ps(x, _mm512_add_ps(one, expf16(neg(x))));
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
    }
    return i;
}

/* Every value, the last few under a mask (as expf_sub_avx512). */
__attribute__((target("avx2,fma"))) static int32_t expf_sub_avx2(float *v, int32_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(v + i, expf8(_mm256_sub_ps(_mm256_loadu_ps(v + i), mv)));
    if (i < n) {
        const __m256i k =
            _mm256_cmpgt_epi32(_mm256_set1_epi32(n - i), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(v + i, k, expf8(_mm256_sub_ps(_mm256_maskload_ps(v + i, k), mv)));
    }
    return n;
}

/* gate[i] = silu(gate[i]) * up[i], eight lanes at a time. */
__attribute__((target("avx2,fma"))) static int64_t silu_mul_avx2(float *gate, const float *up, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i);
        const __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, expf8(_mm256_xor_ps(x, neg))));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    return i;
}
#endif

void sd_silu_mul(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
#ifdef SD_X86
    if (sd_quant_get_impl() == SD_IMPL_AVX2) {
        if (sd_quant_avx512_active()) i = silu_mul_avx512(gate, up, n);
        i += silu_mul_avx2(gate + i, up + i, n - i);
    }
#endif
    for (; i < n; i++)
        gate[i] = gate[i] / (1.0f + sd_expf(-gate[i])) * up[i];
}

void sd_expf_sub(float *v, int32_t n, float m) {
    int32_t i = 0;
#ifdef SD_X86
    if (sd_quant_get_impl() == SD_IMPL_AVX2) {
        if (sd_quant_avx512_active()) i = expf_sub_avx512(v, n, m);
        i += expf_sub_avx2(v + i, n - i, m);
    }
#endif
    for (; i < n; i++)
        v[i] = sd_expf(v[i] - m);
}
static float reduce16(const float l[16]) {
    float t8[8], t4[4];
    for (int j = 0; j < 8; j++)
        t8[j] = l[j] + l[j + 8];
    for (int j = 0; j < 4; j++)
        t4[j] = t8[j] + t8[j + 4];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

/* p as p.V takes it (the header's order): rounded to bf16, and zero below
 * SD_ATTN_P_MIN. */
static float p_round(float p) { return fabsf(p) < SD_ATTN_P_MIN ? 0.0f : sd_attn_bf16r(p); }

/* sd_attn_expf, the softmax's exponential (graphs/cpu/attention.h), of
 * x = score - max <= 0: 2^n p(r), n = x log2(e) rounded to nearest even
 * (by adding 1.5 2^23), r = x - n ln 2 in one fused step, p a degree-4
 * polynomial fitted on [-ln 2 / 2, ln 2 / 2] (all told within 2.8e-6 of
 * exp relatively, the worst near x = -42), 2^n from z's bits (normal for
 * every n it meets); 0 below x = -44 (e < 2^-63, where p would be 0 but
 * for a sliver), a NaN a NaN. The p it feeds are rounded to bf16 (2^-9),
 * so ggml's exponential, with twice the operations for float's last bit,
 * bought nothing there; a free one would make the 0.5B's attention over
 * 4,000 keys 13-15% cheaper (docs/benchmarks.md, "Stop 83"). */
#define AX_L2E 0x1.715476p+0f
#define AX_LN2 0x1.62e430p-1f
#define AX_R 0x1.8p23f
#define AX_MIN (-44.0f)
#define AX_C0 0x1.ffffe8p-1f
#define AX_C1 0x1.fffb34p-1f
#define AX_C2 0x1.0005b8p-1f
#define AX_C3 0x1.57e0d8p-3f
#define AX_C4 0x1.53a0eap-5f

float sd_attn_expf(float x) {
    const float z = fmaf(x, AX_L2E, AX_R), n = z - AX_R, r = fmaf(-n, AX_LN2, x);
    const float p = fmaf(fmaf(fmaf(fmaf(AX_C4, r, AX_C3), r, AX_C2), r, AX_C1), r, AX_C0);
    uint32_t u;
    memcpy(&u, &z, sizeof u);
    u = (u + 127u) << 23;
    float s;
    memcpy(&s, &u, sizeof s);
    return x < AX_MIN ? 0.0f : p * s;
}

#ifdef SD_X86
/* sd_attn_expf on eight and on sixteen lanes, the same operations. */
static inline __attribute__((always_inline, target("avx2,fma"))) __m256 attn_exp8(__m256 x) {
    const __m256 rr = _mm256_set1_ps(AX_R), z = _mm256_fmadd_ps(x, _mm256_set1_ps(AX_L2E), rr);
    const __m256 n = _mm256_sub_ps(z, rr), r = _mm256_fnmadd_ps(n, _mm256_set1_ps(AX_LN2), x);
    const __m256 p = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(AX_C4), r, _mm256_set1_ps(AX_C3)), r,
                                        _mm256_set1_ps(AX_C2)),
                        r, _mm256_set1_ps(AX_C1)),
        r, _mm256_set1_ps(AX_C0));
    const __m256 s = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(z), _mm256_set1_epi32(127)), 23));
    return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(AX_MIN), _CMP_NLT_UQ), _mm256_mul_ps(p, s));
}

static inline __attribute__((always_inline, target("avx512f,fma"))) __m512 attn_exp16(__m512 x) {
    const __m512 rr = _mm512_set1_ps(AX_R), z = _mm512_fmadd_ps(x, _mm512_set1_ps(AX_L2E), rr);
    const __m512 n = _mm512_sub_ps(z, rr), r = _mm512_fnmadd_ps(n, _mm512_set1_ps(AX_LN2), x);
    const __m512 p = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(AX_C4), r, _mm512_set1_ps(AX_C3)), r,
                                        _mm512_set1_ps(AX_C2)),
                        r, _mm512_set1_ps(AX_C1)),
        r, _mm512_set1_ps(AX_C0));
    const __m512 s = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_castps_si512(z), _mm512_set1_epi32(127)), 23));
    return _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(AX_MIN), _CMP_NLT_UQ), p, s);
}

#define TGT2 __attribute__((target("avx2,fma,f16c")))
#define TGT5 __attribute__((target("avx512f,avx512vl,avx2,fma,f16c")))
#define AI5 static inline __attribute__((always_inline, target("avx512f,avx512vl,avx2,fma,f16c")))

/* sd_attn_bf16r on eight lanes: add half an ulp of bf16 (ties to even) and cut;
 * a NaN keeps its upper half, made quiet. */
TGT2 static inline __m256 bf16r_avx2(__m256 x) {
    const __m256i b = _mm256_castps_si256(x), hi = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i r =
        _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), odd), hi);
    const __m256i q = _mm256_and_si256(_mm256_or_si256(b, _mm256_set1_epi32(0x400000)), hi);
    return _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(q),
                            _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* p_round on eight lanes. */
TGT2 static inline __m256 p_round_avx2(__m256 p) {
    const __m256 big =
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), p), _mm256_set1_ps(SD_ATTN_P_MIN), _CMP_NLT_UQ);
    return _mm256_and_ps(bf16r_avx2(p), big);
}

/* sd_attn_bf16r on sixteen lanes (bf16r_avx2's steps). */
AI5 __m512 bf16r_512(__m512 x) {
    const __m512i b = _mm512_castps_si512(x), hi = _mm512_set1_epi32((int)0xffff0000u);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    const __m512i r =
        _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), odd), hi);
    const __m512i q = _mm512_and_si512(_mm512_or_si512(b, _mm512_set1_epi32(0x400000)), hi);
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), q));
}

/* p_round on sixteen lanes. */
AI5 __m512 p_round_512(__m512 p) { return bf16r_512(sd_attn_p_min16(p)); }

#endif

/* ------------------------------------------------------------ RMSNorm */

#ifdef SD_X86
/* The lanes of the squares' sum of in[0, n - n % 16), l[16] out. */
TGT2 static void squares_avx2(const float *in, int64_t n, float l[16]) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(in + i), b = _mm256_loadu_ps(in + i + 8);
        lo = _mm256_fmadd_ps(a, a, lo);
        hi = _mm256_fmadd_ps(b, b, hi);
    }
    _mm256_storeu_ps(l, lo);
    _mm256_storeu_ps(l + 8, hi);
}

TGT2 static void scale_avx2(float *out, const float *in, const float *w, int64_t n, float scale) {
    const __m256 s = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i,
                         _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(in + i), s), _mm256_loadu_ps(w + i)));
    for (; i < n; i++)
        out[i] = in[i] * scale * w[i];
}
#endif

void sd_rmsnorm_fast(float *out, const float *in, const float *w, int64_t n, float eps) {
    float l[16] = {0};
    int64_t i = 0;
#ifdef SD_X86
    const bool simd = sd_quant_get_impl() == SD_IMPL_AVX2;
    if (simd) {
        squares_avx2(in, n, l);
        i = n - n % 16;
    }
#endif
    for (; i < n; i++)
        l[i % 16] = fmaf(in[i], in[i], l[i % 16]);
    const float scale = 1.0f / sqrtf(reduce16(l) / (float)n + eps);
#ifdef SD_X86
    if (simd) {
        scale_avx2(out, in, w, n, scale);
        return;
    }
#endif
    for (i = 0; i < n; i++)
        out[i] = in[i] * scale * w[i];
}

/* ------------------------------------------------------------ softmax */

#ifdef SD_X86
/* The scalar loop's maximum from sc[0] over the lanes l[0, nl) that hold
 * sc[1, i), then over sc[i, n). */
static float max_finish(const float *sc, const float *l, int nl, int32_t i, int32_t n) {
    float m = sc[0];
    for (int j = 0; j < nl; j++)
        m = l[j] > m ? l[j] : m;
    for (; i < n; i++)
        m = sc[i] > m ? sc[i] : m;
    return m;
}

/* sd_attn_softmax_heads' maximum, sum lanes and scaling of one head, eight lanes at
 * a time: the maximum keeps the scalar loop's choices (a NaN after sc[0]
 * never wins; a NaN sc[0] always does), the sum adds the same values into
 * the same sixteen lanes in the same order. */
TGT2 static float max_avx2(const float *sc, int32_t n) {
    __m256 mx = _mm256_set1_ps(sc[0]);
    int32_t i = 1;
    for (; i + 8 <= n; i += 8)
        mx = _mm256_max_ps(_mm256_loadu_ps(sc + i), mx);
    _Alignas(32) float l[8];
    _mm256_store_ps(l, mx);
    return max_finish(sc, l, 8, i, n);
}

/* sd_expf_sub of sc[0, n) with the sum lanes of sc[0, cap) (sc[n, cap)
 * made zero) in the same pass, as expf_sum_avx512: each block of sixteen
 * goes into the lanes as it is written, in the order a pass over the
 * blocks adds them; the last block's values from n on are zero. */
TGT2 static void expf_sum_avx2(float *sc, int32_t n, size_t cap, float m, float l[16]) {
    const __m256 mv = _mm256_set1_ps(m), iota = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = attn_exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + i), mv));
        const __m256 b = attn_exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + i + 8), mv));
        _mm256_storeu_ps(sc + i, a);
        _mm256_storeu_ps(sc + i + 8, b);
        lo = _mm256_add_ps(lo, a);
        hi = _mm256_add_ps(hi, b);
    }
    if (i < n) { /* the lanes at or past n: zero, and never read past sc + cap */
        const __m256 ka = _mm256_cmp_ps(iota, _mm256_set1_ps((float)(n - i)), _CMP_LT_OQ),
                     kb = _mm256_cmp_ps(iota, _mm256_set1_ps((float)(n - i - 8)), _CMP_LT_OQ);
        const __m256 a = _mm256_and_ps(
            ka, attn_exp8(_mm256_sub_ps(_mm256_maskload_ps(sc + i, _mm256_castps_si256(ka)), mv)));
        const __m256 b = _mm256_and_ps(
            kb, attn_exp8(_mm256_sub_ps(_mm256_maskload_ps(sc + i + 8, _mm256_castps_si256(kb)), mv)));
        _mm256_storeu_ps(sc + i, a);
        _mm256_storeu_ps(sc + i + 8, b);
        lo = _mm256_add_ps(lo, a);
        hi = _mm256_add_ps(hi, b);
        i += 16;
    }
    for (; (size_t)i < cap; i += 16) { /* cap: whole blocks */
        _mm256_storeu_ps(sc + i, _mm256_setzero_ps());
        _mm256_storeu_ps(sc + i + 8, _mm256_setzero_ps());
    }
    _mm256_storeu_ps(l, lo);
    _mm256_storeu_ps(l + 8, hi);
}

TGT2 static void scale_n_avx2(float *sc, int32_t n, float inv) {
    const __m256 s = _mm256_set1_ps(inv);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(sc + i, p_round_avx2(_mm256_mul_ps(_mm256_loadu_ps(sc + i), s)));
    for (; i < n; i++)
        sc[i] = p_round(sc[i] * inv);
}

/* The same three steps on sixteen lanes (max_avx2's choices: _mm512_max_ps
 * returns its second operand where either is NaN). A softmax of 2,048 keys
 * runs for every (row, head) pair of a verification pass, so these count
 * beside the exponentials. */
/* The last values under a mask, as expf_sub_avx512 takes them: a short
 * row's tail was most of its maximum's time. */
TGT5 static float max_avx512(const float *sc, int32_t n) {
    __m512 mx = _mm512_set1_ps(sc[0]);
    int32_t i = 1;
    for (; i + 16 <= n; i += 16)
        mx = _mm512_max_ps(_mm512_loadu_ps(sc + i), mx);
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        mx = _mm512_mask_max_ps(mx, k, _mm512_maskz_loadu_ps(k, sc + i), mx);
    }
    _Alignas(64) float l[16];
    _mm512_store_ps(l, mx);
    return max_finish(sc, l, 16, n, n);
}

/* sd_expf_sub of sc[0, n) with the sum lanes of sc[0, cap) (sc[n, cap)
 * made zero) in the same pass: each block of sixteen is added to the lanes
 * as it is written, in the order a separate pass over the blocks adds
 * them, where that pass read every score again (a 2,048-key softmax runs
 * for each of an 8-row pass's 112 (row, head) pairs a layer). */
TGT5 static void expf_sum_avx512(float *sc, int32_t n, size_t cap, float m, float l[16]) {
    const __m512 mv = _mm512_set1_ps(m);
    __m512 s = _mm512_setzero_ps();
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 e = attn_exp16(_mm512_sub_ps(_mm512_loadu_ps(sc + i), mv));
        _mm512_storeu_ps(sc + i, e);
        s = _mm512_add_ps(s, e);
    }
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        const __m512 e =
            _mm512_maskz_mov_ps(k, attn_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sc + i), mv)));
        _mm512_storeu_ps(sc + i, e);
        s = _mm512_add_ps(s, e);
        i += 16;
    }
    for (; (size_t)i < cap; i += 16)
        _mm512_storeu_ps(sc + i, _mm512_setzero_ps()); /* cap: whole blocks */
    _mm512_storeu_ps(l, s);
}

TGT5 static void scale_n_avx512(float *sc, int32_t n, float inv) {
    const __m512 s = _mm512_set1_ps(inv);
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(sc + i, p_round_512(_mm512_mul_ps(_mm512_loadu_ps(sc + i), s)));
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(sc + i, k, p_round_512(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, sc + i), s)));
    }
}

#endif

/* Scores of n keys -> p, per head, in the header's order (p as p.V takes
 * it), or e where p.V scales and rounds them itself (scale false); each
 * head's 1 / sum after the heads' scores either way. */
void sd_attn_softmax_heads(float *scores, int32_t nh, int32_t n, size_t cap, bool scale) {
#ifdef SD_X86
    const bool simd = sd_quant_get_impl() == SD_IMPL_AVX2, wide = simd && sd_quant_avx512_active();
#endif
    float *inv = scores + (size_t)nh * cap;
    for (int32_t h = 0; h < nh; h++) {
        float *sc = scores + (size_t)h * cap;
        float l[16] = {0};
#ifdef SD_X86
        if (wide) {
            expf_sum_avx512(sc, n, cap, max_avx512(sc, n), l);
            inv[h] = 1.0f / reduce16(l);
            if (scale) scale_n_avx512(sc, n, inv[h]);
            continue;
        }
        if (simd) {
            expf_sum_avx2(sc, n, cap, max_avx2(sc, n), l);
            inv[h] = 1.0f / reduce16(l);
            if (scale) scale_n_avx2(sc, n, inv[h]);
            continue;
        }
#endif
        float mx = sc[0];
        for (int32_t i = 1; i < n; i++)
            mx = sc[i] > mx ? sc[i] : mx;
        for (int32_t i = 0; i < n; i++)
            sc[i] = sd_attn_expf(sc[i] - mx);
        for (size_t i = (size_t)n; i < cap; i++)
            sc[i] = 0.0f;
        for (size_t i = 0; i < cap; i++)
            l[i % 16] += sc[i];
        inv[h] = 1.0f / reduce16(l);
        for (int32_t i = 0; i < n && scale; i++)
            sc[i] = p_round(sc[i] * inv[h]);
    }
}
