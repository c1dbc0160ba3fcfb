/* bench/bench_quant.c - micro-benchmark of the dot-product kernels and the
 * matrix product, scalar vs AVX2 vs AVX-512 (the batch kernels), on one
 * thread.
 *
 * For each weight type: a 2048 x 640 weight matrix (n_out x n_in; the K
 * formats need n_in to be a multiple of 256, so they run 640 x 2048, the same
 * number of weights), single-row sd_vec_dot over all rows, then sd_matmul
 * with 1, 8 and 32 activation rows. Prints ns per matrix-vector product
 * (per activation row) and the weight bytes streamed per second. Then the
 * batch table: sd_matmul on the default model's matrix shapes at 1..256
 * activation rows, ns per row per output (--batch prints only that).
 *
 * Build (not part of CMake; from the repository root):
 *   gcc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -I include -I . base/base.c \
 *       graphs/quant*.c \
 *       graphs/matmul.c \
 *       bench/bench_quant.c -lm -o /tmp/bench_quant
 *   /tmp/bench_quant [--json out.json] [--quick]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "graphs/matmul.h"
#include "graphs/quant.h"

static uint64_t g_rng = 0x1234567;

static float frand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static volatile float g_sink;

/* Best CPU time in ns of fn over `reps` repetitions, each run until it has taken
 * at least min_ms (so short kernels are timed over many calls). */
struct job {
    enum sd_type t;
    const uint8_t *w, *x;
    size_t wrb, xrb;
    int64_t n_out, n_in, n_rows;
    float *y;
    int mode; /* 0 = vec_dot over all rows, 1 = matmul */
};

static void run_job(const struct job *j) {
    if (j->mode == 0) {
        float acc = 0;
        for (int64_t o = 0; o < j->n_out; o++) acc += sd_vec_dot(j->t, j->n_in, j->w + (size_t)o * j->wrb, j->x);
        g_sink = acc;
    } else {
        sd_matmul(j->t, j->w, j->wrb, j->n_out, j->n_in, j->x, j->xrb, j->n_rows, j->y, 0, j->n_out);
        g_sink = j->y[0];
    }
}

/* This thread's CPU time in ms: on a machine shared with other work, time
 * during which the benchmark was preempted does not count. */
static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static double time_ns(const struct job *j, double min_ms, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        int iters = 0;
        const double t0 = cpu_ms();
        double t1;
        do {
            run_job(j);
            iters++;
            t1 = cpu_ms();
        } while (t1 - t0 < min_ms);
        const double ns = (t1 - t0) * 1e6 / iters;
        if (ns < best) best = ns;
    }
    return best;
}

/* One weight matrix of type t, n_out x n_in, with max_rows activation rows. */
struct mat {
    enum sd_type t;
    int64_t n_out, n_in;
    size_t wrb, xrb;
    uint8_t *w, *x;
    float *y;
};

static bool mat_make(struct mat *m, enum sd_type t, int64_t n_out, int64_t n_in, int64_t max_rows) {
    const struct sd_type_traits *tr = sd_type_get(t);
    m->t = t;
    m->n_out = n_out;
    m->n_in = n_in;
    sd_row_size(t, n_in, &m->wrb);
    sd_row_size(tr->vec_dot_type, n_in, &m->xrb);
    m->w = sd_aligned_alloc(m->wrb * (size_t)n_out);
    m->x = sd_aligned_alloc(m->xrb * (size_t)max_rows);
    m->y = malloc(sizeof(float) * (size_t)(n_out * max_rows));
    float *f = malloc(sizeof(float) * (size_t)n_in);
    if (!m->w || !m->x || !m->y || !f) return false;
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t k = 0; k < n_in; k++) f[k] = frand();
        sd_quantize_row(t, f, m->w + (size_t)o * m->wrb, n_in);
    }
    for (int64_t r = 0; r < max_rows; r++) {
        for (int64_t k = 0; k < n_in; k++) f[k] = frand();
        sd_quantize_row(tr->vec_dot_type, f, m->x + (size_t)r * m->xrb, n_in);
    }
    free(f);
    return true;
}

static void mat_free(struct mat *m) {
    sd_aligned_free(m->w);
    sd_aligned_free(m->x);
    free(m->y);
}

/* Implementations as the benchmark names them: AVX2 with and without the
 * AVX-512 batch kernels. Returns false if this CPU lacks it. */
enum bimpl { B_SCALAR, B_AVX2, B_AVX512 };
static const char *const k_bimpl_name[] = {"scalar", "avx2", "avx512"};

static bool set_bimpl(enum bimpl b) {
    if (b == B_SCALAR) return sd_quant_set_impl(SD_IMPL_SCALAR) == SD_IMPL_SCALAR;
    if (sd_quant_set_impl(SD_IMPL_AVX2) != SD_IMPL_AVX2) return false;
    return sd_quant_set_avx512(b == B_AVX512) == (b == B_AVX512);
}

int main(int argc, char **argv) {
    const char *json_path = NULL;
    double min_ms = 100;
    int reps = 5;
    bool batch_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) {
            json_path = argv[++i];
        } else if (!strcmp(argv[i], "--quick")) {
            min_ms = 20;
            reps = 2;
        } else if (!strcmp(argv[i], "--batch")) {
            batch_only = true;
        } else {
            fprintf(stderr, "usage: %s [--json out.json] [--quick] [--batch]\n", argv[0]);
            return 2;
        }
    }
    const enum sd_type types[] = {SD_TYPE_Q4_0, SD_TYPE_Q4_1, SD_TYPE_Q5_0, SD_TYPE_Q5_1, SD_TYPE_Q8_0, SD_TYPE_Q4_K,
                                  SD_TYPE_Q5_K, SD_TYPE_Q6_K, SD_TYPE_F16, SD_TYPE_BF16, SD_TYPE_F32};
    const int row_counts[] = {1, 8, 32};
    FILE *js = json_path ? fopen(json_path, "w") : NULL;
    if (json_path && !js) {
        fprintf(stderr, "cannot write %s\n", json_path);
        return 1;
    }
    if (js) {
        fprintf(js, "{\"avx2\": %s, \"avx512\": %s, \"results\": [\n", sd_quant_avx2_supported() ? "true" : "false",
                sd_quant_avx512_supported() ? "true" : "false");
    }
    bool first = true;
    if (!batch_only) {
        printf("one thread; ns per matrix-vector product (per activation row); GB/s = weight bytes / time\n");
        printf("%-5s %-10s %-6s | %12s %7s | %12s %12s %12s\n", "type", "shape", "impl", "vec_dot ns", "GB/s",
               "matmul r=1", "r=8 per row", "r=32 per row");
    }
    for (size_t ti = 0; ti < SD_ARRAY_LEN(types) && !batch_only; ti++) {
        const enum sd_type t = types[ti];
        const struct sd_type_traits *tr = sd_type_get(t);
        const int64_t n_in = tr->blck_size == 256 ? 2048 : 640, n_out = tr->blck_size == 256 ? 640 : 2048;
        struct mat mt;
        if (!mat_make(&mt, t, n_out, n_in, 32)) return 1;
        for (int m = 0; m < 3; m++) {
            if (!set_bimpl((enum bimpl)m)) continue;
            const char *iname = k_bimpl_name[m];
            struct job j = {t, mt.w, mt.x, mt.wrb, mt.xrb, n_out, n_in, 1, mt.y, 0};
            /* The scalar kernels are slow; time them more briefly. */
            const double ms = m == B_SCALAR ? min_ms / 4 : min_ms;
            const double vd = time_ns(&j, ms, reps);
            double mm[3];
            j.mode = 1;
            for (int rc = 0; rc < 3; rc++) {
                j.n_rows = row_counts[rc];
                mm[rc] = time_ns(&j, ms, reps) / row_counts[rc];
            }
            const double gbs = (double)(mt.wrb * (size_t)n_out) / vd;
            char shape[32];
            snprintf(shape, sizeof(shape), "%lldx%lld", (long long)n_out, (long long)n_in);
            printf("%-5s %-10s %-6s | %12.0f %7.2f | %12.0f %12.0f %12.0f\n", sd_type_name(t), shape, iname, vd, gbs,
                   mm[0], mm[1], mm[2]);
            if (js) {
                fprintf(js,
                        "%s  {\"type\": \"%s\", \"n_out\": %lld, \"n_in\": %lld, \"impl\": \"%s\", \"vec_dot_ns\": %.0f, "
                        "\"matmul_ns_per_row\": {\"1\": %.0f, \"8\": %.0f, \"32\": %.0f}}",
                        first ? "" : ",\n", sd_type_name(t), (long long)n_out, (long long)n_in, iname, vd, mm[0],
                        mm[1], mm[2]);
                first = false;
            }
        }
        mat_free(&mt);
    }

    /* Batches: the shapes of the default model (Gemma 3 270M), the output
     * projection as a 16384-row slice of its 262144 x 640 q8_0 matrix. ns
     * per row per output, and the per-row cost relative to one row. */
    static const struct {
        enum sd_type t;
        int64_t n_out, n_in;
        const char *what;
    } shapes[] = {
        {SD_TYPE_Q8_0, 16384, 640, "output (slice)"},
        {SD_TYPE_Q5_0, 2048, 640, "ffn_gate/up"},
        {SD_TYPE_Q5_0, 1024, 640, "attn_q"},
        {SD_TYPE_Q4_K, 640, 1024, "attn_output"},
        {SD_TYPE_Q4_K, 640, 2048, "ffn_down"},
        {SD_TYPE_Q6_K, 640, 2048, "ffn_down"},
        {SD_TYPE_Q8_0, 256, 640, "attn_v"},
    };
    const int batch_rows[] = {1, 2, 4, 8, 13, 16, 32, 64, 256};
    printf("\none thread; sd_matmul ns per row per output (ratio: per-row cost / the n_rows=1 cost)\n");
    printf("%-5s %-11s %-15s %-6s |", "type", "shape", "tensor", "impl");
    for (size_t rc = 0; rc < SD_ARRAY_LEN(batch_rows); rc++) printf(" %7s%-3d", "r=", batch_rows[rc]);
    printf("\n");
    for (size_t si = 0; si < SD_ARRAY_LEN(shapes); si++) {
        struct mat mt;
        if (!mat_make(&mt, shapes[si].t, shapes[si].n_out, shapes[si].n_in, 256)) return 1;
        for (int m = 1; m < 3; m++) {
            if (!set_bimpl((enum bimpl)m)) continue;
            char shape[32];
            snprintf(shape, sizeof(shape), "%lldx%lld", (long long)mt.n_out, (long long)mt.n_in);
            printf("%-5s %-11s %-15s %-6s |", sd_type_name(mt.t), shape, shapes[si].what, k_bimpl_name[m]);
            double ns[SD_ARRAY_LEN(batch_rows)];
            for (size_t rc = 0; rc < SD_ARRAY_LEN(batch_rows); rc++) {
                struct job j = {mt.t, mt.w, mt.x, mt.wrb, mt.xrb, mt.n_out, mt.n_in, batch_rows[rc], mt.y, 1};
                ns[rc] = time_ns(&j, min_ms / 2, reps) / (double)batch_rows[rc] / (double)mt.n_out;
                printf(" %6.2f", ns[rc]);
                printf(rc == 0 ? "    " : " %3.0f%%", 100.0 * ns[rc] / ns[0]);
                fflush(stdout);
            }
            printf("\n");
            if (js) {
                fprintf(js, "%s  {\"batch\": true, \"type\": \"%s\", \"n_out\": %lld, \"n_in\": %lld, \"impl\": \"%s\", "
                            "\"ns_per_row_per_output\": {",
                        first ? "" : ",\n", sd_type_name(mt.t), (long long)mt.n_out, (long long)mt.n_in,
                        k_bimpl_name[m]);
                for (size_t rc = 0; rc < SD_ARRAY_LEN(batch_rows); rc++) {
                    fprintf(js, "%s\"%d\": %.4f", rc ? ", " : "", batch_rows[rc], ns[rc]);
                }
                fprintf(js, "}}");
                first = false;
            }
        }
        mat_free(&mt);
    }
    sd_quant_set_impl(SD_IMPL_AUTO);
    sd_quant_set_avx512(true);
    if (js) {
        fprintf(js, "\n]}\n");
        fclose(js);
    }
    return 0;
}
