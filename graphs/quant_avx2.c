/* graphs/quant_avx2.c - the AVX2/FMA/F16C kernels: whether this CPU runs
 * them, and the dispatch of a dot-product tile to the kernels of its weight
 * type, the 32-element formats (quant_avx2_q32.c), the K formats
 * (quant_avx2_k.c) or the float types (quant_avx2_float.c). The activation
 * quantizers (q8_0, q8_1, q8_K) are in quant_avx2_quantize.c.
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
#include "quant_avx2.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#include <cpuid.h>

/* __builtin_cpu_supports checks that the OS saves the YMM registers for
 * "avx2"; F16C is read from CPUID directly because not every compiler knows
 * the "f16c" feature name (clang 14/15 do not). */
bool sd_quant_avx2_supported(void) {
    __builtin_cpu_init();
    unsigned a, b, c, d;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* Read from CPUID: clang 14 does not know the "avxvnni" feature name. */
bool sd_quant_avxvnni_supported(void) {
    unsigned a, b, c, d;
    return sd_quant_avx2_supported() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}

/* Read from CPUID too (leaf 7, sub-leaf 0, ECX bit 8): both the AVX-512 and
 * the AVX-VNNI kernels have a GFNI copy. */
bool sd_quant_gfni_supported(void) {
    unsigned a, b, c, d;
    return sd_quant_avx2_supported() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 8));
}

/* ------------------------------------------------------- dispatching */

bool sd_vec_dot_tile_avx2(enum sd_type wtype, int64_t n, const void *w, size_t w_stride, int nw, const void *xq,
                          size_t x_stride, int nx, float *y, size_t y_stride) {
    sd_avx2_tile_fn *f;
    switch (wtype) {
    case SD_TYPE_Q4_0: f = sd_avx2_tile_q4_0; break;
    case SD_TYPE_Q4_1: f = sd_avx2_tile_q4_1; break;
    case SD_TYPE_Q5_0: f = sd_avx2_tile_q5_0; break;
    case SD_TYPE_Q5_1: f = sd_avx2_tile_q5_1; break;
    case SD_TYPE_Q8_0: f = sd_avx2_tile_q8_0; break;
    case SD_TYPE_Q4_K: f = sd_avx2_tile_q4_K; break;
    case SD_TYPE_Q5_K: f = sd_avx2_tile_q5_K; break;
    case SD_TYPE_Q6_K: f = sd_avx2_tile_q6_K; break;
    case SD_TYPE_F32: f = sd_avx2_tile_f32; break;
    case SD_TYPE_F16: f = sd_avx2_tile_f16; break;
    case SD_TYPE_BF16: f = sd_avx2_tile_bf16; break;
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

#else /* no x86 or no GCC-compatible compiler: scalar only */

bool sd_quant_avx2_supported(void) { return false; }

bool sd_quant_avxvnni_supported(void) { return false; }

bool sd_quant_gfni_supported(void) { return false; }

bool sd_vec_dot_tile_avx2(enum sd_type wtype, int64_t n, const void *w, size_t w_stride, int nw, const void *xq,
                          size_t x_stride, int nx, float *y, size_t y_stride) {
    (void)wtype, (void)n, (void)w, (void)w_stride, (void)nw, (void)xq, (void)x_stride, (void)nx, (void)y,
        (void)y_stride;
    return false;
}

#endif
