/* graphs/cpu/attention.c - ggml's exp and the fast-order attention of
 * graphs/cpu/attention.h: a scalar reference, AVX2 and AVX-512 paths with
 * the same bits (every sum is in the header's order, lane for lane). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "graphs/cpu/attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "base/base.h"
#include "graphs/kv.h"
#include "graphs/quant.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define SD_X86 1
#endif

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
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         fmaf(0x1.ffffecp-1f, b, 1.0f));
    const int32_t ni = (int32_t)n, e1 = SD_MAX(-125, SD_MIN(127, ni));
    return (j * pow2i(e1)) * pow2i(ni - e1);
}

#ifdef SD_X86
/* sd_expf on eight lanes, the same operations. */
__attribute__((target("avx2,fma"))) static __m256 expf8(__m256 x) {
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
    const __m256i e1 = _mm256_max_epi32(_mm256_set1_epi32(-125), _mm256_min_epi32(_mm256_set1_epi32(127), ni));
    const __m256i e2 = _mm256_sub_epi32(ni, e1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e1, bias), 23));
    const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e2, bias), 23));
    const __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, p1), p2);
    const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n), _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 neg = _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ);
    const __m256 alt = _mm256_andnot_ps(neg, _mm256_set1_ps(INFINITY));
    return _mm256_blendv_ps(res, alt, big);
}

/* sd_expf on sixteen lanes, the same operations. */
__attribute__((target("avx512f,fma"))) static __m512 expf16(__m512 x) {
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
    const __m512i e1 = _mm512_max_epi32(_mm512_set1_epi32(-125), _mm512_min_epi32(_mm512_set1_epi32(127), ni));
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
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(v + i, expf16(_mm512_sub_ps(_mm512_loadu_ps(v + i), mv)));
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
__attribute__((target("avx512f,fma"))) static int64_t silu_mul_avx512(float *gate, const float *up, int64_t n) {
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
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(v + i, expf8(_mm256_sub_ps(_mm256_loadu_ps(v + i), mv)));
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
    for (; i < n; i++) gate[i] = gate[i] / (1.0f + sd_expf(-gate[i])) * up[i];
}

void sd_expf_sub(float *v, int32_t n, float m) {
    int32_t i = 0;
#ifdef SD_X86
    if (sd_quant_get_impl() == SD_IMPL_AVX2) {
        if (sd_quant_avx512_active()) i = expf_sub_avx512(v, n, m);
        i += expf_sub_avx2(v + i, n - i, m);
    }
#endif
    for (; i < n; i++) v[i] = sd_expf(v[i] - m);
}

/* ------------------------------------------------------ scalar reference */

/* Floats of a head's scores for n keys: whole blocks of 16. */
static size_t cap_of(int32_t n) { return ((size_t)n + 15) / 16 * 16; }

/* A tile (sd_attn_fast_rows) holds q of up to 256 values a head, and its
 * p.V takes the run's keys 32 at a time. */
enum { TILE_KEYS = 32, TILE_HD = 256 };
/* The keys-in-lanes scores (scores_t16) take up to this many (row, head)
 * pairs a pass over the keys; q's levels are at most Q_LEVELS (12 bits). */
enum { T16_PAIRS = 64, Q_LEVELS = 2047 };

static float reduce16(const float l[16]) {
    float t8[8], t4[4];
    for (int j = 0; j < 8; j++) t8[j] = l[j] + l[j + 8];
    for (int j = 0; j < 4; j++) t4[j] = t8[j] + t8[j + 4];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

static float h2f(uint16_t h) { return sd_fp16_to_fp32(h); }

/* p.V's inputs (the header's order): x rounded to bf16, and p so rounded
 * and zero below P_MIN. */
static const float P_MIN = 0x1p-64f;
static float bf16r(float x) { return sd_bf16_to_fp32(sd_fp32_to_bf16(x)); }
static float p_round(float p) { return fabsf(p) < P_MIN ? 0.0f : bf16r(p); }

/* The fast order's q of one head takes levels of at most q_levels(hd) (the
 * scores' int32 sums cannot overflow: hd * SD_KV_KEY_LEVELS * q_levels(hd)
 * < 2^31), rounded as the keys are (sd_quantize_levels). */
static int32_t q_levels(int32_t hd) {
    const int64_t most = (int64_t)INT32_MAX / ((int64_t)hd * SD_KV_KEY_LEVELS);
    return most < Q_LEVELS ? (int32_t)most : Q_LEVELS;
}

/* Heads [h0, h0 + hn) of q quantized: levels at lev[h * hd], and the
 * factor each score's integer sum takes with its key's scale, qs * kscale. */
static void quant_heads(const float *q, int32_t h0, int32_t hn, int32_t hd, float kscale, int16_t *lev,
                        float *qk) {
    for (int32_t h = 0; h < hn; h++)
        qk[h] =
            sd_quantize_levels(q + (size_t)(h0 + h) * hd, hd, q_levels(hd), lev + (size_t)h * hd) * kscale;
}

/* A score from its exact integer sum: (float)s * (key scale * qk). */
static float score_of(int32_t s, float ks, float qk) { return (float)s * (ks * qk); }

static void scores_scalar(const int16_t *lev, const float *qk, int32_t nh, int32_t hd, const int16_t *k,
                          const float *ks, size_t stride, const int32_t *slots, int32_t n, float *sc,
                          size_t cap) {
    for (int32_t h = 0; h < nh; h++)
        for (int32_t i = 0; i < n; i++) {
            const int16_t *kr = k + (size_t)slots[i] * stride, *qh = lev + (size_t)h * hd;
            int32_t sum = 0;
            for (int32_t d = 0; d < hd; d++)
                sum += (int32_t)qh[d] * (int32_t)kr[d];
            sc[(size_t)h * cap + i] = score_of(sum, ks[slots[i]], qk[h]);
        }
}

/* Value d of key i's V row. */
static float v_at(const uint16_t *v, size_t stride, const int32_t *slots, int32_t i, int32_t d) {
    return h2f(v[(size_t)slots[i] * stride + d]);
}

static void pv_scalar(const float *p, int32_t nh, int32_t hd, int32_t d_begin, int32_t d_end, const uint16_t *v,
                      size_t stride, const int32_t *slots, int32_t n, size_t cap, float *out) {
    for (int32_t h = 0; h < nh; h++)
        for (int32_t d = d_begin; d < d_end; d++) {
            const float *ph = p + (size_t)h * cap;
            float acc = out[(size_t)h * hd + d];
            for (int32_t i = 0; i < n; i += 2) {
                if (i + 1 < n) acc = fmaf(ph[i + 1], v_at(v, stride, slots, i + 1, d), acc);
                acc = fmaf(ph[i], v_at(v, stride, slots, i, d), acc);
            }
            out[(size_t)h * hd + d] = acc;
        }
}

/* ------------------------------------------------------------ AVX2 */

#ifdef SD_X86
#define TGT2 __attribute__((target("avx2,fma,f16c")))

/* The K and V rows come from memory (a layer's cache is read once a pass,
 * after 250 MB of weights went through the caches), and p.V reads each row
 * a slice at a time, a row's stride apart, which the hardware prefetcher
 * follows poorly; so do a tile's scores, several keys a step. Those kernels
 * ask for the slice (or row) they read PF_KEYS keys later (p.V of a tile:
 * a block of keys later). One row's scores read whole rows in order and
 * gain nothing from it: they were slower with it (docs/benchmarks.md,
 * "Figures from code comments"). */
enum { PF_KEYS = 16 };
/* One row's AVX-512 p.V does some ten cycles of work a key, so sixteen
 * keys ahead is shorter than a trip to memory once the context outgrows
 * the caches; it asks 96 keys ahead. (The one-row pass after 2,048 tokens
 * measured 2-4% faster in alternated runs, near this machine's wander;
 * tiles of rows prefetch a block of keys ahead on their own.) */
enum { PF_KEYS_ONE_ROW = 96 };

/* Asks for the bytes [b, e) of slot s's row into L1 (whole lines). */
static inline __attribute__((always_inline)) void pf_row(const uint16_t *base, size_t stride, int32_t s, size_t b, size_t e) {
    const char *p = (const char *)(base + (size_t)s * stride);
    for (size_t o = b & ~(size_t)63; o < e; o += 64) __builtin_prefetch(p + o, 0, 3);
}

/* The slot d after i, or the last one (n > 0). */
static inline int32_t pf_slot_at(const int32_t *slots, int32_t i, int32_t d, int32_t n) {
    return slots[i + d < n ? i + d : n - 1];
}
static inline int32_t pf_slot(const int32_t *slots, int32_t i, int32_t n) { return pf_slot_at(slots, i, PF_KEYS, n); }

TGT2 static inline __m256 cvt8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* bf16r on eight lanes: add half an ulp of bf16 (ties to even) and cut;
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
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), p), _mm256_set1_ps(P_MIN), _CMP_NLT_UQ);
    return _mm256_and_ps(bf16r_avx2(p), big);
}

/* Up to four heads at a time, always as four so that the accumulators stay
 * in registers: missing heads repeat the first one and are not stored. A
 * key's integer sum in eight lanes of vpmaddwd (pairs of exact products),
 * then added across them: exact, as the scalar sum. */
TGT2 static int32_t hsum8(__m256i v) {
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4E));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xB1));
    return _mm_cvtsi128_si32(x);
}

TGT2 static void scores_avx2(const int16_t *lev, const float *qk, int32_t nh, int32_t hd, const int16_t *k,
                             const float *ks, size_t stride, const int32_t *slots, int32_t n, float *sc,
                             size_t cap) {
    for (int32_t h0 = 0; h0 < nh; h0 += 4) {
        const int32_t hn = SD_MIN(4, nh - h0);
        const int16_t *qh[4];
        for (int32_t h = 0; h < 4; h++)
            qh[h] = lev + (size_t)(h0 + (h < hn ? h : 0)) * hd;
        for (int32_t i = 0; i < n; i++) {
            const int16_t *kr = k + (size_t)slots[i] * stride;
            __m256i acc[4];
#pragma GCC unroll 4
            for (int32_t h = 0; h < 4; h++)
                acc[h] = _mm256_setzero_si256();
            for (int32_t d = 0; d < hd; d += 16) {
                const __m256i kv = _mm256_loadu_si256((const __m256i *)(kr + d));
#pragma GCC unroll 4
                for (int32_t h = 0; h < 4; h++)
                    acc[h] = _mm256_add_epi32(
                        acc[h], _mm256_madd_epi16(kv, _mm256_loadu_si256((const __m256i *)(qh[h] + d))));
            }
            for (int32_t h = 0; h < hn; h++)
                sc[(size_t)(h0 + h) * cap + i] = score_of(hsum8(acc[h]), ks[slots[i]], qk[h0 + h]);
        }
    }
}

/* Key i's step of pv_avx2: two heads' accumulators over values [0, 16)
 * of its V row (at vr). */
TGT2 static inline void pv_key_avx2(const float *const ph[2], int32_t i, const uint16_t *vr,
                                    __m256 acc[2][2]) {
    const __m256 v0 = cvt8(vr), v1 = cvt8(vr + 8);
#pragma GCC unroll 2
    for (int32_t h = 0; h < 2; h++) {
        const __m256 pb = _mm256_set1_ps(ph[h][i]);
        acc[h][0] = _mm256_fmadd_ps(pb, v0, acc[h][0]);
        acc[h][1] = _mm256_fmadd_ps(pb, v1, acc[h][1]);
    }
}

/* Output values [d0, d0 + 16) of two heads for d0 in [d_begin, d_end)
 * (multiples of 16), continuing from out's; the keys in the header's pairs. */
TGT2 static void pv_avx2(const float *p, int32_t nh, int32_t hd, int32_t d_begin, int32_t d_end, const uint16_t *v,
                         size_t stride, const int32_t *slots, int32_t n, size_t cap, float *out) {
    for (int32_t h0 = 0; h0 < nh; h0 += 2) {
        const int32_t hn = SD_MIN(2, nh - h0);
        const float *ph[2] = {p + (size_t)h0 * cap, p + (size_t)(h0 + (hn > 1)) * cap};
        for (int32_t d0 = d_begin; d0 < d_end; d0 += 16) {
            __m256 acc[2][2];
#pragma GCC unroll 2
            for (int32_t h = 0; h < 2; h++) {
                const float *o = out + (size_t)(h0 + (h < hn ? h : 0)) * hd + d0;
                acc[h][0] = _mm256_loadu_ps(o);
                acc[h][1] = _mm256_loadu_ps(o + 8);
            }
            int32_t i = 0;
            for (; i + 1 < n; i += 2) {
                pf_row(v, stride, pf_slot(slots, i, n), (size_t)d0 * 2, (size_t)d0 * 2 + 32);
                pf_row(v, stride, pf_slot(slots, i + 1, n), (size_t)d0 * 2, (size_t)d0 * 2 + 32);
                pv_key_avx2(ph, i + 1, v + (size_t)slots[i + 1] * stride + d0, acc);
                pv_key_avx2(ph, i, v + (size_t)slots[i] * stride + d0, acc);
            }
            if (i < n) pv_key_avx2(ph, i, v + (size_t)slots[i] * stride + d0, acc);
            for (int32_t h = 0; h < hn; h++) {
                _mm256_storeu_ps(out + (size_t)(h0 + h) * hd + d0, acc[h][0]);
                _mm256_storeu_ps(out + (size_t)(h0 + h) * hd + d0 + 8, acc[h][1]);
            }
        }
    }
}

/* ------------------------------------------------------------ AVX-512 */

#define TGT5 __attribute__((target("avx512f,avx512vl,avx2,fma,f16c")))

/* Keys in lanes: the K rows of sixteen keys (their levels, pairs of int16
 * in each dword) are transposed once (kt[j] holds dword j, values 2j and
 * 2j + 1, of the sixteen keys) for every (row, head) pair that reads them;
 * a pair's vpdpwssd with its q's dword j broadcast then adds two exact
 * products to each key's int32 sum, and a pass over the dwords gives
 * sixteen consecutive scores: the sums are exact, so they are the scalar
 * loop's whatever the order. Against fp16 keys converted to f32 and
 * fused multiply-adds in sixteen lanes, a third of the transposition and
 * half the multiply instructions (docs/benchmarks.md, "Integer keys"). */

/* r[i] (key i's sixteen dwords) -> r[e] (dword e of the sixteen keys). */
static inline __attribute__((always_inline, target("avx512f,avx512vl,avx2,fma,f16c"))) void transpose16(__m512 r[16]) {
    __m512 a[16], b[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) { /* b[4g + e], lane L: keys 4g..4g+3, value 4L + e */
        b[4 * g] = _mm512_shuffle_ps(a[4 * g], a[4 * g + 2], 0x44);
        b[4 * g + 1] = _mm512_shuffle_ps(a[4 * g], a[4 * g + 2], 0xEE);
        b[4 * g + 2] = _mm512_shuffle_ps(a[4 * g + 1], a[4 * g + 3], 0x44);
        b[4 * g + 3] = _mm512_shuffle_ps(a[4 * g + 1], a[4 * g + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) {
        const __m512 c0 = _mm512_shuffle_f32x4(b[e], b[4 + e], 0x44), c1 = _mm512_shuffle_f32x4(b[e], b[4 + e], 0xEE);
        const __m512 c2 = _mm512_shuffle_f32x4(b[8 + e], b[12 + e], 0x44), c3 = _mm512_shuffle_f32x4(b[8 + e], b[12 + e], 0xEE);
        r[e] = _mm512_shuffle_f32x4(c0, c2, 0x88);
        r[4 + e] = _mm512_shuffle_f32x4(c0, c2, 0xDD);
        r[8 + e] = _mm512_shuffle_f32x4(c1, c3, 0x88);
        r[12 + e] = _mm512_shuffle_f32x4(c1, c3, 0xDD);
    }
}

#define TGT5I __attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")))

/* kt[j] = dword j of keys run[0, nk) (nk <= 16; missing keys zero); hd a
 * multiple of 16 (a last half chunk of 16 values loads eight dwords). */
TGT5I static void keys_i16(const int16_t *k, size_t stride, const int32_t *run, int32_t nk, int32_t hd,
                           int32_t kt[][16]) {
    for (int32_t c = 0; c < hd; c += 32) {
        const __mmask16 lm = hd - c >= 32 ? (__mmask16)0xFFFF : (__mmask16)0x00FF;
        __m512 r[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            r[j] = j < nk ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(lm, k + (size_t)run[j] * stride + c))
                          : _mm512_setzero_ps();
        transpose16(r);
        const int ne = hd - c >= 32 ? 16 : 8;
        for (int e = 0; e < ne; e++)
            _mm512_store_si512((void *)kt[c / 2 + e], _mm512_castps_si512(r[e]));
    }
}

/* S += k * the dword at p broadcast: vpdpwssd with an embedded-broadcast
 * memory operand, so that k stays in a register for every pair that reads
 * it and each pair's q costs one load. */
static inline __attribute__((always_inline, target("avx512f,avx512vnni"))) __m512i
dpwssd_bcast(__m512i S, __m512i k, const int16_t *p) {
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__)
    __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(S) : "v"(k), "m"(*(const int32_t *)p));
    return S;
#else
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_dpwssd_epi32(S, k, _mm512_set1_epi32(v));
#endif
}

/* P pairs' (P of 1, 2 or 4) scores of the sixteen keys of kt, their scales
 * ks (a vector over the keys), stored at dst[p] under mask mk. Two sums a
 * pair (even and odd dwords) so that eight chains hide vpdpwssd's latency
 * with four pairs. */
static inline
    __attribute__((always_inline, target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c"))) void
    pairs_i16(int P, const int16_t *const q[4], const float qk[4], int32_t hd, const int32_t kt[][16],
              __m512 ks, float *const dst[4], __mmask16 mk) {
    __m512i a[4][2];
#pragma GCC unroll 4
    for (int p = 0; p < P; p++)
        a[p][0] = a[p][1] = _mm512_setzero_si512();
    for (int32_t j = 0; j < hd / 2; j += 2) {
        const __m512i k0 = _mm512_load_si512((const void *)kt[j]),
                      k1 = _mm512_load_si512((const void *)kt[j + 1]);
#pragma GCC unroll 4
        for (int p = 0; p < P; p++) {
            a[p][0] = dpwssd_bcast(a[p][0], k0, q[p] + 2 * j);
            a[p][1] = dpwssd_bcast(a[p][1], k1, q[p] + 2 * j + 2);
        }
    }
#pragma GCC unroll 4
    for (int p = 0; p < P; p++) {
        const __m512 s = _mm512_cvtepi32_ps(_mm512_add_epi32(a[p][0], a[p][1]));
        _mm512_mask_storeu_ps(dst[p], mk, _mm512_mul_ps(s, _mm512_mul_ps(ks, _mm512_set1_ps(qk[p]))));
    }
}

/* Scores of np pairs over keys run[0, m): pair p's q levels at qp[p] ([hd])
 * and factor qk[p], its score of key run[i] to sp[p][i]. hd a multiple of
 * 16, at most TILE_HD. */
TGT5I static void scores_t16(const int16_t *const *qp, const float *qk, float *const *sp, int32_t np,
                             int32_t hd, const int16_t *k, const float *kscale, size_t stride,
                             const int32_t *run, int32_t m) {
    _Alignas(64) int32_t kt[TILE_HD / 2][16];
    _Alignas(64) float ksv[16];
    for (int32_t i0 = 0; i0 < m; i0 += 16) {
        const int32_t nk = SD_MIN(16, m - i0);
        for (int32_t j = 0; j < nk; j++)
            pf_row((const uint16_t *)k, stride, pf_slot_at(run, i0 + j, 16, m), 0, (size_t)hd * 2);
        keys_i16(k, stride, run + i0, nk, hd, kt);
        for (int32_t j = 0; j < 16; j++)
            ksv[j] = j < nk ? kscale[run[i0 + j]] : 0.0f;
        const __m512 ks = _mm512_load_ps(ksv);
        const __mmask16 mk = (__mmask16)((1u << nk) - 1u);
        int32_t p = 0;
        for (; p + 4 <= np; p += 4) {
            const int16_t *q[4] = {qp[p], qp[p + 1], qp[p + 2], qp[p + 3]};
            float *const d[4] = {sp[p] + i0, sp[p + 1] + i0, sp[p + 2] + i0, sp[p + 3] + i0};
            pairs_i16(4, q, qk + p, hd, (const int32_t(*)[16])kt, ks, d, mk);
        }
        if (p + 2 <= np) {
            const int16_t *q[4] = {qp[p], qp[p + 1], qp[p], qp[p]};
            float *const d[4] = {sp[p] + i0, sp[p + 1] + i0, sp[p] + i0, sp[p] + i0};
            const float f[4] = {qk[p], qk[p + 1], qk[p], qk[p]};
            pairs_i16(2, q, f, hd, (const int32_t(*)[16])kt, ks, d, mk);
            p += 2;
        }
        if (p < np) {
            const int16_t *q[4] = {qp[p], qp[p], qp[p], qp[p]};
            float *const d[4] = {sp[p] + i0, sp[p] + i0, sp[p] + i0, sp[p] + i0};
            const float f[4] = {qk[p], qk[p], qk[p], qk[p]};
            pairs_i16(1, q, f, hd, (const int32_t(*)[16])kt, ks, d, mk);
        }
    }
}

/* One row's nh heads (levels lev, factors qk) over keys slots[0, n),
 * scores at sc[h * cap + i]. */
TGT5I static void scores_avx512(const int16_t *lev, const float *qk, int32_t nh, int32_t hd, const int16_t *k,
                                const float *kscale, size_t stride, const int32_t *slots, int32_t n,
                                float *sc, size_t cap) {
    const int16_t *qp[T16_PAIRS];
    float *sp[T16_PAIRS];
    for (int32_t h0 = 0; h0 < nh; h0 += T16_PAIRS) {
        const int32_t hn = SD_MIN(T16_PAIRS, nh - h0);
        for (int32_t h = 0; h < hn; h++)
            qp[h] = lev + (size_t)(h0 + h) * hd, sp[h] = sc + (size_t)(h0 + h) * cap;
        scores_t16(qp, qk + h0, sp, hn, hd, k, kscale, stride, slots, n);
    }
}

/* AVX-512 with AVX512_BF16 (vdpbf16ps), for p.V only. */
#define ISA5B "avx512f,avx512vl,avx512bw,avx512bf16,avx2,fma,f16c"
#define AI5 static inline __attribute__((always_inline, target("avx512f,avx512vl,avx2,fma,f16c")))
#define TGT5B __attribute__((target(ISA5B)))
#define AI5B static inline __attribute__((always_inline, target(ISA5B)))

/* bf16r on sixteen lanes (bf16r_avx2's steps). */
AI5 __m512 bf16r_512(__m512 x) {
    const __m512i b = _mm512_castps_si512(x), hi = _mm512_set1_epi32((int)0xffff0000u);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    const __m512i r =
        _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), odd), hi);
    const __m512i q = _mm512_and_si512(_mm512_or_si512(b, _mm512_set1_epi32(0x400000)), hi);
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), q));
}

/* p_round on sixteen lanes. */
AI5 __m512 p_round_512(__m512 p) {
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(p), _mm512_set1_ps(P_MIN), _CMP_NLT_UQ);
    return _mm512_maskz_mov_ps(big, bf16r_512(p));
}

/* The accumulators of H output rows (or pairs) of W vectors, from and to
 * oh[h] + off + 16 j; the store leaves rows past hn alone. */
AI5 void acc_load(int H, int W, float *const *oh, int32_t off, __m512 (*acc)[4]) {
#pragma GCC unroll 16
    for (int h = 0; h < H; h++)
#pragma GCC unroll 4
        for (int j = 0; j < W; j++)
            acc[h][j] = _mm512_loadu_ps(oh[h] + off + 16 * j);
}

AI5 void acc_store(int H, int hn, int W, float *const *oh, int32_t off, __m512 (*acc)[4]) {
#pragma GCC unroll 16
    for (int h = 0; h < H; h++)
#pragma GCC unroll 4
        for (int j = 0; j < W; j++)
            if (h < hn) _mm512_storeu_ps(oh[h] + off + 16 * j, acc[h][j]);
}

/* Key i's step without vdpbf16ps: its V values [0, 16 W) (at vr) into H
 * heads' accumulators. */
AI5 void pv_key_512(int H, int W, const float *const ph[8], int32_t i, const uint16_t *vr, __m512 acc[8][4]) {
    __m512 vz[4];
#pragma GCC unroll 4
    for (int j = 0; j < W; j++)
        vz[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16 * j)));
#pragma GCC unroll 8
    for (int h = 0; h < H; h++) {
        const __m512 pb = _mm512_set1_ps(ph[h][i]);
#pragma GCC unroll 4
        for (int j = 0; j < W; j++)
            acc[h][j] = _mm512_fmadd_ps(pb, vz[j], acc[h][j]);
    }
}

/* W vectors of 16 output values of H heads (H W <= 16 accumulators;
 * missing heads repeat the first and are not stored), over every key in
 * the header's pairs, continuing from out's values. */
AI5 void pv_chunk_avx512(int H, int W, const float *const ph[8], int32_t hn, const uint16_t *v, size_t stride,
                         const int32_t *slots, int32_t n, float *const oh[8]) {
    __m512 acc[8][4];
    acc_load(H, W, oh, 0, acc);
    int32_t i = 0;
    for (; i + 1 < n; i += 2) {
        pf_row(v, stride, pf_slot_at(slots, i, PF_KEYS_ONE_ROW, n), 0, (size_t)W * 32);
        pf_row(v, stride, pf_slot_at(slots, i + 1, PF_KEYS_ONE_ROW, n), 0, (size_t)W * 32);
        pv_key_512(H, W, ph, i + 1, v + (size_t)slots[i + 1] * stride, acc);
        pv_key_512(H, W, ph, i, v + (size_t)slots[i] * stride, acc);
    }
    if (i < n) pv_key_512(H, W, ph, i, v + (size_t)slots[i] * stride, acc);
    acc_store(H, hn, W, oh, 0, acc);
}

/* vdpbf16ps's operand of two keys' V values [0, 16): dword d holds key 0's
 * value d (low half, as bf16: exact on the fast order's cache) and key 1's
 * (high half; zero where solo). */
AI5B __m512bh v_pair_bf16(const uint16_t *r0, const uint16_t *r1, bool solo) {
    const __m512i ilv = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                         22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)r0));
    const __m512 b = solo ? _mm512_setzero_ps() : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)r1));
    return (__m512bh)_mm512_permutexvar_epi16(ilv, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

/* p's pair (i, i + 1) as vdpbf16ps takes it (p already bf16; i + 1 zero
 * where solo). */
static inline uint32_t p_pair(const float *p, int32_t i, bool solo) {
    uint32_t a, b = 0;
    memcpy(&a, p + i, 4);
    if (!solo) memcpy(&b, p + i + 1, 4);
    return (a >> 16) | (b & 0xffff0000u);
}

/* Keys i and i + 1 (solo: i alone, r1 not read) of pv_chunk_avx512 on
 * vdpbf16ps: one instruction takes both keys' products, odd first, as the
 * header's pair. */
AI5B void pv_pair_bf16(int H, int W, const float *const ph[8], int32_t i, const uint16_t *r0,
                       const uint16_t *r1, bool solo, __m512 acc[8][4]) {
    __m512bh vz[4];
#pragma GCC unroll 4
    for (int j = 0; j < W; j++)
        vz[j] = v_pair_bf16(r0 + 16 * j, r1 + 16 * j, solo);
#pragma GCC unroll 8
    for (int h = 0; h < H; h++) {
        const __m512bh pb = (__m512bh)_mm512_set1_epi32((int)p_pair(ph[h], i, solo));
#pragma GCC unroll 4
        for (int j = 0; j < W; j++)
            acc[h][j] = _mm512_dpbf16_ps(acc[h][j], pb, vz[j]);
    }
}

AI5B void pv_chunk_bf16(int H, int W, const float *const ph[8], int32_t hn, const uint16_t *v, size_t stride,
                        const int32_t *slots, int32_t n, float *const oh[8]) {
    __m512 acc[8][4];
    acc_load(H, W, oh, 0, acc);
    int32_t i = 0;
    for (; i + 1 < n; i += 2) {
        pf_row(v, stride, pf_slot_at(slots, i, PF_KEYS_ONE_ROW, n), 0, (size_t)W * 32);
        pf_row(v, stride, pf_slot_at(slots, i + 1, PF_KEYS_ONE_ROW, n), 0, (size_t)W * 32);
        pv_pair_bf16(H, W, ph, i, v + (size_t)slots[i] * stride, v + (size_t)slots[i + 1] * stride, false,
                     acc);
    }
    if (i < n) { /* the last key alone: r1 is not read */
        const uint16_t *r0 = v + (size_t)slots[i] * stride;
        pv_pair_bf16(H, W, ph, i, r0, r0, true, acc);
    }
    acc_store(H, hn, W, oh, 0, acc);
}

/* pv_chunk_bf16 for the shapes pv_avx512 takes. */
TGT5B static void pv_chunk_bf16_any(int H, int W, const float *const ph[8], int32_t hn, const uint16_t *v,
                                    size_t stride, const int32_t *slots, int32_t n, float *const oh[8]) {
    if (H == 8 && W == 2)
        pv_chunk_bf16(8, 2, ph, hn, v, stride, slots, n, oh);
    else if (H == 8)
        pv_chunk_bf16(8, 1, ph, hn, v, stride, slots, n, oh);
    else if (W == 4)
        pv_chunk_bf16(4, 4, ph, hn, v, stride, slots, n, oh);
    else
        pv_chunk_bf16(4, 1, ph, hn, v, stride, slots, n, oh);
}

/* Output values [d0, d0 + 16 W) of heads [h0, h0 + hn) (hn <= H). */
AI5 void pv_heads(int H, int W, bool hw, const float *p, int32_t h0, int32_t hn, int32_t hd, int32_t d0,
                  const uint16_t *v, size_t stride, const int32_t *slots, int32_t n, size_t cap, float *out) {
    const float *ph[8];
    float *oh[8];
    for (int32_t h = 0; h < H; h++) {
        const int32_t hh = h0 + (h < hn ? h : 0);
        ph[h] = p + (size_t)hh * cap;
        oh[h] = out + (size_t)hh * hd + d0;
    }
    if (hw)
        pv_chunk_bf16_any(H, W, ph, hn, v + d0, stride, slots, n, oh);
    else
        pv_chunk_avx512(H, W, ph, hn, v + d0, stride, slots, n, oh);
}

/* One row's p.V. Each pass over the keys reads V and converts it, so a
 * pass serves as many heads as the accumulators allow: up to eight heads
 * of 32 values (a head group of seven or six whole, where the threads
 * split a head's 64 values in two), else four of 64 or of 16. */
TGT5 static void pv_avx512(const float *p, int32_t nh, int32_t hd, int32_t d_begin, int32_t d_end,
                           const uint16_t *v, size_t stride, const int32_t *slots, int32_t n, size_t cap, float *out) {
    const bool hw = sd_attn_bf16_active();
    int32_t h0 = 0;
    for (; nh - h0 > 4; h0 += 8) {
        const int32_t hn = SD_MIN(8, nh - h0);
        int32_t d0 = d_begin;
        for (; d0 + 32 <= d_end; d0 += 32)
            pv_heads(8, 2, hw, p, h0, hn, hd, d0, v, stride, slots, n, cap, out);
        for (; d0 < d_end; d0 += 16)
            pv_heads(8, 1, hw, p, h0, hn, hd, d0, v, stride, slots, n, cap, out);
    }
    for (; h0 < nh; h0 += 4) {
        const int32_t hn = SD_MIN(4, nh - h0);
        int32_t d0 = d_begin;
        for (; d0 + 64 <= d_end; d0 += 64)
            pv_heads(4, 4, hw, p, h0, hn, hd, d0, v, stride, slots, n, cap, out);
        for (; d0 < d_end; d0 += 16)
            pv_heads(4, 1, hw, p, h0, hn, hd, d0, v, stride, slots, n, cap, out);
    }
}

/* A tile's rows share the keys of their run (sd_attn_fast_rows): each V
 * row of the run is loaded and converted once for up to sixteen (row, head)
 * pairs, taken in order from the flat list of every row's heads (so seven
 * heads of eight rows make 3.5 tiles, not four of which two are a
 * quarter empty), and each pair's sums take exactly the steps of the one-row
 * kernels above. The pairs' p are copied into tiles first, so that the
 * inner loops address them at fixed offsets from one pointer. */

struct tile {
    int32_t np, hd;
    const float *ps[16]; /* pair p's p from the run's first key */
    float *out[16];      /* pair p's output values [hd] */
};

/* Key i of a block (pv_block): its V values [d0, d0 + 16 W) into the 4 R
 * pairs' accumulators. */
AI5 void pv_tile_key(int R, int W, int32_t i, const float pt[TILE_KEYS][16], const uint16_t *vr,
                     __m512 acc[16][4]) {
    __m512 vz[4];
#pragma GCC unroll 4
    for (int j = 0; j < W; j++)
        vz[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16 * j)));
#pragma GCC unroll 16
    for (int p = 0; p < 4 * R; p++) {
        const __m512 pb = _mm512_set1_ps(pt[i][p]);
#pragma GCC unroll 4
        for (int j = 0; j < W; j++)
            acc[p][j] = _mm512_fmadd_ps(pb, vz[j], acc[p][j]);
    }
}

/* out += p.V over a block of the run's keys for the tile's pairs, output
 * values [d_begin, d_end) 16 W at a time (4 R pairs, R and W constants:
 * R W <= 4 keeps the accumulators in registers), the keys in the header's
 * pairs (nk even: the run starts at an even index of every row's keys).
 * pt[i][v]: pair v's p at the block's key i. */
AI5 void pv_block(int R, int W, int32_t d_begin, int32_t d_end, float *const oh[16],
                  const float pt[TILE_KEYS][16], const uint16_t *v, size_t stride, const int32_t *run,
                  int32_t nk, int32_t nrun) {
    for (int32_t d0 = d_begin; d0 < d_end; d0 += 16 * W) {
        __m512 acc[16][4];
        acc_load(4 * R, W, oh, d0, acc);
        for (int32_t i = 0; i < nk; i += 2) {
            pf_row(v, stride, pf_slot_at(run, i, TILE_KEYS, nrun), (size_t)d0 * 2, (size_t)(d0 + 16 * W) * 2);
            pf_row(v, stride, pf_slot_at(run, i + 1, TILE_KEYS, nrun), (size_t)d0 * 2,
                   (size_t)(d0 + 16 * W) * 2);
            pv_tile_key(R, W, i + 1, pt, v + (size_t)run[i + 1] * stride + d0, acc);
            pv_tile_key(R, W, i, pt, v + (size_t)run[i] * stride + d0, acc);
        }
        acc_store(4 * R, 4 * R, W, oh, d0, acc);
    }
}

/* pv_block on vdpbf16ps: pt2[j][v] is pair v's p at the block's keys 2j
 * and 2j + 1 as p_pair gives it. */
AI5B void pv_block_bf16(int R, int W, int32_t d_begin, int32_t d_end, float *const oh[16],
                        const uint32_t pt2[TILE_KEYS / 2][16], const uint16_t *v, size_t stride,
                        const int32_t *run, int32_t nk, int32_t nrun) {
    for (int32_t d0 = d_begin; d0 < d_end; d0 += 16 * W) {
        __m512 acc[16][4];
        acc_load(4 * R, W, oh, d0, acc);
        for (int32_t i = 0; i < nk; i += 2) {
            pf_row(v, stride, pf_slot_at(run, i, TILE_KEYS, nrun), (size_t)d0 * 2, (size_t)(d0 + 16 * W) * 2);
            pf_row(v, stride, pf_slot_at(run, i + 1, TILE_KEYS, nrun), (size_t)d0 * 2,
                   (size_t)(d0 + 16 * W) * 2);
            const uint16_t *r0 = v + (size_t)run[i] * stride + d0, *r1 = v + (size_t)run[i + 1] * stride + d0;
            __m512bh vz[4];
#pragma GCC unroll 4
            for (int j = 0; j < W; j++)
                vz[j] = v_pair_bf16(r0 + 16 * j, r1 + 16 * j, false);
#pragma GCC unroll 16
            for (int p = 0; p < 4 * R; p++) {
                const __m512bh pb = (__m512bh)_mm512_set1_epi32((int)pt2[i / 2][p]);
#pragma GCC unroll 4
                for (int j = 0; j < W; j++)
                    acc[p][j] = _mm512_dpbf16_ps(acc[p][j], pb, vz[j]);
            }
        }
        acc_store(4 * R, 4 * R, W, oh, d0, acc);
    }
}

/* pt[i][p] = pair p's p at key i0 + i for i < nk (missing pairs and keys
 * 0): sixteen keys of sixteen pairs a transpose16. */
TGT5 static void pair_ps(const struct tile *t, int32_t i0, int32_t nk, float pt[][16]) {
    for (int32_t b = 0; b < nk; b += 16) {
        const __mmask16 mk = (__mmask16)((1u << SD_MIN(16, nk - b)) - 1u);
        __m512 r[16];
#pragma GCC unroll 16
        for (int p = 0; p < 16; p++) r[p] = p < t->np ? _mm512_maskz_loadu_ps(mk, t->ps[p] + i0 + b) : _mm512_setzero_ps();
        transpose16(r);
#pragma GCC unroll 16
        for (int e = 0; e < 16; e++) _mm512_store_ps(pt[b + e], r[e]);
    }
}

/* pt2[j][p] = pair p's p at keys i0 + 2j, i0 + 2j + 1 for 2j < nk, as
 * p_pair gives them (p is bf16 already: the conversion is exact): one
 * transpose16 for the block's 32 keys. */
TGT5B static void pair_ps_bf16(const struct tile *t, int32_t i0, int32_t nk, uint32_t pt2[][16]) {
    const __mmask16 lo = (__mmask16)((1u << SD_MIN(16, nk)) - 1u),
                    hi = (__mmask16)((1u << SD_MAX(0, nk - 16)) - 1u);
    __m512 r[16];
#pragma GCC unroll 16
    for (int p = 0; p < 16; p++)
        r[p] = p < t->np ? (__m512)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, t->ps[p] + i0 + 16),
                                                       _mm512_maskz_loadu_ps(lo, t->ps[p] + i0))
                         : _mm512_setzero_ps();
    transpose16(r);
#pragma GCC unroll 16
    for (int e = 0; e < 16; e++)
        _mm512_store_ps((float *)pt2[e], r[e]);
}

/* The tile's pairs over keys run[0, m) on vdpbf16ps (pv_tile). */
TGT5B static void pv_tile_bf16(const struct tile *t, float *const oh[16], const uint16_t *v, size_t stride,
                               const int32_t *run, int32_t m) {
    _Alignas(64) uint32_t pt2[TILE_KEYS / 2][16];
    const int32_t R = (t->np + 3) / 4;
    for (int32_t i0 = 0; i0 < m; i0 += TILE_KEYS) {
        const int32_t nk = SD_MIN(TILE_KEYS, m - i0);
        pair_ps_bf16(t, i0, nk, pt2);
        const int32_t *rk = run + i0, hd = t->hd, w32 = hd / 32 * 32, w64 = hd / 64 * 64;
        const int32_t nr = m - i0;
        if (R == 4)
            pv_block_bf16(4, 1, 0, hd, oh, pt2, v, stride, rk, nk, nr);
        else if (R == 3)
            pv_block_bf16(3, 1, 0, hd, oh, pt2, v, stride, rk, nk, nr);
        else if (R == 2)
            pv_block_bf16(2, 2, 0, w32, oh, pt2, v, stride, rk, nk, nr),
                pv_block_bf16(2, 1, w32, hd, oh, pt2, v, stride, rk, nk, nr);
        else
            pv_block_bf16(1, 4, 0, w64, oh, pt2, v, stride, rk, nk, nr),
                pv_block_bf16(1, 1, w64, hd, oh, pt2, v, stride, rk, nk, nr);
    }
}

/* The tile's pairs over keys run[0, m) (m even), in blocks of TILE_KEYS;
 * the smallest R (groups of four pairs) that holds them. */
TGT5 static void pv_tile(const struct tile *t, const uint16_t *v, size_t stride, const int32_t *run, int32_t m) {
    _Alignas(64) float pt[TILE_KEYS][16];
    _Alignas(64) float junk[TILE_HD];
    float *oh[16];
    for (int32_t p = 0; p < 16; p++) oh[p] = p < t->np ? t->out[p] : junk;
    if (sd_attn_bf16_active()) {
        pv_tile_bf16(t, oh, v, stride, run, m);
        return;
    }
    const int32_t R = (t->np + 3) / 4;
    for (int32_t i0 = 0; i0 < m; i0 += TILE_KEYS) {
        const int32_t nk = SD_MIN(TILE_KEYS, m - i0);
        pair_ps(t, i0, nk, pt);
        const int32_t *rk = run + i0, hd = t->hd, w32 = hd / 32 * 32, w64 = hd / 64 * 64;
        const int32_t nr = m - i0;
        if (R == 4) pv_block(4, 1, 0, hd, oh, pt, v, stride, rk, nk, nr);
        else if (R == 3) pv_block(3, 1, 0, hd, oh, pt, v, stride, rk, nk, nr);
        else if (R == 2) pv_block(2, 2, 0, w32, oh, pt, v, stride, rk, nk, nr), pv_block(2, 1, w32, hd, oh, pt, v, stride, rk, nk, nr);
        else pv_block(1, 4, 0, w64, oh, pt, v, stride, rk, nk, nr), pv_block(1, 1, w64, hd, oh, pt, v, stride, rk, nk, nr);
    }
}

/* The run's scores of every (row, head) pair (n_rows * nh <= T16_PAIRS),
 * pair p = r * nh + h's q levels at lev + p * hd, in one pass over its
 * keys. */
static void run_scores(const struct sd_attn_row *rows, int32_t n_rows, int32_t m, int32_t nh, int32_t hd,
                       const int16_t *lev, const float *qk, const int16_t *k, const float *ks,
                       size_t stride) {
    const int32_t *run = rows[0].slots + rows[0].a;
    const int16_t *qp[T16_PAIRS] = {0};
    float *sp[T16_PAIRS] = {0};
    int32_t np = 0;
    for (int32_t r = 0; r < n_rows; r++)
        for (int32_t h = 0; h < nh; h++, np++) {
            qp[np] = lev + (size_t)np * (size_t)hd;
            sp[np] = rows[r].scores + (size_t)h * cap_of(rows[r].n) + (size_t)rows[r].a;
        }
    scores_t16(qp, qk, sp, np, hd, k, ks, stride, run, m);
}

/* The keys of the run that p.V takes in a tile for rows whose run starts
 * at an index of parity par: from run index par, an even count (the
 * header's pairs begin at even indices of each row's keys). */
static int32_t pv_run_len(int32_t m, int32_t par) { return m > par ? (m - par) & ~1 : 0; }

/* The run's p.V for every (row, head) pair of the rows whose run starts at
 * an index of parity par (pv_run_len's keys), sixteen pairs a tile. */
static void run_pv(const struct sd_attn_row *rows, int32_t n_rows, int32_t m, int32_t par, int32_t nh,
                   int32_t hd, const uint16_t *v, size_t stride) {
    const int32_t *run = rows[0].slots + rows[0].a + par, len = pv_run_len(m, par);
    int32_t last = -1;
    for (int32_t r = 0; r < n_rows; r++)
        if ((rows[r].a & 1) == par) last = r;
    if (len == 0 || last < 0) return;
    struct tile t = {0, hd, {0}, {0}};
    for (int32_t r = 0; r <= last; r++) {
        if ((rows[r].a & 1) != par) continue;
        for (int32_t h = 0; h < nh; h++) {
            t.ps[t.np] = rows[r].scores + (size_t)h * cap_of(rows[r].n) + (size_t)(rows[r].a + par);
            t.out[t.np] = rows[r].out + (size_t)h * hd;
            if (++t.np == 16 || (r == last && h == nh - 1)) {
                pv_tile(&t, v, stride, run, len);
                t.np = 0;
            }
        }
    }
}
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
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(in + i), s), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) out[i] = in[i] * scale * w[i];
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
    for (; i < n; i++) l[i % 16] = fmaf(in[i], in[i], l[i % 16]);
    const float scale = 1.0f / sqrtf(reduce16(l) / (float)n + eps);
#ifdef SD_X86
    if (simd) {
        scale_avx2(out, in, w, n, scale);
        return;
    }
#endif
    for (i = 0; i < n; i++) out[i] = in[i] * scale * w[i];
}

/* ------------------------------------------------------------ the row */

enum impl { IMPL_SCALAR, IMPL_AVX2, IMPL_AVX512 };

/* -1 until first asked, then 0 or 1 (atomic: threads of a pass read it). */
static atomic_int g_bf16 = -1;

static bool bf16_supported(void) {
#ifdef SD_X86
    return sd_quant_avx512_supported() && __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

#ifdef SD_X86
/* Sixteen chains of vdpbf16ps (bf16), or of the fused multiply-adds p.V
 * takes without it, as its kernels keep sixteen accumulators: multiply-adds
 * a nanosecond (32 a vdpbf16ps, 16 a fused multiply-add). Asked only where
 * the CPU has AVX512_BF16. */
enum { RATE_CHAINS = 16, RATE_ITERS = 4096 };
TGT5B static double pv_rate(bool bf16) {
    volatile float seed = 0.5f; /* read and written: the loops stay */
    const __m512 a = _mm512_set1_ps(seed), b = _mm512_set1_ps(1e-3f);
    const __m512bh ah = _mm512_cvtne2ps_pbh(a, a), bh = _mm512_cvtne2ps_pbh(b, b);
    __m512 acc[RATE_CHAINS];
    for (int c = 0; c < RATE_CHAINS; c++)
        acc[c] = _mm512_set1_ps((float)c);
    const double t0 = sd_time_ms();
    if (bf16) {
        for (int it = 0; it < RATE_ITERS; it++)
#pragma GCC unroll 16
            for (int c = 0; c < RATE_CHAINS; c++)
                acc[c] = _mm512_dpbf16_ps(acc[c], ah, bh);
    } else {
        for (int it = 0; it < RATE_ITERS; it++)
#pragma GCC unroll 16
            for (int c = 0; c < RATE_CHAINS; c++)
                acc[c] = _mm512_fmadd_ps(a, b, acc[c]);
    }
    const double ms = sd_time_ms() - t0;
    for (int c = 1; c < RATE_CHAINS; c++)
        acc[0] = _mm512_add_ps(acc[0], acc[c]);
    seed = _mm512_reduce_add_ps(acc[0]) > 0 ? 0.5f : 0.25f;
    return (bf16 ? 32.0 : 16.0) * RATE_CHAINS * RATE_ITERS / (ms * 1e6);
}
#endif

/* Whether vdpbf16ps does more multiply-adds a second than the fused
 * multiply-adds that give its bits: the best of rounds of each, alternating
 * for a millisecond. A core's first 512-bit fused multiply-adds run slower
 * for a while: measured cold, best of three rounds, they once came out at
 * a fifth of their rate (16 against 80-96 multiply-adds a ns) in some
 * forty processes here, and p.V took the slower path.
 * Zen 4 runs it at twice their rate; Emerald Rapids (a KVM guest, stop
 * 60) at half, where the fused multiply-adds made a one-row attention
 * after 2,048 keys 28% cheaper (76 -> 55 us) and an 8-row one 27%. Either
 * path gives the same bits, so the choice is speed alone. */
static bool bf16_pays(void) {
#ifdef SD_X86
    double bf = 0, fm = 0;
    for (const double t0 = sd_time_ms(); sd_time_ms() - t0 < 1.0;)
        bf = SD_MAX(bf, pv_rate(true)), fm = SD_MAX(fm, pv_rate(false));
    return bf > fm;
#else
    return false;
#endif
}

bool sd_attn_bf16_supported(void) { return bf16_supported() && sd_quant_avx512_active(); }

bool sd_attn_set_bf16(bool on) {
    atomic_store_explicit(&g_bf16, on && bf16_supported() ? 1 : 0, memory_order_relaxed);
    return sd_attn_bf16_active();
}

bool sd_attn_bf16_active(void) {
    int v = atomic_load_explicit(&g_bf16, memory_order_relaxed);
    if (v < 0) {
        v = bf16_supported() && bf16_pays() ? 1 : 0; /* whatever kernels run now: they may change */
        atomic_store_explicit(&g_bf16, v, memory_order_relaxed);
    }
    return v == 1 && sd_quant_avx512_active();
}

static enum impl impl_for(int32_t hd) {
    if (sd_quant_get_impl() != SD_IMPL_AVX2 || hd % 16 || hd > TILE_HD) return IMPL_SCALAR;
    return sd_quant_avx512_active() ? IMPL_AVX512 : IMPL_AVX2;
}

/* Scores of keys slots[0, n) into sc[h * cap + i] for nh heads of q
 * already quantized (levels lev [nh][hd], factors qk [nh]). */
static void scores_lev(enum impl im, const int16_t *lev, const float *qk, int32_t nh, int32_t hd,
                       const int16_t *k, const float *ks, size_t stride, const int32_t *slots, int32_t n,
                       float *sc, size_t cap) {
#ifdef SD_X86
    if (im == IMPL_AVX512) {
        scores_avx512(lev, qk, nh, hd, k, ks, stride, slots, n, sc, cap);
        return;
    }
    if (im == IMPL_AVX2) {
        scores_avx2(lev, qk, nh, hd, k, ks, stride, slots, n, sc, cap);
        return;
    }
#endif
    (void)im;
    scores_scalar(lev, qk, nh, hd, k, ks, stride, slots, n, sc, cap);
}

/* The same from f32 q: its heads quantized a few at a time (Q_CHUNK
 * values), the same levels for every key. */
enum { Q_CHUNK = 4096 };
static void scores_part(enum impl im, const float *q, int32_t nh, int32_t hd, const int16_t *k,
                        const float *ks, size_t stride, const int32_t *slots, int32_t n, float kscale,
                        float *sc, size_t cap) {
    _Alignas(64) int16_t lev[Q_CHUNK];
    float qk[Q_CHUNK / 16];
    const int32_t per = SD_MAX(1, Q_CHUNK / hd);
    for (int32_t h0 = 0; h0 < nh; h0 += per) {
        const int32_t hn = SD_MIN(per, nh - h0);
        quant_heads(q, h0, hn, hd, kscale, lev, qk);
        scores_lev(im, lev, qk, hn, hd, k, ks, stride, slots, n, sc + (size_t)h0 * cap, cap);
    }
}

/* out += p.V over keys slots[0, n), p at p[h * cap + i], for output
 * values [d_begin, d_end) of each head (multiples of 16 where im is SIMD). */
static void pv_dims(enum impl im, const float *p, int32_t nh, int32_t hd, int32_t d_begin, int32_t d_end,
                    const uint16_t *v, size_t stride, const int32_t *slots, int32_t n, size_t cap, float *out) {
#ifdef SD_X86
    if (im == IMPL_AVX512) {
        pv_avx512(p, nh, hd, d_begin, d_end, v, stride, slots, n, cap, out);
        return;
    }
    if (im == IMPL_AVX2) {
        pv_avx2(p, nh, hd, d_begin, d_end, v, stride, slots, n, cap, out);
        return;
    }
#endif
    (void)im;
    pv_scalar(p, nh, hd, d_begin, d_end, v, stride, slots, n, cap, out);
}

static void pv_part(enum impl im, const float *p, int32_t nh, int32_t hd, const uint16_t *v, size_t stride,
                    const int32_t *slots, int32_t n, size_t cap, float *out) {
    pv_dims(im, p, nh, hd, 0, hd, v, stride, slots, n, cap, out);
}

#ifdef SD_X86
/* The scalar loop's maximum from sc[0] over the lanes l[0, nl) that hold
 * sc[1, i), then over sc[i, n). */
static float max_finish(const float *sc, const float *l, int nl, int32_t i, int32_t n) {
    float m = sc[0];
    for (int j = 0; j < nl; j++) m = l[j] > m ? l[j] : m;
    for (; i < n; i++) m = sc[i] > m ? sc[i] : m;
    return m;
}

/* softmax_heads' maximum, sum lanes and scaling of one head, eight lanes at
 * a time: the maximum keeps the scalar loop's choices (a NaN after sc[0]
 * never wins; a NaN sc[0] always does), the sum adds the same values into
 * the same sixteen lanes in the same order. */
TGT2 static float max_avx2(const float *sc, int32_t n) {
    __m256 mx = _mm256_set1_ps(sc[0]);
    int32_t i = 1;
    for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(_mm256_loadu_ps(sc + i), mx);
    _Alignas(32) float l[8];
    _mm256_store_ps(l, mx);
    return max_finish(sc, l, 8, i, n);
}

TGT2 static void sum16_avx2(const float *sc, size_t cap, float l[16]) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (size_t i = 0; i < cap; i += 16) {
        lo = _mm256_add_ps(lo, _mm256_loadu_ps(sc + i));
        hi = _mm256_add_ps(hi, _mm256_loadu_ps(sc + i + 8));
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
#endif

/* The same three steps on sixteen lanes (max_avx2's choices: _mm512_max_ps
 * returns its second operand where either is NaN). A softmax of 2,048 keys
 * runs for every (row, head) pair of a verification pass, so these count
 * beside the exponentials. */
/* The last values under a mask, as expf_sub_avx512 takes them: a short
 * row's tail was most of its maximum's time. */
TGT5 static float max_avx512(const float *sc, int32_t n) {
    __m512 mx = _mm512_set1_ps(sc[0]);
    int32_t i = 1;
    for (; i + 16 <= n; i += 16) mx = _mm512_max_ps(_mm512_loadu_ps(sc + i), mx);
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
        const __m512 e = expf16(_mm512_sub_ps(_mm512_loadu_ps(sc + i), mv));
        _mm512_storeu_ps(sc + i, e);
        s = _mm512_add_ps(s, e);
    }
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        const __m512 e = _mm512_maskz_mov_ps(k, expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sc + i), mv)));
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

/* Scores of n keys -> p, per head, in the header's order (p as p.V takes
 * it). */
static void softmax_heads(float *scores, int32_t nh, int32_t n, size_t cap) {
#ifdef SD_X86
    const bool simd = sd_quant_get_impl() == SD_IMPL_AVX2, wide = simd && sd_quant_avx512_active();
#endif
    for (int32_t h = 0; h < nh; h++) {
        float *sc = scores + (size_t)h * cap;
        float l[16] = {0};
#ifdef SD_X86
        if (wide) {
            expf_sum_avx512(sc, n, cap, max_avx512(sc, n), l);
            scale_n_avx512(sc, n, 1.0f / reduce16(l));
            continue;
        }
        if (simd) {
            sd_expf_sub(sc, n, max_avx2(sc, n));
            for (size_t i = (size_t)n; i < cap; i++) sc[i] = 0.0f;
            sum16_avx2(sc, cap, l);
            scale_n_avx2(sc, n, 1.0f / reduce16(l));
            continue;
        }
#endif
        float mx = sc[0];
        for (int32_t i = 1; i < n; i++) mx = sc[i] > mx ? sc[i] : mx;
        sd_expf_sub(sc, n, mx);
        for (size_t i = (size_t)n; i < cap; i++) sc[i] = 0.0f;
        for (size_t i = 0; i < cap; i++) l[i % 16] += sc[i];
        const float inv = 1.0f / reduce16(l);
        for (int32_t i = 0; i < n; i++)
            sc[i] = p_round(sc[i] * inv);
    }
}

void sd_attn_fast_v_row(uint16_t *v, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        const float x = h2f(v[i]), y = bf16r(x);
        v[i] = sd_fp32_to_fp16(isfinite(x) && fabsf(y) > 65504.0f ? copysignf(65280.0f, x) : y);
    }
}

void sd_attn_fast(const float *q, int32_t nh, int32_t hd, const int16_t *k, const float *ks,
                  const uint16_t *v, size_t stride, const int32_t *slots, int32_t n, float kscale,
                  float *scores, float *out) {
    const size_t cap = cap_of(n);
    const enum impl im = impl_for(hd);
    scores_part(im, q, nh, hd, k, ks, stride, slots, n, kscale, scores, cap);
    softmax_heads(scores, nh, n, cap);
    memset(out, 0, (size_t)nh * (size_t)hd * sizeof(float));
    pv_part(im, scores, nh, hd, v, stride, slots, n, cap, out);
}

void sd_attn_fast_scores(const float *q, int32_t nh, int32_t hd, const int16_t *k, const float *ks,
                         size_t stride, const int32_t *slots, int32_t n, int32_t i0, int32_t i1, float kscale,
                         float *scores) {
    if (i1 > i0)
        scores_part(impl_for(hd), q, nh, hd, k, ks, stride, slots + i0, i1 - i0, kscale, scores + i0,
                    cap_of(n));
}

void sd_attn_fast_softmax(float *scores, int32_t nh, int32_t n) { softmax_heads(scores, nh, n, cap_of(n)); }

void sd_attn_fast_pv(int32_t nh, int32_t hd, const uint16_t *v, size_t stride, const int32_t *slots, int32_t n,
                     const float *scores, int32_t d0, int32_t d1, float *out) {
    for (int32_t h = 0; h < nh; h++) memset(out + (size_t)h * hd + d0, 0, (size_t)(d1 - d0) * sizeof(float));
    if (d1 > d0) pv_dims(impl_for(hd), scores, nh, hd, d0, d1, v, stride, slots, n, cap_of(n), out);
}

#ifdef SD_X86
/* A row's keys outside the tile's run: before it (i in [0, a)) and after
 * it (i in [a + m, n)), one row at a time. */
static void rest_scores(enum impl im, const struct sd_attn_row *r, const int16_t *lev, const float *qk,
                        int32_t m, int32_t nh, int32_t hd, const int16_t *k, const float *ks, size_t stride) {
    const size_t cap = cap_of(r->n);
    const int32_t b = r->a + m;
    if (r->a > 0) scores_lev(im, lev, qk, nh, hd, k, ks, stride, r->slots, r->a, r->scores, cap);
    if (r->n > b) scores_lev(im, lev, qk, nh, hd, k, ks, stride, r->slots + b, r->n - b, r->scores + b, cap);
}

static void rest_pv(enum impl im, const struct sd_attn_row *r, int32_t i0, int32_t i1, int32_t nh, int32_t hd,
                    const uint16_t *v, size_t stride) {
    if (i1 > i0) pv_part(im, r->scores + i0, nh, hd, v, stride, r->slots + i0, i1 - i0, cap_of(r->n), r->out);
}
#endif

void sd_attn_fast_rows(const struct sd_attn_row *rows, int32_t n_rows, int32_t m, int32_t nh, int32_t hd,
                       const int16_t *k, const float *ks, const uint16_t *v, size_t stride, float kscale) {
    const enum impl im = impl_for(hd);
    if (im != IMPL_AVX512 || m <= 0 || nh > T16_PAIRS || nh * hd > Q_CHUNK) {
        for (int32_t r = 0; r < n_rows; r++)
            sd_attn_fast(rows[r].q, nh, hd, k, ks, v, stride, rows[r].slots, rows[r].n, kscale,
                         rows[r].scores, rows[r].out);
        return;
    }
#ifdef SD_X86
    /* Rows a tile's worth at a time, so that every (row, head) pair's q is
     * quantized once (Q_CHUNK values on the stack) and the run's scores take
     * one pass over its keys (a row's result does not depend on the rows
     * beside it). */
    const int32_t per = SD_MIN(T16_PAIRS / nh, Q_CHUNK / (nh * hd));
    if (n_rows > per) {
        for (int32_t r = 0; r < n_rows; r += per)
            sd_attn_fast_rows(rows + r, SD_MIN(per, n_rows - r), m, nh, hd, k, ks, v, stride, kscale);
        return;
    }
    _Alignas(64) int16_t lev[Q_CHUNK];
    float qk[T16_PAIRS] = {0};
    for (int32_t r = 0; r < n_rows; r++) {
        int16_t *lr = lev + (size_t)r * (size_t)nh * (size_t)hd;
        quant_heads(rows[r].q, 0, nh, hd, kscale, lr, qk + r * nh);
        rest_scores(im, &rows[r], lr, qk + r * nh, m, nh, hd, k, ks, stride);
    }
    run_scores(rows, n_rows, m, nh, hd, lev, qk, k, ks, stride);
    /* p.V: each row's keys before its part of the run, the run's part in
     * tiles of the rows of each parity, the keys after. */
    for (int32_t r = 0; r < n_rows; r++) {
        const struct sd_attn_row *row = &rows[r];
        softmax_heads(row->scores, nh, row->n, cap_of(row->n));
        memset(row->out, 0, (size_t)nh * (size_t)hd * sizeof(float));
        rest_pv(im, row, 0, row->a + (row->a & 1), nh, hd, v, stride);
    }
    for (int32_t par = 0; par < 2; par++)
        run_pv(rows, n_rows, m, par, nh, hd, v, stride);
    for (int32_t r = 0; r < n_rows; r++) {
        const int32_t par = rows[r].a & 1;
        rest_pv(im, &rows[r], rows[r].a + par + pv_run_len(m, par), rows[r].n, nh, hd, v, stride);
    }
#endif
}
