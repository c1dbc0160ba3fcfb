/* graphs/packed_avx2.c - AVX2 group kernels of graphs/packed.h, for CPUs
 * without AVX-512 VNNI.
 *
 * The sixteen outputs of a group are taken as two halves of eight (the low
 * and high 32 bytes of each 64-byte vector of the layout). A step's four
 * products per output are summed exactly by vpmaddubsw and vpmaddwd
 * (values up to 63 times activations within +-127 cannot saturate 16
 * bits, and the pair sums of 2-8 steps add up in 16 bits before one
 * vpmaddwd, as many as the type's largest value allows: SD_PK_I16_STEPS
 * in packed_avx2_kernels.h); q8_0's values up to 255 would, so its
 * weights are turned back to signed bytes and multiplied by sign (as
 * ggml's AVX2 kernels do), which gives S_b directly. Where the CPU has
 * AVX-VNNI (and no AVX-512), one 256-bit vpdpbusd does a step's sums
 * instead (q8_0 then takes its stored unsigned values and the offset
 * product, as the AVX-512 kernels do). The integer sums are exact and the
 * float steps are the scalar reference's, lane by lane, so the bits are
 * the reference's on either path.
 *
 * Built with target attributes; graphs/packed.c calls in only when
 * sd_quant_get_impl() is SD_IMPL_AVX2. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <string.h>

#include "base/base.h"
#include "packed.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGT_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

#define SD_PK_GF 0
#include "packed_avx2_kernels.h"

TGT_INLINE __m256 wload(enum sd_type t, const uint8_t *p) {
    if (t == SD_TYPE_F32) return _mm256_loadu_ps((const float *)p);
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (t == SD_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Float weights: each half of eight outputs, two rows at a time, four
 * accumulators a row (k % 4). */
TGT static void f_group(enum sd_type t, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int64_t nr,
                        float *acc) {
    const size_t es = t == SD_TYPE_F32 ? 4 : 2;
    for (int h = 0; h < 2; h++)
        for (int64_t r0 = 0; r0 < nr; r0 += 2) {
            const float *x0 = (const float *)(xq + (size_t)r0 * xs);
            const float *x1 = r0 + 1 < nr ? (const float *)(xq + (size_t)(r0 + 1) * xs) : x0;
            __m256 a0[4], a1[4];
            for (int l = 0; l < 4; l++) a0[l] = a1[l] = _mm256_setzero_ps();
            for (int64_t k = 0; k < n; k++) {
                const __m256 w = wload(t, g + ((size_t)k * 16 + 8 * (size_t)h) * es);
                a0[k & 3] = _mm256_fmadd_ps(w, _mm256_set1_ps(x0[k]), a0[k & 3]);
                a1[k & 3] = _mm256_fmadd_ps(w, _mm256_set1_ps(x1[k]), a1[k & 3]);
            }
            _mm256_store_ps(acc + 16 * r0 + 8 * h, _mm256_add_ps(_mm256_add_ps(a0[0], a0[1]), _mm256_add_ps(a0[2], a0[3])));
            if (r0 + 1 < nr)
                _mm256_store_ps(acc + 16 * (r0 + 1) + 8 * h,
                                _mm256_add_ps(_mm256_add_ps(a1[0], a1[1]), _mm256_add_ps(a1[2], a1[3])));
        }
}

/* quant_span of graphs/packed.c, eight values at a time (nbk a multiple of
 * 8), as the AVX-512 one: the maximum keeps mx where a value is NaN, as the
 * scalar comparison does, and the rounding is to nearest even. */
TGT float sd_packed_quant_span_avx2(const float *x, int nbk, int8_t *q, int32_t *sum) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 mx = _mm256_setzero_ps();
    for (int j = 0; j < nbk; j += 8)
        mx = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), absmask), mx);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float amax = _mm_cvtss_f32(m4);
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
    const __m256 lim = _mm256_set1_ps(127.f), nlim = _mm256_set1_ps(-127.f);
    __m256i s = _mm256_setzero_si256();
    for (int j = 0; j < nbk; j += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j), id);
        __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm256_and_ps(r, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
        const __m256i qi = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(r, lim), nlim));
        const __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(qi), _mm256_extracti128_si256(qi, 1));
        _mm_storel_epi64((__m128i *)(q + j), _mm_packs_epi16(p16, p16));
        s = _mm256_add_epi32(s, qi);
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    *sum = _mm_cvtsi128_si32(s4);
    return amax / 127.f;
}

TGT static bool int_group_avx2(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq, size_t xs,
                               int64_t n_rows, float *acc) {
    return int_group(false, t, g, n_in, xq, xs, n_rows, acc);
}
TGT static bool int_group_vnni(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq, size_t xs,
                               int64_t n_rows, float *acc) {
    return int_group(true, t, g, n_in, xq, xs, n_rows, acc);
}

bool sd_packed_group_avx2(enum sd_type t, bool vnni, bool gfni, const uint8_t *g, int64_t n_in,
                          const uint8_t *xq, size_t xs, int64_t n_rows, float *acc) {
    if (n_rows > 64) return false;
    switch (t) {
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q5_0:
    case SD_TYPE_Q8_0:
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q5_K:
    case SD_TYPE_Q6_K:
        return (vnni && gfni ? sd_packed_int_group_avx2_gfni
                : vnni       ? int_group_vnni
                             : int_group_avx2)(t, g, n_in, xq, xs, n_rows, acc);
    case SD_TYPE_F32:
    case SD_TYPE_F16:
    case SD_TYPE_BF16: f_group(t, g, n_in, xq, xs, n_rows, acc); return true;
    default: return false;
    }
}

#else

float sd_packed_quant_span_avx2(const float *x, int nbk, int8_t *q, int32_t *sum) {
    (void)x, (void)nbk, (void)q, (void)sum;
    return 0.0f;
}

bool sd_packed_group_avx2(enum sd_type t, bool vnni, bool gfni, const uint8_t *g, int64_t n_in,
                          const uint8_t *xq, size_t xs, int64_t n_rows, float *acc) {
    (void)t, (void)vnni, (void)gfni, (void)g, (void)n_in, (void)xq, (void)xs, (void)n_rows, (void)acc;
    return false;
}

#endif
