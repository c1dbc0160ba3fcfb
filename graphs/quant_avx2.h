/*
 * graphs/quant_avx2.h - what the files of the AVX2/FMA/F16C kernels share
 * (quant_avx2.c, the tiles of quant_avx2_q32.c, quant_avx2_k.c and
 * quant_avx2_float.c, the quantizers of quant_avx2_quantize.c): the target
 * attribute, the tile shape, a few inline readers and the documented fold,
 * and the tile kernel of each weight type, which quant_avx2.c dispatches
 * to. Private to graphs/quant_avx2*.c; empty where the AVX2 kernels are not
 * compiled in.
 *
 * The build passes no -mavx2: each function carries the target attribute,
 * and nothing here runs before sd_quant_avx2_supported() said yes. A file
 * that includes this header starts with the fp-contract pragma of
 * quant_avx2.c, before any include, so that the inline functions below are
 * compiled under it too.
 */
#ifndef SD_QUANT_AVX2_H
#define SD_QUANT_AVX2_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "graphs/quant.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGT_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* Tile shape: weight rows x activation rows sharing one unpacking. Eight
 * activation rows amortize the unpacking better than four (see
 * docs/benchmarks.md); weight rows only share the activation scales, so
 * four suffice. */
#define TW 4
#define TX 8

TGT_INLINE float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

TGT_INLINE __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* The documented fold: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
TGT_INLINE float fold8(__m256 v) {
    const __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

/* Each kernel is instantiated three times: for a single dot product, for
 * one activation row (the matrix-vector product of decoding) and for any
 * number of rows. The constants let the compiler drop loops and keep the
 * weights in registers instead of saving them for further rows; the
 * arithmetic per output is the same in all three. */
#define DEF_TILE(name, call)                                                                                 \
    TGT void name(int64_t n, const uint8_t *w, size_t ws, int nw_, const uint8_t *x, size_t xs, int nx_,     \
                  float *y, size_t ys) {                                                                     \
        if (nx_ == 1 && nw_ == 1) {                                                                          \
            const int nw = 1, nx = 1;                                                                        \
            call;                                                                                            \
        } else if (nx_ == 1) {                                                                               \
            const int nw = nw_, nx = 1;                                                                      \
            call;                                                                                            \
        } else {                                                                                             \
            const int nw = nw_, nx = nx_;                                                                    \
            call;                                                                                            \
        }                                                                                                    \
    }

/* The tile kernel of one weight type: nw <= TW weight rows x nx <= TX
 * activation rows, as sd_vec_dot_tile_avx2 hands them out. */
typedef void sd_avx2_tile_fn(int64_t n, const uint8_t *w, size_t ws, int nw, const uint8_t *x, size_t xs,
                             int nx, float *y, size_t ys);
sd_avx2_tile_fn sd_avx2_tile_q4_0, sd_avx2_tile_q4_1, sd_avx2_tile_q5_0, sd_avx2_tile_q5_1, sd_avx2_tile_q8_0;
sd_avx2_tile_fn sd_avx2_tile_q4_K, sd_avx2_tile_q5_K, sd_avx2_tile_q6_K;
sd_avx2_tile_fn sd_avx2_tile_f32, sd_avx2_tile_f16, sd_avx2_tile_bf16;

#endif

#endif /* SD_QUANT_AVX2_H */
