/* graphs/packed_avx512.c - AVX-512 VNNI group kernels of graphs/packed.h.
 *
 * One zmm lane per output: a vpdpbusd of a weight vector (sixteen outputs'
 * dwords of four unsigned values) with a broadcast activation dword adds
 * four exact products to each output's int32 sum. The integer sums are
 * exact, so they equal the scalar reference's whatever order the lanes take
 * them in; the float steps after them (one conversion, one product of the
 * scales, one or two fused multiply-adds per block) are the reference's,
 * lane by lane. Weights are unpacked into registers per block and group for
 * each eight rows; from 16 rows on (prefill, wide verification) the first
 * eight rows also leave them unpacked in a 16 KB window that the other rows
 * read, which takes 5-20% off those products (docs/benchmarks.md,
 * "Unpacked once for many rows"). Per-row accumulators live in the
 * caller's acc[n_rows][16] (L1). The integer kernels are in
 * packed_avx512_kernels.h, compiled here and again in packed_avx512_gfni.c
 * for CPUs with GFNI (Ice Lake and Zen 4 on), where a byte's high nibble is
 * one vgf2p8affineqb in place of a shift and a mask, and q5's fifth bit is
 * merged by a second one under the bit's mask in place of a masked add and
 * the register copy it cost: 16 of a q5_0 block's operations where there
 * were 28 (docs/benchmarks.md, "GFNI"). This file keeps the float kernels,
 * the activation helpers and the entry.
 *
 * The build passes no -mavx512*: each function carries a target attribute
 * and graphs/packed.c calls in here only after sd_quant_avx512_active(). */
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

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define TGT_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

#define SD_PK_GF 0
#include "packed_avx512_kernels.h"

TGT_INLINE __m512 wload(enum sd_type t, const uint8_t *p) {
    if (t == SD_TYPE_F32) return _mm512_loadu_ps((const float *)p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (t == SD_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Float weights, four rows at a time, four accumulators a row (k % 4). */
TGT static void f_group(enum sd_type t, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int64_t nr,
                        float *acc) {
    const size_t es = t == SD_TYPE_F32 ? 4 : 2;
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
        const float *x[4];
        for (int i = 0; i < 4; i++) x[i] = (const float *)(xq + (size_t)(r0 + i < nr ? r0 + i : r0) * xs);
        __m512 a[4][4];
        for (int i = 0; i < 4; i++)
            for (int l = 0; l < 4; l++) a[i][l] = _mm512_setzero_ps();
        for (int64_t k = 0; k < n; k++) {
            const __m512 w = wload(t, g + (size_t)k * 16 * es);
            for (int i = 0; i < 4; i++) a[i][k & 3] = _mm512_fmadd_ps(w, _mm512_set1_ps(x[i][k]), a[i][k & 3]);
        }
        for (int i = 0; i < 4 && r0 + i < nr; i++)
            _mm512_store_ps(acc + 16 * (r0 + i),
                            _mm512_add_ps(_mm512_add_ps(a[i][0], a[i][1]), _mm512_add_ps(a[i][2], a[i][3])));
    }
}

/* quant_span of graphs/packed.c, sixteen values at a time (nbk a multiple
 * of 16): the maximum ignores NaN as the scalar comparison does, and
 * roundscale to nearest even is the scalar's 1.5 * 2^23 trick. */
TGT static float quant_span_512(const float *x, int nbk, int8_t *q, int32_t *sum) {
    __m512 mx = _mm512_setzero_ps();
    for (int j = 0; j < nbk; j += 16) mx = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + j)), mx);
    const float amax = _mm512_reduce_max_ps(mx);
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
    const __m512 lim = _mm512_set1_ps(127.f);
    __m512i s = _mm512_setzero_si512();
    for (int j = 0; j < nbk; j += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + j), id);
        __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), r);
        const __m512i qi = _mm512_cvtps_epi32(_mm512_max_ps(_mm512_min_ps(r, lim), _mm512_sub_ps(_mm512_setzero_ps(), lim)));
        _mm_storeu_si128((__m128i *)(q + j), _mm512_cvtepi32_epi8(qi));
        s = _mm512_add_epi32(s, qi);
    }
    *sum = _mm512_reduce_add_epi32(s);
    return amax / 127.f;
}

/* -32 times each sum of 16 of n int8 values (graphs/packed.c's c32), by
 * vpsadbw on the values plus 128 (eight bytes a lane, two lanes a sum),
 * where the scalar loop took an add a value and was 3% of an 8-row pass. */
TGT void sd_packed_sums16_avx512(const int8_t *q, int64_t n, int32_t *c32) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int64_t i = 0; i < n; i += 64) {
        const __m512i s8 = _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512((const void *)(q + i)), flip),
                                           _mm512_setzero_si512());
        uint64_t s16[8];
        _mm512_storeu_si512((void *)s16, _mm512_add_epi64(s8, _mm512_shuffle_epi32(s8, _MM_PERM_BADC)));
        for (int k = 0; k < 4; k++) c32[i / 16 + k] = -32 * ((int32_t)s16[2 * k] - 16 * 128);
    }
}

float sd_packed_quant_span_avx512(const float *x, int nbk, int8_t *q, int32_t *sum) {
    return quant_span_512(x, nbk, q, sum);
}

TGT void sd_packed_unpack_avx512(enum sd_type t, bool gfni, const uint8_t *g, int64_t b0, int64_t b1,
                                 uint8_t *u) {
    if (gfni)
        sd_packed_unpack_gfni(t, g, b0, b1, u);
    else
        unpack_blocks(t, g, b0, b1, u);
}

bool sd_packed_group_avx512(enum sd_type t, bool gfni, const uint8_t *g, int64_t n_in, const uint8_t *xq,
                            size_t xs, int64_t n_rows, float *acc) {
    if (n_rows > 64 || (unsigned)t >= SD_TYPE_COUNT) return false;
    const bool wide = n_rows >= WIDE_ROWS;
    const sd_pk_group_fn k = gfni ? sd_packed_kernel_gfni(t, wide) : k_int[t][wide];
    if (k) {
        k(g, n_in, xq, xs, n_rows, acc);
        return true;
    }
    if (t != SD_TYPE_F32 && t != SD_TYPE_F16 && t != SD_TYPE_BF16) return false;
    f_group(t, g, n_in, xq, xs, n_rows, acc);
    return true;
}

#else

float sd_packed_quant_span_avx512(const float *x, int nbk, int8_t *q, int32_t *sum) {
    (void)x, (void)nbk, (void)q, (void)sum;
    return 0.0f;
}

void sd_packed_sums16_avx512(const int8_t *q, int64_t n, int32_t *c32) {
    (void)q, (void)n, (void)c32;
}

bool sd_packed_group_avx512(enum sd_type t, bool gfni, const uint8_t *g, int64_t n_in, const uint8_t *xq,
                            size_t xs, int64_t n_rows, float *acc) {
    (void)t, (void)gfni, (void)g, (void)n_in, (void)xq, (void)xs, (void)n_rows, (void)acc;
    return false;
}

void sd_packed_unpack_avx512(enum sd_type t, bool gfni, const uint8_t *g, int64_t b0, int64_t b1,
                             uint8_t *u) {
    (void)t, (void)gfni, (void)g, (void)b0, (void)b1, (void)u;
}

#endif
