/* graphs/cpu/attn_bf16.c - whether the fast order's p.V runs on vdpbf16ps
 * or on the fused multiply-adds that give its bits (graphs/cpu/attention.h,
 * sd_attn_bf16_active): where the CPU has AVX512_BF16, both timed at the
 * first ask, since which is faster differs by CPU (Zen 4 runs vdpbf16ps at
 * twice their rate, Emerald Rapids at half); either gives the same bits. */
#include "graphs/cpu/attn_internal.h"

#include <stdatomic.h>

#ifdef SD_X86
#define TGT5B __attribute__((target("avx512f,avx512vl,avx512bw,avx512bf16,avx2,fma,f16c")))
#endif

/* -1 until first asked, then 0 or 1 (atomic: threads of a pass read it). */
static atomic_int g_bf16 = -1;

static bool bf16_supported(void) {
#ifdef SD_X86
    return sd_quant_avx512_supported() && __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

#ifdef SD_X86
/* Sixteen chains of vdpbf16ps (bf16), or of the fused multiply-adds p.V
 * takes without it, as its kernels keep sixteen accumulators: multiply-adds
 * a nanosecond (32 a vdpbf16ps, 16 a fused multiply-add). Asked only where
 * the CPU has AVX512_BF16. */
enum { RATE_CHAINS = 16, RATE_ITERS = 4096 };
TGT5B static double pv_rate(bool bf16) {
    volatile float seed = 0.5f; /* read and written: the loops stay */
    const __m512 a = _mm512_set1_ps(seed), b = _mm512_set1_ps(1e-3f);
    const __m512bh ah = _mm512_cvtne2ps_pbh(a, a), bh = _mm512_cvtne2ps_pbh(b, b);
    __m512 acc[RATE_CHAINS];
    for (int c = 0; c < RATE_CHAINS; c++)
        acc[c] = _mm512_set1_ps((float)c);
    const double t0 = sd_time_ms();
    if (bf16) {
        for (int it = 0; it < RATE_ITERS; it++)
#pragma GCC unroll 16
            for (int c = 0; c < RATE_CHAINS; c++)
                acc[c] = _mm512_dpbf16_ps(acc[c], ah, bh);
    } else {
        for (int it = 0; it < RATE_ITERS; it++)
#pragma GCC unroll 16
            for (int c = 0; c < RATE_CHAINS; c++)
                acc[c] = _mm512_fmadd_ps(a, b, acc[c]);
    }
    const double ms = sd_time_ms() - t0;
    for (int c = 1; c < RATE_CHAINS; c++)
        acc[0] = _mm512_add_ps(acc[0], acc[c]);
    seed = _mm512_reduce_add_ps(acc[0]) > 0 ? 0.5f : 0.25f;
    return (bf16 ? 32.0 : 16.0) * RATE_CHAINS * RATE_ITERS / (ms * 1e6);
}
#endif

#ifdef SD_X86
/* Whether vdpbf16ps did more multiply-adds a second than the fused
 * multiply-adds that give its bits in one window of a millisecond: the best
 * of rounds of each, alternating. A core's first 512-bit fused
 * multiply-adds run slower for a while: measured cold, best of three
 * rounds, they once came out at a fifth of their rate (16 against 80-96
 * multiply-adds a ns) in some forty processes here, and p.V took the
 * slower path. */
static bool bf16_faster(void) {
    double bf = 0, fm = 0;
    for (const double t0 = sd_time_ms(); sd_time_ms() - t0 < 1.0;)
        bf = SD_MAX(bf, pv_rate(true)), fm = SD_MAX(fm, pv_rate(false));
    return bf > fm;
}
#endif

/* Whether p.V should run on vdpbf16ps: two windows of bf16_faster in a row
 * agreeing (at most five). Zen 4 runs it at twice the fused multiply-adds'
 * rate; Emerald Rapids (a KVM guest, stop 60) at half, where the fused
 * multiply-adds made a one-row attention after 2,048 keys 28% cheaper
 * (76 -> 55 us) and an 8-row one 27%. One window alone chose wrong in 16
 * of 2,000 processes on the Zen 4 EPYC (stop 85): vdpbf16ps at 11-48
 * multiply-adds a ns in every round of the window, the fused ones at 59,
 * and the one-row attention then ran 25-35% slower for the whole process.
 * Either path gives the same bits, so the choice is speed alone. */
static bool bf16_pays(void) {
#ifdef SD_X86
    bool last = bf16_faster();
    for (int w = 1; w < 5; w++) {
        const bool now = bf16_faster();
        if (now == last) break;
        last = now;
    }
    return last;
#else
    return false;
#endif
}

bool sd_attn_bf16_supported(void) { return bf16_supported() && sd_quant_avx512_active(); }

bool sd_attn_set_bf16(bool on) {
    atomic_store_explicit(&g_bf16, on && bf16_supported() ? 1 : 0, memory_order_relaxed);
    return sd_attn_bf16_active();
}

bool sd_attn_bf16_active(void) {
    int v = atomic_load_explicit(&g_bf16, memory_order_relaxed);
    if (v < 0) {
        v = bf16_supported() && bf16_pays() ? 1 : 0; /* whatever kernels run now: they may change */
        atomic_store_explicit(&g_bf16, v, memory_order_relaxed);
    }
    return v == 1 && sd_quant_avx512_active();
}

bool sd_attn_pv_scales(enum sd_attn_impl im) { return im == SD_ATTN_AVX512 && sd_attn_bf16_active(); }
