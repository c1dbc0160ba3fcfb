/* graphs/cpu/attn_scores.c - the fast order's scores (graphs/cpu/attention.h):
 * q quantized per head and each score an exact int32 sum of levels times
 * two scales, in a loop of C, vpmaddwd (AVX2) or vpdpwssd with the keys in
 * lanes (AVX-512): the sums are exact, so every path gives the same bits. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "graphs/cpu/attn_internal.h"

#include <string.h>

#include "graphs/kv.h"

/* The fast order's q of one head takes levels of at most q_levels(hd) (the
 * scores' int32 sums cannot overflow: hd * SD_KV_KEY_LEVELS * q_levels(hd)
 * < 2^31), rounded as the keys are (sd_quantize_levels). */
static int32_t q_levels(int32_t hd) {
    const int64_t most = (int64_t)INT32_MAX / ((int64_t)hd * SD_KV_KEY_LEVELS);
    return most < Q_LEVELS ? (int32_t)most : Q_LEVELS;
}

/* Heads [h0, h0 + hn) of q quantized: levels at lev[h * hd], and the
 * factor each score's integer sum takes with its key's scale, qs * kscale. */
void sd_attn_quant_heads(const float *q, int32_t h0, int32_t hn, int32_t hd, float kscale, int16_t *lev,
                         float *qk) {
    for (int32_t h = 0; h < hn; h++)
        qk[h] =
            sd_quantize_levels(q + (size_t)(h0 + h) * hd, hd, q_levels(hd), lev + (size_t)h * hd) * kscale;
}

/* A score from its exact integer sum: (float)s * (key scale * qk). */
static float score_of(int32_t s, float ks, float qk) { return (float)s * (ks * qk); }

static void scores_scalar(const int16_t *lev, const float *qk, int32_t nh, int32_t hd, const int16_t *k,
                          const float *ks, const int32_t *slots, int32_t n, float *sc, size_t cap) {
    int16_t kr[SD_KV_MAX_HEAD_DIM];
    for (int32_t i = 0; i < n; i++) {
        sd_kv_keys_get(k, slots[i], hd, kr); /* the key's levels in a row, once for every head */
        for (int32_t h = 0; h < nh; h++) {
            const int16_t *qh = lev + (size_t)h * hd;
            int32_t sum = 0;
            for (int32_t d = 0; d < hd; d++)
                sum += (int32_t)qh[d] * (int32_t)kr[d];
            sc[(size_t)h * cap + i] = score_of(sum, ks[slots[i]], qk[h]);
        }
    }
}
#ifdef SD_X86
#define TGT2 __attribute__((target("avx2,fma,f16c")))

/* A run's keys as the scores take them, in the lanes of a key block
 * (graphs/kv.h): lanes [o, o + c) hold keys run[i0, i0 + c). Keys in
 * consecutive slots are read where they lie, a block at a time (an
 * unaligned run's first and last blocks in part), which is every run of
 * decoding and of a prefill chunk; other keys (a draft tree's branches,
 * slots out of order) are gathered into buf, up to sixteen from lane 0.
 * The blocks are not asked for ahead: read in order, a K/V head's keys are
 * one stream the CPU's own prefetcher follows, and asking for the next
 * block (into L1 or L2, 16 or 32 keys on) made one row of six heads of 128
 * over 4,000 keys from memory slower on the Zen 4 EPYC, 108 against 131-137
 * us (AVX2's kernels there 220-224 against 257-283). */
struct key_seg {
    const int32_t (*kt)[16]; /* [hd / 2][16]: dword j (levels 2j, 2j + 1) of each lane's key */
    int32_t o, c;
};

static struct key_seg key_seg(const int16_t *k, int32_t hd, const int32_t *run, int32_t i0, int32_t m,
                              int32_t buf[][16]) {
    const int32_t s0 = run[i0], o = s0 % SD_KV_KEY_BLOCK;
    int32_t c = SD_MIN(SD_KV_KEY_BLOCK - o, m - i0), l = 1;
    while (l < c && run[i0 + l] == s0 + l)
        l++;
    if (l == c) return (struct key_seg){(const int32_t(*)[16])(k + sd_kv_key_at(s0 - o, 0, hd)), o, c};
    c = SD_MIN(SD_KV_KEY_BLOCK, m - i0);
    memset(buf, 0, (size_t)(hd / 2) * sizeof buf[0]);
    for (l = 0; l < c; l++)
        for (int32_t j = 0; j < hd / 2; j++)
            memcpy(&buf[j][l], k + sd_kv_key_at(run[i0 + l], 2 * j, hd), 4);
    return (struct key_seg){(const int32_t(*)[16])buf, 0, c};
}

/* The segment's scales in its lanes (others 0). */
static void seg_scales(const float *ks, const int32_t *run, struct key_seg g, float v[16]) {
    memset(v, 0, 16 * sizeof *v);
    for (int32_t l = 0; l < g.c; l++)
        v[g.o + l] = ks[run[l]];
}

/* Pairs a step of the AVX2 scores takes: two sums of eight keys a pair
 * and the block's two halves in registers, 2 G + 3 of the sixteen. */
enum { SCORE_PAIRS = 6 };

/* G pairs' sums over a key block's halves (lanes 0-7 and 8-15), into sa[g]
 * and sb[g]: a pair's vpmaddwd with its q's dword j broadcast adds two
 * exact products to eight keys' sums at once, so a pass over the dwords
 * gives sixteen keys' sums with no sum across lanes (exact, so the bits
 * are the scalar loop's). Each dword of the block is loaded once for the G
 * pairs, each pair's q dword broadcast once for both halves; one pair at a
 * time loaded them again for every pair, six loads a key and pair where
 * this takes 2 + 2 / G (docs/benchmarks.md, "Tile scores six pairs a
 * step"). Inlined with G a constant. */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
pairs16(int G, const int16_t *const *q, const int32_t (*kt)[16], int32_t hd, __m256i *sa, __m256i *sb) {
    __m256i a[SCORE_PAIRS], b[SCORE_PAIRS];
#pragma GCC unroll 6
    for (int g = 0; g < G; g++)
        a[g] = b[g] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int32_t j = 0; j < hd / 2; j++) {
        const __m256i k0 = _mm256_loadu_si256((const __m256i *)kt[j]),
                      k1 = _mm256_loadu_si256((const __m256i *)(kt[j] + 8));
#pragma GCC unroll 6
        for (int g = 0; g < G; g++) {
            int32_t w;
            memcpy(&w, q[g] + 2 * j, 4);
            const __m256i x = _mm256_set1_epi32(w);
            a[g] = _mm256_add_epi32(a[g], _mm256_madd_epi16(k0, x));
            b[g] = _mm256_add_epi32(b[g], _mm256_madd_epi16(k1, x));
        }
    }
#pragma GCC unroll 6
    for (int g = 0; g < G; g++) {
        sa[g] = a[g];
        sb[g] = b[g];
    }
}

/* pairs16 with G a constant (1 to SCORE_PAIRS). */
TGT2 static void pairs16_any(int G, const int16_t *const *q, const int32_t (*kt)[16], int32_t hd, __m256i *sa,
                             __m256i *sb) {
    switch (G) {
    case 6:
        pairs16(6, q, kt, hd, sa, sb);
        break;
    case 5:
        pairs16(5, q, kt, hd, sa, sb);
        break;
    case 4:
        pairs16(4, q, kt, hd, sa, sb);
        break;
    case 3:
        pairs16(3, q, kt, hd, sa, sb);
        break;
    case 2:
        pairs16(2, q, kt, hd, sa, sb);
        break;
    default:
        pairs16(1, q, kt, hd, sa, sb);
        break;
    }
}

/* A pair's scores of the segment's lanes as score_of takes them, stored
 * from dst. */
TGT2 static void store_scores16(float *dst, __m256i sa, __m256i sb, const float ksv[16], float qk,
                                struct key_seg g) {
    const __m256 q = _mm256_set1_ps(qk);
    const __m256 fa = _mm256_mul_ps(_mm256_cvtepi32_ps(sa), _mm256_mul_ps(_mm256_loadu_ps(ksv), q));
    const __m256 fb = _mm256_mul_ps(_mm256_cvtepi32_ps(sb), _mm256_mul_ps(_mm256_loadu_ps(ksv + 8), q));
    if (g.o == 0 && g.c == 16) {
        _mm256_storeu_ps(dst, fa);
        _mm256_storeu_ps(dst + 8, fb);
        return;
    }
    float t[16];
    _mm256_storeu_ps(t, fa);
    _mm256_storeu_ps(t + 8, fb);
    memcpy(dst, t + g.o, (size_t)g.c * sizeof(float));
}

/* np (row, head) pairs over keys run[0, m), a key block at a time,
 * SCORE_PAIRS pairs a step; hd a multiple of 16, at most TILE_HD. */
TGT2 static void scores_avx2(const int16_t *const *qp, const float *qk, float *const *sp, int32_t np,
                             int32_t hd, const int16_t *k, const float *ks, const int32_t *run, int32_t m) {
    _Alignas(32) int32_t buf[TILE_HD / 2][16];
    _Alignas(32) float ksv[16];
    for (int32_t i0 = 0; i0 < m;) {
        const struct key_seg g = key_seg(k, hd, run, i0, m, buf);
        seg_scales(ks, run + i0, g, ksv);
        for (int32_t p0 = 0; p0 < np; p0 += SCORE_PAIRS) {
            const int G = (int)SD_MIN(SCORE_PAIRS, np - p0);
            __m256i sa[SCORE_PAIRS], sb[SCORE_PAIRS];
            pairs16_any(G, qp + p0, g.kt, hd, sa, sb);
            for (int e = 0; e < G; e++)
                store_scores16(sp[p0 + e] + i0, sa[e], sb[e], ksv, qk[p0 + e], g);
        }
        i0 += g.c;
    }
}

/* ------------------------------------------------------------ AVX-512 */

/* The AVX-512 scores take sixteen keys in the lanes of one vector: a
 * pair's vpdpwssd with its q's dword j broadcast adds two exact products
 * to each key's int32 sum, and a pass over the dwords gives sixteen
 * consecutive scores: the sums are exact, so they are the scalar loop's
 * whatever the order. Against fp16 keys converted to f32 and fused
 * multiply-adds in sixteen lanes, half the multiply instructions
 * (docs/benchmarks.md, "Integer keys"); against K rows slot after slot,
 * which were transposed sixteen at a time for every pass, none of the
 * transposition (the key blocks of graphs/kv.h; "Stop 82"). */

#define TGT5I __attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")))

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

/* P pairs' (P of 1, 2 or 4) scores of the segment's keys, their scales ks
 * (a vector over the lanes), stored from dst[p]. Two sums a pair (even and
 * odd dwords) so that eight chains hide vpdpwssd's latency with four
 * pairs. */
static inline
    __attribute__((always_inline, target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c"))) void
    pairs_i16(int P, const int16_t *const q[4], const float qk[4], int32_t hd, struct key_seg g, __m512 ks,
              float *const dst[4]) {
    __m512i a[4][2];
#pragma GCC unroll 4
    for (int p = 0; p < P; p++)
        a[p][0] = a[p][1] = _mm512_setzero_si512();
    for (int32_t j = 0; j < hd / 2; j += 2) {
        const __m512i k0 = _mm512_loadu_si512((const void *)g.kt[j]),
                      k1 = _mm512_loadu_si512((const void *)g.kt[j + 1]);
#pragma GCC unroll 4
        for (int p = 0; p < P; p++) {
            a[p][0] = dpwssd_bcast(a[p][0], k0, q[p] + 2 * j);
            a[p][1] = dpwssd_bcast(a[p][1], k1, q[p] + 2 * j + 2);
        }
    }
    const __mmask16 lanes = (__mmask16)(((1u << g.c) - 1u) << g.o), first = (__mmask16)((1u << g.c) - 1u);
#pragma GCC unroll 4
    for (int p = 0; p < P; p++) {
        __m512 s = _mm512_cvtepi32_ps(_mm512_add_epi32(a[p][0], a[p][1]));
        s = _mm512_mul_ps(s, _mm512_mul_ps(ks, _mm512_set1_ps(qk[p])));
        if (g.o) s = _mm512_maskz_compress_ps(lanes, s); /* the segment's lanes from lane 0 */
        _mm512_mask_storeu_ps(dst[p], first, s);
    }
}

/* Scores of np pairs over keys run[0, m): pair p's q levels at qp[p] ([hd])
 * and factor qk[p], its score of key run[i] to sp[p][i]. hd a multiple of
 * 16, at most TILE_HD. */
TGT5I static void scores_t16(const int16_t *const *qp, const float *qk, float *const *sp, int32_t np,
                             int32_t hd, const int16_t *k, const float *kscale, const int32_t *run,
                             int32_t m) {
    _Alignas(64) int32_t buf[TILE_HD / 2][16];
    _Alignas(64) float ksv[16];
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int32_t i0 = 0; i0 < m;) {
        struct key_seg g;
        __m512 ks;
        const int32_t s0 = run[i0];
        if (m - i0 >= 16 && s0 % SD_KV_KEY_BLOCK == 0 &&
            _mm512_cmpeq_epi32_mask(_mm512_loadu_si512((const void *)(run + i0)),
                                    _mm512_add_epi32(_mm512_set1_epi32(s0), iota)) == 0xFFFF) {
            /* A whole block in order, the common case: its keys and their scales as they lie.
             * key_seg finds it too, a slot at a time; with the scales copied there as here the
             * one row of seven heads of 64 over 4,000 keys took 66 us against 63 (Zen 4). */
            g = (struct key_seg){(const int32_t(*)[16])(k + sd_kv_key_at(s0, 0, hd)), 0, 16};
            ks = _mm512_loadu_ps(kscale + s0);
        } else {
            g = key_seg(k, hd, run, i0, m, buf);
            seg_scales(kscale, run + i0, g, ksv);
            ks = _mm512_load_ps(ksv);
        }
        /* Fours, then a three, two or one: a pass of one pair has two chains, and vpdpwssd's
         * latency held the 0.5B's seventh head (4 + 2 + 1) to half the rate; as 4 + 3 one row of
         * seven heads of 64 over 4,000 keys took 48-49 us against 52 (Zen 4). Five left taken as
         * 3 + 2 made GCC's code slower everywhere (the 1.5B's row 84 -> 91-94 us), so it stays 4 + 1. */
        int32_t p = 0;
        for (; p + 4 <= np; p += 4) {
            const int16_t *q[4] = {qp[p], qp[p + 1], qp[p + 2], qp[p + 3]};
            float *const d[4] = {sp[p] + i0, sp[p + 1] + i0, sp[p + 2] + i0, sp[p + 3] + i0};
            pairs_i16(4, q, qk + p, hd, g, ks, d);
        }
        if (p + 3 == np) {
            const int16_t *q[4] = {qp[p], qp[p + 1], qp[p + 2], qp[p]};
            float *const d[4] = {sp[p] + i0, sp[p + 1] + i0, sp[p + 2] + i0, sp[p] + i0};
            const float f[4] = {qk[p], qk[p + 1], qk[p + 2], qk[p]};
            pairs_i16(3, q, f, hd, g, ks, d);
            p += 3;
        }
        if (p + 2 <= np) {
            const int16_t *q[4] = {qp[p], qp[p + 1], qp[p], qp[p]};
            float *const d[4] = {sp[p] + i0, sp[p + 1] + i0, sp[p] + i0, sp[p] + i0};
            const float f[4] = {qk[p], qk[p + 1], qk[p], qk[p]};
            pairs_i16(2, q, f, hd, g, ks, d);
            p += 2;
        }
        if (p < np) {
            const int16_t *q[4] = {qp[p], qp[p], qp[p], qp[p]};
            float *const d[4] = {sp[p] + i0, sp[p] + i0, sp[p] + i0, sp[p] + i0};
            const float f[4] = {qk[p], qk[p], qk[p], qk[p]};
            pairs_i16(1, q, f, hd, g, ks, d);
        }
        i0 += g.c;
    }
}

/* np pairs' scores on the path im (AVX2 or AVX-512). */
static void scores_pairs(enum sd_attn_impl im, const int16_t *const *qp, const float *qk, float *const *sp,
                         int32_t np, int32_t hd, const int16_t *k, const float *ks, const int32_t *run,
                         int32_t m) {
    if (im == SD_ATTN_AVX512)
        scores_t16(qp, qk, sp, np, hd, k, ks, run, m);
    else
        scores_avx2(qp, qk, sp, np, hd, k, ks, run, m);
}

/* One row's nh heads (levels lev, factors qk) over keys slots[0, n),
 * scores at sc[h * cap + i]: its heads as pairs, T16_PAIRS at a time. */
static void scores_heads(enum sd_attn_impl im, const int16_t *lev, const float *qk, int32_t nh, int32_t hd,
                         const int16_t *k, const float *kscale, const int32_t *slots, int32_t n, float *sc,
                         size_t cap) {
    const int16_t *qp[T16_PAIRS];
    float *sp[T16_PAIRS];
    for (int32_t h0 = 0; h0 < nh; h0 += T16_PAIRS) {
        const int32_t hn = SD_MIN(T16_PAIRS, nh - h0);
        for (int32_t h = 0; h < hn; h++)
            qp[h] = lev + (size_t)(h0 + h) * hd, sp[h] = sc + (size_t)(h0 + h) * cap;
        scores_pairs(im, qp, qk + h0, sp, hn, hd, k, kscale, slots, n);
    }
}

/* The run's scores of every (row, head) pair (n_rows * nh <= T16_PAIRS),
 * pair p = r * nh + h's q levels at lev + p * hd, in one pass over its
 * keys. */
void sd_attn_scores_run(enum sd_attn_impl im, const struct sd_attn_row *rows, int32_t n_rows, int32_t m,
                        int32_t nh, int32_t hd, const int16_t *lev, const float *qk, const int16_t *k,
                        const float *ks) {
    const int32_t *run = rows[0].slots + rows[0].a;
    const int16_t *qp[T16_PAIRS] = {0};
    float *sp[T16_PAIRS] = {0};
    int32_t np = 0;
    for (int32_t r = 0; r < n_rows; r++)
        for (int32_t h = 0; h < nh; h++, np++) {
            qp[np] = lev + (size_t)np * (size_t)hd;
            sp[np] = rows[r].scores + (size_t)h * sd_attn_cap(rows[r].n) + (size_t)rows[r].a;
        }
    scores_pairs(im, qp, qk, sp, np, hd, k, ks, run, m);
}
#endif

/* Scores of keys slots[0, n) into sc[h * cap + i] for nh heads of q
 * already quantized (levels lev [nh][hd], factors qk [nh]). */
void sd_attn_scores_lev(enum sd_attn_impl im, const int16_t *lev, const float *qk, int32_t nh, int32_t hd,
                        const int16_t *k, const float *ks, const int32_t *slots, int32_t n, float *sc,
                        size_t cap) {
#ifdef SD_X86
    if (im != SD_ATTN_SCALAR) {
        scores_heads(im, lev, qk, nh, hd, k, ks, slots, n, sc, cap);
        return;
    }
#endif
    (void)im;
    scores_scalar(lev, qk, nh, hd, k, ks, slots, n, sc, cap);
}

/* The same from f32 q: its heads quantized a few at a time (Q_CHUNK
 * values), the same levels for every key. */
void sd_attn_scores_part(enum sd_attn_impl im, const float *q, int32_t nh, int32_t hd, const int16_t *k,
                         const float *ks, const int32_t *slots, int32_t n, float kscale, float *sc,
                         size_t cap) {
    _Alignas(64) int16_t lev[Q_CHUNK];
    float qk[Q_CHUNK / 16];
    const int32_t per = SD_MAX(1, Q_CHUNK / hd);
    for (int32_t h0 = 0; h0 < nh; h0 += per) {
        const int32_t hn = SD_MIN(per, nh - h0);
        sd_attn_quant_heads(q, h0, hn, hd, kscale, lev, qk);
        sd_attn_scores_lev(im, lev, qk, hn, hd, k, ks, slots, n, sc + (size_t)h0 * cap, cap);
    }
}
