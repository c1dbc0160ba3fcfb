/* graphs/packed_avx512_gfni.c - the AVX-512 VNNI group kernels of
 * graphs/packed_avx512_kernels.h compiled for CPUs with GFNI (Intel from
 * Ice Lake on, AMD from Zen 4): their nibbles and q5's fifth bits unpacked
 * by vgf2p8affineqb. graphs/packed_avx512.c calls in here only after
 * sd_quant_gfni_active(). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "base/base.h"
#include "packed.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni")))
#define TGT_INLINE                                                                                           \
    static inline                                                                                            \
        __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni")))

#define SD_PK_GF 1
#include "packed_avx512_kernels.h"

sd_pk_group_fn sd_packed_kernel_gfni(enum sd_type t, bool wide) {
    return (unsigned)t < SD_TYPE_COUNT ? k_int[t][wide] : NULL;
}

TGT void sd_packed_unpack_gfni(enum sd_type t, const uint8_t *g, int64_t b0, int64_t b1, uint8_t *u) {
    unpack_blocks(t, g, b0, b1, u);
}

#else

sd_pk_group_fn sd_packed_kernel_gfni(enum sd_type t, bool wide) {
    (void)t, (void)wide;
    return NULL;
}

void sd_packed_unpack_gfni(enum sd_type t, const uint8_t *g, int64_t b0, int64_t b1, uint8_t *u) {
    (void)t, (void)g, (void)b0, (void)b1, (void)u;
}

#endif
