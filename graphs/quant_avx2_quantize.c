/* graphs/quant_avx2_quantize.c - the AVX2 quantizers of the activation
 * types (q8_0, q8_1, q8_K) and the attention's integer levels, bit for bit
 * those of the scalar reference (graphs/quant_quantize.c). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"
#include "quant_avx2.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

TGT_INLINE int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* ------------------------------------------------------- quantizers */

/* roundf (half away from zero) on eight lanes, exactly: trunc, then step
 * away from zero when the dropped fraction (exact) is at least one half. */
TGT_INLINE __m256 round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), step));
}

/* Four vectors of eight integral floats to 32 int8 in element order. */
TGT_INLINE __m256i pack32(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256i ab = _mm256_packs_epi32(_mm256_cvttps_epi32(a), _mm256_cvttps_epi32(b));
    const __m256i cd = _mm256_packs_epi32(_mm256_cvttps_epi32(c), _mm256_cvttps_epi32(d));
    const __m256i v = _mm256_packs_epi16(ab, cd);
    /* packs work per 128-bit lane: dwords come out as a0 b0 c0 d0 a1 b1 c1 d1. */
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

TGT_INLINE float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* q8_0 / q8_1 exactly as the scalar reference (ggml's _ref quantizers) on
 * finite input: amax is exact, d = amax / 127 and id = 1 / d are the same
 * scalar operations, x * id is the same rounding, round_away is roundf. */
/* act: the activation quantizer of quant_quantize.c (sd_quantize_act_row): id =
 * 127 / amax and ties to even, as ggml's x86 quantize_row_q8_0/q8_1. */
TGT static void quant_q8_01(const float *x, uint8_t *o, int64_t n, bool q8_1, bool act) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const size_t bs = q8_1 ? 36 : 34;
    for (int64_t i = 0; i < n / 32; i++, x += 32, o += bs) {
        __m256 v[4];
        for (int q = 0; q < 4; q++)
            v[q] = _mm256_loadu_ps(x + 8 * q);
        const __m256 m =
            _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absmask), _mm256_and_ps(v[1], absmask)),
                          _mm256_max_ps(_mm256_and_ps(v[2], absmask), _mm256_and_ps(v[3], absmask)));
        const float amax = hmax_ps(m);
        const float d = amax / 127;
        const float id = act ? (amax != 0.0f ? 127.f / amax : 0.0f) : (d != 0.0f ? 1.0f / d : 0.0f);
        const __m256 idv = _mm256_set1_ps(id);
        for (int q = 0; q < 4; q++)
            v[q] =
                act ? _mm256_round_ps(_mm256_mul_ps(v[q], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                    : round_away(_mm256_mul_ps(v[q], idv));
        const __m256i qv = pack32(v[0], v[1], v[2], v[3]);
        const uint16_t dh = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        memcpy(o, &dh, 2);
        _mm256_storeu_si256((__m256i *)(o + (q8_1 ? 4 : 2)), qv);
        if (q8_1) {
            const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), qv);
            const int32_t sum = hsum_i32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
            const uint16_t sh = _cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
            memcpy(o + 2, &sh, 2);
        }
    }
}

/* q8_K as the scalar reference: the first element of largest magnitude gives
 * max, iscale = -127 / max, q = round-to-nearest-even(iscale * x) (what
 * ggml's nearest_int computes in this range), bsums per 16. */
TGT static void quant_q8_K(const float *x, uint8_t *o, int64_t n) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < n / 256; i++, x += 256, o += 292) {
        __m256 m = _mm256_setzero_ps();
        for (int q = 0; q < 32; q++)
            m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + 8 * q), absmask));
        const float amax = hmax_ps(m);
        if (!(amax > 0.0f)) {
            memset(o, 0, 292);
            continue;
        }
        float max = 0.0f;
        const __m256 amv = _mm256_set1_ps(amax);
        for (int q = 0; q < 32; q++) {
            const int hit = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * q), absmask), amv, _CMP_EQ_OQ));
            if (hit) {
                max = x[8 * q + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 isv = _mm256_set1_ps(iscale);
        for (int c = 0; c < 8; c++) {
            __m256 v[4];
            for (int q = 0; q < 4; q++) {
                v[q] = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * c + 8 * q), isv),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            }
            const __m256i qv = pack32(v[0], v[1], v[2], v[3]);
            _mm256_storeu_si256((__m256i *)(o + 4 + 32 * c), qv);
            /* Sums of 16: bytes to int16 pairs, pairs to int32 quads, then
             * two horizontal steps inside each 128-bit lane (one lane = 16). */
            __m256i s =
                _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), qv), _mm256_set1_epi16(1));
            s = _mm256_hadd_epi32(s, s);
            s = _mm256_hadd_epi32(s, s);
            const int16_t b0 = (int16_t)_mm256_extract_epi32(s, 0), b1 = (int16_t)_mm256_extract_epi32(s, 4);
            memcpy(o + 4 + 256 + 4 * c, &b0, 2);
            memcpy(o + 4 + 256 + 4 * c + 2, &b1, 2);
        }
        const float d = 1 / iscale;
        memcpy(o, &d, 4);
    }
}

/* sd_quantize_levels on eight lanes (n a multiple of 8, levels <= 32767),
 * the same operations as the scalar loops: the maximum ignores NaN as the
 * comparison does (maxps keeps its second operand), the clamp sends NaN to
 * -levels by the same rule, and the 1.5 * 2^23 trick rounds to nearest
 * even. Every key and query row of the fast attention comes here; the
 * scalar loops took 2.4 ns a value, 1.2% of an 8-row pass's samples on
 * the 0.5B (0.24% now). */
TGT static float quant_levels(const float *x, int32_t n, int32_t levels, int16_t *q) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 mx = _mm256_setzero_ps();
    for (int32_t i = 0; i < n; i += 8)
        mx = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), mx);
    const float amax = hmax_ps(mx), L = (float)levels, inv = amax > 0.0f ? L / amax : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv), hi = _mm256_set1_ps(L), lo = _mm256_set1_ps(-L);
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    for (int32_t i = 0; i < n; i += 8) {
        /* maxps gives its second operand, -levels, where r is NaN. */
        const __m256 r = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv), lo), hi);
        const __m256i v = _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(r, magic), magic));
        _mm_storeu_si128((__m128i *)(q + i),
                         _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
    }
    return amax / L;
}

bool sd_quantize_levels_avx2(const float *x, int32_t n, int32_t levels, int16_t *q, float *scale) {
    if (n % 8 || levels > INT16_MAX) return false;
    *scale = quant_levels(x, n, levels, q);
    return true;
}

bool sd_quantize_row_avx2(enum sd_type type, const float *src, void *dst, int64_t n) {
    switch (type) {
    case SD_TYPE_Q8_0:
        quant_q8_01(src, dst, n, false, false);
        return true;
    case SD_TYPE_Q8_1:
        quant_q8_01(src, dst, n, true, false);
        return true;
    case SD_TYPE_Q8_K:
        quant_q8_K(src, dst, n);
        return true;
    default:
        return false;
    }
}

bool sd_quantize_act_row_avx2(enum sd_type type, const float *src, void *dst, int64_t n) {
    switch (type) {
    case SD_TYPE_Q8_0:
        quant_q8_01(src, dst, n, false, true);
        return true;
    case SD_TYPE_Q8_1:
        quant_q8_01(src, dst, n, true, true);
        return true;
    default:
        return false;
    }
}

#else /* no x86 or no GCC-compatible compiler: scalar only */

bool sd_quantize_levels_avx2(const float *x, int32_t n, int32_t levels, int16_t *q, float *scale) {
    (void)x, (void)n, (void)levels, (void)q, (void)scale;
    return false;
}

bool sd_quantize_row_avx2(enum sd_type type, const float *src, void *dst, int64_t n) {
    (void)type, (void)src, (void)dst, (void)n;
    return false;
}

bool sd_quantize_act_row_avx2(enum sd_type type, const float *src, void *dst, int64_t n) {
    (void)type, (void)src, (void)dst, (void)n;
    return false;
}

#endif
