/* bench/bench_packed.c - the packed (fast-order) matrix product and the
 * fast-order attention on one thread, at the row counts a verification
 * pass uses: what each costs at L rows against one row.
 *
 * Matrices: the instruct models' shapes and types (Qwen2.5-Coder-0.5B:
 * q5_0 896 -> 4864 and 896 -> 896, q6_K and q4_K 4864 -> 896 (the down
 * projections alternate), q8_0 head (16,384 of
 * its 151,936 outputs); 1.5B: q4_K 1536 -> 8960, q6_K 8960 -> 1536), random
 * weights quantized by sd_quantize_row, packed as a graph packs them; the
 * matrix stays in the caches between calls, so L=1 measures the kernel's
 * streaming rate from L2/L3, not DRAM. Attention: sd_attn_fast_rows over a
 * shared run of N keys for R = 1 (through sd_attn_fast), 2, 3, 4 and 8 rows
 * (one tile: a ratio to one row under R says the tile pays over R rows
 * attended one by one), 7 query heads of 64 per K/V head, as the 0.5B's,
 * and 6 of 128, as the 1.5B's, each head's K (in key blocks) and V rows together
 * as the cache lays them out; and one row "cold", as decoding meets it:
 * 24 layers' K/V rows in turn (on huge pages, as the cache's), 64 MiB
 * read between them as a pass's weights go through the caches (so the
 * rows come from memory).
 *
 * Times are the best of --reps runs of this thread's CPU time (a run
 * repeats the call for 20 ms at least), so a busy machine slows them less
 * than wall time; the machine's speed still wanders, so compare builds in
 * alternation. The implementation is the machine's best (AVX-512 VNNI,
 * else AVX2), as sessions use it.
 *
 * Build (not part of CMake; from the repository root, after cmake --build build):
 *   gcc -std=c11 -O2 -I include -I . bench/bench_packed.c build/libsdnpu.a -lm -lpthread -o /tmp/bench_packed
 *   /tmp/bench_packed [--reps N] [--attention] [--no-bf16] [--no-gfni] [--no-amx] [--avx2 | --avx-vnni]
 *   [--json out.json]
 * (--attention: the attention table only; --no-bf16: p.V without vdpbf16ps,
 * as on a CPU without AVX512_BF16; --no-gfni: the nibbles unpacked without
 * GFNI, as on Cascade Lake or Zen 3; --no-amx: passes of many rows on the
 * VNNI kernels where AMX would take them; --avx2, --avx-vnni: the kernels of a CPU
 * without AVX-512, with or without AVX-VNNI)
 */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/base.h"
#include "graphs/cpu/attention.h"
#include "graphs/kv.h"
#include "graphs/packed.h"
#include "graphs/quant.h"
#include "graphs/types.h"

static uint64_t g_rng = 88172645463325252ull;

static float frand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

typedef void (*bench_fn)(void *ctx);

/* Best over reps of the mean time of fn in a run of at least 20 ms. */
static double best_ms(bench_fn fn, void *ctx, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        int it = 0;
        const double a = cpu_ms();
        double b;
        do {
            fn(ctx);
            it++;
            b = cpu_ms();
        } while (b - a < 20.0);
        if ((b - a) / it < best) best = (b - a) / it;
    }
    return best;
}

struct mm {
    enum sd_type t;
    int64_t n_out, n_in, L;
    void *wp;
    uint8_t *xq;
    size_t xrb;
    float *y;
};

static void run_mm(void *ctx) {
    struct mm *m = ctx;
    sd_packed_matmul(m->t, m->wp, m->n_out, m->n_in, m->xq, m->xrb, m->L, m->y, (size_t)m->n_out, 0, m->n_out);
}

enum { MAX_L = 64 };
static const int LS[] = {1, 2, 3, 4, 8, 16, 32, 64};
#define N_LS ((int)(sizeof LS / sizeof LS[0]))

/* One matrix at every L: ms, ratio to L=1, G multiply-adds/s. */
static int bench_matrix(enum sd_type t, int64_t n_out, int64_t n_in, const char *name, int reps, FILE *js,
                        bool *first) {
    size_t rb;
    if (!sd_row_size(t, n_in, &rb)) return 1;
    uint8_t *src = malloc(rb * (size_t)n_out);
    float *f = malloc(sizeof(float) * (size_t)n_in);
    const size_t pb = (sd_packed_bytes(t, n_out, n_in) + 63) / 64 * 64, xrb = sd_packed_act_row_bytes(t, n_in);
    struct mm m = {t, n_out, n_in, 1, aligned_alloc(64, pb), aligned_alloc(64, xrb * MAX_L), xrb,
                   aligned_alloc(64, sizeof(float) * (size_t)n_out * MAX_L)};
    if (!src || !f || !m.wp || !m.xq || !m.y) return 1;
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t k = 0; k < n_in; k++) f[k] = frand();
        sd_quantize_row(t, f, src + (size_t)o * rb, n_in);
    }
    sd_pack_weights(t, src, rb, n_out, n_in, m.wp);
    for (int r = 0; r < MAX_L; r++) {
        for (int64_t k = 0; k < n_in; k++) f[k] = 3.0f * frand();
        sd_packed_quantize_act(t, f, m.xq + (size_t)r * xrb, n_in);
    }
    printf("| %s | %.2f |", name, (double)pb / 1e6);
    double t1 = 0;
    for (int i = 0; i < N_LS; i++) {
        m.L = LS[i];
        const double ms = best_ms(run_mm, &m, reps);
        if (i == 0) t1 = ms;
        printf(" %.3f (x%.2f, %.0f G) |", ms, ms / t1, (double)n_out * (double)n_in * LS[i] / ms / 1e6);
        if (js)
            fprintf(js, "%s\n  {\"what\": \"%s\", \"L\": %d, \"ms\": %.5f, \"x_L1\": %.4f}", *first ? "" : ",", name,
                    LS[i], ms, ms / t1);
        *first = false;
    }
    printf("\n");
    fflush(stdout);
    free(src), free(f), free(m.wp), free(m.xq), free(m.y);
    return 0;
}

struct at {
    int R, nh, hd;
    struct sd_attn_row rows[8];
    const int16_t *k; /* K's levels (graphs/kv.h's integer keys) */
    const float *ks;
    const uint16_t *v;
    size_t stride;
};

static void run_at(void *ctx) {
    struct at *a = ctx;
    if (a->R == 0) { /* one row's p.V, the first half of the values: one thread's share where two split it */
        const struct sd_attn_row *u = &a->rows[0];
        sd_attn_fast_pv(a->nh, a->hd, a->v, a->stride, u->slots, u->n, u->scores, 0, a->hd / 2, u->out);
    } else if (a->R == 1)
        sd_attn_fast(a->rows[0].q, a->nh, a->hd, a->k, a->ks, a->v, a->stride, a->rows[0].slots, a->rows[0].n,
                     0.125f, a->rows[0].scores, a->rows[0].out);
    else
        sd_attn_fast_rows(a->rows, a->R, a->rows[0].n, a->nh, a->hd, a->k, a->ks, a->v, a->stride, 0.125f);
}

/* rows K/V rows of a head of hd values (at most 256; rows whole key
 * blocks), as the cache holds them: random V in bf16 (sd_kv_fast_v), random K as integer
 * levels in key blocks (graphs/kv.h) and their scales. */
static void fill_kv(int16_t *k, float *ks, uint16_t *v, size_t rows, int hd) {
    float row[256];
    int16_t lev[256];
    for (size_t s = 0; s < rows; s++) {
        for (int d = 0; d < hd; d++) {
            v[s * (size_t)hd + (size_t)d] = sd_kv_fast_v(frand());
            row[d] = frand();
        }
        ks[s] = sd_kv_quantize_key(row, hd, lev);
        sd_kv_keys_put(k, (int32_t)s, hd, lev);
    }
}

/* R rows over a shared run of n keys (row r sees n + r keys) for NH heads
 * of HD values sharing a K/V head; R = 0: one row's p.V alone, over half
 * of each head's values. */
static double bench_attention(int R, int32_t n, int reps, int NH, int HD) {
    const int KV = HD;
    const int32_t cap = n + 32; /* whole key blocks past the 8 rows' own keys */
    int16_t *k = malloc(sizeof(int16_t) * KV * (size_t)cap);
    uint16_t *v = malloc(sizeof(uint16_t) * KV * (size_t)cap);
    float *ks = malloc(sizeof(float) * (size_t)cap);
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)cap);
    float *q = malloc(sizeof(float) * 8 * NH * HD), *sc = malloc(sizeof(float) * 8 * NH * (size_t)cap),
          *out = malloc(sizeof(float) * 8 * NH * HD);
    fill_kv(k, ks, v, (size_t)cap, HD);
    for (int32_t i = 0; i < cap; i++) slots[i] = i;
    for (int i = 0; i < 8 * NH * HD; i++) q[i] = frand();
    struct at a = {R, NH, HD, {{0}}, k, ks, v, KV};
    for (int i = 0; i < 8 * NH * (int)cap; i++) sc[i] = 1.0f / (float)n;
    for (int r = 0; r < (R > 1 ? R : 1); r++)
        a.rows[r] = (struct sd_attn_row){q + r * NH * HD, slots, n + r, 0, sc + (size_t)r * NH * (size_t)cap,
                                         out + r * NH * HD};
    const double ms = best_ms(run_at, &a, reps);
    free(k), free(ks), free(v), free(slots), free(q), free(sc), free(out);
    return ms;
}

/* One row over n keys of each of COLD_LAYERS layers in turn, a slice of
 * COLD_SWEEP bytes read before each (not timed): the best over reps of
 * the mean ms a layer. */
enum { COLD_LAYERS = 24 };
#define COLD_SWEEP ((size_t)64 << 20)

#define HUGE_PAGE ((size_t)2 << 20)

/* bytes of fresh anonymous memory, 2 MiB-aligned and advised onto huge
 * pages before its first touch, as the cache's (sd_kv_create): from malloc
 * a buffer came back, after an earlier call freed its like, from glibc's
 * heap on the small pages it was first touched in (the heap takes such
 * sizes once its mmap threshold has risen), and the cold figures measured
 * the TLB's misses as much as the reads (six heads of 128 over 4,000 keys:
 * 258-268 us against 166). Free with huge_buffer_free. */
static void *huge_buffer(size_t bytes) {
    const size_t len = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    unsigned char *raw =
        mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    unsigned char *p = (unsigned char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + len + HUGE_PAGE > p + len) munmap(p + len, (size_t)(raw + len + HUGE_PAGE - (p + len)));
    sd_advise_huge_pages(p, len);
    return p;
}

static void huge_buffer_free(void *p, size_t bytes) {
    if (p) munmap(p, (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
}

/* The least share of the cold runs' K and V that the kernel mapped in huge
 * pages (AnonHugePages of their mappings, sd_smaps_bytes), printed
 * under the tables: where it is short, the cold columns are not the
 * cache's case. -1 until measured. */
static double g_cold_huge = -1;

static void note_cold_huge(const void *p, size_t bytes) {
    const long long h = sd_smaps_bytes(p, "AnonHugePages");
    const double share = h < 0 ? 0 : h >= (long long)bytes ? 1.0 : (double)h / (double)bytes;
    if (g_cold_huge < 0 || share < g_cold_huge) g_cold_huge = share;
}

static double bench_attention_cold(int R, int32_t n, int reps, int NH, int HD) {
    const int32_t cap = n + 16; /* whole key blocks: n is a multiple of 16 */
    const size_t kv_bytes = sizeof(int16_t) * (size_t)HD * (size_t)cap * COLD_LAYERS;
    int16_t *k = huge_buffer(kv_bytes);
    uint16_t *v = huge_buffer(kv_bytes);
    float *ks = malloc(sizeof(float) * (size_t)cap * COLD_LAYERS);
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)cap);
    float *q = malloc(sizeof(float) * 8 * (size_t)(NH * HD)),
          *sc = malloc(sizeof(float) * 8 * (size_t)NH * (size_t)cap),
          *out = malloc(sizeof(float) * 8 * (size_t)(NH * HD));
    volatile unsigned char *sweep = malloc(COLD_SWEEP);
    if (!k || !v) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    fill_kv(k, ks, v, (size_t)cap * COLD_LAYERS, HD);
    note_cold_huge(k, kv_bytes);
    note_cold_huge(v, kv_bytes);
    for (int32_t i = 0; i < cap; i++)
        slots[i] = i;
    for (int i = 0; i < 8 * NH * HD; i++)
        q[i] = frand();
    for (size_t i = 0; i < COLD_SWEEP; i += 64)
        sweep[i] = (unsigned char)i;
    const int32_t n0 = n - (R > 1 ? R : 1) + 1; /* row r sees n0 + r keys, the last n */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double ms = 0;
        for (int l = 0; l < COLD_LAYERS; l++) {
            unsigned acc = 0;
            for (size_t i = (size_t)l * (COLD_SWEEP / COLD_LAYERS);
                 i < (size_t)(l + 1) * (COLD_SWEEP / COLD_LAYERS); i += 64)
                acc += sweep[i];
            sweep[0] = (unsigned char)acc;
            const size_t o = (size_t)l * (size_t)cap;
            struct at a = {R, NH, HD, {{0}}, k + o * (size_t)HD, ks + o, v + o * (size_t)HD, (size_t)HD};
            for (int w = 0; w < (R > 1 ? R : 1); w++)
                a.rows[w] = (struct sd_attn_row){
                    q + w * NH * HD,  slots, n0 + w, 0, sc + (size_t)w * (size_t)NH * (size_t)cap,
                    out + w * NH * HD};
            const double t = cpu_ms();
            run_at(&a);
            ms += cpu_ms() - t;
        }
        if (ms / COLD_LAYERS < best) best = ms / COLD_LAYERS;
    }
    huge_buffer_free(k, kv_bytes), huge_buffer_free(v, kv_bytes);
    free(ks), free(slots), free(q), free(sc), free(out), free((void *)sweep);
    return best;
}

int main(int argc, char **argv) {
    int reps = 9;
    bool attention_only = false;
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else if (!strcmp(argv[i], "--attention")) attention_only = true;
        else if (!strcmp(argv[i], "--no-bf16"))
            sd_attn_set_bf16(false);
        else if (!strcmp(argv[i], "--no-gfni"))
            sd_quant_set_gfni(false);
        else if (!strcmp(argv[i], "--no-amx"))
            sd_packed_set_amx(false);
        else if (!strcmp(argv[i], "--avx2") || !strcmp(argv[i], "--avx-vnni")) {
            sd_quant_set_avx512(false);
            if (!strcmp(argv[i], "--avx2")) sd_quant_set_avxvnni(false);
        } else {
            fprintf(
                stderr,
                "usage: %s [--reps N] [--attention] [--no-bf16] [--no-gfni] [--no-amx] [--avx2 | --avx-vnni] "
                "[--json out.json]\n",
                argv[0]);
            return 2;
        }
    }
    FILE *js = json_path ? fopen(json_path, "w") : NULL;
    if (json_path && !js) {
        fprintf(stderr, "cannot write %s\n", json_path);
        return 1;
    }
    printf("packed matrix product, one thread (%s%s%.0d%s): ms per call (x L=1, G multiply-adds/s)\n\n",
           sd_quant_avx512_active() ? (sd_quant_gfni_active() ? "AVX-512 VNNI + GFNI" : "AVX-512 VNNI")
           : sd_quant_avxvnni_active()
               ? (sd_quant_gfni_active() ? "AVX2 + AVX-VNNI + GFNI" : "AVX2 + AVX-VNNI")
               : "AVX2",
           sd_packed_amx_active() ? "; AMX tiles from " : "", sd_packed_amx_active() ? SD_AMX_MIN_ROWS : 0,
           sd_packed_amx_active() ? " rows" : "");
    printf("| matrix | MB |");
    for (int i = 0; i < N_LS; i++) printf(" L=%d |", LS[i]);
    printf("\n|---|---:|");
    for (int i = 0; i < N_LS; i++) printf("---:|");
    printf("\n");
    if (js) fprintf(js, "{\"reps\": %d, \"results\": [", reps);
    bool first = true;
    const struct {
        enum sd_type t;
        int64_t n_out, n_in;
        const char *name;
    } mats[] = {
        {SD_TYPE_Q5_0, 4864, 896, "0.5B q5_0 gate 896 -> 4864"},  {SD_TYPE_Q5_0, 896, 896, "0.5B q5_0 attn 896 -> 896"},
        {SD_TYPE_Q6_K, 896, 4864, "0.5B q6_K down 4864 -> 896"},  {SD_TYPE_Q4_K, 896, 4864, "0.5B q4_K down 4864 -> 896"},
        {SD_TYPE_Q8_0, 16384, 896, "0.5B q8_0 head 896 -> 16384"},
        {SD_TYPE_Q4_K, 8960, 1536, "1.5B q4_K gate 1536 -> 8960"}, {SD_TYPE_Q6_K, 1536, 8960, "1.5B q6_K down 8960 -> 1536"},
    };
    for (size_t i = 0; i < sizeof mats / sizeof mats[0] && !attention_only; i++)
        if (bench_matrix(mats[i].t, mats[i].n_out, mats[i].n_in, mats[i].name, reps, js, &first)) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
    /* The 0.5B's shape (7 heads of 64 a K/V head) and the 1.5B's (6 of 128). */
    static const struct { int nh, hd; } shapes[] = {{7, 64}, {6, 128}};
    for (int sh = 0; sh < 2; sh++) {
        const int NH = shapes[sh].nh, HD = shapes[sh].hd;
        printf(
            "\nfast-order attention, one thread: %d heads of %d sharing a K/V head, us per call\n\n"
            "| keys | 1 row | 1 row, cold | 2 rows | 3 rows | 4 rows | 4 rows, cold | 8 rows | 2 / 1 | 3 / 1 "
            "| 4 / 1 | 4 / 1, cold | 8 / 1 | 1 row's p.V, half the values |\n"
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            NH, HD);
        const int32_t ns[] = {512, 2048, 4000};
        for (int i = 0; i < 3; i++) {
            const double one = bench_attention(1, ns[i], reps, NH, HD),
                         cold = bench_attention_cold(1, ns[i], reps, NH, HD),
                         cold4 = bench_attention_cold(4, ns[i], reps, NH, HD),
                         two = bench_attention(2, ns[i], reps, NH, HD),
                         three = bench_attention(3, ns[i], reps, NH, HD),
                         four = bench_attention(4, ns[i], reps, NH, HD),
                         eight = bench_attention(8, ns[i], reps, NH, HD),
                         half = bench_attention(0, ns[i], reps, NH, HD);
            printf(
                "| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | "
                "%.1f |\n",
                ns[i], one * 1e3, cold * 1e3, two * 1e3, three * 1e3, four * 1e3, cold4 * 1e3, eight * 1e3,
                two / one, three / one, four / one, cold4 / cold, eight / one, half * 1e3);
            if (js)
                fprintf(js,
                        "%s\n  {\"what\": \"attention\", \"heads\": %d, \"hd\": %d, \"keys\": %d, "
                        "\"us_1row\": %.2f, "
                        "\"us_1row_cold\": %.2f, \"us_2rows\": %.2f, \"us_3rows\": %.2f, \"us_4rows\": %.2f, "
                        "\"us_4rows_cold\": %.2f, \"us_8rows\": %.2f, \"us_pv_half\": %.2f}",
                        first ? "" : ",", NH, HD, ns[i], one * 1e3, cold * 1e3, two * 1e3, three * 1e3,
                        four * 1e3, cold4 * 1e3, eight * 1e3, half * 1e3);
            first = false;
        }
    }
    if (g_cold_huge >= 0)
        printf("\nthe cold columns' K and V: at least %.0f%% on huge pages, as the cache's are (below 100%%, "
               "their figures count the TLB's misses too)\n",
               100 * g_cold_huge);
    if (js) {
        if (g_cold_huge >= 0)
            fprintf(js, "%s\n  {\"what\": \"cold_huge_share\", \"share\": %.3f}", first ? "" : ",",
                    g_cold_huge);
        fprintf(js, "\n]}\n");
        fclose(js);
    }
    return 0;
}
