/* graphs/packed_avx512_kernels.h - the AVX-512 VNNI integer group kernels
 * of graphs/packed_avx512.c, compiled twice: packed_avx512.c includes them
 * without GFNI, packed_avx512_gfni.c with it (SD_PK_GF 1), each under its
 * own TGT and TGT_INLINE target attributes. Two translation units, not one
 * with both: a GFNI intrinsic inlines only into functions whose target has
 * GFNI, and a function compiled for that target may be given GFNI
 * instructions where its source has none, which the copy for CPUs without
 * GFNI (Skylake-SP, Cascade Lake) must never run. The GFNI copy calls the
 * intrinsics rather than assembly (as dpbusd_bcast is): around assembly
 * the compiler scheduled the 8-row loop worse, and half the gain was lost
 * (docs/benchmarks.md, "GFNI").
 *
 * Internal to graphs/packed_avx512*.c. */
#ifndef SD_GRAPHS_PACKED_AVX512_KERNELS_H
#define SD_GRAPHS_PACKED_AVX512_KERNELS_H

#include <immintrin.h>
#include <string.h>

#include "base/base.h"
#include "packed.h"

#if !defined(TGT) || !defined(TGT_INLINE) || !defined(SD_PK_GF)
#error "define TGT, TGT_INLINE and SD_PK_GF before including packed_avx512_kernels.h"
#endif

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

#if SD_PK_GF
/* Each byte of x mapped by the matrix a (SD_PK_GF_LO, SD_PK_GF_HI). */
TGT_INLINE __m512i gf_map(__m512i x, long long a) {
    return _mm512_gf2p8affine_epi64_epi8(x, _mm512_set1_epi64(a), 0);
}

/* w with its bytes under mask k replaced by x's mapped by a, bit 4 set:
 * a nibble plus 16 (q5's fifth bit) in one operation, into w in place. */
TGT_INLINE __m512i gf_map_bit4(__m512i w, __mmask64 k, __m512i x, long long a) {
    return _mm512_mask_gf2p8affine_epi64_epi8(w, k, x, _mm512_set1_epi64(a), 16);
}
#endif

/* Four nibble vectors -> the eight steps' unsigned values (with GFNI the
 * high nibbles by gf_map). */
TGT_INLINE void unpack_nib(const uint8_t *p, __m512i w[8]) {
    const __m512i m4 = _mm512_set1_epi8(15);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512i v = ld(p + 64 * i);
        w[i] = _mm512_and_si512(v, m4);
#if SD_PK_GF
        w[i + 4] = gf_map(v, SD_PK_GF_HI);
#else
        w[i + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
#endif
    }
}

TGT_INLINE __mmask64 mask_at(const uint8_t *p) {
    uint64_t m;
    memcpy(&m, p, 8);
    return _cvtu64_mask64(m);
}

#if SD_PK_GF
/* q5_0's or q5_K's four nibble vectors and eight fifth-bit masks -> the
 * eight steps' values, on GFNI: two operations a step. */
TGT_INLINE void unpack_q5_gf(const uint8_t *p, const uint8_t *masks, __m512i w[8]) {
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512i v = ld(p + 64 * i);
        w[i] = gf_map_bit4(gf_map(v, SD_PK_GF_LO), mask_at(masks + 8 * i), v, SD_PK_GF_LO);
        w[i + 4] = gf_map_bit4(gf_map(v, SD_PK_GF_HI), mask_at(masks + 8 * (i + 4)), v, SD_PK_GF_HI);
    }
}
#endif

/* Adds 16 to the bytes whose fifth bit is set (q5_0, q5_K). */
TGT_INLINE void add_bit4(const uint8_t *masks, __m512i w[8]) {
    const __m512i b4 = _mm512_set1_epi8(16);
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++)
        w[s] = _mm512_mask_add_epi8(w[s], mask_at(masks + 8 * s), w[s], b4);
}

/* The nibbles, then q5's fifth bits where masks is given. */
TGT_INLINE void unpack_steps(const uint8_t *p, const uint8_t *masks, __m512i w[8]) {
#if SD_PK_GF
    if (masks) {
        unpack_q5_gf(p, masks, w);
        return;
    }
#endif
    unpack_nib(p, w);
    if (masks) add_bit4(masks, w);
}

/* q6_K: ORs the two high bits (as 0x10 and 0x20) into each step. */
TGT_INLINE void add_high2(const uint8_t *p, __m512i w[8]) {
    const __m512i m30 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int a = 0; a < 2; a++) {
        const __m512i h = ld(p + 64 * a);
        const __m512i sh[4] = {_mm512_slli_epi16(h, 4), _mm512_slli_epi16(h, 2), h, _mm512_srli_epi16(h, 2)};
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            w[4 * a + t] = _mm512_ternarylogic_epi32(w[4 * a + t], sh[t], m30, 0xF8);
    }
}

/* The weights of block b, unpacked into the eight steps' vectors. */
TGT_INLINE void q0_weights(enum sd_type t, const uint8_t *rec, __m512i w[8]) {
    if (t == SD_TYPE_Q8_0) {
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            w[s] = ld(rec + 64 * s);
    } else {
        unpack_steps(rec, t == SD_TYPE_Q5_0 ? rec + 256 : NULL, w);
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
    unpack_steps(rec + 256 * j, t == SD_TYPE_Q5_K ? rec + 2048 + 64 * j : NULL, w);
    if (t == SD_TYPE_Q6_K) add_high2(rec + 2048 + 128 * j, w);
    if (u_out) {
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            _mm512_store_si512((void *)(u_out + 512 * j + 64 * s), w[s]);
    }
}

/* Blocks [b0, b1) of a group unpacked into u, 512 bytes a 32-value block
 * and K_UNP a K super-block (its sub-blocks' step vectors in order): the
 * B tiles of graphs/packed_amx.c. */
TGT static void unpack_blocks(enum sd_type t, const uint8_t *g, int64_t b0, int64_t b1, uint8_t *u) {
    const bool k = t == SD_TYPE_Q4_K || t == SD_TYPE_Q5_K || t == SD_TYPE_Q6_K;
    for (int64_t b = b0; b < b1; b++) {
        __m512i w[8];
        if (k) {
            for (int j = 0; j < 8; j++)
                k_steps(t, g + (size_t)b * SD_PK_K_REC(t), j, NULL, u + K_UNP * (size_t)(b - b0), w);
            continue;
        }
        const size_t V = SD_PK_Q0_REC(t);
        sd_pk_prefetch(g + (size_t)b * V, V, t != SD_TYPE_Q8_0);
        q0_weights(t, g + (size_t)b * V, w);
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            _mm512_store_si512((void *)(u + 512 * (size_t)(b - b0) + 64 * s), w[s]);
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
        const __m512 dw =
            _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + (size_t)nb * V + 32 * (size_t)b)));
#pragma GCC unroll 8
        for (int i = 0; i < R; i++)
            S[i] = _mm512_set1_epi32(sd_pk_i32(xq + (size_t)i * xs + corr + 4 * b));
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
#pragma GCC unroll 8
            for (int i = 0; i < R; i++)
                S[i] = dpbusd_bcast(S[i], w[s], xq + (size_t)i * xs + 32 * b + 4 * s);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++)
            a[i] = _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(S[i]),
                _mm512_mul_ps(dw, _mm512_set1_ps(sd_pk_f32(xq + (size_t)i * xs + n + 4 * b))), a[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        _mm512_store_ps(acc + 16 * i, a[i]);
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
        for (int i = 0; i < R; i++)
            T[i] = _mm512_setzero_ps();
        for (int j = 0; j < 8; j++) {
            __m512i w[8], S[8];
            k_steps(t, rec, j, u ? u + K_UNP * (size_t)(b - b0) : NULL,
                    u_out ? u_out + K_UNP * (size_t)(b - b0) : NULL, w);
            const __m512 sc = _mm512_cvtepi32_ps(sc_vec(rec + SD_PK_K_SC(t) + 16 * j, false));
#pragma GCC unroll 8
            for (int i = 0; i < R; i++)
                S[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int st = 0; st < 8; st++)
#pragma GCC unroll 8
                for (int i = 0; i < R; i++)
                    S[i] = dpbusd_bcast(S[i], w[st], xq + (size_t)i * xs + 256 * b + 32 * j + 4 * st);
#pragma GCC unroll 8
            for (int i = 0; i < R; i++)
                T[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[i]), sc, T[i]);
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
        for (int i = 0; i < R; i++)
            T[i] = _mm512_setzero_ps();
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
                    D[i] =
                        _mm512_set1_epi32(sd_pk_i32(xq + (size_t)i * xs + xc + 4 * (16 * b + 2 * c + half)));
#pragma GCC unroll 4
                for (int st = 4 * half; st < 4 * half + 4; st++)
#pragma GCC unroll 8
                    for (int i = 0; i < R; i++)
                        D[i] = dpbusd_bcast(D[i], w[st], xq + (size_t)i * xs + 256 * b + 32 * c + 4 * st);
#pragma GCC unroll 8
                for (int i = 0; i < R; i++)
                    T[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(D[i]), sc, T[i]);
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + SD_PK_K_D(t))));
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const __m512 dx = _mm512_set1_ps(sd_pk_f32(xq + (size_t)i * xs + xd + 4 * b));
            _mm512_store_ps(acc + 16 * i,
                            _mm512_fmadd_ps(T[i], _mm512_mul_ps(dw, dx), _mm512_load_ps(acc + 16 * i)));
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
    /* Three left are one pass, not two and one: a second pass over the
     * weights cost a 3-row graph more than a 4-row one (docs/benchmarks.md,
     * "Stop 80"). */
    if (r + 3 <= nr) {
        rows_of(t, 3, g, u, NULL, b0, b1, n, xq + (size_t)r * xs, xs, acc + 16 * r);
        r += 3;
    }
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

/* One copy of each kernel per type and width, so that the type's branches
 * fold. The many-row copies stand apart from the few-row ones: compiled
 * into one function, the 8-row product's code spilled more of its row
 * pointers and ran 3-5% slower. */
#define GROUP_FN(fn, type, wide)                                                                             \
    TGT static void fn(const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int64_t nr, float *acc) {  \
        group_rows(type, wide, g, n, xq, xs, nr, acc);                                                       \
    }
#define GROUP_FNS(name, type) GROUP_FN(name##_group, type, false) GROUP_FN(name##_wide, type, true)
GROUP_FNS(q4_0, SD_TYPE_Q4_0)
GROUP_FNS(q5_0, SD_TYPE_Q5_0)
GROUP_FNS(q4_K, SD_TYPE_Q4_K)
GROUP_FNS(q5_K, SD_TYPE_Q5_K)
GROUP_FNS(q6_K, SD_TYPE_Q6_K)
GROUP_FN(q8_0_group, SD_TYPE_Q8_0, false)

/* This copy's kernels: [type][wide], the few-row and many-row ones; NULL
 * where the type is not an integer type. */
static const sd_pk_group_fn k_int[SD_TYPE_COUNT][2] = {
    [SD_TYPE_Q4_0] = {q4_0_group, q4_0_wide},  [SD_TYPE_Q5_0] = {q5_0_group, q5_0_wide},
    [SD_TYPE_Q8_0] = {q8_0_group, q8_0_group}, [SD_TYPE_Q4_K] = {q4_K_group, q4_K_wide},
    [SD_TYPE_Q5_K] = {q5_K_group, q5_K_wide},  [SD_TYPE_Q6_K] = {q6_K_group, q6_K_wide},
};

#endif
