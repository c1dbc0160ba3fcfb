/* graphs/quant_avx512.c - AVX-512 VNNI kernels for the matrix product of
 * several activation rows (prefill, speculative verification).
 *
 * The build passes no -mavx512*: each function carries a target attribute
 * and graphs/quant.c calls in here only after sd_quant_avx512_supported()
 * said yes (AVX-512 F, BW, VL and VNNI, with the OS saving the state).
 *
 * Every kernel here gives each output the bits of ggml's AVX2 vec_dot for
 * its type (and so of our AVX2 tiles and scalar kernels; graphs/quant.h,
 * "Tiles and reduction order"): the same exact integer sums, scaled and
 * added to the same accumulator lanes with the same fused multiply-adds, in
 * the same order, and folded the same way. What changes is which outputs
 * share a vector:
 *   - q4_0, q5_0, q8_0 (tiles_q0): the lanes are eight activation rows; an
 *     output's eight accumulator lanes become eight vectors. The
 *     activations of an 8-row group are transposed once per call so that a
 *     broadcast weight dword meets dword t of every row in one vpdpbusd.
 *   - q4_K, q6_K (tile_kq): the lanes of the AVX2 tiles, with vpdpbusd and
 *     vpdpwssd doing the work of maddubs and madd.
 * q4_1, q5_1, q5_K and the float types stay with the AVX2 tiles.
 *
 * The vectors are 256 bits, using AVX-512VL for vpdpbusd, the byte masks
 * and 32 registers: on the Zen 4 these were tuned on a 512-bit operation
 * costs two 256-bit ones, and eight-row groups waste fewer lanes on the row
 * counts of speculative verification (5..16). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <string.h>

#include "base/base.h"
#include "quant.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#include <immintrin.h>

#define TGT5 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
/* Fewest activation rows the q4_0/q5_0/q8_0 kernels take: with fewer most
 * of an 8-row group's lanes idle and the AVX2 tiles are faster. */
#define SD_Q0_MIN_ROWS 4

#define TGT5_INLINE \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

bool sd_quant_avx512_supported(void) {
    if (!sd_quant_avx2_supported()) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

/* Longest row (elements) the 32-element path takes; longer rows go to the
 * AVX2 tiles. It bounds the stack buffers below. */
#define MAX_N 4096
/* Packed activations of as many 8-row groups as fit (at least one group of
 * a MAX_N row); weights re-unpack once per such super-group. */
#define XBUF_BYTES (64 * 1024)

/* ------------------------------------------------------------ helpers */

TGT5_INLINE __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

TGT5_INLINE float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Transpose eight rows of eight dwords: out[k] lane r = in[r] dword k. */
TGT5_INLINE void transpose8(const __m256i in[8], __m256i out[8]) {
    const __m256i t0 = _mm256_unpacklo_epi32(in[0], in[1]), t1 = _mm256_unpackhi_epi32(in[0], in[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(in[2], in[3]), t3 = _mm256_unpackhi_epi32(in[2], in[3]);
    const __m256i t4 = _mm256_unpacklo_epi32(in[4], in[5]), t5 = _mm256_unpackhi_epi32(in[4], in[5]);
    const __m256i t6 = _mm256_unpacklo_epi32(in[6], in[7]), t7 = _mm256_unpackhi_epi32(in[6], in[7]);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    out[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    out[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    out[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    out[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    out[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    out[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    out[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    out[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

/* Eight halves, one per row (zero past nr), as floats. */
TGT5_INLINE __m256 halves8(const uint8_t *p, size_t stride, int nr) {
    uint16_t h[8] = {0};
    for (int r = 0; r < nr; r++) memcpy(&h[r], p + (size_t)r * stride, 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

/* ggml's hsum_float_8, lane-wise over eight accumulator vectors (l[t] holds
 * accumulator lane t of eight outputs): ((l0 + l4) + (l2 + l6)) +
 * ((l1 + l5) + (l3 + l7)). */
TGT5_INLINE __m256 fold_lanes(const __m256 l[8]) {
    const __m256 t0 = _mm256_add_ps(l[0], l[4]), t1 = _mm256_add_ps(l[1], l[5]);
    const __m256 t2 = _mm256_add_ps(l[2], l[6]), t3 = _mm256_add_ps(l[3], l[7]);
    return _mm256_add_ps(_mm256_add_ps(t0, t2), _mm256_add_ps(t1, t3));
}

/* ------------------------------------------------------------ formats */

enum kind { K_Q4_0, K_Q5_0, K_Q8_0, K_Q4_K, K_Q6_K };

/* Weight block bytes. */
static size_t wbs_of(enum kind k) {
    static const size_t s[] = {18, 22, 34, 144, 210};
    return s[k];
}

/* ------------------------------------ q4_0, q5_0, q8_0 in ggml's order
 *
 * ggml's AVX2 vec_dot for these types (the AVX2 tiles' pairs_q0) keeps one
 * float vector per output: for block b in order, lane t (of eight) gets
 * acc_t = fma(dw_b * dx_b, (float)S_bt, acc_t), where S_bt is the exact sum
 * of the products of elements 4t..4t+3; then hsum_float_8. Here the lanes
 * are rows instead: eight activation rows share a vector, and each output
 * keeps eight accumulator vectors, one per t. Vector t takes exactly the
 * operations of lane t of ggml's accumulator, row by row, in the same
 * order, so the result is the same bit for bit, and fold_lanes is its fold.
 *
 * The products come from vpdpbusd (unsigned x signed bytes, four products
 * summed per int32 lane): the activations are packed biased to unsigned,
 * u = x + 128, and the weights stay signed with their broadcast dword as
 * the signed operand; the sum starts at corr = -128 * (sum of the dword's
 * four weights), so S = sum(u * w) - 128 * sum(w) = sum(x * w) exactly. */

/* Packed activations of one 8-row group and block: xv[t] lane r = dword t
 * of row r's quants, biased; dx lane r = row r's scale. */
struct xq0 {
    __m256i xv[8];
    __m256 dx;
};

/* One weight row's block, unpacked: q[t] the signed quants of dword t (four
 * bytes), corr[t] = -128 * their sum. */
struct wq0 {
    int32_t q[8];
    int32_t corr[8];
};

TGT5 static void pack_xq0(int64_t nb, const uint8_t *x, size_t x_stride, int nr, struct xq0 *out) {
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *xb = x + (size_t)b * 34;
        __m256i rv[8];
        for (int r = 0; r < 8; r++)
            rv[r] = r < nr ? _mm256_xor_si256(loadu256(xb + (size_t)r * x_stride + 2), bias) : _mm256_setzero_si256();
        transpose8(rv, out[b].xv);
        out[b].dx = halves8(xb, x_stride, nr);
    }
}

TGT5_INLINE __m256i nibbles32(const uint8_t *qs) {
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* One weight row of nb blocks. */
TGT5 static void unpack_wq0(enum kind kind, int64_t nb, const uint8_t *w, struct wq0 *u, float *dw) {
    const size_t wbs = wbs_of(kind);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = w + (size_t)b * wbs;
        __m256i v;
        uint32_t qh;
        switch (kind) {
        case K_Q4_0:
            v = _mm256_sub_epi8(nibbles32(wb + 2), _mm256_set1_epi8(8));
            break;
        case K_Q5_0:
            memcpy(&qh, wb + 2, 4);
            v = nibbles32(wb + 6);
            v = _mm256_sub_epi8(_mm256_mask_add_epi8(v, (__mmask32)qh, v, _mm256_set1_epi8(16)), _mm256_set1_epi8(16));
            break;
        case K_Q8_0:
        default:
            v = loadu256(wb + 2);
            break;
        }
        const __m256i sum = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), v);
        _mm256_storeu_si256((__m256i *)u[b].q, v);
        _mm256_storeu_si256((__m256i *)u[b].corr, _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum, 7)));
        dw[b] = h2f(wb);
    }
}

/* NW weight rows x NG groups of eight activation rows (NW * NG <= 2: eight
 * accumulators each, sixteen in registers). out[i][g] lane r = the dot of
 * weight row i with activation row 8g + r. */
TGT5_INLINE void tile_q0(int64_t nb, const struct wq0 *wu, const float *wd, size_t w_step, const struct xq0 *xp,
                         size_t x_step, int NW, int NG, __m256 out[2][2]) {
    __m256 acc[2][2][8];
#pragma GCC unroll 2
    for (int i = 0; i < NW; i++)
#pragma GCC unroll 2
        for (int g = 0; g < NG; g++)
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++) acc[i][g][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256 d[2][2];
#pragma GCC unroll 2
        for (int i = 0; i < NW; i++) {
            const __m256 dw = _mm256_set1_ps(wd[(size_t)i * w_step + (size_t)b]);
#pragma GCC unroll 2
            for (int g = 0; g < NG; g++) d[i][g] = _mm256_mul_ps(dw, xp[(size_t)g * x_step + (size_t)b].dx);
        }
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            __m256i xv[2];
#pragma GCC unroll 2
            for (int g = 0; g < NG; g++) xv[g] = _mm256_load_si256(&xp[(size_t)g * x_step + (size_t)b].xv[t]);
#pragma GCC unroll 2
            for (int i = 0; i < NW; i++) {
                const struct wq0 *w = &wu[(size_t)i * w_step + (size_t)b];
                const __m256i c = _mm256_set1_epi32(w->corr[t]), q = _mm256_set1_epi32(w->q[t]);
#pragma GCC unroll 2
                for (int g = 0; g < NG; g++) {
                    const __m256i s = _mm256_dpbusd_epi32(c, xv[g], q);
                    acc[i][g][t] = _mm256_fmadd_ps(d[i][g], _mm256_cvtepi32_ps(s), acc[i][g][t]);
                }
            }
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < NW; i++)
#pragma GCC unroll 2
        for (int g = 0; g < NG; g++) out[i][g] = fold_lanes(acc[i][g]);
}

/* Instantiations with constant tile shapes, so that the loops unroll and
 * the accumulators live in registers. */
#define DEFQ0(name, NW_, NG_)                                                                                   \
    TGT5 static void name(int64_t nb, const struct wq0 *wu, const float *wd, size_t w_step, const struct xq0 *xp, \
                          size_t x_step, __m256 out[2][2]) {                                                     \
        tile_q0(nb, wu, wd, w_step, xp, x_step, NW_, NG_, out);                                                  \
    }
DEFQ0(tile_q0_11, 1, 1)
DEFQ0(tile_q0_21, 2, 1)
DEFQ0(tile_q0_12, 1, 2)

/* Write out[i][g] lane r to y[(8g + r) * y_stride + i] for the rows that
 * exist (nr rows from the tile's first group on). */
static void store_tile(__m256 out[2][2], int nw, int ng, int nr, float *y, size_t y_stride) {
    float t[2][2][8];
    memcpy(t, out, sizeof(t));
    for (int g = 0; g < ng; g++) {
        for (int r = 0; r < 8 && 8 * g + r < nr; r++) {
            float *yr = y + (size_t)(8 * g + r) * y_stride;
            for (int i = 0; i < nw; i++) yr[i] = t[i][g][r];
        }
    }
}

/* All nw x nx outputs: activations packed once per pass of as many 8-row
 * groups as XBUF_BYTES holds, each weight row unpacked once per pass and
 * then met by every group of the pass. Two groups per tile where there are
 * two, else two weight rows. */
TGT5 static void tiles_q0(enum kind kind, int64_t nb, const uint8_t *w, size_t w_stride, int64_t nw, const uint8_t *x,
                          size_t x_stride, int64_t nx, float *y, size_t y_stride) {
    _Alignas(64) uint8_t xbuf[XBUF_BYTES];
    _Alignas(64) struct wq0 wbuf[2][MAX_N / 32];
    float wd[2][MAX_N / 32];
    const size_t xgroup = (size_t)nb * sizeof(struct xq0);
    const int64_t groups_per_pass = (int64_t)(sizeof(xbuf) / xgroup);
    const size_t wrow = (size_t)nb * wbs_of(kind);
    for (int64_t r0 = 0; r0 < nx; r0 += 8 * groups_per_pass) {
        const int64_t nr = SD_MIN(nx - r0, 8 * groups_per_pass);
        const int64_t ng = (nr + 7) / 8;
        for (int64_t g = 0; g < ng; g++) {
            pack_xq0(nb, x + (size_t)(r0 + 8 * g) * x_stride, x_stride, (int)SD_MIN(8, nr - 8 * g),
                     (struct xq0 *)(void *)(xbuf + (size_t)g * xgroup));
        }
        const struct xq0 *xp = (const struct xq0 *)(const void *)xbuf;
        const int nwt = ng >= 2 ? 1 : 2;
        for (int64_t i0 = 0; i0 < nw; i0 += nwt) {
            const int cw = (int)SD_MIN(nwt, nw - i0);
            for (int i = 0; i < cw; i++) unpack_wq0(kind, nb, w + (size_t)(i0 + i) * w_stride, wbuf[i], wd[i]);
            /* The next rows are on their way from memory while these compute. */
            for (int64_t i = i0 + nwt; i < SD_MIN(i0 + 2 * nwt, nw); i++) {
                const uint8_t *wr = w + (size_t)i * w_stride;
                for (size_t off = 0; off < wrow; off += 64) _mm_prefetch((const char *)(wr + off), _MM_HINT_T0);
                _mm_prefetch((const char *)(wr + wrow - 1), _MM_HINT_T0);
            }
            float *yt = y + (size_t)r0 * y_stride + (size_t)i0;
            __m256 out[2][2];
            if (cw == 2) {
                tile_q0_21(nb, wbuf[0], wd[0], MAX_N / 32, xp, (size_t)nb, out);
                store_tile(out, 2, 1, (int)nr, yt, y_stride);
                continue;
            }
            for (int64_t g0 = 0; g0 < ng; g0 += 2) {
                const int rows = (int)(nr - 8 * g0);
                if (ng - g0 >= 2) {
                    tile_q0_12(nb, wbuf[0], wd[0], MAX_N / 32, xp + (size_t)g0 * (size_t)nb, (size_t)nb, out);
                    store_tile(out, 1, 2, rows, yt + (size_t)(8 * g0) * y_stride, y_stride);
                } else {
                    tile_q0_11(nb, wbuf[0], wd[0], MAX_N / 32, xp + (size_t)g0 * (size_t)nb, (size_t)nb, out);
                    store_tile(out, 1, 1, rows, yt + (size_t)(8 * g0) * y_stride, y_stride);
                }
            }
        }
    }
}

/* ------------------------------------------------ q4_K and q6_K */

/* q4_K and q6_K follow ggml's AVX2 order (vec_dot_q4_K_q8_K and
 * vec_dot_q6_K_q8_K; tile_k8 in quant_avx2.c and the scalar dot_q4_K and
 * dot_q6_K in quant_dot.c): per output and super-block eight int32 lanes, lane t
 * holding the scaled products of elements 4t..4t+3 of every run of 32,
 * fused-multiply-added with dx * dw into one float vector per output;
 * q4_K's mins go to a four-lane vector the same way. That order has no
 * horizontal step to save, and in the rows-in-lanes layout above it would
 * need a scale product per dword, so these kernels keep the lanes of the
 * AVX2 tiles; all their integer sums are exact, so only which products meet
 * in which lane matters, not the order of the adds.
 *
 * What VNNI changes is the work per run: vpdpbusd gives the lane sums P of
 * four products of a run directly (|P| <= 4 * 63 * 128 < 2^15), the P of two
 * runs are packed as int16 pairs and one vpdpwssd applies both runs' scales
 * and accumulates: three multiplies per two runs where maddubs and madd take
 * four. On the Zen 4 these were tuned on the integer multiplies share two
 * pipes with the float multiplies, which is what bounds these loops. With 32
 * registers an unpacked weight super-block stays in registers while the
 * activation rows of a tile pass by. No row length limit: no buffers. */
#define KTW 4
#define KTX 16

/* One unpacked weight super-block. */
struct kq_block {
    __m256i wq[8]; /* the unsigned quants of elements 32v..32v+31 */
    __m256i sc[4]; /* dword t: the int16 scales of dword t of wq[2k] and of wq[2k + 1] */
    __m256i m6;    /* q6_K: -32 * the 16 scales, against the bsums (the quants' offset) */
    __m256i m4;    /* q4_K: the eight mins as int16, in both halves, against the q8 sums of 32 */
    float dw, dmw;
};

TGT5_INLINE void unpack_kq(enum kind kind, const uint8_t *b, struct kq_block *s) {
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
        /* Run v takes scale 2v for its dwords 0..3, 2v + 1 for 4..7. */
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const int lo = 4 * k | (4 * k + 2) << 16, hi = lo + (1 | 1 << 16);
            s->sc[k] = _mm256_permutexvar_epi16(_mm256_setr_epi32(lo, lo, lo, lo, hi, hi, hi, hi), sc16);
        }
        s->m6 = _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32));
        s->dw = h2f(b + 208);
        return;
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m256i v = loadu256(b + 16 + 32 * c);
        s->wq[2 * c] = _mm256_and_si256(v, m4);
        s->wq[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
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
    const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_cvtsi64_si128((long long)(sc_lo | (uint64_t)sc_hi << 32)));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) s->sc[k] = _mm256_permutexvar_epi16(_mm256_set1_epi32(2 * k | (2 * k + 1) << 16), sc16);
    s->m4 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)(m_lo | (uint64_t)m_hi << 32))));
    s->dw = h2f(b);
    s->dmw = h2f(b + 2);
}

/* nw <= KTW weight rows x nx <= KTX activation rows. */
TGT5_INLINE void tile_kq(enum kind kind, int64_t nb, const uint8_t *w, size_t w_stride, int nw, const uint8_t *x,
                         size_t x_stride, int nx, float *y, size_t y_stride) {
    const size_t wbs = wbs_of(kind), xbs = 292;
    /* q4_K's mins take two activation rows per vector (rows 2p and 2p + 1
     * in the low and high half of accm[i][p]); a missing last row has zero
     * sums and scale and its lanes are not read. */
    __m256 acc[KTW][KTX], accm[KTW][KTX / 2];
    for (int i = 0; i < nw; i++) {
        for (int r = 0; r < nx; r++) acc[i][r] = _mm256_setzero_ps();
        for (int p = 0; p < (nx + 1) / 2; p++) accm[i][p] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        /* Per activation row: d and the bsums (q6_K); per pair of rows the
         * q8 sums of 32 (q4_K; a sum of two bsums reaches 2 * 16 * 127) and
         * -d. */
        const uint8_t *xb = x + (size_t)b * xbs;
        __m256 dx[KTX], ndx2[KTX / 2];
        __m256i bs[KTX], bs2[KTX / 2];
        for (int r = 0; r < nx; r++) {
            const uint8_t *xr = xb + (size_t)r * x_stride;
            float d;
            memcpy(&d, xr, 4);
            dx[r] = _mm256_set1_ps(d);
            bs[r] = loadu256(xr + 4 + 256);
        }
        if (kind == K_Q4_K) {
            for (int p = 0; p < (nx + 1) / 2; p++) {
                const bool two = 2 * p + 1 < nx;
                const __m256i b1 = two ? bs[2 * p + 1] : _mm256_setzero_si256();
                const __m256 d1 = two ? dx[2 * p + 1] : _mm256_setzero_ps();
                const __m256i b0 = bs[2 * p];
                const __m128i s0 = _mm_hadd_epi16(_mm256_castsi256_si128(b0), _mm256_extracti128_si256(b0, 1));
                const __m128i s1 = _mm_hadd_epi16(_mm256_castsi256_si128(b1), _mm256_extracti128_si256(b1, 1));
                bs2[p] = _mm256_inserti128_si256(_mm256_castsi128_si256(s0), s1, 1);
                ndx2[p] = _mm256_xor_ps(_mm256_permute2f128_ps(dx[2 * p], d1, 0x20), _mm256_set1_ps(-0.0f));
            }
        }
        for (int i = 0; i < nw; i++) {
            struct kq_block kb;
            unpack_kq(kind, w + (size_t)i * w_stride + (size_t)b * wbs, &kb);
            const __m256 dw = _mm256_set1_ps(kb.dw);
            for (int r = 0; r < nx; r++) {
                const uint8_t *xq = xb + (size_t)r * x_stride + 4;
                /* Two chains for latency. */
                __m256i s[2];
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    const __m256i p0 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), kb.wq[2 * k], loadu256(xq + 64 * k));
                    const __m256i p1 =
                        _mm256_dpbusd_epi32(_mm256_setzero_si256(), kb.wq[2 * k + 1], loadu256(xq + 64 * k + 32));
                    const __m256i pp = _mm256_blend_epi16(p0, _mm256_slli_epi32(p1, 16), 0xAA);
                    s[k & 1] = k < 2 ? _mm256_madd_epi16(pp, kb.sc[k]) : _mm256_dpwssd_epi32(s[k & 1], pp, kb.sc[k]);
                }
                if (kind == K_Q6_K) s[0] = _mm256_dpwssd_epi32(s[0], bs[r], kb.m6);
                acc[i][r] = _mm256_fmadd_ps(_mm256_mul_ps(dx[r], dw), _mm256_cvtepi32_ps(_mm256_add_epi32(s[0], s[1])),
                                            acc[i][r]);
            }
            if (kind == K_Q4_K) {
                const __m256 dmw = _mm256_set1_ps(kb.dmw);
                for (int p = 0; p < (nx + 1) / 2; p++) {
                    const __m256 m = _mm256_cvtepi32_ps(_mm256_madd_epi16(kb.m4, bs2[p]));
                    accm[i][p] = _mm256_fmadd_ps(_mm256_mul_ps(ndx2[p], dmw), m, accm[i][p]);
                }
            }
        }
    }
    for (int i = 0; i < nw; i++) {
        for (int r = 0; r < nx; r++) {
            /* reduce8, and for q4_K plus (m0 + m2) + (m1 + m3). */
            const __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc[i][r]), _mm256_extractf128_ps(acc[i][r], 1));
            const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
            float v = _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
            if (kind == K_Q4_K) {
                const __m256 mp = accm[i][r / 2];
                const __m128 m = r & 1 ? _mm256_extractf128_ps(mp, 1) : _mm256_castps256_ps128(mp);
                const __m128 um = _mm_add_ps(m, _mm_movehl_ps(m, m));
                v += _mm_cvtss_f32(_mm_add_ss(um, _mm_movehdup_ps(um)));
            }
            y[(size_t)r * y_stride + (size_t)i] = v;
        }
    }
}

/* Weight chunks outside, activation chunks inside, as the AVX2 tiles: a
 * chunk of weight rows stays in L1 while every activation row passes by. */
TGT5_INLINE void tiles_kq(enum kind kind, int64_t nb, const uint8_t *w, size_t w_stride, int64_t nw,
                          const uint8_t *x, size_t x_stride, int64_t nx, float *y, size_t y_stride) {
    for (int64_t i0 = 0; i0 < nw; i0 += KTW) {
        const int cw = (int)SD_MIN(KTW, nw - i0);
        for (int64_t r0 = 0; r0 < nx; r0 += KTX) {
            tile_kq(kind, nb, w + (size_t)i0 * w_stride, w_stride, cw, x + (size_t)r0 * x_stride, x_stride,
                    (int)SD_MIN(KTX, nx - r0), y + (size_t)r0 * y_stride + (size_t)i0, y_stride);
        }
    }
}

TGT5 static void tiles_q4_K(int64_t nb, const uint8_t *w, size_t ws, int64_t nw, const uint8_t *x, size_t xs,
                            int64_t nx, float *y, size_t ys) {
    tiles_kq(K_Q4_K, nb, w, ws, nw, x, xs, nx, y, ys);
}

TGT5 static void tiles_q6_K(int64_t nb, const uint8_t *w, size_t ws, int64_t nw, const uint8_t *x, size_t xs,
                            int64_t nx, float *y, size_t ys) {
    tiles_kq(K_Q6_K, nb, w, ws, nw, x, xs, nx, y, ys);
}

/* ------------------------------------------------------------ driver */

bool sd_vec_dot_tile_avx512(enum sd_type wtype, int64_t n, const void *w, size_t w_stride, int64_t nw, const void *xq,
                            size_t x_stride, int64_t nx, float *y, size_t y_stride) {
    if (n <= 0 || nw <= 0) return false;
    switch (wtype) {
    /* q4_K and q6_K: the tiles of tile_kq, which beat the AVX2 ones from
     * two activation rows on (no lanes to idle there). */
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q6_K:
        if (n % 256 != 0 || nx < 2) return false;
        (wtype == SD_TYPE_Q4_K ? tiles_q4_K : tiles_q6_K)(n / 256, w, w_stride, nw, xq, x_stride, nx, y, y_stride);
        return true;
    /* q4_0, q5_0, q8_0: eight-row groups; below SD_Q0_MIN_ROWS rows most
     * lanes would idle and the AVX2 tiles are faster. */
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q5_0:
    case SD_TYPE_Q8_0:
        if (n > MAX_N || n % 32 != 0 || nx < SD_Q0_MIN_ROWS) return false;
        tiles_q0(wtype == SD_TYPE_Q4_0 ? K_Q4_0 : wtype == SD_TYPE_Q5_0 ? K_Q5_0 : K_Q8_0, n / 32, w, w_stride, nw, xq,
                 x_stride, nx, y, y_stride);
        return true;
    /* q4_1, q5_1, q5_K and the float types: the AVX2 tiles. */
    default: return false;
    }
}

#else /* no x86 or no GCC-compatible compiler */

bool sd_quant_avx512_supported(void) { return false; }

bool sd_vec_dot_tile_avx512(enum sd_type wtype, int64_t n, const void *w, size_t w_stride, int64_t nw, const void *xq,
                            size_t x_stride, int64_t nx, float *y, size_t y_stride) {
    (void)wtype, (void)n, (void)w, (void)w_stride, (void)nw, (void)xq, (void)x_stride, (void)nx, (void)y,
        (void)y_stride;
    return false;
}

#endif
