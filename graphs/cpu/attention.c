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
#include <stdbool.h>
#include <string.h>

#include "base/base.h"
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

__attribute__((target("avx2,fma"))) static int32_t expf_sub_avx2(float *v, int32_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(v + i, expf8(_mm256_sub_ps(_mm256_loadu_ps(v + i), mv)));
    return i;
}
#endif

void sd_expf_sub(float *v, int32_t n, float m) {
    int32_t i = 0;
#ifdef SD_X86
    if (sd_quant_get_impl() == SD_IMPL_AVX2) i = expf_sub_avx2(v, n, m);
#endif
    for (; i < n; i++) v[i] = sd_expf(v[i] - m);
}

/* ------------------------------------------------------ scalar reference */

static float reduce16(const float l[16]) {
    float t8[8], t4[4];
    for (int j = 0; j < 8; j++) t8[j] = l[j] + l[j + 8];
    for (int j = 0; j < 4; j++) t4[j] = t8[j] + t8[j + 4];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

static float h2f(uint16_t h) { return sd_fp16_to_fp32(h); }

static void scores_scalar(const float *q, int32_t nh, int32_t hd, const uint16_t *k, size_t stride,
                          const int32_t *slots, int32_t n, float kscale, float *sc, size_t cap) {
    for (int32_t h = 0; h < nh; h++)
        for (int32_t i = 0; i < n; i++) {
            const uint16_t *kr = k + (size_t)slots[i] * stride;
            float l[16] = {0};
            for (int32_t d = 0; d < hd; d++) l[d % 16] = fmaf(q[(size_t)h * hd + d], h2f(kr[d]), l[d % 16]);
            sc[(size_t)h * cap + i] = reduce16(l) * kscale;
        }
}

static void pv_scalar(const float *p, int32_t nh, int32_t hd, const uint16_t *v, size_t stride, const int32_t *slots,
                      int32_t n, size_t cap, float *out) {
    for (int32_t h = 0; h < nh; h++)
        for (int32_t d = 0; d < hd; d++) {
            float acc = 0.0f;
            for (int32_t i = 0; i < n; i++) acc = fmaf(p[(size_t)h * cap + i], h2f(v[(size_t)slots[i] * stride + d]), acc);
            out[(size_t)h * hd + d] = acc;
        }
}

/* ------------------------------------------------------------ AVX2 */

#ifdef SD_X86
#define TGT2 __attribute__((target("avx2,fma,f16c")))

/* reduce16 of lanes lo (0..7) and hi (8..15). */
TGT2 static inline float reduce16_avx2(__m256 lo, __m256 hi) {
    const __m256 t8 = _mm256_add_ps(lo, hi);
    const __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
    const __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
    return _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
}

TGT2 static inline __m256 cvt8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* Up to four heads at a time, always as four so that the accumulators stay
 * in registers: missing heads repeat the first one and are not stored. */
static void head_ptrs(const float *q, int32_t h0, int32_t hn, int32_t hd, const float *qh[4]) {
    for (int32_t h = 0; h < 4; h++) qh[h] = q + (size_t)(h0 + (h < hn ? h : 0)) * hd;
}

TGT2 static void scores_avx2(const float *q, int32_t nh, int32_t hd, const uint16_t *k, size_t stride,
                             const int32_t *slots, int32_t n, float kscale, float *sc, size_t cap) {
    for (int32_t h0 = 0; h0 < nh; h0 += 4) {
        const int32_t hn = SD_MIN(4, nh - h0);
        const float *qh[4];
        head_ptrs(q, h0, hn, hd, qh);
        for (int32_t i = 0; i < n; i++) {
            const uint16_t *kr = k + (size_t)slots[i] * stride;
            __m256 lo[4], hi[4];
#pragma GCC unroll 4
            for (int32_t h = 0; h < 4; h++) lo[h] = hi[h] = _mm256_setzero_ps();
            for (int32_t d = 0; d < hd; d += 16) {
                const __m256 k0 = cvt8(kr + d), k1 = cvt8(kr + d + 8);
#pragma GCC unroll 4
                for (int32_t h = 0; h < 4; h++) {
                    lo[h] = _mm256_fmadd_ps(_mm256_loadu_ps(qh[h] + d), k0, lo[h]);
                    hi[h] = _mm256_fmadd_ps(_mm256_loadu_ps(qh[h] + d + 8), k1, hi[h]);
                }
            }
            for (int32_t h = 0; h < hn; h++) sc[(size_t)(h0 + h) * cap + i] = reduce16_avx2(lo[h], hi[h]) * kscale;
        }
    }
}

/* Output values [d0, d0 + 32) of two heads (hd a multiple of 16: the
 * last chunk may be 16 wide, done as two of 8). */
TGT2 static void pv_avx2(const float *p, int32_t nh, int32_t hd, const uint16_t *v, size_t stride,
                         const int32_t *slots, int32_t n, size_t cap, float *out) {
    for (int32_t h0 = 0; h0 < nh; h0 += 2) {
        const int32_t hn = SD_MIN(2, nh - h0);
        const float *ph[2] = {p + (size_t)h0 * cap, p + (size_t)(h0 + (hn > 1)) * cap};
        for (int32_t d0 = 0; d0 < hd; d0 += 16) {
            __m256 acc[2][2];
#pragma GCC unroll 2
            for (int32_t h = 0; h < 2; h++) acc[h][0] = acc[h][1] = _mm256_setzero_ps();
            for (int32_t i = 0; i < n; i++) {
                const uint16_t *vr = v + (size_t)slots[i] * stride + d0;
                const __m256 v0 = cvt8(vr), v1 = cvt8(vr + 8);
#pragma GCC unroll 2
                for (int32_t h = 0; h < 2; h++) {
                    const __m256 pb = _mm256_set1_ps(ph[h][i]);
                    acc[h][0] = _mm256_fmadd_ps(pb, v0, acc[h][0]);
                    acc[h][1] = _mm256_fmadd_ps(pb, v1, acc[h][1]);
                }
            }
            for (int32_t h = 0; h < hn; h++) {
                _mm256_storeu_ps(out + (size_t)(h0 + h) * hd + d0, acc[h][0]);
                _mm256_storeu_ps(out + (size_t)(h0 + h) * hd + d0 + 8, acc[h][1]);
            }
        }
    }
}

/* ------------------------------------------------------------ AVX-512 */

#define TGT5 __attribute__((target("avx512f,avx512vl,avx2,fma,f16c")))

TGT5 static inline float reduce16_512(__m512 a) {
    return reduce16_avx2(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}

TGT5 static void scores_avx512(const float *q, int32_t nh, int32_t hd, const uint16_t *k, size_t stride,
                               const int32_t *slots, int32_t n, float kscale, float *sc, size_t cap) {
    for (int32_t h0 = 0; h0 < nh; h0 += 4) {
        const int32_t hn = SD_MIN(4, nh - h0);
        const float *qh[4];
        head_ptrs(q, h0, hn, hd, qh);
        for (int32_t i = 0; i < n; i++) {
            const uint16_t *kr = k + (size_t)slots[i] * stride;
            __m512 acc[4];
#pragma GCC unroll 4
            for (int32_t h = 0; h < 4; h++) acc[h] = _mm512_setzero_ps();
            for (int32_t d = 0; d < hd; d += 16) {
                const __m512 kz = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + d)));
#pragma GCC unroll 4
                for (int32_t h = 0; h < 4; h++) acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(qh[h] + d), kz, acc[h]);
            }
            for (int32_t h = 0; h < hn; h++) sc[(size_t)(h0 + h) * cap + i] = reduce16_512(acc[h]) * kscale;
        }
    }
}

/* W vectors of 16 output values of four heads (missing heads repeat the
 * first and are not stored), over every key. */
static inline __attribute__((always_inline, target("avx512f,avx512vl,avx2,fma,f16c"))) void
pv_chunk_avx512(const float *const ph[4], int32_t hn, int W, const uint16_t *v, size_t stride, const int32_t *slots,
                int32_t n, float *const oh[4]) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int h = 0; h < 4; h++)
#pragma GCC unroll 4
        for (int j = 0; j < W; j++) acc[h][j] = _mm512_setzero_ps();
    for (int32_t i = 0; i < n; i++) {
        const uint16_t *vr = v + (size_t)slots[i] * stride;
        __m512 vz[4];
#pragma GCC unroll 4
        for (int j = 0; j < W; j++) vz[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16 * j)));
#pragma GCC unroll 4
        for (int h = 0; h < 4; h++) {
            const __m512 pb = _mm512_set1_ps(ph[h][i]);
#pragma GCC unroll 4
            for (int j = 0; j < W; j++) acc[h][j] = _mm512_fmadd_ps(pb, vz[j], acc[h][j]);
        }
    }
    for (int h = 0; h < hn; h++)
        for (int j = 0; j < W; j++) _mm512_storeu_ps(oh[h] + 16 * j, acc[h][j]);
}

TGT5 static void pv_avx512(const float *p, int32_t nh, int32_t hd, const uint16_t *v, size_t stride,
                           const int32_t *slots, int32_t n, size_t cap, float *out) {
    for (int32_t h0 = 0; h0 < nh; h0 += 4) {
        const int32_t hn = SD_MIN(4, nh - h0);
        const float *ph[4];
        for (int32_t h = 0; h < 4; h++) ph[h] = p + (size_t)(h0 + (h < hn ? h : 0)) * cap;
        int32_t d0 = 0;
        for (; d0 + 64 <= hd; d0 += 64) {
            float *oh[4];
            for (int32_t h = 0; h < 4; h++) oh[h] = out + (size_t)(h0 + (h < hn ? h : 0)) * hd + d0;
            pv_chunk_avx512(ph, hn, 4, v + d0, stride, slots, n, oh);
        }
        for (; d0 < hd; d0 += 16) {
            float *oh[4];
            for (int32_t h = 0; h < 4; h++) oh[h] = out + (size_t)(h0 + (h < hn ? h : 0)) * hd + d0;
            pv_chunk_avx512(ph, hn, 1, v + d0, stride, slots, n, oh);
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

static enum impl impl_for(int32_t hd) {
    if (sd_quant_get_impl() != SD_IMPL_AVX2 || hd % 16) return IMPL_SCALAR;
    return sd_quant_avx512_active() ? IMPL_AVX512 : IMPL_AVX2;
}

void sd_attn_fast(const float *q, int32_t nh, int32_t hd, const uint16_t *k, const uint16_t *v, size_t stride,
                  const int32_t *slots, int32_t n, float kscale, float *scores, float *out) {
    const size_t cap = ((size_t)n + 15) / 16 * 16;
    const enum impl im = impl_for(hd);
#ifdef SD_X86
    if (im == IMPL_AVX512) {
        scores_avx512(q, nh, hd, k, stride, slots, n, kscale, scores, cap);
    } else if (im == IMPL_AVX2) {
        scores_avx2(q, nh, hd, k, stride, slots, n, kscale, scores, cap);
    } else
#endif
        scores_scalar(q, nh, hd, k, stride, slots, n, kscale, scores, cap);
    for (int32_t h = 0; h < nh; h++) {
        float *sc = scores + (size_t)h * cap;
        float mx = sc[0];
        for (int32_t i = 1; i < n; i++) mx = sc[i] > mx ? sc[i] : mx;
        sd_expf_sub(sc, n, mx);
        for (size_t i = (size_t)n; i < cap; i++) sc[i] = 0.0f;
        float l[16] = {0};
        for (size_t i = 0; i < cap; i++) l[i % 16] += sc[i];
        const float inv = 1.0f / reduce16(l);
        for (int32_t i = 0; i < n; i++) sc[i] *= inv;
    }
#ifdef SD_X86
    if (im == IMPL_AVX512) {
        pv_avx512(scores, nh, hd, v, stride, slots, n, cap, out);
        return;
    }
    if (im == IMPL_AVX2) {
        pv_avx2(scores, nh, hd, v, stride, slots, n, cap, out);
        return;
    }
#endif
    pv_scalar(scores, nh, hd, v, stride, slots, n, cap, out);
}
