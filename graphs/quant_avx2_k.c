/* graphs/quant_avx2_k.c - the AVX2 tiles of the K formats (q4_K, q5_K,
 * q6_K), in the reduction order that graphs/quant_avx2.c describes: q4_K
 * and q6_K share one unpacking (tile_k8), q5_K follows ggml's own AVX2
 * kernel (tile_q5_K). */
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

/* -------------------------------------------------------- K formats */

/* Each super-block of 256 weights unpacks to eight vectors of 32 unsigned
 * values (0..15, 0..31 or 0..63) and per-vector int16 scale vectors. Against
 * the q8_K activations: maddubs pairs reach 2 * 63 * 127 = 16002; madd with
 * the scale (|scale| <= 128) gives int32 well inside range; the super-block
 * sum stays below 2^31 (at most 256 * 63 * 128 * 128 for q6_K). */
enum k_kind { K_Q4_K, K_Q5_K, K_Q6_K };

/* One unpacked weight super-block. */
struct k_block {
    __m256i wq[8]; /* 32 values each */
    __m256i sc[8]; /* int16 scale for each of the 16 lanes of a maddubs result */
    __m256i mins;  /* Q4_K/Q5_K: mins as int16 pairs [m0 m0 m1 m1 ...]; Q6_K: -32 * the 16 scales */
    __m128i m8;    /* Q4_K/Q5_K: the eight mins as int16 [m0 m1 ... m7] (for tile_k8) */
    float dw, dmw;
};

/* Broadcast int16 lane pairs for madd: result lane l (of 16) holds word
 * sel_lo (l < 8) or sel_hi (l >= 8) of the 128-bit source t, which must be
 * present in both halves. */
TGT_INLINE __m256i pick_words(__m256i t, int sel_lo, int sel_hi) {
    const __m256i mask = _mm256_setr_epi8(
        (char)(2 * sel_lo), (char)(2 * sel_lo + 1), (char)(2 * sel_lo), (char)(2 * sel_lo + 1),
        (char)(2 * sel_lo), (char)(2 * sel_lo + 1), (char)(2 * sel_lo), (char)(2 * sel_lo + 1),
        (char)(2 * sel_lo), (char)(2 * sel_lo + 1), (char)(2 * sel_lo), (char)(2 * sel_lo + 1),
        (char)(2 * sel_lo), (char)(2 * sel_lo + 1), (char)(2 * sel_lo), (char)(2 * sel_lo + 1),
        (char)(2 * sel_hi), (char)(2 * sel_hi + 1), (char)(2 * sel_hi), (char)(2 * sel_hi + 1),
        (char)(2 * sel_hi), (char)(2 * sel_hi + 1), (char)(2 * sel_hi), (char)(2 * sel_hi + 1),
        (char)(2 * sel_hi), (char)(2 * sel_hi + 1), (char)(2 * sel_hi), (char)(2 * sel_hi + 1),
        (char)(2 * sel_hi), (char)(2 * sel_hi + 1), (char)(2 * sel_hi), (char)(2 * sel_hi + 1));
    return _mm256_shuffle_epi8(t, mask);
}

TGT_INLINE void unpack_k(enum k_kind kind, const uint8_t *b, struct k_block *s) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (kind == K_Q6_K) {
        const uint8_t *ql = b, *qh = b + 128;
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = loadu256(ql + 64 * h), l1 = loadu256(ql + 64 * h + 32);
            const __m256i hb = loadu256(qh + 32 * h);
            s->wq[4 * h + 0] = _mm256_or_si256(
                _mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x03)), 4));
            s->wq[4 * h + 1] = _mm256_or_si256(
                _mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x0C)), 2));
            s->wq[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                               _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
            s->wq[4 * h + 3] =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                _mm256_srli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8((char)0xC0)), 2));
        }
        /* Vector v covers elements 32v..32v+31: scale 2v for its low 16
         * lanes, 2v + 1 for its high 16. */
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)(b + 192));
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        const __m256i lo = _mm256_permute2x128_si256(sc16, sc16, 0x00),
                      hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++)
            s->sc[v] = pick_words(v < 4 ? lo : hi, (2 * v) % 8, (2 * v) % 8 + 1);
        s->mins = _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32));
        s->dw = h2f(b + 208);
        s->dmw = 0.0f;
        return;
    }
    const uint8_t *qs = kind == K_Q4_K ? b + 16 : b + 48;
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m256i v = loadu256(qs + 32 * c);
        s->wq[2 * c] = _mm256_and_si256(v, m4);
        s->wq[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    if (kind == K_Q5_K) {
        const __m256i qh = loadu256(b + 16);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m256i bit = _mm256_set1_epi8((char)(1 << j));
            const __m256i hb =
                _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit), _mm256_set1_epi8(0x10));
            s->wq[j] = _mm256_or_si256(s->wq[j], hb);
        }
    }
    /* The eight 6-bit scales and mins, four bytes at a time (see
     * scale_min_k4 in quant_dequant.c): bytes 0-3 hold sc0..3 and the top bits of
     * sc4..7, bytes 4-7 m0..3 and the top bits of m4..7, bytes 8-11 the low
     * nibbles of sc4..7 and m4..7. */
    uint32_t u[3];
    memcpy(u, b + 4, 12);
    const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
    const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
    const __m128i scb = _mm_cvtsi64_si128((long long)(sc_lo | (uint64_t)sc_hi << 32));
    const __m128i mb = _mm_cvtsi64_si128((long long)(m_lo | (uint64_t)m_hi << 32));
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scb));
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        s->sc[j] = pick_words(sc16, j, j);
    /* [m0 m0 m1 m1 ... m7 m7] against bsums [b0 b1 b2 b3 ...]: madd gives
     * m_j * (b_2j + b_2j+1). */
    s->mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));
    s->m8 = _mm_cvtepu8_epi16(mb);
    s->dw = h2f(b);
    s->dmw = h2f(b + 2);
}

/* q4_K and q6_K in the order of ggml's AVX2 vec_dot_q4_K_q8_K and
 * vec_dot_q6_K_q8_K (the scalar dot_q4_K and dot_q6_K in quant_dot.c), which
 * needs no horizontal step: per super-block the sum over the eight runs of
 * 32 of madd(maddubs(w, x), scale) leaves in int32 lane t the scaled
 * products of elements 4t..4t+3 of every run, for q6_K less 32 * madd(bsums,
 * scales) (the quants' offset of 32). The lanes go to one float vector per
 * output with a fused multiply-add by dx * dw (the scalar fmaf per lane).
 * q4_K's mins: madd of the eight mins with the q8 sums of 32 leaves four
 * lanes, each two sub-blocks, fused-multiply-added with -dx * dmin into a
 * four-lane vector. The result is fold8 of the first plus (m0 + m2) +
 * (m1 + m3) of the second.
 *
 * R activation rows against one unpacked weight super-block at a time. x
 * points at the rows' super-block; dx, bs and bs32 hold their d, bsums and
 * q8 sums of 32. Up to two rows unroll the runs (for one row, decoding, the
 * weights come straight from the unpacking, in registers). Four rows share
 * each load of a weight vector and its scales (which do not fit in the 16
 * registers with the rest; one row at a time, the loads would bound the
 * loop), and there the loop over the runs stays rolled: unrolled, GCC
 * reassociates the four sums into trees over all runs and spills. */
TGT_INLINE void rows_k8(enum k_kind kind, const struct k_block *kb, const uint8_t *x, size_t x_stride, int R,
                        const float *dx, const __m256i *bs, const __m128i *bs32, __m256 *acc, __m128 *accm) {
    __m256i sum[4];
#pragma GCC unroll 4
    for (int q = 0; q < R; q++)
        sum[q] = _mm256_setzero_si256();
    if (R <= 2) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
#pragma GCC unroll 2
            for (int q = 0; q < R; q++) {
                const __m256i p =
                    _mm256_maddubs_epi16(kb->wq[j], loadu256(x + (size_t)q * x_stride + 4 + 32 * j));
                sum[q] = _mm256_add_epi32(sum[q], _mm256_madd_epi16(p, kb->sc[j]));
            }
        }
    } else {
#pragma GCC unroll 1
        for (int j = 0; j < 8; j++) {
            const __m256i wq = kb->wq[j], sc = kb->sc[j];
#pragma GCC unroll 4
            for (int q = 0; q < R; q++) {
                const __m256i p = _mm256_maddubs_epi16(wq, loadu256(x + (size_t)q * x_stride + 4 + 32 * j));
                sum[q] = _mm256_add_epi32(sum[q], _mm256_madd_epi16(p, sc));
            }
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < R; q++) {
        if (kind == K_Q6_K) sum[q] = _mm256_add_epi32(sum[q], _mm256_madd_epi16(bs[q], kb->mins));
        acc[q] = _mm256_fmadd_ps(_mm256_set1_ps(dx[q] * kb->dw), _mm256_cvtepi32_ps(sum[q]), acc[q]);
        if (kind == K_Q4_K) {
            const __m128 m = _mm_cvtepi32_ps(_mm_madd_epi16(kb->m8, bs32[q]));
            accm[q] = _mm_fmadd_ps(_mm_set1_ps(-dx[q] * kb->dmw), m, accm[q]);
        }
    }
}

TGT_INLINE void tile_k8(enum k_kind kind, int64_t nb, const uint8_t *w, size_t w_stride, int nw,
                        const uint8_t *x, size_t x_stride, int nx, float *y, size_t y_stride) {
    const size_t wbs = kind == K_Q4_K ? 144 : 210;
    const size_t xbs = 292;
    __m256 acc[TW][TX];
    __m128 accm[TW][TX];
    for (int i = 0; i < nw; i++) {
        for (int r = 0; r < nx; r++) {
            acc[i][r] = _mm256_setzero_ps();
            accm[i][r] = _mm_setzero_ps();
        }
    }
    for (int64_t b = 0; b < nb; b++) {
        /* Per activation row: d, and the bsums (q6_K) or their sums per
         * sub-block of 32 (q4_K; an int16 sum of two reaches 2 * 16 * 127). */
        const uint8_t *xb = x + (size_t)b * xbs;
        float dx[TX];
        __m256i bs[TX];
        __m128i bs32[TX];
        for (int r = 0; r < nx; r++) {
            const uint8_t *xr = xb + (size_t)r * x_stride;
            memcpy(&dx[r], xr, 4);
            bs[r] = loadu256(xr + 4 + 256);
            bs32[r] = _mm_hadd_epi16(_mm256_castsi256_si128(bs[r]), _mm256_extracti128_si256(bs[r], 1));
        }
        for (int i = 0; i < nw; i++) {
            struct k_block kb;
            unpack_k(kind, w + (size_t)i * w_stride + (size_t)b * wbs, &kb);
            int r = 0;
            for (; r + 4 <= nx; r += 4) {
                rows_k8(kind, &kb, xb + (size_t)r * x_stride, x_stride, 4, dx + r, bs + r, bs32 + r,
                        &acc[i][r], &accm[i][r]);
            }
            if (r + 2 <= nx) {
                rows_k8(kind, &kb, xb + (size_t)r * x_stride, x_stride, 2, dx + r, bs + r, bs32 + r,
                        &acc[i][r], &accm[i][r]);
                r += 2;
            }
            if (r < nx) {
                rows_k8(kind, &kb, xb + (size_t)r * x_stride, x_stride, 1, dx + r, bs + r, bs32 + r,
                        &acc[i][r], &accm[i][r]);
            }
        }
    }
    for (int i = 0; i < nw; i++) {
        for (int r = 0; r < nx; r++) {
            float v = fold8(acc[i][r]);
            if (kind == K_Q4_K) {
                const __m128 u = _mm_add_ps(accm[i][r], _mm_movehl_ps(accm[i][r], accm[i][r]));
                v += _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
            }
            y[(size_t)r * y_stride + (size_t)i] = v;
        }
    }
}

/* ------------------------------------------------------------------ q5_K */

/* ggml's AVX2 vec_dot_q5_K_q8_K, the order of dot_q5_K in quant_dot.c. Per
 * super-block, eight int32 lanes: lane t collects, from each 32-element
 * sub-block, its scale times the products of elements 4t..4t+3 (maddubs of
 * the unsigned five-bit quants against q8_K, at most 2 * 31 * 128 per pair,
 * then madd with the scale: exact); the lanes go to the output's eight float
 * lanes with one fused multiply-add by d_x * d_w. The mins times the q8
 * sums of 32 are one exact integer M per super-block, added to a float with
 * a fused multiply-add by -d_x * dmin_w. Result: the fold of the lanes plus
 * that float. */

/* Each weight super-block is unpacked one sub-block at a time and used at
 * once for every activation row of the tile, whose int32 lanes stay in
 * registers. The weight rows' min terms run side by side in the lanes of
 * one vector per activation row (lane i for weight row i; lanes past nw
 * add zero and are not stored): each lane is its own chain of fused
 * multiply-adds, as the scalar summs. */
TGT_INLINE void tile_q5_K(int64_t nb, const uint8_t *w, size_t w_stride, int nw, const uint8_t *x,
                          size_t x_stride, int nx, float *y, size_t y_stride) {
    _Static_assert(TW == 4, "one 128-bit vector of min terms per activation row");
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    __m256 acc[TW][TX];
    __m128 summs[TX];
    for (int r = 0; r < nx; r++) {
        summs[r] = _mm_setzero_ps();
        for (int i = 0; i < nw; i++)
            acc[i][r] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        /* Per activation row: d, and the q8 sums of each 32 (bsums 2j + 2j+1). */
        float dx[TX];
        __m128i q8s[TX];
        for (int r = 0; r < nx; r++) {
            const uint8_t *xb = x + (size_t)r * x_stride + (size_t)b * 292;
            memcpy(&dx[r], xb, 4);
            const __m256i bs = loadu256(xb + 4 + 256);
            q8s[r] = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        }
        __m128i pm[TW][TX]; /* m_j * q8s_j, four int32 per weight and activation row */
        float dmin[TW] = {0};
        for (int i = 0; i < TW; i++) {
            if (i >= nw) {
                for (int r = 0; r < nx; r++)
                    pm[i][r] = _mm_setzero_si128();
                continue;
            }
            const uint8_t *wb = w + (size_t)i * w_stride + (size_t)b * 176;
            /* The eight 6-bit scales and mins (scale_min_k4 in quant_dequant.c) as
             * ggml unpacks them: t[0], t[1] the scales, t[2], t[3] the mins. */
            uint32_t t[4];
            memcpy(t, wb + 4, 12);
            t[3] = ((t[2] >> 4) & 0x0f0f0f0fu) | (((t[1] >> 6) & 0x03030303u) << 4);
            const uint32_t m_lo = t[1] & 0x3f3f3f3fu;
            t[1] = (t[2] & 0x0f0f0f0fu) | (((t[0] >> 6) & 0x03030303u) << 4);
            t[2] = m_lo;
            t[0] &= 0x3f3f3f3fu;
            const __m256i sc16 = _mm256_broadcastsi128_si256(
                _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)(t[0] | (uint64_t)t[1] << 32))));
            const __m128i mins =
                _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)(t[2] | (uint64_t)t[3] << 32)));
            const __m256i qh = loadu256(wb + 16);
            __m256i sumi[TX];
#pragma GCC unroll 8
            for (int r = 0; r < TX; r++)
                sumi[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                /* Sub-block j: nibbles of qs[32 * (j / 2) + e] (low for even
                 * j), fifth bit from bit j of qh[e], moved to bit 4 (16-bit
                 * shifts by at most 4 bring in no neighbouring bit there);
                 * scale j in every int16 lane. */
                const __m256i v = loadu256(wb + 48 + 32 * (j / 2));
                const __m256i h = j < 4 ? _mm256_slli_epi16(qh, 4 - j) : _mm256_srli_epi16(qh, j - 4);
                const __m256i q = _mm256_or_si256(_mm256_and_si256(j & 1 ? _mm256_srli_epi16(v, 4) : v, m4),
                                                  _mm256_and_si256(h, b4));
                const __m256i sc = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * j)));
#pragma GCC unroll 8
                for (int r = 0; r < TX; r++) {
                    if (r < nx) {
                        const uint8_t *xq = x + (size_t)r * x_stride + (size_t)b * 292 + 4 + 32 * j;
                        const __m256i p = _mm256_maddubs_epi16(q, loadu256(xq));
                        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, sc));
                    }
                }
            }
            const float d = h2f(wb);
            dmin[i] = h2f(wb + 2);
#pragma GCC unroll 8
            for (int r = 0; r < TX; r++) {
                if (r < nx) {
                    acc[i][r] =
                        _mm256_fmadd_ps(_mm256_set1_ps(dx[r] * d), _mm256_cvtepi32_ps(sumi[r]), acc[i][r]);
                    pm[i][r] = _mm_madd_epi16(mins, q8s[r]);
                }
            }
        }
        const __m128 dminv = _mm_loadu_ps(dmin);
        for (int r = 0; r < nx; r++) {
            const __m128i M =
                _mm_hadd_epi32(_mm_hadd_epi32(pm[0][r], pm[1][r]), _mm_hadd_epi32(pm[2][r], pm[3][r]));
            summs[r] = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(-dx[r]), dminv), _mm_cvtepi32_ps(M), summs[r]);
        }
    }
    for (int r = 0; r < nx; r++) {
        float s[TW];
        _mm_storeu_ps(s, summs[r]);
        for (int i = 0; i < nw; i++)
            y[(size_t)r * y_stride + (size_t)i] = fold8(acc[i][r]) + s[i];
    }
}

/* ------------------------------------------------- per-type entries */

DEF_TILE(sd_avx2_tile_q4_K, tile_k8(K_Q4_K, n / 256, w, ws, nw, x, xs, nx, y, ys))
DEF_TILE(sd_avx2_tile_q5_K, tile_q5_K(n / 256, w, ws, nw, x, xs, nx, y, ys))
DEF_TILE(sd_avx2_tile_q6_K, tile_k8(K_Q6_K, n / 256, w, ws, nw, x, xs, nx, y, ys))

#endif
