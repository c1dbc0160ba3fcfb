/* bench/bench_quant.c - micro-benchmark of the dot-product kernels and the
 * matrix product, scalar vs AVX2, on one thread.
 *
 * For each weight type: a 2048 x 640 weight matrix (n_out x n_in; the K
 * formats need n_in to be a multiple of 256, so they run 640 x 2048, the same
 * number of weights), single-row sd_vec_dot over all rows, then sd_matmul
 * with 1, 8 and 32 activation rows. Prints ns per matrix-vector product
 * (per activation row) and the weight bytes streamed per second.
 *
 * Build (not part of CMake; from the repository root):
 *   gcc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -I include -I . base/base.c \
 *       graphs/quant_types.c graphs/quant.c graphs/quant_avx2.c graphs/matmul.c \
 *       bench/bench_quant.c -lm -o /tmp/bench_quant
 *   /tmp/bench_quant [--json out.json] [--quick]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Best time in ns of fn over `reps` repetitions, each run until it has taken
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

static double time_ns(const struct job *j, double min_ms, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        int iters = 0;
        const double t0 = sd_time_ms();
        double t1;
        do {
            run_job(j);
            iters++;
            t1 = sd_time_ms();
        } while (t1 - t0 < min_ms);
        const double ns = (t1 - t0) * 1e6 / iters;
        if (ns < best) best = ns;
    }
    return best;
}

int main(int argc, char **argv) {
    const char *json_path = NULL;
    double min_ms = 100;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) {
            json_path = argv[++i];
        } else if (!strcmp(argv[i], "--quick")) {
            min_ms = 20;
            reps = 2;
        } else {
            fprintf(stderr, "usage: %s [--json out.json] [--quick]\n", argv[0]);
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
    if (js) fprintf(js, "{\"avx2\": %s, \"results\": [\n", sd_quant_avx2_supported() ? "true" : "false");
    printf("one thread; ns per matrix-vector product (per activation row); GB/s = weight bytes / time\n");
    printf("%-5s %-10s %-6s | %12s %7s | %12s %12s %12s\n", "type", "shape", "impl", "vec_dot ns", "GB/s",
           "matmul r=1", "r=8 per row", "r=32 per row");
    bool first = true;
    for (size_t ti = 0; ti < SD_ARRAY_LEN(types); ti++) {
        const enum sd_type t = types[ti];
        const struct sd_type_traits *tr = sd_type_get(t);
        const int64_t n_in = tr->blck_size == 256 ? 2048 : 640, n_out = tr->blck_size == 256 ? 640 : 2048;
        size_t wrb, xrb;
        sd_row_size(t, n_in, &wrb);
        sd_row_size(tr->vec_dot_type, n_in, &xrb);
        uint8_t *w = sd_aligned_alloc(wrb * (size_t)n_out);
        uint8_t *x = sd_aligned_alloc(xrb * 32);
        float *f = malloc(sizeof(float) * (size_t)(n_in * 32));
        float *y = malloc(sizeof(float) * (size_t)(n_out * 32));
        if (!w || !x || !f || !y) return 1;
        for (int64_t o = 0; o < n_out; o++) {
            for (int64_t k = 0; k < n_in; k++) f[k] = frand();
            sd_quantize_row(t, f, w + (size_t)o * wrb, n_in);
        }
        for (int64_t k = 0; k < n_in * 32; k++) f[k] = frand();
        sd_quantize_rows(tr->vec_dot_type, f, 32, n_in, x);
        const enum sd_quant_impl impls[2] = {SD_IMPL_SCALAR, SD_IMPL_AVX2};
        for (int m = 0; m < 2; m++) {
            if (sd_quant_set_impl(impls[m]) != impls[m]) continue;
            const char *iname = impls[m] == SD_IMPL_AVX2 ? "avx2" : "scalar";
            struct job j = {t, w, x, wrb, xrb, n_out, n_in, 1, y, 0};
            /* The scalar kernels are slow; time them more briefly. */
            const double ms = impls[m] == SD_IMPL_SCALAR ? min_ms / 4 : min_ms;
            const double vd = time_ns(&j, ms, reps);
            double mm[3];
            j.mode = 1;
            for (int rc = 0; rc < 3; rc++) {
                j.n_rows = row_counts[rc];
                mm[rc] = time_ns(&j, ms, reps) / row_counts[rc];
            }
            const double gbs = (double)(wrb * (size_t)n_out) / vd;
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
        sd_aligned_free(w);
        sd_aligned_free(x);
        free(f);
        free(y);
    }
    sd_quant_set_impl(SD_IMPL_AUTO);
    if (js) {
        fprintf(js, "\n]}\n");
        fclose(js);
    }
    return 0;
}
