/* graphs/quant_avx2_q32.c - the AVX2 tiles of the 32-element block formats
 * (q4_0, q4_1, q5_0, q5_1, q8_0), in the reduction order that
 * graphs/quant_avx2.c describes. */
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

/* The 32 nibbles of 16 bytes: element j < 16 from the low nibble of byte j,
 * element j + 16 from its high nibble. */
TGT_INLINE __m256i nibbles32(const uint8_t *qs) {
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* Byte j = 0xFF where bit j of the little-endian 32-bit word at qh is set. */
TGT_INLINE __m256i bits32(const uint8_t *qh) {
    uint32_t v;
    memcpy(&v, qh, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2,
                                          2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
}

/* Horizontal reductions of eight q4_1/q5_1 blocks at once, lane k of the
 * result holding block k's sum. They use unpack/permute shuffles and adds
 * rather than hadd: vphaddd/vphaddw decode to several uops, where an
 * unpack is one.
 *
 * Level 2 and 3 of the tree: a[j] holds, per 128-bit lane, the partial
 * sums [blk 2j, blk 2j+1, blk 2j, blk 2j+1] (two partials per block and
 * lane); the result adds each block's partials of both lanes. */
TGT_INLINE __m256i tree_tail(__m256i a01, __m256i a23, __m256i a45, __m256i a67) {
    const __m256i b0 = _mm256_add_epi32(_mm256_unpacklo_epi64(a01, a23), _mm256_unpackhi_epi64(a01, a23));
    const __m256i b1 = _mm256_add_epi32(_mm256_unpacklo_epi64(a45, a67), _mm256_unpackhi_epi64(a45, a67));
    /* b0 = [blk 0, 1, 2, 3 | blk 0, 1, 2, 3], each lane half of the block. */
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20), _mm256_permute2x128_si256(b0, b1, 0x31));
}

/* Two blocks' int16 pair sums (maddubs outputs, 16 lanes) to the same shape:
 * the int16 adds form sums of 4 products, so each input must keep
 * |4 products| <= 32767, and madd widens to int32 sums of 8. */
TGT_INLINE __m256i pair16(__m256i p, __m256i q) {
    const __m256i s = _mm256_add_epi16(_mm256_unpacklo_epi32(p, q), _mm256_unpackhi_epi32(p, q));
    return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

/* Eight blocks' maddubs outputs to one vector of int32 block sums. */
TGT_INLINE __m256i tree16(const __m256i m[8]) {
    return tree_tail(pair16(m[0], m[1]), pair16(m[2], m[3]), pair16(m[4], m[5]), pair16(m[6], m[7]));
}

/* ------------------------------------------- 32-element block formats */

/* How a 32-element weight type meets its activation type in maddubs
 * (unsigned first operand, signed second):
 *   Q4_0, Q5_0, Q8_0: weights signed; maddubs(|w|, sign(x, w)) (needs
 *     x != -128, which the q8_0 quantizer guarantees, as ggml's does). A
 *     pair reaches 2 * 128 * 127 = 32512 at most; madd adds adjacent pairs,
 *     which gives ggml's eight int32 lane sums of four products (q0_lanes).
 *   Q4_1, Q5_1: weights unsigned (0..15, 0..31) against signed q8_1;
 *     |4 products| <= 4 * 31 * 128 = 15872, so the int16 tree16 applies. */
enum q32_kind { K_Q4_0, K_Q4_1, K_Q5_0, K_Q5_1, K_Q8_0 };

TGT_INLINE __m256i unpack_w32(enum q32_kind kind, const uint8_t *b) {
    switch (kind) {
    case K_Q4_0:
        return _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8));
    case K_Q5_0:
        /* bit set: q - 16 = nibble; bit clear: nibble - 16 = nibble | 0xF0. */
        return _mm256_or_si256(nibbles32(b + 6),
                               _mm256_andnot_si256(bits32(b + 2), _mm256_set1_epi8((char)0xF0)));
    case K_Q8_0:
    default:
        return loadu256(b + 2);
    }
}

/* The eight lane sums of a Q4_0/Q5_0/Q8_0 block: lane t = sum of the
 * products of elements 4t..4t+3 (wabs = |wv|). */
TGT_INLINE __m256i q0_lanes(__m256i wabs, __m256i wv, __m256i xv) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(xv, wv)), _mm256_set1_epi16(1));
}

/* The halves at p + k * stride for k < nb (zero beyond), as eight floats.
 * They are gathered in general registers and converted at once: building
 * the vector through memory with scalar stores would stall store forwarding
 * on every group. */
TGT_INLINE __m256 load_d8(const uint8_t *p, size_t stride, int nb) {
    uint64_t lo = 0, hi = 0;
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        uint16_t a = 0, b = 0;
        if (k < nb) memcpy(&a, p + (size_t)k * stride, 2);
        if (k + 4 < nb) memcpy(&b, p + (size_t)(k + 4) * stride, 2);
        lo |= (uint64_t)a << (16 * k);
        hi |= (uint64_t)b << (16 * k);
    }
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)hi, (long long)lo));
}

/* One group of nbg <= 8 blocks of nw weight rows against nx activation
 * rows, Q4_1/Q5_1: the block sums of the group in one vector, lane k for
 * block k, scaled and added to the accumulator at once. nbg is the constant
 * 8 for all groups but a row's last, so the checks below fold away there; in
 * a short last group the unused lanes hold zero products and zero scales and
 * add exactly +0 to their lane, as the scalar code, which adds nothing
 * there. With several activation rows a weight row's blocks are unpacked
 * once into wq and reused. */
TGT_INLINE void group_q1(enum q32_kind kind, int nbg, const uint8_t *w, size_t w_stride, int nw,
                         const uint8_t *x, size_t x_stride, int nx, __m256 acc[TW][TX]) {
    const size_t wbs = kind == K_Q4_1 ? 20 : 24;
    const bool reuse = nx > 1;
    __m256 dx[TX], sx[TX];
    __m256i wq[8];
    for (int k = 0; k < 8; k++)
        wq[k] = _mm256_setzero_si256(); /* for the compiler: set below when used */
    for (int r = 0; r < nx; r++) {
        dx[r] = load_d8(x + (size_t)r * x_stride, 36, nbg);
        sx[r] = load_d8(x + (size_t)r * x_stride + 2, 36, nbg);
    }
    for (int i = 0; i < nw; i++) {
        const uint8_t *wb = w + (size_t)i * w_stride;
        const __m256 dw = load_d8(wb, wbs, nbg);
        const __m256 mw = load_d8(wb + 2, wbs, nbg);
        if (reuse) {
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                if (k < nbg) wq[k] = unpack_w32(kind, wb + (size_t)k * wbs);
            }
        }
        for (int r = 0; r < nx; r++) {
            const uint8_t *xb = x + (size_t)r * x_stride + 4;
            __m256i m[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                if (k < nbg) {
                    const __m256i wv = reuse ? wq[k] : unpack_w32(kind, wb + (size_t)k * wbs);
                    m[k] = _mm256_maddubs_epi16(wv, loadu256(xb + (size_t)k * 36));
                } else {
                    m[k] = _mm256_setzero_si256();
                }
            }
            __m256 t = _mm256_mul_ps(_mm256_mul_ps(dw, dx[r]), _mm256_cvtepi32_ps(tree16(m)));
            t = _mm256_add_ps(t, _mm256_mul_ps(mw, sx[r]));
            acc[i][r] = _mm256_add_ps(acc[i][r], t);
        }
    }
}

TGT_INLINE void tile_q1(enum q32_kind kind, int64_t nb, const uint8_t *w, size_t w_stride, int nw,
                        const uint8_t *x, size_t x_stride, int nx, float *y, size_t y_stride) {
    const size_t wbs = kind == K_Q4_1 ? 20 : 24;
    __m256 acc[TW][TX];
    for (int i = 0; i < nw; i++) {
        for (int r = 0; r < nx; r++)
            acc[i][r] = _mm256_setzero_ps();
    }
    const int64_t nfull = nb / 8 * 8;
    for (int64_t g = 0; g < nfull; g += 8) {
        group_q1(kind, 8, w + (size_t)g * wbs, w_stride, nw, x + (size_t)g * 36, x_stride, nx, acc);
    }
    if (nb > nfull) {
        group_q1(kind, (int)(nb - nfull), w + (size_t)nfull * wbs, w_stride, nw, x + (size_t)nfull * 36,
                 x_stride, nx, acc);
    }
    for (int i = 0; i < nw; i++) {
        for (int r = 0; r < nx; r++)
            y[(size_t)r * y_stride + (size_t)i] = fold8(acc[i][r]);
    }
}

/* Q4_0/Q5_0/Q8_0 in ggml's order (q0_block in quant_dot.c): per block the eight
 * lane sums go into the pair's accumulator with one fused multiply-add by
 * the block's d_w * d_x, block after block. A group of nbg <= 8 blocks (8
 * but in a row's last group, so the checks fold away) shares the scale
 * conversions: d_w * d_x of its blocks are computed as one vector per pair
 * and stored, so that each block reads its factor with a broadcast load.
 * NW x NX (constants, NW <= 2, NX <= 4) pairs keep their accumulators in
 * registers. */
TGT_INLINE void group_q0(enum q32_kind kind, int nbg, const uint8_t *w, size_t w_stride, int NW,
                         const uint8_t *x, size_t x_stride, int NX, __m256 acc[2][4]) {
    const size_t wbs = kind == K_Q4_0 ? 18 : kind == K_Q5_0 ? 22 : 34;
    _Alignas(32) float d[2][4][8];
    __m256 dw[2];
#pragma GCC unroll 2
    for (int i = 0; i < NW; i++)
        dw[i] = load_d8(w + (size_t)i * w_stride, wbs, nbg);
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) {
        const __m256 dx = load_d8(x + (size_t)r * x_stride, 34, nbg);
#pragma GCC unroll 2
        for (int i = 0; i < NW; i++)
            _mm256_store_ps(d[i][r], _mm256_mul_ps(dw[i], dx));
    }
    /* Weight row by weight row: each row's blocks are read in order, which
     * matters when the weights stream from memory (taking the rows block by
     * block in turn was much slower), and the out-of-order
     * core overlaps one row's chain with the next. */
#pragma GCC unroll 2
    for (int i = 0; i < NW; i++) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            if (k >= nbg) break;
            const __m256i wv = unpack_w32(kind, w + (size_t)i * w_stride + (size_t)k * wbs);
            const __m256i wa = _mm256_sign_epi8(wv, wv);
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++) {
                const __m256i S = q0_lanes(wa, wv, loadu256(x + (size_t)r * x_stride + 2 + (size_t)k * 34));
                acc[i][r] =
                    _mm256_fmadd_ps(_mm256_broadcast_ss(&d[i][r][k]), _mm256_cvtepi32_ps(S), acc[i][r]);
            }
        }
    }
}

TGT_INLINE void pairs_q0(enum q32_kind kind, int64_t nb, const uint8_t *w, size_t w_stride, int NW,
                         const uint8_t *x, size_t x_stride, int NX, float *y, size_t y_stride) {
    const size_t wbs = kind == K_Q4_0 ? 18 : kind == K_Q5_0 ? 22 : 34;
    __m256 acc[2][4];
#pragma GCC unroll 2
    for (int i = 0; i < NW; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++)
            acc[i][r] = _mm256_setzero_ps();
    const int64_t nfull = nb / 8 * 8;
    for (int64_t g = 0; g < nfull; g += 8) {
        group_q0(kind, 8, w + (size_t)g * wbs, w_stride, NW, x + (size_t)g * 34, x_stride, NX, acc);
    }
    if (nb > nfull) {
        group_q0(kind, (int)(nb - nfull), w + (size_t)nfull * wbs, w_stride, NW, x + (size_t)nfull * 34,
                 x_stride, NX, acc);
    }
#pragma GCC unroll 2
    for (int i = 0; i < NW; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++)
            y[(size_t)r * y_stride + (size_t)i] = fold8(acc[i][r]);
}

/* Each output is one chain of dependent multiply-adds, so a tile runs
 * several side by side: with one activation row (decoding), two weight rows
 * (four were slower when the weights stream from memory, one slower when
 * they come from cache); with several, one weight row
 * at a time (unpacked once per block) against up to four activation rows. */
TGT_INLINE void tile_q0(enum q32_kind kind, int64_t nb, const uint8_t *w, size_t w_stride, int nw,
                        const uint8_t *x, size_t x_stride, int nx, float *y, size_t y_stride) {
    if (nx == 1) {
        for (int i = 0; i < nw; i += 2) {
            if (nw - i >= 2) {
                pairs_q0(kind, nb, w + (size_t)i * w_stride, w_stride, 2, x, x_stride, 1, y + i, y_stride);
            } else {
                pairs_q0(kind, nb, w + (size_t)i * w_stride, w_stride, 1, x, x_stride, 1, y + i, y_stride);
            }
        }
        return;
    }
    for (int i = 0; i < nw; i++) {
        const uint8_t *wi = w + (size_t)i * w_stride;
        for (int r0 = 0; r0 < nx; r0 += 4) {
            const uint8_t *xr = x + (size_t)r0 * x_stride;
            float *yr = y + (size_t)r0 * y_stride + (size_t)i;
            switch (nx - r0) {
            case 1:
                pairs_q0(kind, nb, wi, w_stride, 1, xr, x_stride, 1, yr, y_stride);
                break;
            case 2:
                pairs_q0(kind, nb, wi, w_stride, 1, xr, x_stride, 2, yr, y_stride);
                break;
            case 3:
                pairs_q0(kind, nb, wi, w_stride, 1, xr, x_stride, 3, yr, y_stride);
                break;
            default:
                pairs_q0(kind, nb, wi, w_stride, 1, xr, x_stride, 4, yr, y_stride);
                break;
            }
        }
    }
}

/* ------------------------------------------------- per-type entries */

DEF_TILE(sd_avx2_tile_q4_1, tile_q1(K_Q4_1, n / 32, w, ws, nw, x, xs, nx, y, ys))
DEF_TILE(sd_avx2_tile_q5_1, tile_q1(K_Q5_1, n / 32, w, ws, nw, x, xs, nx, y, ys))

/* tile_q0 picks constant shapes itself. */
#define DEF_TILE_Q0(name, K)                                                                                 \
    TGT void name(int64_t n, const uint8_t *w, size_t ws, int nw, const uint8_t *x, size_t xs, int nx,       \
                  float *y, size_t ys) {                                                                     \
        tile_q0(K, n / 32, w, ws, nw, x, xs, nx, y, ys);                                                     \
    }

DEF_TILE_Q0(sd_avx2_tile_q4_0, K_Q4_0)
DEF_TILE_Q0(sd_avx2_tile_q5_0, K_Q5_0)
DEF_TILE_Q0(sd_avx2_tile_q8_0, K_Q8_0)

#endif
