/* cli/roofline.c - this machine's limits, measured in the benchmark's own
 * run: read bandwidth with n threads (each streaming its share of a buffer
 * far larger than the caches) and the int8 multiply-add peak (independent
 * vpdpbusd chains on every thread, or where the CPU has no AVX-512 VNNI
 * the AVX2 kernels' vpmaddubsw + vpmaddwd step). A pass's achieved bytes/s and
 * multiply-adds/s are then shown as shares of these, which is the only
 * comparison that survives this machine's CPU changing between sessions. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define RL_X86 1
#endif

#define RL_BUF_BYTES ((size_t)768 << 20) /* well past any L3 here */

struct rl_job {
    const uint8_t *p;
    size_t bytes;
    long iters;
    bool vnni; /* the vpdpbusd loop, else the AVX2 kernels' step */
    uint64_t sink;
    pthread_barrier_t *bar;
    double t0, t1;
};

#ifdef RL_X86
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t bytes) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 128 <= bytes; i += 128) {
        a = _mm256_xor_si256(a, _mm256_load_si256((const __m256i *)(p + i)));
        b = _mm256_xor_si256(b, _mm256_load_si256((const __m256i *)(p + i + 32)));
        c = _mm256_xor_si256(c, _mm256_load_si256((const __m256i *)(p + i + 64)));
        d = _mm256_xor_si256(d, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}

/* Sixteen independent chains hide vpdpbusd's latency; 1,024 multiply-adds
 * an iteration. Emerald Rapids retires two a cycle (Zen 4 one), so twelve
 * chains hold the peak only while the latency is at most six cycles; a
 * loop of twelve as GCC scheduled it outside this file reached 320 of the
 * 383-401 G a core that sixteen reach there. The inner loop must be
 * unrolled so that the chains live in registers: left as a loop, GCC keeps
 * acc[] in memory and the loop times a load, a vpdpbusd and a store per
 * step (half this CPU's peak, which is what this benchmark reported
 * before). */
enum { VNNI_CHAINS = 16 };
__attribute__((target("avx512f,avx512vnni"))) static uint64_t vnni_loop(long iters) {
    __m512i acc[VNNI_CHAINS];
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
    for (int i = 0; i < VNNI_CHAINS; i++)
        acc[i] = _mm512_set1_epi32(i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
        for (int i = 0; i < VNNI_CHAINS; i++)
            acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    __m512i s = acc[0];
    for (int i = 1; i < VNNI_CHAINS; i++)
        s = _mm512_add_epi32(s, acc[i]);
    /* The lanes wrap, as vpdpbusd's sums do: summed as unsigned, never as
     * _mm512_reduce_add_epi32's int, whose overflow is undefined (UBSan
     * stopped `bench graphs` on it where a fast core ran long enough for
     * the lanes to wrap). */
    uint32_t lane[16], sum = 0;
    _mm512_storeu_si512(lane, s);
    for (int i = 0; i < 16; i++)
        sum += lane[i];
    return sum;
}

/* Where there is no VNNI, the int8 peak the AVX2 kernels can reach: their
 * step is vpmaddubsw, vpmaddwd against ones and vpaddd, 32 multiply-adds
 * (graphs/packed_avx2.c). Four chains in named registers (as an array GCC
 * keeps them on the stack), each with its own input that an empty asm
 * marks as changed so that nothing is hoisted; 128 multiply-adds an
 * iteration. */
#define RL_STEP(acc, a)                                                                                   \
    do {                                                                                                  \
        __asm__ volatile("" : "+x"(a));                                                                   \
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));                  \
    } while (0)
__attribute__((target("avx2"))) static uint64_t avx2_loop(long iters) {
    const __m256i b = _mm256_set1_epi8(-5), ones = _mm256_set1_epi16(1);
    __m256i a0 = _mm256_set1_epi8(3), a1 = _mm256_set1_epi8(4), a2 = _mm256_set1_epi8(5), a3 = _mm256_set1_epi8(6);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
    for (long it = 0; it < iters; it++) {
        RL_STEP(c0, a0);
        RL_STEP(c1, a1);
        RL_STEP(c2, a2);
        RL_STEP(c3, a3);
    }
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3));
    return (uint64_t)_mm256_extract_epi64(s, 0) ^ (uint64_t)_mm256_extract_epi64(s, 3);
}
#undef RL_STEP
#endif

static void *bw_thread(void *arg) {
    struct rl_job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = sd_time_ms();
#ifdef RL_X86
    j->sink = read_avx2(j->p, j->bytes);
#else
    uint64_t s = 0;
    for (size_t i = 0; i < j->bytes; i += 8) s ^= *(const uint64_t *)(j->p + i);
    j->sink = s;
#endif
    j->t1 = sd_time_ms();
    return NULL;
}

static void *int8_thread(void *arg) {
    struct rl_job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = sd_time_ms();
#ifdef RL_X86
    j->sink = j->vnni ? vnni_loop(j->iters) : avx2_loop(j->iters);
#endif
    j->t1 = sd_time_ms();
    return NULL;
}

/* Seconds from the first thread's start to the last one's end. */
static double run_threads(int n, void *(*fn)(void *), struct rl_job *jobs) {
    pthread_t th[64];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        jobs[i].bar = &bar;
        pthread_create(&th[i], NULL, fn, &jobs[i]);
    }
    double t0 = 1e300, t1 = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        t0 = SD_MIN(t0, jobs[i].t0);
        t1 = SD_MAX(t1, jobs[i].t1);
    }
    pthread_barrier_destroy(&bar);
    return (t1 - t0) / 1e3;
}

/* The process's peak resident memory (getrusage's, /proc's VmHWM) set
 * back to what it holds now, so that a caller's peak is its own and not
 * the read buffer's (Linux: clear_refs' 5); false where it cannot be. */
static bool reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    const bool put = fputs("5", f) >= 0;
    return fclose(f) == 0 && put;
}

int cli_roofline(int n_threads, struct cli_roofline *out) {
    memset(out, 0, sizeof *out);
    if (n_threads < 1 || n_threads > 64) return -1;
    uint8_t *buf = sd_aligned_alloc(RL_BUF_BYTES);
    if (!buf) return -1;
    memset(buf, 1, RL_BUF_BYTES); /* touch every page before timing */
    struct rl_job jobs[64];
    const size_t share = RL_BUF_BYTES / (size_t)n_threads / 128 * 128;
    for (int rep = 0; rep < 3; rep++) {
        for (int i = 0; i < n_threads; i++) jobs[i] = (struct rl_job){.p = buf + (size_t)i * share, .bytes = share};
        const double s = run_threads(n_threads, bw_thread, jobs);
        out->read_gb_s = SD_MAX(out->read_gb_s, (double)share * n_threads / s / 1e9);
    }
    sd_aligned_free(buf);
    out->rss_reset = reset_peak_rss();
#ifdef RL_X86
    __builtin_cpu_init();
    const bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
    if (vnni || __builtin_cpu_supports("avx2")) {
        const long iters = vnni ? 4000000 : 12000000;
        const double macs = vnni ? 64.0 * VNNI_CHAINS : 128.0;
        out->int8_how = vnni ? "vpdpbusd" : "vpmaddubsw+vpmaddwd";
        for (int rep = 0; rep < 3; rep++) {
            for (int i = 0; i < n_threads; i++) jobs[i] = (struct rl_job){.iters = iters, .vnni = vnni};
            const double s = run_threads(n_threads, int8_thread, jobs);
            out->int8_gmac_s = SD_MAX(out->int8_gmac_s, (double)iters * macs * n_threads / s / 1e9);
        }
    }
#endif
    return 0;
}
