/*
 * graphs/cpu/attn_internal.h - what the files of the fast-order attention
 * share (internal to graphs/cpu/; graphs/cpu/attention.h is the face).
 *
 * The attention of graphs/cpu/attention.h is split by step, each file with
 * its scalar reference, AVX2 and AVX-512 paths of the same bits:
 * attn_scores.c quantizes q and computes the scores (exact integer sums);
 * rowmath.c holds the softmax and its exponential beside the other row-wise
 * float math (SiLU, RMSNorm); attn_pv.c computes p.V (and chooses
 * vdpbf16ps or fused multiply-adds for it); attention.c runs a row, a
 * row's keys split between threads, and tiles of rows.
 */
#ifndef SD_CPU_ATTN_INTERNAL_H
#define SD_CPU_ATTN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "graphs/cpu/attention.h"
#include "graphs/quant.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define SD_X86 1
#endif

/* A tile (sd_attn_fast_rows) holds q of up to TILE_HD values a head, and
 * its p.V takes the run's keys TILE_KEYS at a time. The keys-in-lanes
 * scores take up to T16_PAIRS (row, head) pairs a pass over the keys; q's
 * levels are at most Q_LEVELS (12 bits); q is quantized Q_CHUNK values at
 * a time, on the stack. */
enum { TILE_KEYS = 32, TILE_HD = 256, T16_PAIRS = 64, Q_LEVELS = 2047, Q_CHUNK = 4096 };

/* Which code runs: every path gives the same bits. */
enum sd_attn_impl { SD_ATTN_SCALAR, SD_ATTN_AVX2, SD_ATTN_AVX512 };
enum sd_attn_impl sd_attn_impl_for(int32_t hd);

/* Floats of a head's scores for n keys: whole blocks of 16. */
static inline size_t sd_attn_cap(int32_t n) { return ((size_t)n + 15) / 16 * 16; }

/* x rounded to bf16 (to nearest even). */
static inline float sd_attn_bf16r(float x) { return sd_bf16_to_fp32(sd_fp32_to_bf16(x)); }

/* ------------------------------------------------------------ scores */

/* Heads [h0, h0 + hn) of q quantized (the header's levels): levels at
 * lev[h * hd], and the factor each score's integer sum takes with its
 * key's scale, qs * kscale, at qk[h]. */
void sd_attn_quant_heads(const float *q, int32_t h0, int32_t hn, int32_t hd, float kscale, int16_t *lev,
                         float *qk);

/* Scores of keys slots[0, n) into sc[h * cap + i] for nh heads of q
 * already quantized (levels lev [nh][hd], factors qk [nh]); k the K/V
 * head's key blocks (graphs/kv.h). */
void sd_attn_scores_lev(enum sd_attn_impl im, const int16_t *lev, const float *qk, int32_t nh, int32_t hd,
                        const int16_t *k, const float *ks, const int32_t *slots, int32_t n, float *sc,
                        size_t cap);

/* The same from f32 q: its heads quantized Q_CHUNK values at a time, the
 * same levels for every key. */
void sd_attn_scores_part(enum sd_attn_impl im, const float *q, int32_t nh, int32_t hd, const int16_t *k,
                         const float *ks, const int32_t *slots, int32_t n, float kscale, float *sc,
                         size_t cap);

/* A tile's run of m keys (rows[0].slots + rows[0].a), scored for every
 * (row, head) pair in one pass over the keys (im AVX2 or AVX-512, keys in
 * lanes either way; n_rows * nh <= T16_PAIRS): pair p = r * nh + h's q
 * levels at lev + p * hd, factor qk[p]. */
void sd_attn_scores_run(enum sd_attn_impl im, const struct sd_attn_row *rows, int32_t n_rows, int32_t m,
                        int32_t nh, int32_t hd, const int16_t *lev, const float *qk, const int16_t *k,
                        const float *ks);

/* ------------------------------------------------------------ softmax */

/* p, rounded to bf16, is zero below this (the header's order). */
#define SD_ATTN_P_MIN 0x1p-64f

/* Scores of n keys -> p, per head (scores[h * cap + i]), in the header's
 * order, p rounded as p.V takes it; or, where !scale, e (the exponentials,
 * for a p.V that makes p from them itself, sd_attn_pv_scales);
 * scores[n, cap) made zero; each head's 1 / sum at scores[nh * cap + h]. */
void sd_attn_softmax_heads(float *scores, int32_t nh, int32_t n, size_t cap, bool scale);

/* ------------------------------------------------------------ p.V */

/* Whether im's p.V makes p from e and 1 / sum itself, as it packs them
 * for vdpbf16ps (the header's p_i, the same bits), so that the softmax
 * leaves e as they are: its scaling pass read and wrote every score
 * (docs/benchmarks.md, "Stop 84"). */
bool sd_attn_pv_scales(enum sd_attn_impl im);

/* out += p.V over keys slots[0, n), p at p[h * cap + i] (e where
 * sd_attn_pv_scales, with head h's 1 / sum at inv[h]), for output values
 * [d_begin, d_end) of each head (multiples of 16 where im is SIMD). */
void sd_attn_pv_dims(enum sd_attn_impl im, const float *p, const float *inv, int32_t nh, int32_t hd,
                     int32_t d_begin, int32_t d_end, const uint16_t *v, size_t stride, const int32_t *slots,
                     int32_t n, size_t cap, float *out);

/* The keys of a tile's run that its p.V takes for rows whose run starts at
 * an index of parity par: from run index par, an even count (the header's
 * pairs begin at even indices of each row's keys). */
static inline int32_t sd_attn_pv_run_len(int32_t m, int32_t par) { return m > par ? (m - par) & ~1 : 0; }

/* The run's p.V (im AVX2 or AVX-512) for every (row, head) pair of the
 * rows whose run starts at an index of parity par (sd_attn_pv_run_len's
 * keys), sixteen pairs a tile on AVX-512, six on AVX2. */
void sd_attn_pv_run(enum sd_attn_impl im, const struct sd_attn_row *rows, int32_t n_rows, int32_t m,
                    int32_t par, int32_t nh, int32_t hd, const uint16_t *v, size_t stride);

#ifdef SD_X86
/* ------------------------------------------------------------ shared SIMD */

/* The K and V rows come from memory (a layer's cache is read once a pass,
 * after 250 MB of weights went through the caches), and p.V reads each row
 * a slice at a time, a row's stride apart, which the hardware prefetcher
 * follows poorly; so do a tile's scores, several keys a step. Those kernels
 * ask for the slice (or row) they read PF_KEYS keys later (p.V of a tile:
 * a block of keys later). One row's scores, which read whole rows in
 * order, were slower with it four keys at a time (docs/benchmarks.md,
 * "Figures from code comments"); eight keys at a time they ask 32 keys
 * ahead (attn_scores.c). */
enum { PF_KEYS = 16 };

/* Asks for the bytes [b, e) of slot s's row into L1 (whole lines). */
static inline __attribute__((always_inline)) void sd_attn_pf_row(const uint16_t *base, size_t stride,
                                                                 int32_t s, size_t b, size_t e) {
    const char *p = (const char *)(base + (size_t)s * stride);
    for (size_t o = b & ~(size_t)63; o < e; o += 64)
        __builtin_prefetch(p + o, 0, 3);
}

/* The same into L2 (prefetcht1), for the AVX-512 kernels: a block of 16
 * keys of 128 values asks for 64 lines at once, more than L1 can have in
 * flight, and each request into L1 past that waited for a line to arrive
 * (perf put a fifth of the scores' samples on the instruction after it);
 * L2 takes them all. On the Zen 4 EPYC, one row of six heads of 128 over
 * 4,000 keys from memory 297-302 -> 182 us, four rows 518-620 -> 387-389
 * (docs/benchmarks.md, "Stop 80"); AVX2's kernels, tuned on a Zen 3 with
 * half that L2, keep sd_attn_pf_row. */
static inline __attribute__((always_inline)) void sd_attn_pf_row_l2(const uint16_t *base, size_t stride,
                                                                    int32_t s, size_t b, size_t e) {
    const char *p = (const char *)(base + (size_t)s * stride);
    for (size_t o = b & ~(size_t)63; o < e; o += 64)
        __builtin_prefetch(p + o, 0, 2);
}

/* p zeroed where its magnitude is below SD_ATTN_P_MIN (a NaN kept): the
 * header's rule, for the softmax's p_round (rowmath.c) and the packing
 * that makes p for vdpbf16ps (attn_pv.c). */
static inline __attribute__((always_inline, target("avx512f,avx512vl,avx2,fma,f16c"))) __m512
sd_attn_p_min16(__m512 p) {
    return _mm512_maskz_mov_ps(
        _mm512_cmp_ps_mask(_mm512_abs_ps(p), _mm512_set1_ps(SD_ATTN_P_MIN), _CMP_NLT_UQ), p);
}

/* The slot d after i, or the last one (n > 0). */
static inline int32_t sd_attn_pf_slot(const int32_t *slots, int32_t i, int32_t d, int32_t n) {
    return slots[i + d < n ? i + d : n - 1];
}

/* r[i] (row i's sixteen dwords) -> r[e] (dword e of the sixteen rows):
 * the integer keys (attn_scores.c) and a tile's p (attn_pv.c). */
static inline __attribute__((always_inline, target("avx512f,avx512vl,avx2,fma,f16c"))) void
sd_attn_transpose16(__m512 r[16]) {
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
        const __m512 c0 = _mm512_shuffle_f32x4(b[e], b[4 + e], 0x44),
                     c1 = _mm512_shuffle_f32x4(b[e], b[4 + e], 0xEE);
        const __m512 c2 = _mm512_shuffle_f32x4(b[8 + e], b[12 + e], 0x44),
                     c3 = _mm512_shuffle_f32x4(b[8 + e], b[12 + e], 0xEE);
        r[e] = _mm512_shuffle_f32x4(c0, c2, 0x88);
        r[4 + e] = _mm512_shuffle_f32x4(c0, c2, 0xDD);
        r[8 + e] = _mm512_shuffle_f32x4(c1, c3, 0x88);
        r[12 + e] = _mm512_shuffle_f32x4(c1, c3, 0xDD);
    }
}
#endif

#endif
