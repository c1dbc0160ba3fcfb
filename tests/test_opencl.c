/* tests/test_opencl.c - the OpenCL backend (graphs/opencl/) against the CPU
 * backend and a float reference: per operation (matmul of every weight type,
 * RMSNorm, residual adds, the FFN gate), then whole static graphs (blocks
 * and the head, L in {1, 5, 32}, padding rows, a tree-masked second batch)
 * on the tiny models of all three families and, when present, the real
 * model; the KV cache the graphs leave behind; graphs prepared on a loader
 * thread while the session's thread runs and prepares others; a session's
 * context resized on the device; bad device indices and weight types
 * without a kernel.
 *
 * Skips (with the reason printed) when the build has no OpenCL or no
 * OpenCL platform/device is installed.
 *
 * Error bounds. The OpenCL kernels keep activations in float, while the CPU
 * backend quantizes them to each weight's vec_dot type (Q8_0/Q8_1/Q8_K, or
 * rounds them to f16/bf16), as ggml does. So the OpenCL results are the
 * float reference up to summation order (relative 1e-6), and the two
 * backends differ by the CPU's activation-quantization noise. The matmul
 * test measures that noise per weight type (CPU vs a double-precision
 * reference: 1e-3 .. 4e-3 relative on random rows) and requires the OpenCL
 * error to be far below it (1e-5; measured ~1e-7). Through a whole model
 * the noise of every projection adds up: on the tiny models (2-6 layers)
 * the backends' x, KV and logits differ by 1e-2 .. 2.2e-2, under
 * BOUND_GRAPH_*. On the real model the test first measures the CPU's noise
 * on real activations (layer 0's Q/K/V; outlier channels make it larger
 * than on random rows) and bounds the graphs by multiples of it. Weights of type F32
 * (the llama model written with weight_types = 1) leave no quantization on
 * either side, so there the backends must agree to float rounding.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/api.h"
#include "graphs/graph.h"
#include "graphs/quant.h"
#include "sample/sampler.h"
#ifdef SD_HAVE_OPENCL
#include "graphs/opencl/opencl.h"
#endif
#include "sdnpu.h"
#include "util_common.h"
#include "util_tiny_model.h"

/* Normalized error ||a - b|| / ||b|| bounds (see the file comment). */
#define BOUND_OP_FLOAT 1e-5     /* an OpenCL op vs the double reference */
#define BOUND_GRAPH_X 3e-2      /* block output x and KV cache, quantized tiny models */
#define BOUND_GRAPH_LOGITS 3e-2 /* head logits, quantized tiny models */
#define BOUND_F32_MODEL 1e-4    /* x, KV and logits with F32 weights and SiLU (no quantization anywhere) */
#define MIN_TOP1_AGREE 0.9      /* real model: rows whose argmax agrees */

enum { N_CTX = 96 };

struct fam {
    const char *arch;
    int f32; /* 1: all weights F32 */
    struct sdnpu_model *mm;
    struct sd_backend *cl; /* NULL when there is no OpenCL */
};

static struct fam FAMS[] = {
    {"llama", 0, NULL, NULL}, {"qwen2", 0, NULL, NULL}, {"gemma3", 0, NULL, NULL}, {"llama", 1, NULL, NULL}};
static struct sd_pool *g_pool;
static char g_skip_reason[SD_ERR_MSG_MAX]; /* non-empty: no OpenCL here */

static struct sdnpu_model *load_path(const char *path) { return sdt_model(path, 2, true); }

static int group_setup(void **state) {
    (void)state;
    struct sd_err err = {0};
    if (sd_pool_create(2, &g_pool, &err)) return -1;
    for (size_t i = 0; i < SD_ARRAY_LEN(FAMS); i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/test_opencl_tiny_%s%s.gguf", SD_BUILD_DIR, FAMS[i].arch,
                 FAMS[i].f32 ? "_f32" : "");
        struct sdt_tiny_opts o = {.arch = FAMS[i].arch, .weight_types = FAMS[i].f32};
        if (sdt_tiny_write(&o, path)) return -1;
        FAMS[i].mm = load_path(path);
        int rc = sd_backend_opencl_create(FAMS[i].mm->m, g_pool, 0, false, &FAMS[i].cl, &err);
        if (rc == SDNPU_ERR_BACKEND || rc == SDNPU_ERR_UNSUPPORTED) {
            snprintf(g_skip_reason, sizeof g_skip_reason, "%s", err.msg);
            FAMS[i].cl = NULL;
        } else if (rc) {
            fprintf(stderr, "opencl backend: %s\n", err.msg);
            return -1;
        }
    }
    if (g_skip_reason[0])
        printf("OpenCL unavailable, its tests skip: %s\n", g_skip_reason);
    else
        printf("OpenCL backend: %s\n", FAMS[0].cl->desc);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    for (size_t i = 0; i < SD_ARRAY_LEN(FAMS); i++) {
        sd_backend_free(FAMS[i].cl);
        sdnpu_model_free(FAMS[i].mm);
    }
    sd_pool_free(g_pool);
    return 0;
}

static void skip_without_opencl(void) {
    if (g_skip_reason[0]) {
        print_message("skipped: %s\n", g_skip_reason);
        skip();
    }
}

static const char *fam_name(const struct fam *f) {
    static char buf[32];
    snprintf(buf, sizeof buf, "%s%s", f->arch, f->f32 ? "-f32" : "");
    return buf;
}

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#ifdef SD_HAVE_OPENCL
static void fill_random(float *x, size_t n, float scale, uint64_t seed) {
    for (size_t i = 0; i < n; i++)
        x[i] = sdt_rand_float(&seed) * scale;
}
#endif

/* ------------------------------------------------------------ devices */

static void test_devices(void **state) {
    (void)state;
    char buf[2048];
    struct sd_err err = {0};
    int rc = sd_opencl_list_devices(buf, sizeof buf, &err);
    if (rc == SDNPU_ERR_UNSUPPORTED) {
        print_message("skipped: %s\n", err.msg);
        skip();
    }
    if (rc == SDNPU_OK) {
        print_message("OpenCL devices:\n%s", buf);
        assert_non_null(strstr(buf, "0: "));
    } else {
        assert_int_equal(rc, SDNPU_ERR_BACKEND);
        assert_true(strlen(err.msg) > 10);
    }
    /* A device index that does not exist: BACKEND, saying so. */
    const int bad[] = {99, -1};
    for (size_t i = 0; i < SD_ARRAY_LEN(bad); i++) {
        struct sd_backend *be = (struct sd_backend *)0x1;
        memset(&err, 0, sizeof err);
        rc = sd_backend_opencl_create(FAMS[0].mm->m, g_pool, bad[i], false, &be, &err);
        assert_int_equal(rc, SDNPU_ERR_BACKEND);
        assert_null(be);
        print_message("device %d: %s\n", bad[i], err.msg);
        if (!g_skip_reason[0]) assert_non_null(strstr(err.msg, "does not exist"));
    }
    /* And through the generic constructor. */
    struct sd_backend *be = NULL;
    rc = sd_backend_create("opencl", 99, SD_KERNELS_FAST, FAMS[0].mm->m, NULL, g_pool, &be, &err);
    assert_int_equal(rc, SDNPU_ERR_BACKEND);
    assert_null(be);
}

/* ------------------------------------------------------------ per op */

#ifdef SD_HAVE_OPENCL
/* One weight: OpenCL and CPU matmul against a double reference on
 * dequantized weights. Returns the CPU's error (its quantization noise). */
static double check_matmul(struct sd_backend *be, const struct sd_weight *w, const char *what, int32_t n_rows,
                           uint64_t seed, const float *x_in) {
    size_t n_in = (size_t)w->n_in, n_out = (size_t)w->n_out, R = (size_t)n_rows;
    float *x = malloc(R * n_in * sizeof(float));
    float *wrow = malloc(n_in * sizeof(float));
    float *ref = malloc(R * n_out * sizeof(float)), *cl = malloc(R * n_out * sizeof(float));
    float *cpu = malloc(R * n_out * sizeof(float));
    if (x_in)
        memcpy(x, x_in, R * n_in * sizeof(float));
    else
        fill_random(x, R * n_in, 1.0f, seed);
    /* The CPU's activation rows, as graphs/cpu/matjobs.c makes them. */
    enum sd_type vt = sd_type_get(w->type)->vec_dot_type;
    size_t xq_row = 0;
    if (w->type == SD_TYPE_F16 || w->type == SD_TYPE_BF16) vt = SD_TYPE_F32;
    assert_true(sd_row_size(vt, (int64_t)n_in, &xq_row));
    unsigned char *xq = malloc(R * xq_row);
    for (size_t r = 0; r < R; r++) {
        const float *xr = x + r * n_in;
        void *dst = xq + r * xq_row;
        if (w->type == SD_TYPE_F16 || w->type == SD_TYPE_BF16) {
            float *y = dst;
            for (size_t i = 0; i < n_in; i++)
                y[i] = w->type == SD_TYPE_F16 ? sd_fp16_to_fp32(sd_fp32_to_fp16(xr[i]))
                                              : sd_bf16_to_fp32(sd_fp32_to_bf16(xr[i]));
        } else {
            assert_true(sd_quantize_row(vt, xr, dst, (int64_t)n_in));
        }
    }
    for (size_t o = 0; o < n_out; o++) {
        const void *row = (const char *)w->data + o * w->row_bytes;
        sd_dequantize_row(w->type, row, wrow, (int64_t)n_in);
        for (size_t r = 0; r < R; r++) {
            double s = 0;
            for (size_t i = 0; i < n_in; i++)
                s += (double)wrow[i] * (double)x[r * n_in + i];
            ref[r * n_out + o] = (float)s;
            cpu[r * n_out + o] = sd_vec_dot(w->type, (int64_t)n_in, row, xq + r * xq_row);
        }
    }
    struct sd_err err = {0};
    int rc = sd_opencl_test_matmul(be, w, x, n_rows, cl, &err);
    if (rc) fail_msg("matmul %s: %s", what, err.msg);
    double e_cl = rel_err(cl, ref, R * n_out), e_cpu = rel_err(cpu, ref, R * n_out),
           e_x = rel_err(cl, cpu, R * n_out);
    print_message("  %-28s %-5s L=%-2d  opencl-vs-ref %.2e  cpu-vs-ref %.2e  opencl-vs-cpu %.2e\n", what,
                  sd_type_name(w->type), n_rows, e_cl, e_cpu, e_x);
    if (!(e_cl < BOUND_OP_FLOAT))
        fail_msg("matmul %s: opencl error %.3g above %.3g", what, e_cl, BOUND_OP_FLOAT);
    /* The backends differ by the CPU's own quantization noise, no more. */
    if (!(e_x < 1.5 * e_cpu + BOUND_OP_FLOAT))
        fail_msg("matmul %s: opencl-vs-cpu %.3g, cpu noise %.3g", what, e_x, e_cpu);
    free(x);
    free(wrow);
    free(ref);
    free(cl);
    free(cpu);
    free(xq);
    return e_cpu;
}
#endif

static void test_matmul_every_type(void **state) {
    (void)state;
    skip_without_opencl();
#ifdef SD_HAVE_OPENCL
    bool seen[SD_TYPE_COUNT] = {0};
    for (size_t f = 0; f < SD_ARRAY_LEN(FAMS); f++) {
        if (strcmp(FAMS[f].arch, "llama") != 0) continue; /* llama (mixed and F32) has every type */
        const struct sd_model *m = FAMS[f].mm->m;
        for (int32_t il = 0; il < 2; il++) {
            const struct sd_layer *Ly = &m->layers[il];
            const struct sd_weight *ws[] = {&Ly->wq,     &Ly->wk,   &Ly->wv,    &Ly->wo,
                                            &Ly->w_gate, &Ly->w_up, &Ly->w_down};
            static const char *names[] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                          "ffn_gate", "ffn_up", "ffn_down"};
            for (size_t i = 0; i < SD_ARRAY_LEN(ws); i++) {
                if (seen[ws[i]->type] && !(il == 0 && i == 6)) continue;
                seen[ws[i]->type] = true;
                char what[64];
                snprintf(what, sizeof what, "%s blk.%d.%s", fam_name(&FAMS[f]), il, names[i]);
                int32_t rows[] = {1, 5, 32};
                for (size_t r = 0; r < SD_ARRAY_LEN(rows); r++)
                    check_matmul(FAMS[f].cl, ws[i], what, rows[r], 1000 + (uint64_t)(il * 10 + (int)i), NULL);
            }
        }
        check_matmul(FAMS[f].cl, &m->output, "output", 5, 7, NULL);
        check_matmul(FAMS[f].cl, &m->tok_embd, "token_embd", 5, 8, NULL);
        seen[m->output.type] = seen[m->tok_embd.type] = true;
    }
    const enum sd_type want[] = {SD_TYPE_F32,  SD_TYPE_F16,  SD_TYPE_BF16, SD_TYPE_Q4_0,
                                 SD_TYPE_Q4_1, SD_TYPE_Q5_0, SD_TYPE_Q5_1, SD_TYPE_Q8_0,
                                 SD_TYPE_Q4_K, SD_TYPE_Q5_K, SD_TYPE_Q6_K};
    for (size_t i = 0; i < SD_ARRAY_LEN(want); i++) {
        if (!seen[want[i]]) fail_msg("type %s was not tested", sd_type_name(want[i]));
        assert_true(sd_opencl_type_supported(want[i]));
    }
#endif
}

#ifdef SD_HAVE_OPENCL
static double gelu_ref(double x) {
    if (x <= -10) return 0;
    if (x >= 10) return x;
    return 0.5 * x * (1 + tanh(0.79788456080286535587989211986876 * x * (1 + 0.044715 * x * x)));
}

static void rmsnorm_ref(const float *x, const float *w, int32_t n, float eps, double *out) {
    double ss = 0;
    for (int32_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    double scale = 1.0 / sqrt(ss / n + eps);
    for (int32_t i = 0; i < n; i++)
        out[i] = x[i] * scale * w[i];
}
#endif

static void test_row_ops(void **state) {
    (void)state;
    skip_without_opencl();
#ifdef SD_HAVE_OPENCL
    for (size_t f = 0; f < 3; f++) {
        const struct sd_model_config *c = &FAMS[f].mm->m->cfg;
        const int32_t R = 5, d = c->d_model, ff = c->n_ff;
        size_t wmax = (size_t)SD_MAX(d, ff) * (size_t)R;
        float *x = malloc(wmax * sizeof(float)), *a = malloc(wmax * sizeof(float));
        float *w = malloc((size_t)d * sizeof(float)), *y = malloc(wmax * sizeof(float)),
              *ref = malloc(wmax * sizeof(float));
        double *t = malloc((size_t)SD_MAX(d, ff) * sizeof(double));
        fill_random(x, wmax, 3.0f, 11);
        fill_random(a, wmax, 2.0f, 12);
        fill_random(w, (size_t)d, 0.2f, 13);
        for (int32_t i = 0; i < d; i++)
            w[i] += 1.0f;
        const enum sd_opencl_test_op ops[] = {SD_CL_OP_RMSNORM, SD_CL_OP_ADD, SD_CL_OP_ADD_NORMED,
                                              SD_CL_OP_ACT_MUL};
        const char *names[] = {"rmsnorm", "add", "add_normed", c->gelu ? "gelu*up" : "silu*up"};
        for (size_t o = 0; o < SD_ARRAY_LEN(ops); o++) {
            int32_t n = ops[o] == SD_CL_OP_ACT_MUL ? ff : d;
            for (int32_t r = 0; r < R; r++) {
                const float *xr = x + (size_t)r * (size_t)n, *ar = a + (size_t)r * (size_t)n;
                float *rr = ref + (size_t)r * (size_t)n;
                switch (ops[o]) {
                case SD_CL_OP_RMSNORM:
                    rmsnorm_ref(xr, w, n, c->norm_eps, t);
                    for (int32_t i = 0; i < n; i++)
                        rr[i] = (float)t[i];
                    break;
                case SD_CL_OP_ADD:
                    for (int32_t i = 0; i < n; i++)
                        rr[i] = (float)((double)xr[i] + ar[i]);
                    break;
                case SD_CL_OP_ADD_NORMED:
                    rmsnorm_ref(ar, w, n, c->norm_eps, t);
                    for (int32_t i = 0; i < n; i++)
                        rr[i] = (float)(xr[i] + t[i]);
                    break;
                case SD_CL_OP_ACT_MUL:
                    for (int32_t i = 0; i < n; i++) {
                        double g = xr[i], act = c->gelu ? gelu_ref(g) : g / (1 + exp(-g));
                        rr[i] = (float)(act * ar[i]);
                    }
                    break;
                }
            }
            struct sd_err err = {0};
            int rc = sd_opencl_test_rowop(FAMS[f].cl, ops[o], x, a, w, R, y, &err);
            if (rc) fail_msg("%s: %s", names[o], err.msg);
            double e = rel_err(y, ref, (size_t)R * (size_t)n);
            print_message("  %-8s %-10s opencl-vs-ref %.2e\n", fam_name(&FAMS[f]), names[o], e);
            if (!(e < BOUND_OP_FLOAT))
                fail_msg("%s %s: error %.3g above %.3g", fam_name(&FAMS[f]), names[o], e, BOUND_OP_FLOAT);
        }
        free(x);
        free(a);
        free(w);
        free(y);
        free(ref);
        free(t);
    }
#endif
}

/* ------------------------------------------------------------ graphs */

/* Graphs of one backend for one L: blocks [0, split) and [split, n_layer)
 * (one block when the model has one layer) and the head. */
struct graphs {
    struct sd_graph b[2];
    int nb;
    struct sd_graph head;
};

/* Prepare a graph and check that the estimate the memory budget uses is
 * what preparing added: the graph's own bytes and any scratch the backend
 * had to add to its share; and that a loader's estimate, which assumes
 * nothing shared, is never less. */
static void prepare_counted(struct sd_backend *be, const struct sd_graph_shape *sh, struct sd_graph *g) {
    struct sd_err err = {0};
    size_t est = be->i->estimate(be, sh, 0), shared = sd_backend_shared_bytes(be);
    assert_true(be->i->estimate(be, sh, SD_PREPARE_LOADER) >= est);
    if (sd_graph_prepare(be, sh, SIZE_MAX, g, &err)) fail_msg("%s: prepare: %s", be->desc, err.msg);
    assert_int_equal(g->prepared_bytes + (sd_backend_shared_bytes(be) - shared), est);
}

static void prepare_graphs(struct sd_backend *be, int32_t L, struct graphs *gs) {
    const struct sd_model *m = be->m;
    int32_t nl = m->cfg.n_layer, split = nl > 1 ? nl / 2 : nl;
    memset(gs, 0, sizeof *gs);
    struct sd_graph_shape sh[2] = {{SD_GRAPH_BLOCK, 0, split, L, N_CTX, NULL, 0},
                                   {SD_GRAPH_BLOCK, split, nl, L, N_CTX, NULL, 0}};
    gs->nb = split < nl ? 2 : 1;
    for (int i = 0; i < gs->nb; i++) prepare_counted(be, &sh[i], &gs->b[i]);
    struct sd_graph_shape hs = {SD_GRAPH_HEAD, 0, 0, L, N_CTX, NULL, 0};
    prepare_counted(be, &hs, &gs->head);
}

static void release_graphs(struct graphs *gs) {
    for (int i = 0; i < gs->nb; i++)
        sd_graph_release(&gs->b[i]);
    sd_graph_release(&gs->head);
}

/* Embed the rows, run the blocks, then the head: x [L][d], logits [L][n_vocab]. */
static void run_graphs(struct graphs *gs, const struct sd_model *m, struct sd_kv_cache *kv,
                       const struct sd_row *rows, int32_t L, int32_t base, float *x, float *logits) {
    sd_embed_rows(m, rows, L, x);
    struct sd_err err = {0};
    for (int i = 0; i < gs->nb; i++)
        if (sd_graph_run(&gs->b[i], kv, rows, base, x, NULL, &err)) fail_msg("run block: %s", err.msg);
    float *xh = malloc((size_t)L * (size_t)m->cfg.d_model * sizeof(float));
    memcpy(xh, x, (size_t)L * (size_t)m->cfg.d_model * sizeof(float));
    if (sd_graph_run(&gs->head, kv, rows, base, xh, logits, &err)) fail_msg("run head: %s", err.msg);
    free(xh);
}

/* Step 1: n1 real rows of a causal chunk at positions 0.., the rest padding.
 * Step 2 (base = n1): a chain of draft rows each seeing the prefix and its
 * in-batch ancestors, the last row padding when L > 2. */
static int32_t make_rows(struct sd_row *rows, int32_t L, int step, int32_t n1, const int32_t *toks) {
    memset(rows, 0, (size_t)L * sizeof *rows);
    int32_t n_real = step == 0 ? (L > 2 ? L - 1 - L / 8 : L) : (L > 2 ? L - 1 : L);
    for (int32_t r = 0; r < L; r++) {
        struct sd_row *w = &rows[r];
        if (r >= n_real) {
            w->token = -1;
            continue;
        }
        if (step == 0) {
            w->token = toks[r];
            w->pos = w->slot = r;
            w->n_prefix = r + 1;
        } else {
            w->token = toks[n1 + r];
            w->pos = w->slot = n1 + r;
            w->n_prefix = n1;
            for (int32_t j = 0; j <= r; j++)
                w->anc[j >> 6] |= 1ull << (j & 63);
        }
    }
    return n_real;
}

/* K and V of slots [0, n_slots) of every layer, as floats: the two caches'
 * snapshots compared layer by layer, K and V apart. */
static double kv_err(const struct sd_kv_cache *a, const struct sd_kv_cache *b, int32_t n_slots) {
    const size_t n = (size_t)n_slots * (size_t)a->kv_dim, bytes = sd_kv_snapshot_bytes(a, n_slots);
    uint16_t *sa = malloc(bytes), *sb = malloc(bytes);
    float *fa = malloc(n * sizeof(float)), *fb = malloc(n * sizeof(float));
    sd_kv_snapshot(a, n_slots, sa);
    sd_kv_snapshot(b, n_slots, sb);
    double worst = 0;
    for (int32_t l = 0; l < a->n_layer; l++) {
        for (int kv = 0; kv < 2; kv++) {
            const uint16_t *pa = sa + (size_t)(2 * l + kv) * n, *pb = sb + (size_t)(2 * l + kv) * n;
            for (size_t i = 0; i < n; i++) {
                fa[i] = sd_fp16_to_fp32(pa[i]);
                fb[i] = sd_fp16_to_fp32(pb[i]);
            }
            double e = rel_err(fa, fb, n);
            if (getenv("SDNPU_TEST_VERBOSE"))
                print_message("    layer %d %s err %.3e\n", l, kv ? "V" : "K", e);
            if (e > worst) worst = e;
        }
    }
    free(sa);
    free(sb);
    free(fa);
    free(fb);
    return worst;
}

static int32_t argmax(const float *v, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* Run both steps on the CPU and on OpenCL and compare. Returns the worst
 * errors; row0 (if not NULL) gets OpenCL's step-1 logits of row 0 (for the
 * batch-invariance check across L). SDNPU_TEST_VERBOSE prints the KV error
 * per layer. */
struct cmp {
    double x, logits, kv;
    int32_t agree, rows;
};

static struct cmp compare_backends(struct sd_backend *cpu, struct sd_backend *cl, int32_t L,
                                   const int32_t *toks, float *row0) {
    const struct sd_model *m = cpu->m;
    const struct sd_model_config *c = &m->cfg;
    size_t xs = (size_t)L * (size_t)c->d_model, ls = (size_t)L * (size_t)c->n_vocab;
    struct graphs gcpu, gcl;
    prepare_graphs(cpu, L, &gcpu);
    prepare_graphs(cl, L, &gcl);
    struct sd_kv_cache kcpu, kcl;
    struct sd_err err = {0};
    assert_int_equal(sd_kv_create(m, N_CTX, sd_backend_kv_keys(cpu), &kcpu, &err), SDNPU_OK);
    assert_int_equal(sd_kv_create(m, N_CTX, sd_backend_kv_keys(cl), &kcl, &err), SDNPU_OK);
    float *xa = malloc(xs * sizeof(float)), *xb = malloc(xs * sizeof(float));
    float *la = malloc(ls * sizeof(float)), *lb = malloc(ls * sizeof(float));
    struct sd_row *rows = calloc((size_t)L, sizeof *rows);
    struct cmp out = {0};
    int32_t n1 = 0, slots = 0;
    for (int step = 0; step < 2; step++) {
        int32_t n_real = make_rows(rows, L, step, n1, toks);
        int32_t base = step == 0 ? 0 : n1;
        run_graphs(&gcpu, m, &kcpu, rows, L, base, xa, la);
        run_graphs(&gcl, m, &kcl, rows, L, base, xb, lb);
        if (step == 0 && row0) memcpy(row0, lb, (size_t)c->n_vocab * sizeof(float));
        /* Errors over the real rows. Padding rows compute on token 0 with
         * a zero attention output, a degenerate input whose values nobody
         * reads; they only have to be finite. */
        double nx = 0, dx = 0, nl = 0, dl = 0;
        for (int32_t r = 0; r < L; r++) {
            const float *ra = la + (size_t)r * (size_t)c->n_vocab, *rb = lb + (size_t)r * (size_t)c->n_vocab;
            const float *xra = xa + (size_t)r * (size_t)c->d_model,
                        *xrb = xb + (size_t)r * (size_t)c->d_model;
            if (rows[r].token < 0) {
                for (int32_t i = 0; i < c->n_vocab; i++)
                    assert_true(isfinite(rb[i]));
                continue;
            }
            for (int32_t i = 0; i < c->d_model; i++) {
                nx += ((double)xrb[i] - xra[i]) * ((double)xrb[i] - xra[i]);
                dx += (double)xra[i] * xra[i];
            }
            for (int32_t i = 0; i < c->n_vocab; i++) {
                nl += ((double)rb[i] - ra[i]) * ((double)rb[i] - ra[i]);
                dl += (double)ra[i] * ra[i];
            }
            out.rows++;
            out.agree += argmax(ra, c->n_vocab) == argmax(rb, c->n_vocab);
        }
        out.x = fmax(out.x, sqrt(nx / dx));
        out.logits = fmax(out.logits, sqrt(nl / dl));
        slots = (step == 0 ? 0 : n1) + n_real;
        if (step == 0) n1 = n_real;
    }
    out.kv = kv_err(&kcl, &kcpu, slots);
    /* Both backends mark the same slots. */
    for (int32_t s = 0; s < N_CTX; s++)
        assert_int_equal(kcl.slot_pos[s], kcpu.slot_pos[s]);
    release_graphs(&gcpu);
    release_graphs(&gcl);
    sd_kv_free(&kcpu);
    sd_kv_free(&kcl);
    free(xa);
    free(xb);
    free(la);
    free(lb);
    free(rows);
    return out;
}

static void test_graphs_tiny(void **state) {
    (void)state;
    skip_without_opencl();
    for (size_t f = 0; f < SD_ARRAY_LEN(FAMS); f++) {
        const struct sd_model *m = FAMS[f].mm->m;
        struct sd_backend *cpu = NULL;
        struct sd_err err = {0};
        assert_int_equal(sd_backend_cpu_create(m, g_pool, SD_KERNELS_GGML, NULL, &cpu, &err), SDNPU_OK);
        int32_t toks[2 * 32];
        uint64_t seed = 31 + f;
        for (size_t i = 0; i < SD_ARRAY_LEN(toks); i++)
            toks[i] = 3 + (int32_t)(sdt_rand_u64(&seed) % (uint64_t)(m->cfg.n_vocab - 3));
        int32_t Ls[] = {1, 5, 32};
        float *row0[3];
        for (size_t li = 0; li < SD_ARRAY_LEN(Ls); li++) {
            row0[li] = malloc((size_t)m->cfg.n_vocab * sizeof(float));
            struct cmp e = compare_backends(cpu, FAMS[f].cl, Ls[li], toks, row0[li]);
            print_message("  %-11s L=%-2d  x %.2e  logits %.2e  kv %.2e  top-1 %d/%d\n", fam_name(&FAMS[f]),
                          Ls[li], e.x, e.logits, e.kv, e.agree, e.rows);
            double bx = FAMS[f].f32 ? BOUND_F32_MODEL : BOUND_GRAPH_X;
            double bl = FAMS[f].f32 ? BOUND_F32_MODEL : BOUND_GRAPH_LOGITS;
            if (!(e.x < bx) || !(e.kv < bx) || !(e.logits < bl))
                fail_msg("%s L=%d: x %.3g kv %.3g (bound %.3g), logits %.3g (bound %.3g)", fam_name(&FAMS[f]),
                         Ls[li], e.x, e.kv, bx, e.logits, bl);
        }
        /* Batch invariance on OpenCL: row 0 (the same token at position 0,
         * seeing only itself) has the same logits at every L. */
        for (size_t li = 1; li < SD_ARRAY_LEN(Ls); li++)
            if (memcmp(row0[0], row0[li], (size_t)m->cfg.n_vocab * sizeof(float)) != 0)
                fail_msg("%s: row 0 logits differ between L=1 and L=%d (err %.3g)", fam_name(&FAMS[f]),
                         Ls[li], rel_err(row0[li], row0[0], (size_t)m->cfg.n_vocab));
        for (size_t li = 0; li < SD_ARRAY_LEN(Ls); li++)
            free(row0[li]);
        sd_backend_free(cpu);
    }
#ifdef SD_HAVE_OPENCL
    struct sd_opencl_stats st;
    sd_opencl_get_stats(FAMS[0].cl, &st);
    print_message("  program cache (llama backend): %d builds (%.0f ms, last %.0f ms), %d reuses\n",
                  st.n_builds, st.build_ms, st.last_build_ms, st.n_reused);
    /* Blocks and head of one L share a program. */
    assert_true(st.n_reused >= 2);
#endif
}

/* Shared weights on OpenCL: blocks of two row counts and their heads read
 * one device buffer per weight, counted once in the backend's shared bytes
 * (each prepare's estimate exact: prepare_counted) and freed with the last
 * graph; and they compute what private buffers do, bit for bit. */
static void test_shared_weights(void **state) {
    (void)state;
    skip_without_opencl();
    for (size_t f = 0; f < SD_ARRAY_LEN(FAMS); f++) {
        const struct sd_model *m = FAMS[f].mm->m;
        struct sd_backend *sh = NULL;
        struct sd_err err = {0};
        assert_int_equal(sd_backend_opencl_create(m, g_pool, 0, true, &sh, &err), SDNPU_OK);
        size_t total = (size_t)m->output.n_out * m->output.row_bytes;
        for (int32_t il = 0; il < m->cfg.n_layer; il++) {
            const struct sd_layer *Ly = &m->layers[il];
            const struct sd_weight *ws[] = {&Ly->wq, &Ly->wk, &Ly->wv, &Ly->wo, &Ly->w_gate, &Ly->w_up, &Ly->w_down};
            for (size_t i = 0; i < SD_ARRAY_LEN(ws); i++) total += (size_t)ws[i]->n_out * ws[i]->row_bytes;
        }
        struct graphs a, b;
        prepare_graphs(sh, 1, &a);
        prepare_graphs(sh, 5, &b);
        assert_int_equal(sd_backend_shared_weight_bytes(sh), total);
        assert_int_equal(sd_backend_shared_weight_bytes(FAMS[f].cl), 0);
        release_graphs(&a);
        assert_int_equal(sd_backend_shared_weight_bytes(sh), total);
        release_graphs(&b);
        assert_int_equal(sd_backend_shared_weight_bytes(sh), 0);
        int32_t toks[2 * 32];
        uint64_t seed = 77 + f;
        for (size_t i = 0; i < SD_ARRAY_LEN(toks); i++)
            toks[i] = 3 + (int32_t)(sdt_rand_u64(&seed) % (uint64_t)(m->cfg.n_vocab - 3));
        struct cmp e = compare_backends(FAMS[f].cl, sh, 5, toks, NULL);
        if (e.x != 0 || e.logits != 0 || e.kv != 0)
            fail_msg("%s: shared weights differ from private ones: x %.3g logits %.3g kv %.3g", fam_name(&FAMS[f]),
                     e.x, e.logits, e.kv);
        sd_backend_free(sh);
    }
}

/* A session's context resized on OpenCL (sdnpu_session_set_n_ctx: a new
 * runtime, its graphs prepared on the device for the new size) continues
 * as a session created that large: the same logits, bit for bit, for 24
 * greedy steps past the old size. */
static void test_resize(void **state) {
    (void)state;
    skip_without_opencl();
    for (size_t f = 0; f < SD_ARRAY_LEN(FAMS); f++) {
        struct sdnpu_model *m = FAMS[f].mm;
        const int32_t nv = sdnpu_model_n_vocab(m);
        struct sdnpu_session_params sp = sdnpu_session_default_params();
        sp.backend = "opencl";
        sp.n_threads = 2;
        struct sdnpu_session *a = NULL, *b = NULL;
        sp.n_ctx = 40;
        assert_int_equal(sdnpu_session_create(m, sp, &a), SDNPU_OK);
        sp.n_ctx = N_CTX;
        assert_int_equal(sdnpu_session_create(m, sp, &b), SDNPU_OK);
        sdnpu_token p[32];
        uint64_t seed = 91 + f;
        p[0] = 1;
        for (int i = 1; i < 32; i++)
            p[i] = 3 + (sdnpu_token)(sdt_rand_u64(&seed) % (uint64_t)(nv - 3));
        assert_int_equal(sdnpu_session_eval(a, p, 32, NULL, 0), SDNPU_OK);
        assert_int_equal(sdnpu_session_eval(b, p, 32, NULL, 0), SDNPU_OK);
        assert_int_equal(sdnpu_session_set_n_ctx(a, N_CTX), SDNPU_OK);
        float *la = malloc((size_t)nv * sizeof *la), *lb = malloc((size_t)nv * sizeof *lb);
        assert_non_null(la);
        assert_non_null(lb);
        sdnpu_token t = p[31];
        for (int i = 0; i < 24; i++) {
            assert_int_equal(sdnpu_session_eval(a, &t, 1, la, (size_t)nv), SDNPU_OK);
            assert_int_equal(sdnpu_session_eval(b, &t, 1, lb, (size_t)nv), SDNPU_OK);
            if (memcmp(la, lb, (size_t)nv * sizeof *la))
                fail_msg("%s: step %d after the resize: logits differ from a session made large",
                         fam_name(&FAMS[f]), i);
            t = argmax(la, nv);
        }
        free(la);
        free(lb);
        sdnpu_session_free(a);
        sdnpu_session_free(b);
    }
}

/* A subset head (calibration's, calib/calib.h) computes the full head's
 * logits at its tokens, on OpenCL as on the cpu: bit for bit against the
 * same backend's full head (each output's sum is its own), and its
 * estimate is what it holds. Each head's greedy tokens (sd_graph_run_argmax:
 * fused on the cpu, a scan of the logits on OpenCL) are sd_argmax of the
 * logits it wrote. */
static void test_subset_head(void **state) {
    (void)state;
    skip_without_opencl();
    const struct sd_model *m = FAMS[2].mm->m;
    const int32_t L = 5, nv = m->cfg.n_vocab, d = m->cfg.d_model;
    const int32_t subset[] = {nv - 1, 3, 17, 0, 42};
    const int32_t ns = (int32_t)SD_ARRAY_LEN(subset);
    struct sd_graph_shape full = {SD_GRAPH_HEAD, 0, 0, L, N_CTX, NULL, 0};
    struct sd_graph_shape part = {SD_GRAPH_HEAD, 0, 0, L, N_CTX, subset, ns};
    float *x = malloc((size_t)L * (size_t)d * sizeof(float)), *xc = malloc((size_t)L * (size_t)d * sizeof(float));
    float *lf = malloc((size_t)L * (size_t)nv * sizeof(float)), *ls = malloc((size_t)L * ns * sizeof(float));
    uint64_t seed = 5;
    for (int32_t i = 0; i < L * d; i++) x[i] = sdt_rand_float(&seed);
    struct sd_err err = {0};
    struct sd_backend *cpu = NULL;
    assert_int_equal(sd_backend_cpu_create(m, g_pool, SD_KERNELS_FAST, NULL, &cpu, &err), SDNPU_OK);
    struct sd_backend *bes[2] = {cpu, FAMS[2].cl};
    for (int b = 0; b < 2; b++) {
        struct sd_graph gf, gs;
        assert_int_equal(sd_graph_prepare(bes[b], &full, SIZE_MAX, &gf, &err), SDNPU_OK);
        assert_int_equal(sd_graph_prepare(bes[b], &part, SIZE_MAX, &gs, &err), SDNPU_OK);
        assert_int_equal(gs.prepared_bytes, bes[b]->i->estimate(bes[b], &part, 0));
        assert_true(gs.prepared_bytes < gf.prepared_bytes);
        assert_null(gs.shape.subset);
        memcpy(xc, x, (size_t)L * (size_t)d * sizeof(float));
        assert_int_equal(sd_graph_run(&gf, NULL, NULL, 0, xc, lf, &err), SDNPU_OK);
        memcpy(xc, x, (size_t)L * (size_t)d * sizeof(float));
        assert_int_equal(sd_graph_run(&gs, NULL, NULL, 0, xc, ls, &err), SDNPU_OK);
        for (int32_t r = 0; r < L; r++)
            for (int32_t j = 0; j < ns; j++)
                if (memcmp(&ls[r * ns + j], &lf[(size_t)r * (size_t)nv + (size_t)subset[j]], sizeof(float)) != 0)
                    fail_msg("%s: row %d token %d: subset %.9g, full %.9g", bes[b]->desc, r, subset[j],
                             (double)ls[r * ns + j], (double)lf[(size_t)r * (size_t)nv + (size_t)subset[j]]);
        int32_t am[5];
        struct sd_graph *heads[2] = {&gf, &gs};
        float *outs[2] = {lf, ls};
        const int32_t widths[2] = {nv, ns};
        for (int h = 0; h < 2; h++) {
            memcpy(xc, x, (size_t)L * (size_t)d * sizeof(float));
            assert_int_equal(sd_graph_run_argmax(heads[h], xc, outs[h], am, true, &err), SDNPU_OK);
            for (int32_t r = 0; r < L; r++)
                assert_int_equal(am[r], sd_argmax(outs[h] + (size_t)r * (size_t)widths[h], widths[h]));
        }
        sd_graph_release(&gf);
        sd_graph_release(&gs);
    }
    sd_backend_free(cpu);
    free(x);
    free(xc);
    free(lf);
    free(ls);
}

/* ------------------------------------------------------------ loader */

/* Progressive graph switching (sched/loader.c) prepares graphs on a loader
 * thread (SD_PREPARE_LOADER) while the session's thread keeps running the
 * backend's other graphs, and may prepare and release graphs itself. */
struct loader_job {
    struct sd_backend *be;
    struct sd_graph_shape shapes[2];
    struct sd_graph g[2];
    int rc;
    struct sd_err err;
    atomic_int done;
};

static void *loader_main(void *arg) {
    struct loader_job *j = arg;
    j->rc = SDNPU_OK;
    for (int i = 0; i < 2 && j->rc == SDNPU_OK; i++)
        j->rc = sd_graph_prepare_on_loader(j->be, &j->shapes[i], SIZE_MAX, &j->g[i], &j->err);
    atomic_store(&j->done, 1);
    return NULL;
}

static void test_loader_prepare(void **state) {
    (void)state;
    skip_without_opencl();
    struct sd_backend *be = FAMS[0].cl;
    const struct sd_model *m = be->m;
    const struct sd_model_config *c = &m->cfg;
    assert_true(be->i->loader_prepare);
    /* L=3 and L=2 are row counts no other test builds, so the loader and
     * the session's thread each compile a program while the other works. */
    enum { L = 3, L_SIDE = 2 };
    const struct sd_graph_shape busy = {SD_GRAPH_BLOCK, 0, c->n_layer, 1, N_CTX, NULL, 0};
    const struct sd_graph_shape want_b = {SD_GRAPH_BLOCK, 0, c->n_layer, L, N_CTX, NULL, 0};
    const struct sd_graph_shape want_h = {SD_GRAPH_HEAD, 0, 0, L, N_CTX, NULL, 0};
    const struct sd_graph_shape side = {SD_GRAPH_HEAD, 0, 0, L_SIDE, N_CTX, NULL, 0};
    struct sd_err err = {0};
    struct sd_graph gb;
    assert_int_equal(sd_graph_prepare(be, &busy, SIZE_MAX, &gb, &err), SDNPU_OK);
    struct sd_kv_cache kv, ka, kb;
    assert_int_equal(sd_kv_create(m, N_CTX, sd_backend_kv_keys(be), &kv, &err), SDNPU_OK);
    assert_int_equal(sd_kv_create(m, N_CTX, sd_backend_kv_keys(be), &ka, &err), SDNPU_OK);
    assert_int_equal(sd_kv_create(m, N_CTX, sd_backend_kv_keys(be), &kb, &err), SDNPU_OK);
    size_t d = (size_t)c->d_model, nv = (size_t)c->n_vocab;
    float *xb = malloc(d * sizeof(float)), *xs = malloc((size_t)L_SIDE * d * sizeof(float));
    float *ls = malloc((size_t)L_SIDE * nv * sizeof(float));
    struct loader_job *j = calloc(1, sizeof *j);
    j->be = be;
    j->shapes[0] = want_b;
    j->shapes[1] = want_h;
    atomic_init(&j->done, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, loader_main, j), 0);
    /* The session's thread keeps computing meanwhile (at least a few runs,
     * then until the loader is done), and once prepares, runs and releases
     * a graph of its own. */
    int runs = 0;
    bool side_done = false;
#ifdef SD_HAVE_OPENCL
    struct sd_opencl_stats st;
#endif
    for (; runs < 4 || !atomic_load(&j->done); runs++) {
        struct sd_row one = {.token = 5 + runs % 7, .pos = 0, .slot = 0, .n_prefix = 1};
        sd_embed_rows(m, &one, 1, xb);
        sd_kv_truncate(&kv, 0);
        if (sd_graph_run(&gb, &kv, &one, 0, xb, NULL, &err)) fail_msg("busy run: %s", err.msg);
        if (!side_done) {
            struct sd_graph gs;
            if (sd_graph_prepare(be, &side, SIZE_MAX, &gs, &err)) fail_msg("side prepare: %s", err.msg);
            for (size_t i = 0; i < (size_t)L_SIDE * d; i++) xs[i] = 0.01f * (float)(i % 97);
            if (sd_graph_run(&gs, NULL, NULL, 0, xs, ls, &err)) fail_msg("side run: %s", err.msg);
            sd_graph_release(&gs);
            side_done = true;
        }
#ifdef SD_HAVE_OPENCL
        sd_opencl_get_stats(be, &st); /* reads what the prepares count */
#endif
        if (runs > 100000) fail_msg("the loader did not finish");
    }
    assert_int_equal(pthread_join(th, NULL), 0);
    if (j->rc) fail_msg("loader prepare: %s", j->err.msg);
    print_message("  %d runs of the L=1 block while the loader prepared block and head of L=%d"
                  " (%.0f + %.0f ms)\n",
                  runs, L, j->g[0].prepare_ms, j->g[1].prepare_ms);
    /* The same shapes prepared on the session's thread: the same bytes, the
     * same outputs bit for bit. */
    struct sd_graph ref[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(sd_graph_prepare(be, &j->shapes[i], SIZE_MAX, &ref[i], &err), SDNPU_OK);
        assert_int_equal(j->g[i].prepared_bytes, ref[i].prepared_bytes);
        assert_int_equal(j->g[i].prepared_bytes, be->i->estimate(be, &j->shapes[i], 0));
    }
    int32_t toks[L];
    for (int32_t r = 0; r < L; r++) toks[r] = 3 + 11 * r;
    struct sd_row rows[L];
    make_rows(rows, L, 0, 0, toks); /* real rows and a padding row */
    float *xa = malloc((size_t)L * d * sizeof(float)), *xl = malloc((size_t)L * d * sizeof(float));
    float *la = malloc((size_t)L * nv * sizeof(float)), *ll = malloc((size_t)L * nv * sizeof(float));
    sd_embed_rows(m, rows, L, xa);
    sd_embed_rows(m, rows, L, xl);
    assert_int_equal(sd_graph_run(&ref[0], &ka, rows, 0, xa, NULL, &err), SDNPU_OK);
    assert_int_equal(sd_graph_run(&j->g[0], &kb, rows, 0, xl, NULL, &err), SDNPU_OK);
    assert_memory_equal(xa, xl, (size_t)L * d * sizeof(float));
    size_t kvn = (size_t)ka.n_layer * (size_t)ka.n_alloc * (size_t)ka.kv_dim * sizeof(uint16_t);
    assert_memory_equal(ka.k, kb.k, kvn);
    assert_memory_equal(ka.v, kb.v, kvn);
    assert_int_equal(sd_graph_run(&ref[1], NULL, NULL, 0, xa, la, &err), SDNPU_OK);
    assert_int_equal(sd_graph_run(&j->g[1], NULL, NULL, 0, xl, ll, &err), SDNPU_OK);
    assert_memory_equal(la, ll, (size_t)L * nv * sizeof(float));
#ifdef SD_HAVE_OPENCL
    sd_opencl_get_stats(be, &st);
    print_message("  program cache (llama backend): %d builds, %d reuses\n", st.n_builds, st.n_reused);
#endif
    for (int i = 0; i < 2; i++) {
        sd_graph_release(&j->g[i]);
        sd_graph_release(&ref[i]);
    }
    sd_graph_release(&gb);
    sd_kv_free(&kv);
    sd_kv_free(&ka);
    sd_kv_free(&kb);
    free(j);
    free(xb);
    free(xs);
    free(ls);
    free(xa);
    free(xl);
    free(la);
    free(ll);
}

/* ------------------------------------------------------------ failures */

static void test_unsupported_type_and_budget(void **state) {
    (void)state;
    skip_without_opencl();
    const struct sd_model *m = FAMS[0].mm->m;
    /* A model whose first projection claims a type the kernels lack. */
    struct sd_model fake = *m;
    struct sd_layer *layers = malloc((size_t)m->cfg.n_layer * sizeof *layers);
    memcpy(layers, m->layers, (size_t)m->cfg.n_layer * sizeof *layers);
    layers[0].wq.type = SD_TYPE_Q2_K;
    fake.layers = layers;
    struct sd_backend *be = NULL;
    struct sd_err err = {0};
    assert_int_equal(sd_backend_opencl_create(&fake, g_pool, 0, false, &be, &err), SDNPU_OK);
    struct sd_graph g;
    struct sd_graph_shape sh = {SD_GRAPH_BLOCK, 0, 1, 5, N_CTX, NULL, 0};
    int rc = sd_graph_prepare(be, &sh, SIZE_MAX, &g, &err);
    print_message("  unsupported type: %s\n", err.msg);
    assert_int_equal(rc, SDNPU_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "q2_K"));
    assert_non_null(strstr(err.msg, "blk.0.attn_q.weight"));
    assert_null(g.impl);
    /* The other layer still prepares and runs on the same backend. */
    struct sd_graph_shape sh1 = {SD_GRAPH_BLOCK, 1, 2, 5, N_CTX, NULL, 0};
    assert_int_equal(sd_graph_prepare(be, &sh1, SIZE_MAX, &g, &err), SDNPU_OK);
    sd_graph_release(&g);
    /* A memory budget below the estimate prepares nothing. */
    rc = sd_graph_prepare(be, &sh1, 4096, &g, &err);
    assert_int_equal(rc, SDNPU_ERR_OOM);
    assert_null(g.impl);
    sd_backend_free(be);
    free(layers);
}

/* ------------------------------------------------------------ real model */

/* The best of 3 runs (after one warm-up) of a block graph of all layers and
 * of the head, for L rows of a causal chunk; and their prepare time. */
static void time_graphs(struct sd_backend *be, int32_t L, const int32_t *toks, double *prep_ms,
                        double *block_ms, double *head_ms) {
    const struct sd_model *m = be->m;
    struct sd_graph_shape bs = {SD_GRAPH_BLOCK, 0, m->cfg.n_layer, L, N_CTX, NULL, 0},
                          hs = {SD_GRAPH_HEAD, 0, 0, L, N_CTX, NULL, 0};
    struct sd_graph gb, gh;
    struct sd_err err = {0};
    struct sd_kv_cache kv;
    assert_int_equal(sd_kv_create(m, N_CTX, sd_backend_kv_keys(be), &kv, &err), SDNPU_OK);
    assert_int_equal(sd_graph_prepare(be, &bs, SIZE_MAX, &gb, &err), SDNPU_OK);
    assert_int_equal(sd_graph_prepare(be, &hs, SIZE_MAX, &gh, &err), SDNPU_OK);
    *prep_ms = gb.prepare_ms + gh.prepare_ms;
    struct sd_row *rows = calloc((size_t)L, sizeof *rows);
    make_rows(rows, L, 0, 0, toks);
    size_t xs = (size_t)L * (size_t)m->cfg.d_model;
    float *x = malloc(xs * sizeof(float)), *x0 = malloc(xs * sizeof(float));
    float *logits = malloc((size_t)L * (size_t)m->cfg.n_vocab * sizeof(float));
    sd_embed_rows(m, rows, L, x0);
    *block_ms = *head_ms = 1e30;
    for (int it = 0; it < 4; it++) {
        memcpy(x, x0, xs * sizeof(float));
        double t0 = sd_time_ms();
        assert_int_equal(sd_graph_run(&gb, &kv, rows, 0, x, NULL, &err), SDNPU_OK);
        double t1 = sd_time_ms();
        assert_int_equal(sd_graph_run(&gh, &kv, rows, 0, x, logits, &err), SDNPU_OK);
        double t2 = sd_time_ms();
        if (it > 0) {
            *block_ms = fmin(*block_ms, t1 - t0);
            *head_ms = fmin(*head_ms, t2 - t1);
        }
    }
    sd_graph_release(&gb);
    sd_graph_release(&gh);
    sd_kv_free(&kv);
    free(rows);
    free(x);
    free(x0);
    free(logits);
}

static void test_real_model(void **state) {
    (void)state;
    skip_without_opencl();
    if (!sdt_file_exists(SD_GEMMA_MODEL) || getenv("SDNPU_TEST_NO_MODEL")) {
        print_message("skipped: no model at %s (or SDNPU_TEST_NO_MODEL set)\n", SD_GEMMA_MODEL);
        skip();
    }
    double t0 = sd_time_ms();
    struct sdnpu_model *mm = load_path(SD_GEMMA_MODEL);
    const struct sd_model *m = mm->m;
    const char *text =
        "Static graphs run fixed shapes on mobile accelerators, so the engine pads every batch "
        "to the graph's length and fills the padding with draft tokens that may be accepted.";
    int32_t toks[64];
    size_t nt = 0;
    assert_int_equal(sdnpu_tokenize(mm, text, strlen(text), SDNPU_TOKENIZE_ADD_SPECIAL, toks, 64, &nt),
                     SDNPU_OK);
    assert_true(nt >= 20);
    /* Two steps of up to 32 rows: repeat the prompt to 64 tokens. */
    for (size_t i = nt; i < 64; i++)
        toks[i] = toks[i % nt];
    struct sd_backend *cpu = NULL, *cl = NULL;
    struct sd_err err = {0};
    assert_int_equal(sd_backend_cpu_create(m, g_pool, SD_KERNELS_GGML, NULL, &cpu, &err), SDNPU_OK);
    assert_int_equal(sd_backend_opencl_create(m, g_pool, 0, false, &cl, &err), SDNPU_OK);
    /* Calibration: the CPU's own activation-quantization noise on this
     * model's real activations (layer 0's Q/K/V of the prompt's normed
     * embeddings), against a double reference; OpenCL must sit on the
     * reference. The graph bounds below are multiples of this noise: it
     * enters at every projection of 18 layers and grows with depth. */
    double noise = 1e-2;
#ifdef SD_HAVE_OPENCL
    {
        enum { R = 16 };
        int32_t d = m->cfg.d_model;
        struct sd_row rr[R];
        memset(rr, 0, sizeof rr);
        for (int r = 0; r < R; r++)
            rr[r].token = toks[r];
        float *x = malloc((size_t)R * (size_t)d * sizeof(float)),
              *h = malloc((size_t)R * (size_t)d * sizeof(float));
        double *t = malloc((size_t)d * sizeof(double));
        sd_embed_rows(m, rr, R, x);
        for (int r = 0; r < R; r++) {
            rmsnorm_ref(x + (size_t)r * (size_t)d, m->layers[0].attn_norm.data, d, m->cfg.norm_eps, t);
            for (int32_t i = 0; i < d; i++)
                h[(size_t)r * (size_t)d + i] = (float)t[i];
        }
        const struct sd_weight *ws[] = {&m->layers[0].wq, &m->layers[0].wk, &m->layers[0].wv};
        const char *names[] = {"real blk.0.attn_q", "real blk.0.attn_k", "real blk.0.attn_v"};
        noise = 0;
        for (int i = 0; i < 3; i++)
            noise = fmax(noise, check_matmul(cl, ws[i], names[i], R, 0, h));
        free(x);
        free(h);
        free(t);
    }
#endif
    /* The logits carry the residual stream's difference through one more
     * norm and the 262,144-row head (measured 4.1x the noise since the CPU
     * rounds q and the attention weights to fp16 as ggml does). */
    const double bx = 4 * noise, bkv = 8 * noise, bl = 6 * noise;
    print_message("  calibration: cpu quantization noise %.2e -> bounds x %.2e, kv %.2e, logits %.2e\n",
                  noise, bx, bkv, bl);
    int32_t Ls[] = {1, 32};
    for (size_t li = 0; li < SD_ARRAY_LEN(Ls); li++) {
        struct cmp e = compare_backends(cpu, cl, Ls[li], toks, NULL);
        print_message("  real model L=%-2d  x %.2e  logits %.2e  kv %.2e  top-1 %d/%d\n", Ls[li], e.x,
                      e.logits, e.kv, e.agree, e.rows);
        if (!(e.x < bx) || !(e.kv < bkv) || !(e.logits < bl))
            fail_msg("real model L=%d: x %.3g (bound %.3g) kv %.3g (bound %.3g), logits %.3g (bound %.3g)",
                     Ls[li], e.x, bx, e.kv, bkv, e.logits, bl);
        if (!((double)e.agree >= MIN_TOP1_AGREE * e.rows))
            fail_msg("real model L=%d: top-1 agrees on %d of %d rows", Ls[li], e.agree, e.rows);
    }
    /* Timings, for the record, with SDNPU_TEST_TIMING set (tests never
     * assert on time): the whole model as one block graph, and the head. */
    for (size_t li = 0; li < SD_ARRAY_LEN(Ls) && getenv("SDNPU_TEST_TIMING"); li++) {
        struct sd_backend *bes[2] = {cpu, cl};
        double tb[2], th[2], tp[2];
        for (int b = 0; b < 2; b++)
            time_graphs(bes[b], Ls[li], toks, &tp[b], &tb[b], &th[b]);
        print_message(
            "  timing L=%-2d  block[0,%d): opencl %.1f ms, cpu %.1f ms;  head: opencl %.1f ms, cpu %.1f ms;"
            "  prepare block+head: opencl %.0f ms, cpu %.0f ms\n",
            Ls[li], m->cfg.n_layer, tb[1], tb[0], th[1], th[0], tp[1], tp[0]);
    }
#ifdef SD_HAVE_OPENCL
    struct sd_opencl_stats st;
    sd_opencl_get_stats(cl, &st);
    print_message("  real model program builds: %d (%.0f ms total), reuses %d\n", st.n_builds, st.build_ms,
                  st.n_reused);
#endif
    print_message("  real model test: %.1f s\n", (sd_time_ms() - t0) / 1000.0);
    sd_backend_free(cl);
    sd_backend_free(cpu);
    sdnpu_model_free(mm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_matmul_every_type),
        cmocka_unit_test(test_row_ops),
        cmocka_unit_test(test_graphs_tiny),
        cmocka_unit_test(test_shared_weights),
        cmocka_unit_test(test_subset_head),
        cmocka_unit_test(test_resize),
        cmocka_unit_test(test_loader_prepare),
        cmocka_unit_test(test_unsupported_type_and_budget),
        cmocka_unit_test(test_real_model),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
