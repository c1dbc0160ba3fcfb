/* graphs/quant_avx2.c - AVX2/FMA/F16C kernels: dot-product tiles and the
 * activation quantizers (q8_0, q8_1, q8_K).
 *
 * The build passes no -mavx2: each function carries a target attribute and
 * graphs/quant.c calls in here only after sd_quant_avx2_supported() said yes.
 *
 * Every kernel keeps the reduction order that graphs/quant.h documents, so
 * its results equal the scalar reference bit for bit. Q4_0, Q5_0 and Q8_0
 * (ggml's order):
 *   - per block eight exact int32 lane sums of four products each (maddubs
 *     on u8 x s8, then madd), one vector;
 *   - converted to float and fused-multiply-added with the block's
 *     d_w * d_x into the output's accumulator vector, block after block, so
 *     lane t of the accumulator is exactly the scalar acc[t];
 *   - the final fold is the scalar reduce8.
 * Q4_1, Q5_1 and the K formats:
 *   - per block an exact int32 sum (maddubs on u8 x s8, then int16/int32
 *     horizontal adds whose ranges are checked in the comments below);
 *   - eight blocks at a time, the eight block sums sit in one vector, lane k
 *     holding block 8g + k; it is converted to float, multiplied by the
 *     per-lane d_w * d_x and added to the accumulator vector, so lane k of
 *     the accumulator is exactly the scalar acc[b % 8];
 *   - the final fold is the scalar reduce8.
 * There no multiply-add is fused (ISO C mode and the pragma below), because a
 * fused multiply-add rounds once where the scalar reference rounds twice;
 * the fused ones of the Q0 formats are explicit intrinsics.
 *
 * A tile of several weight rows x activation rows unpacks each weight block
 * once and reuses it for every activation row, and converts each block scale
 * once; the arithmetic per output is exactly that of a single dot product.
 *
 * The Q0 order puts every block's multiply-add on the output's one
 * accumulator chain, bound by the FMA latency, so the Q0 tiles run several
 * outputs side by side (tile_q0). The block sums of the other formats are
 * independent of each other. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "quant.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#include <cpuid.h>
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGT_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* Tile shape: weight rows x activation rows sharing one unpacking. Eight
 * activation rows amortize the unpacking better than four (about 15% on
 * q5_0/q4_K/q6_K at 8 or 32 rows); weight rows only share the activation
 * scales, so four suffice. */
#define TW 4
#define TX 8

/* __builtin_cpu_supports checks that the OS saves the YMM registers for
 * "avx2"; F16C is read from CPUID directly because not every compiler knows
 * the "f16c" feature name (clang 14/15 do not). */
bool sd_quant_avx2_supported(void) {
    __builtin_cpu_init();
    unsigned a, b, c, d;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* ------------------------------------------------------------ helpers */

TGT_INLINE float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

TGT_INLINE __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

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
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
}

/* Horizontal reductions of eight q4_1/q5_1 blocks at once, lane k of the
 * result holding block k's sum. They use unpack/permute shuffles and adds
 * rather than hadd: vphaddd/vphaddw decode to several uops (about 4 cycles
 * each on the Zen 4 this was tuned on, against 1 for an unpack).
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

TGT_INLINE int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* The documented fold: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
TGT_INLINE float fold8(__m256 v) {
    const __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
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
        return _mm256_or_si256(nibbles32(b + 6), _mm256_andnot_si256(bits32(b + 2), _mm256_set1_epi8((char)0xF0)));
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
TGT_INLINE void group_q1(enum q32_kind kind, int nbg, const uint8_t *w, size_t w_stride, int nw, const uint8_t *x,
                         size_t x_stride, int nx, __m256 acc[TW][TX]) {
    const size_t wbs = kind == K_Q4_1 ? 20 : 24;
    const bool reuse = nx > 1;
    __m256 dx[TX], sx[TX];
    __m256i wq[8];
    for (int k = 0; k < 8; k++) wq[k] = _mm256_setzero_si256(); /* for the compiler: set below when used */
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

TGT_INLINE void tile_q1(enum q32_kind kind, int64_t nb, const uint8_t *w, size_t w_stride, int nw, const uint8_t *x,
                        size_t x_stride, int nx, float *y, size_t y_stride) {
    const size_t wbs = kind == K_Q4_1 ? 20 : 24;
    __m256 acc[TW][TX];
    for (int i = 0; i < nw; i++) {
        for (int r = 0; r < nx; r++) acc[i][r] = _mm256_setzero_ps();
    }
    const int64_t nfull = nb / 8 * 8;
    for (int64_t g = 0; g < nfull; g += 8) {
        group_q1(kind, 8, w + (size_t)g * wbs, w_stride, nw, x + (size_t)g * 36, x_stride, nx, acc);
    }
    if (nb > nfull) {
        group_q1(kind, (int)(nb - nfull), w + (size_t)nfull * wbs, w_stride, nw, x + (size_t)nfull * 36, x_stride,
                 nx, acc);
    }
    for (int i = 0; i < nw; i++) {
        for (int r = 0; r < nx; r++) y[(size_t)r * y_stride + (size_t)i] = fold8(acc[i][r]);
    }
}

/* Q4_0/Q5_0/Q8_0 in ggml's order (q0_block in quant.c): per block the eight
 * lane sums go into the pair's accumulator with one fused multiply-add by
 * the block's d_w * d_x, block after block. A group of nbg <= 8 blocks (8
 * but in a row's last group, so the checks fold away) shares the scale
 * conversions: d_w * d_x of its blocks are computed as one vector per pair
 * and stored, so that each block reads its factor with a broadcast load.
 * NW x NX (constants, NW <= 2, NX <= 4) pairs keep their accumulators in
 * registers. */
TGT_INLINE void group_q0(enum q32_kind kind, int nbg, const uint8_t *w, size_t w_stride, int NW, const uint8_t *x,
                         size_t x_stride, int NX, __m256 acc[2][4]) {
    const size_t wbs = kind == K_Q4_0 ? 18 : kind == K_Q5_0 ? 22 : 34;
    _Alignas(32) float d[2][4][8];
    __m256 dw[2];
#pragma GCC unroll 2
    for (int i = 0; i < NW; i++) dw[i] = load_d8(w + (size_t)i * w_stride, wbs, nbg);
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) {
        const __m256 dx = load_d8(x + (size_t)r * x_stride, 34, nbg);
#pragma GCC unroll 2
        for (int i = 0; i < NW; i++) _mm256_store_ps(d[i][r], _mm256_mul_ps(dw[i], dx));
    }
    /* Weight row by weight row: each row's blocks are read in order, which
     * matters when the weights stream from memory (taking the rows block by
     * block in turn measured more than twice as slow), and the out-of-order
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
                acc[i][r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&d[i][r][k]), _mm256_cvtepi32_ps(S), acc[i][r]);
            }
        }
    }
}

TGT_INLINE void pairs_q0(enum q32_kind kind, int64_t nb, const uint8_t *w, size_t w_stride, int NW, const uint8_t *x,
                         size_t x_stride, int NX, float *y, size_t y_stride) {
    const size_t wbs = kind == K_Q4_0 ? 18 : kind == K_Q5_0 ? 22 : 34;
    __m256 acc[2][4];
#pragma GCC unroll 2
    for (int i = 0; i < NW; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) acc[i][r] = _mm256_setzero_ps();
    const int64_t nfull = nb / 8 * 8;
    for (int64_t g = 0; g < nfull; g += 8) {
        group_q0(kind, 8, w + (size_t)g * wbs, w_stride, NW, x + (size_t)g * 34, x_stride, NX, acc);
    }
    if (nb > nfull) {
        group_q0(kind, (int)(nb - nfull), w + (size_t)nfull * wbs, w_stride, NW, x + (size_t)nfull * 34, x_stride,
                 NX, acc);
    }
#pragma GCC unroll 2
    for (int i = 0; i < NW; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) y[(size_t)r * y_stride + (size_t)i] = fold8(acc[i][r]);
}

/* Each output is one chain of dependent multiply-adds, so a tile runs
 * several side by side: with one activation row (decoding), two weight rows
 * (four measured up to 50% slower when the weights stream from memory, one
 * about 10% slower when they come from cache); with several, one weight row
 * at a time (unpacked once per block) against up to four activation rows. */
TGT_INLINE void tile_q0(enum q32_kind kind, int64_t nb, const uint8_t *w, size_t w_stride, int nw, const uint8_t *x,
                        size_t x_stride, int nx, float *y, size_t y_stride) {
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
            case 1: pairs_q0(kind, nb, wi, w_stride, 1, xr, x_stride, 1, yr, y_stride); break;
            case 2: pairs_q0(kind, nb, wi, w_stride, 1, xr, x_stride, 2, yr, y_stride); break;
            case 3: pairs_q0(kind, nb, wi, w_stride, 1, xr, x_stride, 3, yr, y_stride); break;
            default: pairs_q0(kind, nb, wi, w_stride, 1, xr, x_stride, 4, yr, y_stride); break;
            }
        }
    }
}

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
        (char)(2 * sel_lo), (char)(2 * sel_lo + 1), (char)(2 * sel_lo), (char)(2 * sel_lo + 1), (char)(2 * sel_lo),
        (char)(2 * sel_lo + 1), (char)(2 * sel_lo), (char)(2 * sel_lo + 1), (char)(2 * sel_lo), (char)(2 * sel_lo + 1),
        (char)(2 * sel_lo), (char)(2 * sel_lo + 1), (char)(2 * sel_lo), (char)(2 * sel_lo + 1), (char)(2 * sel_lo),
        (char)(2 * sel_lo + 1), (char)(2 * sel_hi), (char)(2 * sel_hi + 1), (char)(2 * sel_hi), (char)(2 * sel_hi + 1),
        (char)(2 * sel_hi), (char)(2 * sel_hi + 1), (char)(2 * sel_hi), (char)(2 * sel_hi + 1), (char)(2 * sel_hi),
        (char)(2 * sel_hi + 1), (char)(2 * sel_hi), (char)(2 * sel_hi + 1), (char)(2 * sel_hi), (char)(2 * sel_hi + 1),
        (char)(2 * sel_hi), (char)(2 * sel_hi + 1));
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
            s->wq[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                                  _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x03)), 4));
            s->wq[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                                  _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x0C)), 2));
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
        const __m256i lo = _mm256_permute2x128_si256(sc16, sc16, 0x00), hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) s->sc[v] = pick_words(v < 4 ? lo : hi, (2 * v) % 8, (2 * v) % 8 + 1);
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
            const __m256i hb = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit), _mm256_set1_epi8(0x10));
            s->wq[j] = _mm256_or_si256(s->wq[j], hb);
        }
    }
    /* The eight 6-bit scales and mins, four bytes at a time (see
     * scale_min_k4 in quant.c): bytes 0-3 hold sc0..3 and the top bits of
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
    for (int j = 0; j < 8; j++) s->sc[j] = pick_words(sc16, j, j);
    /* [m0 m0 m1 m1 ... m7 m7] against bsums [b0 b1 b2 b3 ...]: madd gives
     * m_j * (b_2j + b_2j+1). */
    s->mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));
    s->m8 = _mm_cvtepu8_epi16(mb);
    s->dw = h2f(b);
    s->dmw = h2f(b + 2);
}

/* q4_K and q6_K in the order of ggml's AVX2 vec_dot_q4_K_q8_K and
 * vec_dot_q6_K_q8_K (the scalar dot_q4_K and dot_q6_K in quant.c), which
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
    for (int q = 0; q < R; q++) sum[q] = _mm256_setzero_si256();
    if (R <= 2) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
#pragma GCC unroll 2
            for (int q = 0; q < R; q++) {
                const __m256i p = _mm256_maddubs_epi16(kb->wq[j], loadu256(x + (size_t)q * x_stride + 4 + 32 * j));
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

TGT_INLINE void tile_k8(enum k_kind kind, int64_t nb, const uint8_t *w, size_t w_stride, int nw, const uint8_t *x,
                        size_t x_stride, int nx, float *y, size_t y_stride) {
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
                rows_k8(kind, &kb, xb + (size_t)r * x_stride, x_stride, 4, dx + r, bs + r, bs32 + r, &acc[i][r],
                        &accm[i][r]);
            }
            if (r + 2 <= nx) {
                rows_k8(kind, &kb, xb + (size_t)r * x_stride, x_stride, 2, dx + r, bs + r, bs32 + r, &acc[i][r],
                        &accm[i][r]);
                r += 2;
            }
            if (r < nx) {
                rows_k8(kind, &kb, xb + (size_t)r * x_stride, x_stride, 1, dx + r, bs + r, bs32 + r, &acc[i][r],
                        &accm[i][r]);
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

/* ------------------------------------------------------ float formats */

/* The order of dot_f32/f16/bf16 in quant.c (ggml's vec_dot as built for
 * AVX-512): each output has its own accumulator lanes, every lane a chain of
 * fused multiply-adds along the row. They sit in groups of eight (one
 * vector each): f32/f16 have 64 lanes, group g taking elements 64m + 8g ..
 * 64m + 8g + 7; bf16 has the two sixteen-lane vdpbf16ps accumulators, group
 * g (two per accumulator) taking elements 64m + 16g .. 64m + 16g + 15, lane
 * l the pair 2l + 1, 2l of them.
 *
 * A pass runs a few groups of a few outputs (weight rows x activation rows)
 * over the whole row, eight chains side by side where the tile allows: that
 * hides the FMA latency within the registers (one output's 64 lanes alone
 * would take eight, its neighbours' none), and each weight vector is loaded
 * (and converted) once for all the pass's activation rows, each activation
 * vector once for all its weight rows. */
enum f_kind { K_F32, K_F16, K_BF16 };

/* Elements per group, and groups per output. */
#define F_ELEMS(kind) ((kind) == K_BF16 ? 16 : 8)
#define F_GROUPS(kind) (64 / F_ELEMS(kind))
/* Largest block: weight rows x activation rows. */
#define F_MW 4
#define F_MX 2

TGT_INLINE __m256 load8_f(enum f_kind kind, const uint8_t *w, int64_t k) {
    if (kind == K_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 2 * k)));
    return _mm256_loadu_ps((const float *)(const void *)(w + 4 * k));
}

TGT_INLINE float load1_f(enum f_kind kind, const uint8_t *w, int64_t k) {
    if (kind == K_F32) {
        float f;
        memcpy(&f, w + 4 * k, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, w + 2 * k, 2);
    return kind == K_F16 ? _cvtsh_ss(h) : sd_bf16_to_fp32(h);
}

/* Zero where |v| < FLT_MIN (sign kept), v elsewhere, NaN included. */
TGT_INLINE __m256 flush_denormal(__m256 v) {
    const __m256 keep =
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v), _mm256_set1_ps(FLT_MIN), _CMP_NLT_UQ);
    return _mm256_and_ps(v, _mm256_or_ps(keep, _mm256_set1_ps(-0.0f)));
}

/* sd_bf16_fma on eight lanes, a and b already flushed. */
TGT_INLINE __m256 bf16_fma8(__m256 a, __m256 b, __m256 acc) { return flush_denormal(_mm256_fmadd_ps(a, b, acc)); }

/* One pass: groups g0 .. g0 + JB - 1 of MW weight rows x MX activation rows
 * over the elements below n64 (a multiple of 64), into out[i][r][g]. */
TGT_INLINE void pass_f(enum f_kind kind, int MW, int MX, int JB, int g0, int64_t n64, const uint8_t *w,
                       size_t w_stride, const uint8_t *x, size_t x_stride, __m256 out[F_MW][F_MX][8]) {
    const int E = F_ELEMS(kind);
    __m256 acc[8][F_MW][F_MX];
#pragma GCC unroll 8
    for (int j = 0; j < JB; j++)
#pragma GCC unroll 8
        for (int i = 0; i < MW; i++)
#pragma GCC unroll 8
            for (int r = 0; r < MX; r++) acc[j][i][r] = _mm256_setzero_ps();
    for (int64_t k = 0; k < n64; k += 64) {
        if (kind == K_BF16) {
            /* Lane l takes elements 2l + 1 and 2l of its group: the
             * activations split into odd and even elements, each weight
             * dword (two bf16) into its high and low half. */
            __m256 xo[4][F_MX], xe[4][F_MX];
#pragma GCC unroll 8
            for (int r = 0; r < MX; r++) {
                const float *xr = (const float *)(const void *)(x + (size_t)r * x_stride) + k;
#pragma GCC unroll 8
                for (int j = 0; j < JB; j++) {
                    const __m256 a = _mm256_loadu_ps(xr + E * (g0 + j)), b = _mm256_loadu_ps(xr + E * (g0 + j) + 8);
                    const __m256i perm = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
                    xe[j][r] = flush_denormal(_mm256_permutevar8x32_ps(_mm256_shuffle_ps(a, b, 0x88), perm));
                    xo[j][r] = flush_denormal(_mm256_permutevar8x32_ps(_mm256_shuffle_ps(a, b, 0xDD), perm));
                }
            }
#pragma GCC unroll 8
            for (int i = 0; i < MW; i++) {
#pragma GCC unroll 8
                for (int j = 0; j < JB; j++) {
                    const __m256i d = loadu256(w + (size_t)i * w_stride + 2 * (k + E * (g0 + j)));
                    const __m256 wo = flush_denormal(
                        _mm256_castsi256_ps(_mm256_and_si256(d, _mm256_set1_epi32((int)0xFFFF0000u))));
                    const __m256 we = flush_denormal(_mm256_castsi256_ps(_mm256_slli_epi32(d, 16)));
#pragma GCC unroll 8
                    for (int r = 0; r < MX; r++)
                        acc[j][i][r] = bf16_fma8(we, xe[j][r], bf16_fma8(wo, xo[j][r], acc[j][i][r]));
                }
            }
        } else {
            __m256 xv[8][F_MX];
#pragma GCC unroll 8
            for (int r = 0; r < MX; r++) {
                const float *xr = (const float *)(const void *)(x + (size_t)r * x_stride) + k;
#pragma GCC unroll 8
                for (int j = 0; j < JB; j++) xv[j][r] = _mm256_loadu_ps(xr + E * (g0 + j));
            }
#pragma GCC unroll 8
            for (int i = 0; i < MW; i++) {
#pragma GCC unroll 8
                for (int j = 0; j < JB; j++) {
                    const __m256 wv = load8_f(kind, w + (size_t)i * w_stride, k + E * (g0 + j));
#pragma GCC unroll 8
                    for (int r = 0; r < MX; r++) acc[j][i][r] = _mm256_fmadd_ps(wv, xv[j][r], acc[j][i][r]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < JB; j++)
#pragma GCC unroll 8
        for (int i = 0; i < MW; i++)
#pragma GCC unroll 8
            for (int r = 0; r < MX; r++) out[i][r][g0 + j] = acc[j][i][r];
}

/* All groups of an MW x MX block, in passes of up to eight chains (at most
 * one bf16 output's four groups, whose pairs of steps are long chains
 * anyway). */
#define DEF_FBLOCK(name, kind, MW, MX)                                                                 \
    TGT static void name(int64_t n64, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,       \
                         __m256 out[F_MW][F_MX][8]) {                                                 \
        const int jb = SD_MIN(F_GROUPS(kind), 8 / ((MW) * (MX)));                                    \
        for (int g0 = 0; g0 < F_GROUPS(kind); g0 += jb)                                              \
            pass_f(kind, MW, MX, jb, g0, n64, w, ws, x, xs, out);                                    \
    }
#define DEF_FBLOCKS(T, kind)                                                                           \
    DEF_FBLOCK(T##_11, kind, 1, 1) DEF_FBLOCK(T##_12, kind, 1, 2) DEF_FBLOCK(T##_21, kind, 2, 1)       \
    DEF_FBLOCK(T##_22, kind, 2, 2) DEF_FBLOCK(T##_41, kind, 4, 1) DEF_FBLOCK(T##_42, kind, 4, 2)
DEF_FBLOCKS(fb_f32, K_F32)
DEF_FBLOCKS(fb_f16, K_F16)
DEF_FBLOCKS(fb_bf16, K_BF16)

typedef void (*fblock_fn)(int64_t n64, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                          __m256 out[F_MW][F_MX][8]);
/* [kind][MW / 2][MX - 1] for MW in 1, 2, 4 and MX in 1, 2. */
#define FBLOCKS(T) {{T##_11, T##_12}, {T##_21, T##_22}, {T##_41, T##_42}}
static const fblock_fn k_fblocks[3][3][2] = {FBLOCKS(fb_f32), FBLOCKS(fb_f16), FBLOCKS(fb_bf16)};

/* An output from its accumulator groups a: the lanes folded as the scalar
 * fold64 (f32/f16) or as reduce16 per accumulator, added in double (bf16),
 * then the elements from n64 on one by one, as the scalar tail. */
TGT_INLINE float finish_f(enum f_kind kind, int64_t n, int64_t n64, const __m256 a[8], const uint8_t *w,
                          const float *x) {
    if (kind == K_BF16) {
        double s = 0.0;
        s += (double)fold8(_mm256_add_ps(a[0], a[1]));
        s += (double)fold8(_mm256_add_ps(a[2], a[3]));
        for (int64_t k = n64; k < n; k++) s += (double)(load1_f(kind, w, k) * x[k]);
        return (float)s;
    }
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
    const float f = fold8(_mm256_add_ps(lo, hi));
    if (kind == K_F32) {
        float s = f;
        for (int64_t k = n64; k < n; k++) s += load1_f(kind, w, k) * x[k];
        return s;
    }
    double s = f;
    for (int64_t k = n64; k < n; k++) s += (double)(load1_f(kind, w, k) * x[k]);
    return (float)s;
}

/* The tile in blocks of up to F_MW weight rows x F_MX activation rows
 * (measured on the Zen 4 these were tuned on: four weight rows sharing two
 * activation rows' loads run about a third faster than two sharing four, at
 * 8 rows or more). */
TGT_INLINE void tile_f(enum f_kind kind, int64_t n, const uint8_t *w, size_t w_stride, int nw, const uint8_t *x,
                       size_t x_stride, int nx, float *y, size_t y_stride) {
    const int64_t n64 = n / 64 * 64;
    for (int r0 = 0; r0 < nx;) {
        const int mx = nx - r0 >= F_MX ? F_MX : 1;
        for (int i0 = 0; i0 < nw;) {
            const int mw = nw - i0 >= F_MW ? F_MW : nw - i0 >= 2 ? 2 : 1;
            __m256 acc[F_MW][F_MX][8];
            const uint8_t *wb = w + (size_t)i0 * w_stride, *xb = x + (size_t)r0 * x_stride;
            k_fblocks[kind][mw / 2][mx - 1](n64, wb, w_stride, xb, x_stride, acc);
            for (int i = 0; i < mw; i++) {
                for (int r = 0; r < mx; r++) {
                    y[(size_t)(r0 + r) * y_stride + (size_t)(i0 + i)] =
                        finish_f(kind, n, n64, acc[i][r], wb + (size_t)i * w_stride,
                                 (const float *)(const void *)(xb + (size_t)r * x_stride));
                }
            }
            i0 += mw;
        }
        r0 += mx;
    }
}

/* ------------------------------------------------------------------ q5_K */

/* ggml's AVX2 vec_dot_q5_K_q8_K, the order of dot_q5_K in quant.c. Per
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
TGT_INLINE void tile_q5_K(int64_t nb, const uint8_t *w, size_t w_stride, int nw, const uint8_t *x, size_t x_stride,
                          int nx, float *y, size_t y_stride) {
    _Static_assert(TW == 4, "one 128-bit vector of min terms per activation row");
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    __m256 acc[TW][TX];
    __m128 summs[TX];
    for (int r = 0; r < nx; r++) {
        summs[r] = _mm_setzero_ps();
        for (int i = 0; i < nw; i++) acc[i][r] = _mm256_setzero_ps();
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
                for (int r = 0; r < nx; r++) pm[i][r] = _mm_setzero_si128();
                continue;
            }
            const uint8_t *wb = w + (size_t)i * w_stride + (size_t)b * 176;
            /* The eight 6-bit scales and mins (scale_min_k4 in quant.c) as
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
            const __m128i mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)(t[2] | (uint64_t)t[3] << 32)));
            const __m256i qh = loadu256(wb + 16);
            __m256i sumi[TX];
#pragma GCC unroll 8
            for (int r = 0; r < TX; r++) sumi[r] = _mm256_setzero_si256();
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
                    acc[i][r] = _mm256_fmadd_ps(_mm256_set1_ps(dx[r] * d), _mm256_cvtepi32_ps(sumi[r]), acc[i][r]);
                    pm[i][r] = _mm_madd_epi16(mins, q8s[r]);
                }
            }
        }
        const __m128 dminv = _mm_loadu_ps(dmin);
        for (int r = 0; r < nx; r++) {
            const __m128i M = _mm_hadd_epi32(_mm_hadd_epi32(pm[0][r], pm[1][r]), _mm_hadd_epi32(pm[2][r], pm[3][r]));
            summs[r] = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(-dx[r]), dminv), _mm_cvtepi32_ps(M), summs[r]);
        }
    }
    for (int r = 0; r < nx; r++) {
        float s[TW];
        _mm_storeu_ps(s, summs[r]);
        for (int i = 0; i < nw; i++) y[(size_t)r * y_stride + (size_t)i] = fold8(acc[i][r]) + s[i];
    }
}

/* ------------------------------------------------- per-type entries */

/* Each kernel is instantiated three times: for a single dot product, for
 * one activation row (the matrix-vector product of decoding) and for any
 * number of rows. The constants let the compiler drop loops and keep the
 * weights in registers instead of saving them for further rows; the
 * arithmetic per output is the same in all three. */
#define DEF_TILE(name, call)                                                                                    \
    TGT static void name(int64_t n, const uint8_t *w, size_t ws, int nw_, const uint8_t *x, size_t xs, int nx_, \
                         float *y, size_t ys) {                                                                 \
        if (nx_ == 1 && nw_ == 1) {                                                                             \
            const int nw = 1, nx = 1;                                                                           \
            call;                                                                                               \
        } else if (nx_ == 1) {                                                                                  \
            const int nw = nw_, nx = 1;                                                                         \
            call;                                                                                               \
        } else {                                                                                                \
            const int nw = nw_, nx = nx_;                                                                       \
            call;                                                                                               \
        }                                                                                                       \
    }

DEF_TILE(t_q4_1, tile_q1(K_Q4_1, n / 32, w, ws, nw, x, xs, nx, y, ys))
DEF_TILE(t_q5_1, tile_q1(K_Q5_1, n / 32, w, ws, nw, x, xs, nx, y, ys))
DEF_TILE(t_q4_K, tile_k8(K_Q4_K, n / 256, w, ws, nw, x, xs, nx, y, ys))
DEF_TILE(t_q5_K, tile_q5_K(n / 256, w, ws, nw, x, xs, nx, y, ys))
DEF_TILE(t_q6_K, tile_k8(K_Q6_K, n / 256, w, ws, nw, x, xs, nx, y, ys))
DEF_TILE(t_f32, tile_f(K_F32, n, w, ws, nw, x, xs, nx, y, ys))
DEF_TILE(t_f16, tile_f(K_F16, n, w, ws, nw, x, xs, nx, y, ys))
DEF_TILE(t_bf16, tile_f(K_BF16, n, w, ws, nw, x, xs, nx, y, ys))

/* tile_q0 picks constant shapes itself. */
#define DEF_TILE_Q0(name, K)                                                                                 \
    TGT static void name(int64_t n, const uint8_t *w, size_t ws, int nw, const uint8_t *x, size_t xs, int nx, \
                         float *y, size_t ys) {                                                              \
        tile_q0(K, n / 32, w, ws, nw, x, xs, nx, y, ys);                                                     \
    }

DEF_TILE_Q0(t_q4_0, K_Q4_0)
DEF_TILE_Q0(t_q5_0, K_Q5_0)
DEF_TILE_Q0(t_q8_0, K_Q8_0)

typedef void (*tile_fn)(int64_t n, const uint8_t *w, size_t ws, int nw, const uint8_t *x, size_t xs, int nx,
                        float *y, size_t ys);

bool sd_vec_dot_tile_avx2(enum sd_type wtype, int64_t n, const void *w, size_t w_stride, int nw, const void *xq,
                          size_t x_stride, int nx, float *y, size_t y_stride) {
    tile_fn f;
    switch (wtype) {
    case SD_TYPE_Q4_0: f = t_q4_0; break;
    case SD_TYPE_Q4_1: f = t_q4_1; break;
    case SD_TYPE_Q5_0: f = t_q5_0; break;
    case SD_TYPE_Q5_1: f = t_q5_1; break;
    case SD_TYPE_Q8_0: f = t_q8_0; break;
    case SD_TYPE_Q4_K: f = t_q4_K; break;
    case SD_TYPE_Q5_K: f = t_q5_K; break;
    case SD_TYPE_Q6_K: f = t_q6_K; break;
    case SD_TYPE_F32: f = t_f32; break;
    case SD_TYPE_F16: f = t_f16; break;
    case SD_TYPE_BF16: f = t_bf16; break;
    default: return false;
    }
    const uint8_t *wb = w, *xb = xq;
    /* Weight chunks outside, activation chunks inside: a chunk of weight rows
     * stays in L1 while every activation row passes by. */
    for (int i0 = 0; i0 < nw; i0 += TW) {
        const int cw = nw - i0 < TW ? nw - i0 : TW;
        for (int r0 = 0; r0 < nx; r0 += TX) {
            const int cx = nx - r0 < TX ? nx - r0 : TX;
            f(n, wb + (size_t)i0 * w_stride, w_stride, cw, xb + (size_t)r0 * x_stride, x_stride, cx,
              y + (size_t)r0 * y_stride + (size_t)i0, y_stride);
        }
    }
    return true;
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
/* act: the activation quantizer of quant.c (sd_quantize_act_row): id =
 * 127 / amax and ties to even, as ggml's x86 quantize_row_q8_0/q8_1. */
TGT static void quant_q8_01(const float *x, uint8_t *o, int64_t n, bool q8_1, bool act) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const size_t bs = q8_1 ? 36 : 34;
    for (int64_t i = 0; i < n / 32; i++, x += 32, o += bs) {
        __m256 v[4];
        for (int q = 0; q < 4; q++) v[q] = _mm256_loadu_ps(x + 8 * q);
        const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absmask), _mm256_and_ps(v[1], absmask)),
                                       _mm256_max_ps(_mm256_and_ps(v[2], absmask), _mm256_and_ps(v[3], absmask)));
        const float amax = hmax_ps(m);
        const float d = amax / 127;
        const float id = act ? (amax != 0.0f ? 127.f / amax : 0.0f) : (d != 0.0f ? 1.0f / d : 0.0f);
        const __m256 idv = _mm256_set1_ps(id);
        for (int q = 0; q < 4; q++)
            v[q] = act ? _mm256_round_ps(_mm256_mul_ps(v[q], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
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
        for (int q = 0; q < 32; q++) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + 8 * q), absmask));
        const float amax = hmax_ps(m);
        if (!(amax > 0.0f)) {
            memset(o, 0, 292);
            continue;
        }
        float max = 0.0f;
        const __m256 amv = _mm256_set1_ps(amax);
        for (int q = 0; q < 32; q++) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * q), absmask), amv,
                                                             _CMP_EQ_OQ));
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
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), qv), _mm256_set1_epi16(1));
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

bool sd_quantize_row_avx2(enum sd_type type, const float *src, void *dst, int64_t n) {
    switch (type) {
    case SD_TYPE_Q8_0: quant_q8_01(src, dst, n, false, false); return true;
    case SD_TYPE_Q8_1: quant_q8_01(src, dst, n, true, false); return true;
    case SD_TYPE_Q8_K: quant_q8_K(src, dst, n); return true;
    default: return false;
    }
}

bool sd_quantize_act_row_avx2(enum sd_type type, const float *src, void *dst, int64_t n) {
    switch (type) {
    case SD_TYPE_Q8_0: quant_q8_01(src, dst, n, false, true); return true;
    case SD_TYPE_Q8_1: quant_q8_01(src, dst, n, true, true); return true;
    default: return false;
    }
}

#else /* no x86 or no GCC-compatible compiler: scalar only */

bool sd_quant_avx2_supported(void) { return false; }

bool sd_vec_dot_tile_avx2(enum sd_type wtype, int64_t n, const void *w, size_t w_stride, int nw, const void *xq,
                          size_t x_stride, int nx, float *y, size_t y_stride) {
    (void)wtype, (void)n, (void)w, (void)w_stride, (void)nw, (void)xq, (void)x_stride, (void)nx, (void)y,
        (void)y_stride;
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
