/* graphs/quant_avx2_float.c - the AVX2 tiles of the float weight types
 * (f32, f16, bf16), in the order of the scalar dot_f32/f16/bf16. */
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

/* ------------------------------------------------------ float formats */

/* The order of dot_f32/f16/bf16 in quant_dot.c (ggml's vec_dot as built for
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
TGT_INLINE __m256 bf16_fma8(__m256 a, __m256 b, __m256 acc) {
    return flush_denormal(_mm256_fmadd_ps(a, b, acc));
}

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
            for (int r = 0; r < MX; r++)
                acc[j][i][r] = _mm256_setzero_ps();
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
                    const __m256 a = _mm256_loadu_ps(xr + E * (g0 + j)),
                                 b = _mm256_loadu_ps(xr + E * (g0 + j) + 8);
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
                for (int j = 0; j < JB; j++)
                    xv[j][r] = _mm256_loadu_ps(xr + E * (g0 + j));
            }
#pragma GCC unroll 8
            for (int i = 0; i < MW; i++) {
#pragma GCC unroll 8
                for (int j = 0; j < JB; j++) {
                    const __m256 wv = load8_f(kind, w + (size_t)i * w_stride, k + E * (g0 + j));
#pragma GCC unroll 8
                    for (int r = 0; r < MX; r++)
                        acc[j][i][r] = _mm256_fmadd_ps(wv, xv[j][r], acc[j][i][r]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < JB; j++)
#pragma GCC unroll 8
        for (int i = 0; i < MW; i++)
#pragma GCC unroll 8
            for (int r = 0; r < MX; r++)
                out[i][r][g0 + j] = acc[j][i][r];
}

/* All groups of an MW x MX block, in passes of up to eight chains (at most
 * one bf16 output's four groups, whose pairs of steps are long chains
 * anyway). */
#define DEF_FBLOCK(name, kind, MW, MX)                                                                       \
    TGT static void name(int64_t n64, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,              \
                         __m256 out[F_MW][F_MX][8]) {                                                        \
        const int jb = SD_MIN(F_GROUPS(kind), 8 / ((MW) * (MX)));                                            \
        for (int g0 = 0; g0 < F_GROUPS(kind); g0 += jb)                                                      \
            pass_f(kind, MW, MX, jb, g0, n64, w, ws, x, xs, out);                                            \
    }
#define DEF_FBLOCKS(T, kind)                                                                                 \
    DEF_FBLOCK(T##_11, kind, 1, 1)                                                                           \
    DEF_FBLOCK(T##_12, kind, 1, 2) DEF_FBLOCK(T##_21, kind, 2, 1) DEF_FBLOCK(T##_22, kind, 2, 2)             \
        DEF_FBLOCK(T##_41, kind, 4, 1) DEF_FBLOCK(T##_42, kind, 4, 2)
DEF_FBLOCKS(fb_f32, K_F32)
DEF_FBLOCKS(fb_f16, K_F16)
DEF_FBLOCKS(fb_bf16, K_BF16)

typedef void (*fblock_fn)(int64_t n64, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                          __m256 out[F_MW][F_MX][8]);
/* [kind][MW / 2][MX - 1] for MW in 1, 2, 4 and MX in 1, 2. */
#define FBLOCKS(T)                                                                                           \
    {                                                                                                        \
        {T##_11, T##_12}, {T##_21, T##_22}, { T##_41, T##_42 }                                               \
    }
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
        for (int64_t k = n64; k < n; k++)
            s += (double)(load1_f(kind, w, k) * x[k]);
        return (float)s;
    }
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
    const float f = fold8(_mm256_add_ps(lo, hi));
    if (kind == K_F32) {
        float s = f;
        for (int64_t k = n64; k < n; k++)
            s += load1_f(kind, w, k) * x[k];
        return s;
    }
    double s = f;
    for (int64_t k = n64; k < n; k++)
        s += (double)(load1_f(kind, w, k) * x[k]);
    return (float)s;
}

/* The tile in blocks of up to F_MW weight rows x F_MX activation rows:
 * four weight rows sharing two activation rows' loads ran faster than two
 * sharing four at 8 rows or more (see docs/benchmarks.md). */
TGT_INLINE void tile_f(enum f_kind kind, int64_t n, const uint8_t *w, size_t w_stride, int nw,
                       const uint8_t *x, size_t x_stride, int nx, float *y, size_t y_stride) {
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

/* ------------------------------------------------- per-type entries */

DEF_TILE(sd_avx2_tile_f32, tile_f(K_F32, n, w, ws, nw, x, xs, nx, y, ys))
DEF_TILE(sd_avx2_tile_f16, tile_f(K_F16, n, w, ws, nw, x, xs, nx, y, ys))
DEF_TILE(sd_avx2_tile_bf16, tile_f(K_BF16, n, w, ws, nw, x, xs, nx, y, ys))

#endif
