/* graphs/packed_avx2_gfni.c - the AVX-VNNI group kernels of
 * graphs/packed_avx2_kernels.h compiled for CPUs with GFNI too (Intel's
 * client cores from Alder Lake on): a high nibble is one vgf2p8affineqb
 * where a shift and a mask were two, and q5's fifth bits become bytes of 16
 * in two operations where four were. graphs/packed_avx2.c calls in here
 * only after sd_quant_gfni_active() with AVX-VNNI active. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "base/base.h"
#include "packed.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#define TGT __attribute__((target("avx2,fma,f16c,gfni")))
#define TGT_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c,gfni")))

#define SD_PK_GF 1
#include "packed_avx2_kernels.h"

TGT bool sd_packed_int_group_avx2_gfni(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq,
                                       size_t xs, int64_t n_rows, float *acc) {
    return int_group(true, t, g, n_in, xq, xs, n_rows, acc);
}

#else

bool sd_packed_int_group_avx2_gfni(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq,
                                   size_t xs, int64_t n_rows, float *acc) {
    (void)t, (void)g, (void)n_in, (void)xq, (void)xs, (void)n_rows, (void)acc;
    return false;
}

#endif
