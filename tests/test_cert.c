/* tests/test_cert.c - the certified argmax of a q8_0 or q6_K head
 * (graphs/cert.h), each of these for both:
 *   - the bound: on random heads and activations of wide range, in every
 *     kernel implementation, each exact logit (the packed head kernel's)
 *     lies within ||x~|| c_j of the copy's;
 *   - the scan's bounds, and its refusal of what is not finite (an
 *     untrusted file's scales give infinite margins);
 *   - a cpu head graph over a store holding the certificate gives the
 *     argmax the whole head gives, bit for bit, at 1 to 4 rows: on heads
 *     whose winning rows were copied before and after themselves (exact
 *     ties: the first index wins) and copied with one value changed (near
 *     ties the copy cannot order); and, for a top-k sampler, each row's k
 *     best logits and the penalized tokens' exactly, the rest exact or
 *     -infinity.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "engine/api.h"
#include "graphs/cert.h"
#include "graphs/graph.h"
#include "graphs/packed.h"
#include "graphs/weights.h"
#include "util_common.h"
#include "util_tiny_model.h"

/* The head types that have a certificate. */
static const enum sd_type head_types[] = {SD_TYPE_Q8_0, SD_TYPE_Q6_K};

static size_t row_of(enum sd_type t, int64_t n_in) {
    size_t b = 0;
    assert_true(sd_row_size(t, n_in, &b));
    return b;
}

/* n_out rows of type t of random values whose magnitude varies by row. */
static uint8_t *random_head(enum sd_type t, int64_t n_out, int64_t n_in, uint64_t seed) {
    uint8_t *w = malloc(row_of(t, n_in) * (size_t)n_out);
    float *f = malloc(sizeof(float) * (size_t)n_in);
    assert_non_null(w);
    assert_non_null(f);
    uint64_t st = seed;
    for (int64_t o = 0; o < n_out; o++) {
        const float s = powf(10.0f, sdt_rand_float(&st));
        for (int64_t i = 0; i < n_in; i++)
            f[i] = s * sdt_rand_float(&st);
        assert_true(sd_quantize_row(t, f, w + (size_t)o * row_of(t, n_in), n_in));
    }
    free(f);
    return w;
}

/* The packed head and its certificate. */
struct head {
    enum sd_type t;
    int64_t n_out, n_in;
    uint8_t *w, *wp, *cert;
};

static struct head make_head(enum sd_type t, uint8_t *w, int64_t n_out, int64_t n_in) {
    struct head h = {t, n_out, n_in, w, NULL, NULL};
    h.wp = sd_aligned_alloc(sd_packed_bytes(t, n_out, n_in));
    h.cert = sd_aligned_alloc(sd_cert_bytes(t, n_out, n_in));
    assert_non_null(h.wp);
    assert_non_null(h.cert);
    sd_pack_weights(t, w, row_of(t, n_in), n_out, n_in, h.wp);
    const int64_t groups = (n_out + 15) / 16;
    void *scratch = malloc(sd_cert_scratch_bytes(t, n_in));
    assert_non_null(scratch);
    /* two ranges, as two threads would build them */
    sd_cert_build(t, w, row_of(t, n_in), n_out, n_in, h.cert, 0, groups / 2, scratch);
    sd_cert_build(t, w, row_of(t, n_in), n_out, n_in, h.cert, groups / 2, groups, scratch);
    free(scratch);
    return h;
}

static void free_head(struct head *h) {
    free(h->w);
    sd_aligned_free(h->wp);
    sd_aligned_free(h->cert);
}

/* One activation row: random, of magnitude 10^e, or all zero. */
static void activation(float *x, int64_t n, float e, uint64_t *st) {
    for (int64_t i = 0; i < n; i++)
        x[i] = e < -30 ? 0.0f : powf(10.0f, e) * sdt_rand_float(st);
}

/* Every exact logit within the bound of the copy's, in every
 * implementation; and the bound leaves out more than 1 / keep_out of a
 * random head's outputs. */
static void check_bound(enum sd_type t, int64_t n_out, int64_t n_in, uint64_t seed, int64_t keep_out) {
    const float mags[] = {0.0f, -3.0f, 2.0f, -20.0f, 15.0f, -100.0f};
    {
        struct head h = make_head(t, random_head(t, n_out, n_in, seed), n_out, n_in);
        const float *c = sd_cert_margins(t, h.cert, n_out, n_in);
        const size_t xrb = sd_packed_act_row_bytes(t, n_in);
        uint8_t *xq = sd_aligned_alloc(xrb);
        float *x = malloc(sizeof(float) * (size_t)n_in), *e = malloc(sizeof(float) * (size_t)n_out),
              *a = malloc(sizeof(float) * (size_t)n_out),
              *gmax = malloc(sizeof(float) * (size_t)(n_out / 16 + 1));
        uint64_t st = 5;
        for (enum sdt_impl im = SDT_SCALAR; im <= SDT_AVX512_GFNI; im++) {
            if (!sdt_use_impl(im)) continue;
            for (size_t k = 0; k < SD_ARRAY_LEN(mags); k++) {
                activation(x, n_in, mags[k], &st);
                sd_packed_quantize_act(t, x, xq, n_in);
                sd_packed_matmul(t, h.wp, n_out, n_in, xq, xrb, 1, e, (size_t)n_out, 0, n_out);
                sd_cert_matmul(t, h.cert, n_out, n_in, xq, xrb, 1, a, (size_t)n_out, 0, n_out);
                const float xn = sd_cert_act_norm(t, xq, n_in);
                assert_true(isfinite(xn));
                int64_t out = 0;
                for (int64_t j = 0; j < n_out; j++) {
                    assert_true(fabs((double)e[j] - (double)a[j]) <= (double)xn * c[j] + 1e-30);
                    assert_true(c[j] > 0.0f);
                }
                float best = -INFINITY;
                assert_true(sd_cert_scan(a, c, xn, n_out, &best, gmax, NULL));
                for (int64_t j = 0; j < n_out; j++)
                    out += e[j] < best; /* certainly not the argmax */
                if (mags[k] > -30) assert_true(out > n_out / keep_out);
            }
        }
        sdt_use_auto();
        free(x), free(e), free(a), free(gmax);
        sd_aligned_free(xq);
        free_head(&h);
    }
}

static void test_bound(void **state) {
    (void)state;
    check_bound(SD_TYPE_Q8_0, 16 * 9 + 5, 256, 11, 2);
    check_bound(SD_TYPE_Q8_0, 16 * 20, 896, 12, 2);
    check_bound(SD_TYPE_Q6_K, 16 * 9 + 5, 256, 13, 2);
    /* Uniform random rows of 1,536: their logits spread as 1 / sqrt(n) of
     * ||w|| ||x||, q4_K's error (6-7% of ||w||) does not; out of 320 the
     * bound left out 151-285 here. A real head's winner stands further
     * out (docs/benchmarks.md, "A certificate for the 1.5B's head"). */
    check_bound(SD_TYPE_Q6_K, 16 * 20, 1536, 14, 3);
}

/* The scan's bounds by hand, and what is not finite refused, in each
 * implementation (a vector a group, and the scalar loop). */
static void check_scan(void) {
    float a[20], c[20], gmax[2];
    for (int j = 0; j < 20; j++)
        a[j] = (float)j, c[j] = 0.25f;
    float best = -INFINITY;
    assert_true(sd_cert_scan(a, c, 2.0f, 20, &best, gmax, NULL)); /* margins 0.5 */
    assert_true(best == 18.5f);
    assert_true(gmax[0] == 15.5f && gmax[1] == 19.5f);
    best = 100.0f; /* a better lower bound from elsewhere stays */
    assert_true(sd_cert_scan(a, c, 2.0f, 20, &best, gmax, NULL) && best == 100.0f);
    a[7] = NAN;
    assert_false(sd_cert_scan(a, c, 2.0f, 20, &best, gmax, NULL));
    a[7] = 7.0f, c[3] = INFINITY;
    assert_false(sd_cert_scan(a, c, 2.0f, 20, &best, gmax, NULL));
    c[3] = 0.25f;
    assert_false(sd_cert_scan(a, c, INFINITY, 20, &best, gmax, NULL));
    a[19] = 3.3e38f; /* its upper bound overflows */
    assert_false(sd_cert_scan(a, c, 1e38f, 20, &best, gmax, NULL));
    a[19] = NAN; /* past n: never read */
    best = -INFINITY;
    assert_true(sd_cert_scan(a, c, 2.0f, 19, &best, gmax, NULL) && gmax[1] == 18.5f);
}

static void test_scan(void **state) {
    (void)state;
    for (enum sdt_impl im = SDT_SCALAR; im <= SDT_AVX512_GFNI; im++)
        if (sdt_use_impl(im)) check_scan();
    sdt_use_auto();
}

/* A row whose fp16 scale is infinite (an untrusted file) gets an infinite
 * margin; the others keep theirs; types and widths without a copy have
 * none. */
static void test_untrusted_scale(void **state) {
    (void)state;
    const int64_t n_out = 32;
    for (size_t k = 0; k < SD_ARRAY_LEN(head_types); k++) {
        const enum sd_type t = head_types[k];
        const int64_t n_in = t == SD_TYPE_Q6_K ? 512 : 64;
        uint8_t *w = random_head(t, n_out, n_in, 3);
        const uint16_t inf = 0x7C00;
        /* row 5, second block's scale: q8_0's first 2 bytes, q6_K's last 2 of 210 */
        const size_t at =
            t == SD_TYPE_Q6_K ? sizeof(struct sd_block_q6_K) + offsetof(struct sd_block_q6_K, d) : 34;
        memcpy(w + 5 * row_of(t, n_in) + at, &inf, 2);
        struct head h = make_head(t, w, n_out, n_in);
        const float *c = sd_cert_margins(t, h.cert, n_out, n_in);
        for (int64_t j = 0; j < n_out; j++)
            assert_true(j == 5 ? isinf(c[j]) : isfinite(c[j]));
        free_head(&h);
    }
    assert_int_equal(sd_cert_bytes(SD_TYPE_Q4_K, 100, 256), 0);
    assert_int_equal(sd_cert_bytes(SD_TYPE_Q8_0, 100, 48), 0);
    assert_true(sd_cert_bytes(SD_TYPE_Q6_K, 100, 768) > 0);
    assert_false(sd_cert_supported(SD_TYPE_Q6_K, 128));
    assert_false(sd_cert_supported(SD_TYPE_Q5_0, 256));
}

/* ------------------------------------------------------- through a graph */

/* The tiny Gemma model (its output the tied q8_0 embedding) with the
 * output replaced by w of type t, a store in head mode `head` and a cpu
 * backend. */
struct rig {
    struct sdnpu_model *m;
    struct sd_model mm;
    struct sd_wstore *ws;
    struct sd_pool *pool;
    struct sd_backend *be;
};

/* r in place: the store and the backend keep &r->mm. */
static void rig_open(struct rig *r, struct sdnpu_model *m, enum sd_type t, const uint8_t *w,
                     enum sd_head_mode head) {
    struct sd_err e = {0};
    *r = (struct rig){.m = m, .mm = *m->m};
    r->mm.output.data = w;
    r->mm.output.type = t;
    r->mm.output.row_bytes = row_of(t, r->mm.cfg.d_model);
    r->mm.file_mapped = false; /* w is ours: packing must not give its pages back */
    assert_int_equal(sd_wstore_create(&r->mm, head, &r->ws, &e), SDNPU_OK);
    assert_int_equal(sd_wstore_certified(r->ws), head == SD_HEAD_CERTIFIED);
    assert_int_equal(sd_pool_create(2, &r->pool, &e), SDNPU_OK);
    assert_int_equal(sd_backend_cpu_create(&r->mm, r->pool, SD_KERNELS_FAST, r->ws, &r->be, &e), SDNPU_OK);
}

static void rig_close(struct rig *r) {
    sd_backend_free(r->be);
    sd_pool_free(r->pool);
    sd_wstore_free(r->ws);
}

/* Heads of 1 .. MAX_L rows: every certified size and the first exact one. */
enum { N_X = 24, MAX_L = SD_CERT_MAX_ROWS + 1 };

/* The greedy argmax of rows x [N_X][d] through heads of 1..MAX_L rows: whole
 * (keep_logits) into exact, and as greedy runs take it into greedy. Where
 * certified, a greedy head holds the certificate's scratch (prepared bytes
 * beyond the exact head's). */
static void run_heads(struct rig *r, const float *x, int32_t *exact, int32_t *greedy, size_t *bytes1) {
    struct sd_err e = {0};
    const size_t d = (size_t)r->mm.cfg.d_model, nv = (size_t)r->mm.cfg.n_vocab;
    float *xb = malloc(sizeof(float) * d * MAX_L), *logits = malloc(sizeof(float) * nv * MAX_L);
    for (int32_t L = 1; L <= MAX_L; L++) {
        const struct sd_graph_shape s = {SD_GRAPH_HEAD, 0, 0, L, 64, NULL, 0};
        struct sd_graph g;
        assert_int_equal(sd_graph_prepare(r->be, &s, SIZE_MAX, &g, &e), SDNPU_OK);
        if (L == 1) *bytes1 = g.prepared_bytes;
        for (int32_t i = 0; i + L <= N_X; i += L) {
            int32_t am[MAX_L];
            for (int keep = 0; keep < 2; keep++) {
                memcpy(xb, x + (size_t)i * d, sizeof(float) * d * (size_t)L);
                assert_int_equal(sd_graph_run_argmax(&g, xb, logits, am, keep, &e), SDNPU_OK);
                for (int32_t k = 0; k < L; k++)
                    (keep ? exact : greedy)[(size_t)(L - 1) * N_X + i + k] = am[k];
            }
        }
        sd_graph_release(&g);
    }
    free(xb);
    free(logits);
}

/* The k best of n logits by (value, then lower index) into ids[0, k). */
static void best_k(const float *v, int32_t n, int32_t k, int32_t *ids) {
    for (int32_t i = 0; i < k; i++) {
        int32_t b = -1;
        for (int32_t j = 0; j < n; j++) {
            bool used = false;
            for (int32_t t = 0; t < i; t++) used |= ids[t] == j;
            if (!used && (b < 0 || v[j] > v[b])) b = j;
        }
        ids[i] = b;
    }
}

/* Top-k runs (graphs/graph.h's sd_graph_run_topk) against the whole head
 * over rows x, 1 to MAX_L rows a head: each row's k best (ids and values) and
 * the keep tokens' logits exact, every other logit exact or -infinity;
 * returns how many were -infinity (none: the whole head ran), and in
 * *beyond how many of those were in heads of more rows than the type
 * certifies (sd_cert_max_rows). */
static long check_topk(struct rig *r, const float *x, long *beyond) {
    struct sd_err e = {0};
    const size_t d = (size_t)r->mm.cfg.d_model;
    const int32_t nv = r->mm.cfg.n_vocab, keep[3] = {7, nv - 1, 123456};
    float *xb = malloc(sizeof(float) * d * MAX_L), *full = malloc(sizeof(float) * (size_t)nv * MAX_L),
          *part = malloc(sizeof(float) * (size_t)nv * MAX_L);
    long dropped = 0;
    *beyond = 0;
    for (int32_t L = 1; L <= MAX_L; L++) {
        const struct sd_graph_shape s = {SD_GRAPH_HEAD, 0, 0, L, 64, NULL, 0};
        struct sd_graph g;
        assert_int_equal(sd_graph_prepare(r->be, &s, SIZE_MAX, &g, &e), SDNPU_OK);
        for (int32_t i = 0; i + L <= N_X; i += L)
            for (int32_t k = 1; k <= SD_CERT_MAX_TOPK; k += SD_CERT_MAX_TOPK - 1) {
                int32_t am[MAX_L], want[SD_CERT_MAX_TOPK], got[SD_CERT_MAX_TOPK];
                memcpy(xb, x + (size_t)i * d, sizeof(float) * d * (size_t)L);
                assert_int_equal(sd_graph_run_argmax(&g, xb, full, am, true, &e), SDNPU_OK);
                const struct sd_head_topk tk = {k, keep, 3};
                memcpy(xb, x + (size_t)i * d, sizeof(float) * d * (size_t)L);
                assert_int_equal(sd_graph_run_topk(&g, xb, part, &tk, &e), SDNPU_OK);
                for (int32_t row = 0; row < L; row++) {
                    const float *f = full + (size_t)row * (size_t)nv, *q = part + (size_t)row * (size_t)nv;
                    best_k(f, nv, k, want);
                    best_k(q, nv, k, got);
                    assert_memory_equal(want, got, sizeof(int32_t) * (size_t)k);
                    for (int t = 0; t < 2; t++) assert_true(q[keep[t]] == f[keep[t]]);
                    for (int32_t j = 0; j < nv; j++) {
                        assert_true(q[j] == f[j] || q[j] == -INFINITY);
                        dropped += q[j] == -INFINITY;
                        *beyond += q[j] == -INFINITY && L > sd_cert_max_rows(r->mm.output.type);
                    }
                }
            }
        sd_graph_release(&g);
    }
    free(xb), free(full), free(part);
    return dropped;
}

/* Rows x whose winners (under the whole head of w) are copied: before and
 * after themselves (exact ties), and with one value moved a step (near
 * ties), so that the first index and the copy's blind spots are tested. */
static uint8_t *with_rivals(enum sd_type t, const uint8_t *w, const struct sd_model *m, const int32_t *winner,
                            uint64_t *st) {
    const size_t rb = row_of(t, m->cfg.d_model), nv = (size_t)m->cfg.n_vocab;
    const size_t q0 = t == SD_TYPE_Q8_0 ? 2 : 0; /* the first quant: after q8_0's scale, q6_K's ql */
    uint8_t *v = malloc(rb * nv);
    memcpy(v, w, rb * nv);
    for (int i = 0; i < N_X; i++) {
        const int32_t j = winner[i];
        const size_t to[3] = {sdt_rand_u64(st) % nv, sdt_rand_u64(st) % nv, sdt_rand_u64(st) % nv};
        for (int k = 0; k < 3; k++) {
            if (to[k] == (size_t)j) continue;
            memcpy(v + to[k] * rb, w + (size_t)j * rb, rb);
            if (k == 2) v[to[k] * rb + q0 + sdt_rand_u64(st) % 32] ^= 1; /* one quant a step away */
        }
    }
    return v;
}

/* The tiny model's head made type t: its q8_0 rows through floats. */
static uint8_t *head_as(enum sd_type t, const struct sd_model *base) {
    const size_t d = (size_t)base->cfg.d_model, nv = (size_t)base->cfg.n_vocab, rb = row_of(t, (int64_t)d);
    uint8_t *w = malloc(rb * nv);
    float *f = malloc(sizeof(float) * d);
    assert_non_null(w);
    assert_non_null(f);
    for (size_t o = 0; o < nv; o++) {
        sd_dequantize_row(SD_TYPE_Q8_0, (const uint8_t *)base->output.data + o * base->output.row_bytes, f,
                          (int64_t)d);
        assert_true(sd_quantize_row(t, f, w + o * rb, (int64_t)d));
    }
    free(f);
    return w;
}

static void check_graph_ties(enum sd_type t) {
    char path[512];
    snprintf(path, sizeof path, "%s/test_cert_tiny.gguf", SD_BUILD_DIR);
    struct sdt_tiny_opts o = {.arch = "gemma3", .n_vocab = 3000};
    struct sdnpu_model *m = sdt_tiny_load(&o, path);
    assert_non_null(m);
    const struct sd_model *base = m->m;
    assert_int_equal(base->output.type, SD_TYPE_Q8_0);
    const size_t d = (size_t)base->cfg.d_model;
    uint8_t *w = head_as(t, base);
    float *x = malloc(sizeof(float) * d * N_X);
    uint64_t st = 77;
    for (size_t i = 0; i < d * N_X; i++)
        x[i] = sdt_rand_float(&st);
    /* A head of L rows fills N_X - N_X % L entries of its part; the rest stay -1 in every array. */
    int32_t ex0[MAX_L * N_X], ex[MAX_L * N_X], gr[MAX_L * N_X], ex2[MAX_L * N_X], gr2[MAX_L * N_X];
    memset(ex0, 0xff, sizeof ex0), memset(ex, 0xff, sizeof ex), memset(gr, 0xff, sizeof gr);
    memset(ex2, 0xff, sizeof ex2), memset(gr2, 0xff, sizeof gr2);
    size_t b_exact, b_cert;
    struct rig r;
    rig_open(&r, m, t, w, SD_HEAD_EXACT);
    run_heads(&r, x, ex0, gr, &b_exact);
    rig_close(&r);
    assert_memory_equal(ex0, gr, sizeof ex0);
    uint8_t *v = with_rivals(t, w, base, ex0, &st);
    rig_open(&r, m, t, v, SD_HEAD_EXACT);
    run_heads(&r, x, ex, gr, &b_exact);
    rig_close(&r);
    rig_open(&r, m, t, v, SD_HEAD_CERTIFIED);
    run_heads(&r, x, ex2, gr2, &b_cert);
    long beyond;
    assert_true(check_topk(&r, x, &beyond) > 0); /* top-k runs: the certified heads computed less */
    assert_int_equal(beyond, 0);                 /* past sd_cert_max_rows, every logit */
    rig_close(&r);
    rig_open(&r, m, t, v, SD_HEAD_EXACT);
    assert_int_equal(check_topk(&r, x, &beyond), 0); /* without a certificate, every logit */
    rig_close(&r);
    assert_true(b_cert > b_exact);           /* the greedy head is certified */
    assert_memory_equal(ex, ex2, sizeof ex); /* the whole head, either store */
    assert_memory_equal(ex, gr2, sizeof ex); /* the certified argmax */
    assert_memory_equal(ex, gr, sizeof ex);
    int moved = 0; /* rivals took winners' places: ties were decided */
    for (int i = 0; i < N_X; i++)
        moved += ex[i] != ex0[i];
    assert_true(moved > 0);
    free(v);
    free(w);
    free(x);
    sdnpu_model_free(m);
}

static void test_graph_ties(void **state) {
    (void)state;
    for (size_t k = 0; k < SD_ARRAY_LEN(head_types); k++)
        check_graph_ties(head_types[k]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_scan),
        cmocka_unit_test(test_untrusted_scale),
        cmocka_unit_test(test_graph_ties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
