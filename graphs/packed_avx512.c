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
 * "Unpacked once for many rows"). Per-row accumulators live in the caller's
 * acc[n_rows][16] (L1).
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

/* S += w . the dword at p broadcast: vpdpbusd with an embedded-broadcast
 * memory operand, one fused operation where the intrinsics give a separate
 * broadcast (which costs a vector pipe slot of its own). */
TGT_INLINE __m512i dpbusd_bcast(__m512i S, __m512i w, const uint8_t *p) {
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(S) : "v"(w), "m"(*(const int32_t *)p));
    return S;
#else
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_dpbusd_epi32(S, w, _mm512_set1_epi32(v));
#endif
}

TGT_INLINE __m512i ld(const uint8_t *p) { return _mm512_loadu_si512((const void *)p); }

/* Four nibble vectors -> the eight steps' unsigned values. */
TGT_INLINE void unpack_nib(const uint8_t *p, __m512i w[8]) {
    const __m512i m4 = _mm512_set1_epi8(15);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512i v = ld(p + 64 * i);
        w[i] = _mm512_and_si512(v, m4);
        w[i + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
}

/* Adds 16 to the bytes whose fifth bit is set (q5_0, q5_K). */
TGT_INLINE void add_bit4(const uint8_t *masks, __m512i w[8]) {
    const __m512i b4 = _mm512_set1_epi8(16);
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        uint64_t m;
        memcpy(&m, masks + 8 * s, 8);
        w[s] = _mm512_mask_add_epi8(w[s], _cvtu64_mask64(m), w[s], b4);
    }
}

/* q6_K: ORs the two high bits (as 0x10 and 0x20) into each step. */
TGT_INLINE void add_high2(const uint8_t *p, __m512i w[8]) {
    const __m512i m30 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int a = 0; a < 2; a++) {
        const __m512i h = ld(p + 64 * a);
        const __m512i sh[4] = {_mm512_slli_epi16(h, 4), _mm512_slli_epi16(h, 2), h, _mm512_srli_epi16(h, 2)};
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) w[4 * a + t] = _mm512_ternarylogic_epi32(w[4 * a + t], sh[t], m30, 0xF8);
    }
}

/* The weights of block b, unpacked into the eight steps' vectors. */
TGT_INLINE void q0_weights(enum sd_type t, const uint8_t *rec, __m512i w[8]) {
    if (t == SD_TYPE_Q8_0) {
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) w[s] = ld(rec + 64 * s);
    } else {
        unpack_nib(rec, w);
        if (t == SD_TYPE_Q5_0) add_bit4(rec + 256, w);
    }
}

/* A K super-block unpacked: eight sub-blocks' eight step vectors. */
#define K_UNP 4096

/* The step vectors of sub-block j of a K record: read from u (the record's
 * unpacked copy) where it is given, else unpacked, and left in u_out. */
TGT_INLINE void k_steps(enum sd_type t, const uint8_t *rec, int j, const uint8_t *u, uint8_t *u_out,
                        __m512i w[8]) {
    if (u) {
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            w[s] = ld(u + 512 * j + 64 * s);
        return;
    }
    sd_pk_prefetch_part(rec, SD_PK_K_REC(t), j, 8, true);
    unpack_nib(rec + 256 * j, w);
    if (t == SD_TYPE_Q6_K)
        add_high2(rec + 2048 + 128 * j, w);
    else if (t == SD_TYPE_Q5_K)
        add_bit4(rec + 2048 + 64 * j, w);
    if (u_out) {
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            _mm512_store_si512((void *)(u_out + 512 * j + 64 * s), w[s]);
    }
}

/* R rows (R a constant) over blocks [b0, b1) of the group, their
 * accumulators in registers: R independent dependency chains in program
 * order, which is what lets the scheduler overlap them (one row's eight
 * vpdpbusd form a chain of ~40 cycles). The accumulators start from 0 at
 * block 0, else from acc, and end in acc, so a span continues the one
 * before it in the same order. The weights come unpacked from u (512 bytes
 * a block from b0) where it is given, else are unpacked from the group. */
TGT_INLINE void q0_span(enum sd_type t, int R, const uint8_t *g, const uint8_t *u, uint8_t *u_out, int64_t b0,
                        int64_t b1, int64_t n, const uint8_t *xq, size_t xs, float *acc) {
    const int64_t nb = n / 32;
    const size_t V = SD_PK_Q0_REC(t);
    const size_t corr = SD_PK_Q0_CORR(t, n);
    __m512 a[8];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        a[i] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(acc + 16 * i);
    for (int64_t b = b0; b < b1; b++) {
        __m512i w[8], S[8];
        if (u) {
#pragma GCC unroll 8
            for (int s = 0; s < 8; s++)
                w[s] = ld(u + 512 * (size_t)(b - b0) + 64 * s);
        } else {
            sd_pk_prefetch(g + (size_t)b * V, V, t != SD_TYPE_Q8_0);
            q0_weights(t, g + (size_t)b * V, w);
            if (u_out) {
#pragma GCC unroll 8
                for (int s = 0; s < 8; s++)
                    _mm512_store_si512((void *)(u_out + 512 * (size_t)(b - b0) + 64 * s), w[s]);
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + (size_t)nb * V + 32 * (size_t)b)));
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) S[i] = _mm512_set1_epi32(sd_pk_i32(xq + (size_t)i * xs + corr + 4 * b));
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
#pragma GCC unroll 8
            for (int i = 0; i < R; i++)
                S[i] = dpbusd_bcast(S[i], w[s], xq + (size_t)i * xs + 32 * b + 4 * s);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++)
            a[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[i]),
                                   _mm512_mul_ps(dw, _mm512_set1_ps(sd_pk_f32(xq + (size_t)i * xs + n + 4 * b))), a[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) _mm512_store_ps(acc + 16 * i, a[i]);
}

TGT_INLINE __m512i sc_vec(const uint8_t *p, bool sign) {
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    return sign ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v);
}

/* q4_K, q5_K, R rows (a constant): per sub-block S_j scaled into T (a
 * float fused multiply-add: two operations where vpmulld and an add took
 * three), the rows' T in registers across the super-block, where they were stored and
 * loaded a row and sub-block, which was slower (docs/benchmarks.md); the
 * mins' sum M. acc is written whole. */
TGT_INLINE void k45_rows(enum sd_type t, int R, const uint8_t *g, const uint8_t *u, uint8_t *u_out,
                         int64_t b0, int64_t b1, int64_t n, const uint8_t *xq, size_t xs, float *acc) {
    const size_t xd = (size_t)n, xlo = SD_PK_K_LO(n), xhi = SD_PK_K_HI(n);
#pragma GCC unroll 8
    for (int i = 0; i < R && b0 == 0; i++)
        _mm512_store_ps(acc + 16 * i, _mm512_setzero_ps());
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *rec = g + (size_t)b * SD_PK_K_REC(t);
        __m512 T[8];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) T[i] = _mm512_setzero_ps();
        for (int j = 0; j < 8; j++) {
            __m512i w[8], S[8];
            k_steps(t, rec, j, u ? u + K_UNP * (size_t)(b - b0) : NULL,
                    u_out ? u_out + K_UNP * (size_t)(b - b0) : NULL, w);
            const __m512 sc = _mm512_cvtepi32_ps(sc_vec(rec + SD_PK_K_SC(t) + 16 * j, false));
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) S[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int st = 0; st < 8; st++)
#pragma GCC unroll 8
                for (int i = 0; i < R; i++) S[i] = dpbusd_bcast(S[i], w[st], xq + (size_t)i * xs + 256 * b + 32 * j + 4 * st);
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) T[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[i]), sc, T[i]);
        }
        const __m512i m0 = ld(rec + SD_PK_K_M(t)), m1 = ld(rec + SD_PK_K_M(t) + 64);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SD_PK_K_D(t))));
        const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SD_PK_K_D(t) + 32)));
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const uint8_t *x = xq + (size_t)i * xs;
            const uint8_t *lo = x + xlo + 8 * b, *hi = x + xhi + 8 * b;
            __m512i Ml = dpbusd_bcast(_mm512_setzero_si512(), m0, lo);
            Ml = dpbusd_bcast(Ml, m1, lo + 4);
            __m512i Mh = dpbusd_bcast(_mm512_setzero_si512(), m0, hi);
            Mh = dpbusd_bcast(Mh, m1, hi + 4);
            const __m512i M = _mm512_add_epi32(Ml, _mm512_slli_epi32(Mh, 8));
            const __m512 dx = _mm512_set1_ps(sd_pk_f32(x + xd + 4 * b));
            __m512 a = _mm512_load_ps(acc + 16 * i);
            a = _mm512_fmadd_ps(T[i], _mm512_mul_ps(dw, dx), a);
            a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dm, dx), a);
            _mm512_store_ps(acc + 16 * i, a);
        }
    }
}

/* q6_K, R rows (a constant): each sub-block's two halves of 16 values
 * (their own scales) one after the other, T in registers as in k45_rows. */
TGT_INLINE void q6k_rows(int R, const uint8_t *g, const uint8_t *u, uint8_t *u_out, int64_t b0, int64_t b1,
                         int64_t n, const uint8_t *xq, size_t xs, float *acc) {
    const enum sd_type t = SD_TYPE_Q6_K;
    const size_t xd = (size_t)n, xc = SD_PK_K_CORR(n);
#pragma GCC unroll 8
    for (int i = 0; i < R && b0 == 0; i++)
        _mm512_store_ps(acc + 16 * i, _mm512_setzero_ps());
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *rec = g + (size_t)b * SD_PK_K_REC(t);
        __m512 T[8];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) T[i] = _mm512_setzero_ps();
        for (int c = 0; c < 8; c++) {
            __m512i w[8];
            k_steps(t, rec, c, u ? u + K_UNP * (size_t)(b - b0) : NULL,
                    u_out ? u_out + K_UNP * (size_t)(b - b0) : NULL, w);
#pragma GCC unroll 2
            for (int half = 0; half < 2; half++) {
                const __m512 sc = _mm512_cvtepi32_ps(sc_vec(rec + SD_PK_K_SC(t) + 32 * c + 16 * half, true));
                __m512i D[8];
#pragma GCC unroll 8
                for (int i = 0; i < R; i++)
                    D[i] = _mm512_set1_epi32(sd_pk_i32(xq + (size_t)i * xs + xc + 4 * (16 * b + 2 * c + half)));
#pragma GCC unroll 4
                for (int st = 4 * half; st < 4 * half + 4; st++)
#pragma GCC unroll 8
                    for (int i = 0; i < R; i++) D[i] = dpbusd_bcast(D[i], w[st], xq + (size_t)i * xs + 256 * b + 32 * c + 4 * st);
#pragma GCC unroll 8
                for (int i = 0; i < R; i++) T[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D[i]), sc, T[i]);
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SD_PK_K_D(t))));
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const __m512 dx = _mm512_set1_ps(sd_pk_f32(xq + (size_t)i * xs + xd + 4 * b));
            _mm512_store_ps(acc + 16 * i, _mm512_fmadd_ps(T[i], _mm512_mul_ps(dw, dx),
                                                          _mm512_load_ps(acc + 16 * i)));
        }
    }
}

/* R rows of a packed integer type over its blocks [b0, b1) (32-value
 * blocks, or the K types' super-blocks). */
TGT_INLINE void rows_of(enum sd_type t, int R, const uint8_t *g, const uint8_t *u, uint8_t *u_out, int64_t b0,
                        int64_t b1, int64_t n, const uint8_t *xq, size_t xs, float *acc) {
    if (t == SD_TYPE_Q6_K)
        q6k_rows(R, g, u, u_out, b0, b1, n, xq, xs, acc);
    else if (t == SD_TYPE_Q4_K || t == SD_TYPE_Q5_K)
        k45_rows(t, R, g, u, u_out, b0, b1, n, xq, xs, acc);
    else
        q0_span(t, R, g, u, u_out, b0, b1, n, xq, xs, acc);
}

/* Every row over blocks [b0, b1), eight at a time; the first eight leave
 * the weights unpacked in u_out where it is given, for the others. */
TGT_INLINE void rows_span(enum sd_type t, const uint8_t *g, uint8_t *u_out, int64_t b0, int64_t b1, int64_t n,
                          const uint8_t *xq, size_t xs, int64_t nr, float *acc) {
    const uint8_t *u = NULL;
    int64_t r = 0;
    if (u_out && nr >= 8) {
        rows_of(t, 8, g, NULL, u_out, b0, b1, n, xq, xs, acc);
        u = u_out, r = 8;
    }
    for (; r + 8 <= nr; r += 8)
        rows_of(t, 8, g, u, NULL, b0, b1, n, xq + (size_t)r * xs, xs, acc + 16 * r);
    for (; r + 4 <= nr; r += 4)
        rows_of(t, 4, g, u, NULL, b0, b1, n, xq + (size_t)r * xs, xs, acc + 16 * r);
    for (; r + 2 <= nr; r += 2)
        rows_of(t, 2, g, u, NULL, b0, b1, n, xq + (size_t)r * xs, xs, acc + 16 * r);
    for (; r < nr; r++)
        rows_of(t, 1, g, u, NULL, b0, b1, n, xq + (size_t)r * xs, xs, acc + 16 * r);
}

/* From WIDE_ROWS rows on, the weights are unpacked once for all of them,
 * a window of WIDE_BYTES at a time (in L1): each eight rows after the first
 * read the unpacked vectors where they unpacked them again (20 of a q5_0
 * block's 108 vector operations at 8 rows; 26 of q6_K's). */
#ifndef WIDE_ROWS
#define WIDE_ROWS 16
#endif
#define WIDE_BYTES 16384

TGT_INLINE void group_rows(enum sd_type t, bool wide, const uint8_t *g, int64_t n, const uint8_t *xq,
                           size_t xs, int64_t nr, float *acc) {
    const bool k = t == SD_TYPE_Q4_K || t == SD_TYPE_Q5_K || t == SD_TYPE_Q6_K;
    const int64_t nb = n / (k ? 256 : 32), win = WIDE_BYTES / (k ? K_UNP : 512);
    if (!wide) {
        rows_span(t, g, NULL, 0, nb, n, xq, xs, nr, acc);
        return;
    }
    _Alignas(64) uint8_t u[WIDE_BYTES];
    for (int64_t b0 = 0; b0 < nb; b0 += win)
        rows_span(t, g, u, b0, SD_MIN(nb, b0 + win), n, xq, xs, nr, acc);
}

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

/* One copy of each kernel per type and width, so that the type's branches
 * fold. The many-row copies stand apart from the few-row ones: compiled
 * into one function, the 8-row product's code spilled more of its row
 * pointers and ran 3-5% slower. */
#define GROUP_FNS(name, type)                                                                                \
    TGT static void name##_group(const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int64_t nr,      \
                                 float *acc) {                                                               \
        group_rows(type, false, g, n, xq, xs, nr, acc);                                                      \
    }                                                                                                        \
    TGT static void name##_wide(const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int64_t nr,       \
                                float *acc) {                                                                \
        group_rows(type, true, g, n, xq, xs, nr, acc);                                                       \
    }
GROUP_FNS(q4_0, SD_TYPE_Q4_0)
GROUP_FNS(q5_0, SD_TYPE_Q5_0)
GROUP_FNS(q4_K, SD_TYPE_Q4_K)
GROUP_FNS(q5_K, SD_TYPE_Q5_K)
GROUP_FNS(q6_K, SD_TYPE_Q6_K)
TGT static void q8_0_group(const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int64_t nr, float *acc) {
    group_rows(SD_TYPE_Q8_0, false, g, n, xq, xs, nr, acc);
}

float sd_packed_quant_span_avx512(const float *x, int nbk, int8_t *q, int32_t *sum) {
    return quant_span_512(x, nbk, q, sum);
}

TGT void sd_packed_unpack_q0_avx512(enum sd_type t, const uint8_t *rec, uint8_t *out) {
    __m512i w[8];
    if (t == SD_TYPE_Q4_0) q0_weights(SD_TYPE_Q4_0, rec, w);
    else if (t == SD_TYPE_Q5_0) q0_weights(SD_TYPE_Q5_0, rec, w);
    else q0_weights(SD_TYPE_Q8_0, rec, w);
    for (int s = 0; s < 8; s++) _mm512_store_si512((void *)(out + 64 * s), w[s]);
}

/* The integer kernel of type t, its few-row or many-row copy; NULL where
 * t is not an integer type. */
typedef void (*group_fn)(const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int64_t nr, float *acc);
static group_fn int_kernel(enum sd_type t, bool wide) {
    switch (t) {
    case SD_TYPE_Q4_0:
        return wide ? q4_0_wide : q4_0_group;
    case SD_TYPE_Q5_0:
        return wide ? q5_0_wide : q5_0_group;
    case SD_TYPE_Q8_0:
        return q8_0_group;
    case SD_TYPE_Q4_K:
        return wide ? q4_K_wide : q4_K_group;
    case SD_TYPE_Q5_K:
        return wide ? q5_K_wide : q5_K_group;
    case SD_TYPE_Q6_K:
        return wide ? q6_K_wide : q6_K_group;
    default:
        return NULL;
    }
}

bool sd_packed_group_avx512(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq, size_t xs,
                            int64_t n_rows, float *acc) {
    if (n_rows > 64) return false;
    const group_fn k = int_kernel(t, n_rows >= WIDE_ROWS);
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

bool sd_packed_group_avx512(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq, size_t xs,
                            int64_t n_rows, float *acc) {
    (void)t, (void)g, (void)n_in, (void)xq, (void)xs, (void)n_rows, (void)acc;
    return false;
}

void sd_packed_unpack_q0_avx512(enum sd_type t, const uint8_t *rec, uint8_t *out) {
    (void)t, (void)rec;
    memset(out, 0, 512);
}

#endif
