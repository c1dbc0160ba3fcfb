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
#ifdef SD_X86
#define TGT2 __attribute__((target("avx2,fma,f16c")))

/* The last n % 8 keys of scores8_avx2 (below), one key at a time: up to
 * four heads at a time, always as four so that the accumulators stay in
 * registers: missing heads repeat the first one and are not stored. A
 * key's integer sum in eight lanes of vpmaddwd (pairs of exact products),
 * then added across them, the four heads' at once (vphaddd): exact, as
 * the scalar sum, and the scores in four lanes (a horizontal sum and the
 * scalar product a head took 11% of a one-row pass after 2,048 tokens
 * without AVX-512). */
TGT2 static void scores_avx2(const int16_t *lev, const float *qk, int32_t nh, int32_t hd, const int16_t *k,
                             const float *ks, size_t stride, const int32_t *slots, int32_t n, float *sc,
                             size_t cap) {
    for (int32_t h0 = 0; h0 < nh; h0 += 4) {
        const int32_t hn = SD_MIN(4, nh - h0);
        const int16_t *qh[4];
        float qkh[4];
        for (int32_t h = 0; h < 4; h++) {
            qh[h] = lev + (size_t)(h0 + (h < hn ? h : 0)) * hd;
            qkh[h] = qk[h0 + (h < hn ? h : 0)];
        }
        const __m128 qk4 = _mm_loadu_ps(qkh);
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
            /* The four heads' sums side by side, and their scores as
             * score_of takes them, lane by lane. */
            const __m256i t =
                _mm256_hadd_epi32(_mm256_hadd_epi32(acc[0], acc[1]), _mm256_hadd_epi32(acc[2], acc[3]));
            const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
            const __m128 f = _mm_mul_ps(_mm_cvtepi32_ps(s4), _mm_mul_ps(_mm_set1_ps(ks[slots[i]]), qk4));
            float out[4];
            _mm_storeu_ps(out, f);
            for (int32_t h = 0; h < hn; h++)
                sc[(size_t)(h0 + h) * cap + i] = out[h];
        }
    }
}

/* Keys in lanes on AVX2, for a tile's run: the levels of eight keys
 * transposed once (kt[j] holds dword j, values 2j and 2j + 1, of each key;
 * missing keys zero) for every (row, head) pair that reads them, so that a
 * pair's vpmaddwd with its q's dword j broadcast adds two exact products to
 * eight keys' sums at once and a pass over the dwords gives eight
 * consecutive scores, with no sum across lanes. A pair over two such
 * blocks reads each broadcast twice. The sums are exact, so the bits are
 * the scalar loop's. */
TGT2 static void keys8_i16(const int16_t *k, size_t stride, const int32_t *run, int32_t nk, int32_t hd,
                           __m256i *kt) {
    for (int32_t c = 0; c < hd; c += 16) {
        __m256i r[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            r[j] = j < nk ? _mm256_loadu_si256((const __m256i *)(k + (size_t)run[j] * stride + c))
                          : _mm256_setzero_si256();
        __m256i t[8], u[8];
#pragma GCC unroll 4
        for (int j = 0; j < 8; j += 2) {
            t[j] = _mm256_unpacklo_epi32(r[j], r[j + 1]);
            t[j + 1] = _mm256_unpackhi_epi32(r[j], r[j + 1]);
        }
#pragma GCC unroll 2
        for (int j = 0; j < 8; j += 4) {
            u[j] = _mm256_unpacklo_epi64(t[j], t[j + 2]);
            u[j + 1] = _mm256_unpackhi_epi64(t[j], t[j + 2]);
            u[j + 2] = _mm256_unpacklo_epi64(t[j + 1], t[j + 3]);
            u[j + 3] = _mm256_unpackhi_epi64(t[j + 1], t[j + 3]);
        }
        /* u[e] (e < 4) holds dwords e and e + 4 of keys 0-3, u[4 + e] of
         * keys 4-7, a 128-bit lane each. */
        __m256i *o = kt + c / 2;
#pragma GCC unroll 4
        for (int e = 0; e < 4; e++) {
            o[e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x20);
            o[e + 4] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x31);
        }
    }
}

/* Stores the eight lanes' scores of keys [i0, i0 + nk) at dst. */
TGT2 static void store_scores8(float *dst, __m256i sum, __m256 ks, float qk, int32_t nk) {
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(ks, _mm256_set1_ps(qk)));
    if (nk == 8) {
        _mm256_storeu_ps(dst, f);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, f);
    memcpy(dst, tmp, (size_t)nk * sizeof(float));
}

/* Eight keys' scale factors (missing keys 0). */
TGT2 static __m256 scales8(const float *ks, const int32_t *run, int32_t nk) {
    float v[8] = {0};
    for (int32_t j = 0; j < nk; j++)
        v[j] = ks[run[j]];
    return _mm256_loadu_ps(v);
}

/* One row's scores on AVX2, eight keys at a time: a head's q levels, four
 * chunks of sixteen at a time in registers, against each key's K chunk as
 * vpmaddwd's memory operand, gives each key's sum in eight lanes; the
 * eight keys' sums are then added across lanes together (a vphaddd tree,
 * nine operations for eight scores where scores_avx2 takes about five a
 * key for four heads) and scaled as store_scores8 does. The sums are
 * exact, so the bits are the scalar loop's. Against scores_avx2 for the
 * 0.5B's seven heads of 64 over 2,048 keys: docs/benchmarks.md, "One
 * row's attention on AVX2". */
TGT2 static __m256i sums8_tree(const __m256i a[8]) {
    const __m256i t0 = _mm256_hadd_epi32(a[0], a[1]), t1 = _mm256_hadd_epi32(a[2], a[3]);
    const __m256i t2 = _mm256_hadd_epi32(a[4], a[5]), t3 = _mm256_hadd_epi32(a[6], a[7]);
    const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    /* u0: keys 0-3's sums of lanes 0-3 | of lanes 4-7; u1 keys 4-7's */
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* acc[j] += key j's products with chunks [c0, c0 + 4) of the head's levels
 * qh (kr[j] the key's K row). */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
chunks4(const int16_t *qh, const int16_t *const kr[8], int32_t c0, __m256i acc[8]) {
    __m256i qv[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
        qv[c] = _mm256_loadu_si256((const __m256i *)(qh + 16 * (c0 + c)));
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            acc[j] = _mm256_add_epi32(
                acc[j],
                _mm256_madd_epi16(qv[c], _mm256_loadu_si256((const __m256i *)(kr[j] + 16 * (c0 + c)))));
        /* Key j's sum here: GCC otherwise regroups the 32 integer sums
         * and spills the products to the stack. */
        __asm__("" : "+x"(acc[j]));
    }
}

/* Eight keys' sums with the head's levels qh; hd a multiple of 16. */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) __m256i
head_sums8(const int16_t *qh, const int16_t *const kr[8], int32_t hd) {
    __m256i acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        acc[j] = _mm256_setzero_si256();
    int32_t c = 0;
    for (; c + 4 <= hd / 16; c += 4)
        chunks4(qh, kr, c, acc);
    for (; c < hd / 16; c++) /* a last one to three chunks */
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            acc[j] = _mm256_add_epi32(
                acc[j], _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(qh + 16 * c)),
                                          _mm256_loadu_si256((const __m256i *)(kr[j] + 16 * c))));
    return sums8_tree(acc);
}

/* scores8_avx2 asks for the K rows 32 keys ahead: with the rows from
 * memory (24 layers' caches read in turn, 64 MiB between them), the 0.5B's
 * seven heads over 4,000 keys took 74-84 us against 94-98 without, in
 * three alternated rounds, and the 1.5B's six heads of 128 154 against
 * 180. */
enum { PF_KEYS_SCORES = 32 };

/* Keys eight at a time, each block's heads in turn (its K rows stay in L1
 * for them); the last n % 8 keys go to scores_avx2. */
TGT2 static void scores8_avx2(const int16_t *lev, const float *qk, int32_t nh, int32_t hd, const int16_t *k,
                              const float *ks, size_t stride, const int32_t *slots, int32_t n, float *sc,
                              size_t cap) {
    int32_t i0 = 0;
    for (; i0 + 8 <= n; i0 += 8) {
        const int16_t *kr[8];
        for (int j = 0; j < 8; j++) {
            kr[j] = k + (size_t)slots[i0 + j] * stride;
            sd_attn_pf_row((const uint16_t *)k, stride, sd_attn_pf_slot(slots, i0 + j, PF_KEYS_SCORES, n), 0,
                           (size_t)hd * 2);
        }
        const __m256 ks8 = scales8(ks, slots + i0, 8);
        for (int32_t h = 0; h < nh; h++) {
            const __m256i sum = hd == 64    ? head_sums8(lev + (size_t)h * hd, kr, 64)
                                : hd == 128 ? head_sums8(lev + (size_t)h * hd, kr, 128)
                                            : head_sums8(lev + (size_t)h * hd, kr, hd);
            const __m256 f =
                _mm256_mul_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(ks8, _mm256_set1_ps(qk[h])));
            _mm256_storeu_ps(sc + (size_t)h * cap + i0, f);
        }
    }
    if (i0 < n) scores_avx2(lev, qk, nh, hd, k, ks, stride, slots + i0, n - i0, sc + i0, cap);
}

/* Pairs a step of the tile's scores takes: two sums of eight keys a pair
 * and the two blocks' dwords in registers, 2 G + 3 of the sixteen. */
enum { SCORE_PAIRS = 6 };

/* G pairs' sums over the two transposed blocks kt[0] and kt[1] (sixteen
 * keys), into sa[g] and sb[g]: each of the blocks' dwords is loaded once
 * for the G pairs, each pair's q dword broadcast once for both blocks.
 * One pair at a time loaded the blocks' dwords again for every pair, six
 * loads a key and pair where this takes 2 + 2 / G (docs/benchmarks.md,
 * "Tile scores six pairs a step"). Inlined with G a constant. */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
pairs16(int G, const int16_t *const *q, const __m256i (*kt)[TILE_HD / 2], int32_t hd, __m256i *sa,
        __m256i *sb) {
    __m256i a[SCORE_PAIRS], b[SCORE_PAIRS];
#pragma GCC unroll 6
    for (int g = 0; g < G; g++)
        a[g] = b[g] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int32_t j = 0; j < hd / 2; j++) {
        const __m256i k0 = _mm256_load_si256(&kt[0][j]), k1 = _mm256_load_si256(&kt[1][j]);
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
TGT2 static void pairs16_any(int G, const int16_t *const *q, const __m256i (*kt)[TILE_HD / 2], int32_t hd,
                             __m256i *sa, __m256i *sb) {
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

/* np (row, head) pairs over keys run[0, m), sixteen keys (two transposed
 * blocks) at a time, SCORE_PAIRS pairs a step; hd a multiple of 16, at
 * most TILE_HD. */
TGT2 static void scores_tile_avx2(const int16_t *const *qp, const float *qk, float *const *sp, int32_t np,
                                  int32_t hd, const int16_t *k, const float *ks, size_t stride,
                                  const int32_t *run, int32_t m) {
    _Alignas(32) __m256i kt[2][TILE_HD / 2];
    for (int32_t i0 = 0; i0 < m; i0 += 16) {
        const int32_t na = SD_MIN(8, m - i0), nb = SD_MAX(0, SD_MIN(8, m - i0 - 8));
        for (int32_t j = 0; j < 16; j++)
            sd_attn_pf_row((const uint16_t *)k, stride, sd_attn_pf_slot(run, i0 + j, 16, m), 0,
                           (size_t)hd * 2);
        keys8_i16(k, stride, run + i0, na, hd, kt[0]);
        keys8_i16(k, stride, run + i0 + 8, nb, hd, kt[1]);
        const __m256 ksa = scales8(ks, run + i0, na), ksb = scales8(ks, run + i0 + 8, nb);
        for (int32_t p0 = 0; p0 < np; p0 += SCORE_PAIRS) {
            const int G = (int)SD_MIN(SCORE_PAIRS, np - p0);
            __m256i sa[SCORE_PAIRS], sb[SCORE_PAIRS];
            pairs16_any(G, qp + p0, (const __m256i(*)[TILE_HD / 2]) kt, hd, sa, sb);
            for (int g = 0; g < G; g++) {
                store_scores8(sp[p0 + g] + i0, sa[g], ksa, qk[p0 + g], na);
                if (nb > 0) store_scores8(sp[p0 + g] + i0 + 8, sb[g], ksb, qk[p0 + g], nb);
            }
        }
    }
}

/* ------------------------------------------------------------ AVX-512 */

/* Keys in lanes: the K rows of sixteen keys (their levels, pairs of int16
 * in each dword) are transposed once (kt[j] holds dword j, values 2j and
 * 2j + 1, of the sixteen keys) for every (row, head) pair that reads them;
 * a pair's vpdpwssd with its q's dword j broadcast then adds two exact
 * products to each key's int32 sum, and a pass over the dwords gives
 * sixteen consecutive scores: the sums are exact, so they are the scalar
 * loop's whatever the order. Against fp16 keys converted to f32 and
 * fused multiply-adds in sixteen lanes, a third of the transposition and
 * half the multiply instructions (docs/benchmarks.md, "Integer keys"). */

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
        sd_attn_transpose16(r);
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
            sd_attn_pf_row_l2((const uint16_t *)k, stride, sd_attn_pf_slot(run, i0 + j, 16, m), 0,
                              (size_t)hd * 2);
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

/* The run's scores of every (row, head) pair (n_rows * nh <= T16_PAIRS),
 * pair p = r * nh + h's q levels at lev + p * hd, in one pass over its
 * keys. */
void sd_attn_scores_run(enum sd_attn_impl im, const struct sd_attn_row *rows, int32_t n_rows, int32_t m,
                        int32_t nh, int32_t hd, const int16_t *lev, const float *qk, const int16_t *k,
                        const float *ks, size_t stride) {
    const int32_t *run = rows[0].slots + rows[0].a;
    const int16_t *qp[T16_PAIRS] = {0};
    float *sp[T16_PAIRS] = {0};
    int32_t np = 0;
    for (int32_t r = 0; r < n_rows; r++)
        for (int32_t h = 0; h < nh; h++, np++) {
            qp[np] = lev + (size_t)np * (size_t)hd;
            sp[np] = rows[r].scores + (size_t)h * sd_attn_cap(rows[r].n) + (size_t)rows[r].a;
        }
    if (im == SD_ATTN_AVX512)
        scores_t16(qp, qk, sp, np, hd, k, ks, stride, run, m);
    else
        scores_tile_avx2(qp, qk, sp, np, hd, k, ks, stride, run, m);
}
#endif

/* Scores of keys slots[0, n) into sc[h * cap + i] for nh heads of q
 * already quantized (levels lev [nh][hd], factors qk [nh]). */
void sd_attn_scores_lev(enum sd_attn_impl im, const int16_t *lev, const float *qk, int32_t nh, int32_t hd,
                        const int16_t *k, const float *ks, size_t stride, const int32_t *slots, int32_t n,
                        float *sc, size_t cap) {
#ifdef SD_X86
    if (im == SD_ATTN_AVX512) {
        scores_avx512(lev, qk, nh, hd, k, ks, stride, slots, n, sc, cap);
        return;
    }
    if (im == SD_ATTN_AVX2) {
        scores8_avx2(lev, qk, nh, hd, k, ks, stride, slots, n, sc, cap);
        return;
    }
#endif
    (void)im;
    scores_scalar(lev, qk, nh, hd, k, ks, stride, slots, n, sc, cap);
}

/* The same from f32 q: its heads quantized a few at a time (Q_CHUNK
 * values), the same levels for every key. */
void sd_attn_scores_part(enum sd_attn_impl im, const float *q, int32_t nh, int32_t hd, const int16_t *k,
                         const float *ks, size_t stride, const int32_t *slots, int32_t n, float kscale,
                         float *sc, size_t cap) {
    _Alignas(64) int16_t lev[Q_CHUNK];
    float qk[Q_CHUNK / 16];
    const int32_t per = SD_MAX(1, Q_CHUNK / hd);
    for (int32_t h0 = 0; h0 < nh; h0 += per) {
        const int32_t hn = SD_MIN(per, nh - h0);
        sd_attn_quant_heads(q, h0, hn, hd, kscale, lev, qk);
        sd_attn_scores_lev(im, lev, qk, hn, hd, k, ks, stride, slots, n, sc + (size_t)h0 * cap, cap);
    }
}
