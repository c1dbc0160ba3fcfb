/* tests/test_graphs.c - the static-graph runtime: a row's logits are
 * bit-identical whatever graph (L) runs it, where it sits and what the other
 * rows hold (tiny models of every family, and the real model when present);
 * prepared bytes are counted; the memory limit fails cleanly and leaves the
 * model and session usable; the prefill policies give identical results. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/api.h"
#include "sdnpu.h"
#include "util_common.h"
#include "util_tiny_model.h"

static const char *ARCHS[] = {"llama", "qwen2", "gemma3"};

static const char *tiny_path(int i) {
    static char paths[3][256];
    snprintf(paths[i], sizeof paths[i], "%s/test_graphs_tiny_%s.gguf", SD_BUILD_DIR, ARCHS[i]);
    struct sdt_tiny_opts o = {.arch = ARCHS[i]};
    assert_int_equal(sdt_tiny_write(&o, paths[i]), 0);
    return paths[i];
}

static struct sdnpu_model *load(const char *path) {
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = 2;
    struct sdnpu_model *m = NULL;
    char err[512];
    int rc = sdnpu_model_load(path, mp, &m, err, sizeof err);
    if (rc) fprintf(stderr, "load %s: %s\n", path, err);
    assert_int_equal(rc, SDNPU_OK);
    return m;
}

static struct sdnpu_session *session(struct sdnpu_model *m, int n_batch, int n_verify, size_t mem_limit, int policy) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 512;
    sp.n_batch = n_batch;
    sp.n_verify = n_verify;
    sp.mem_limit = mem_limit;
    sp.prefill_policy = policy;
    struct sdnpu_session *s = NULL;
    int rc = sdnpu_session_create(m, sp, &s);
    if (rc) fprintf(stderr, "session: %s\n", sdnpu_model_last_error(m));
    assert_int_equal(rc, SDNPU_OK);
    return s;
}

static void random_tokens(int32_t *t, int n, int32_t n_vocab, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(3 + sdt_rand_u64(&seed) % (uint64_t)(n_vocab - 3));
}

/* One row (token t after a prefix of P tokens) decoded on G0 alone, then on
 * G2 (L rows) at every row index among unrelated real rows and padding:
 * its logits must be identical bit for bit. */
static void check_row_invariance(const char *path, int P, int L) {
    struct sdnpu_model *m = load(path);
    int32_t nv = sdnpu_model_n_vocab(m);
    struct sdnpu_session *s = session(m, 64, L, 0, 0);
    int32_t *prefix = malloc(sizeof *prefix * (size_t)P);
    random_tokens(prefix, P, nv, 11);
    assert_int_equal(sdnpu_session_eval(s, prefix, (size_t)P, NULL, 0), SDNPU_OK);
    int32_t other[64];
    random_tokens(other, 64, nv, 99);
    float *alone = malloc(sizeof(float) * (size_t)nv);
    float *batch = malloc(sizeof(float) * (size_t)nv * (size_t)L);
    struct sd_err e = {0};
    struct sd_row row = {.token = other[0], .pos = P, .slot = P, .n_prefix = P};
    row.anc[0] = 1;
    assert_int_equal(sd_rt_decode(s->rt, &s->kv, &row, 1, P, false, alone, &e), SDNPU_OK);
    sd_kv_truncate(&s->kv, P);
    for (int at = 0; at < L; at += (L > 8 ? 3 : 1)) {
        /* n_real real rows: the row under test at index `at`, every other one
         * a sibling (same position, its own slot, sees only itself). */
        int n_real = at + 1 + (L - at - 1) / 2;
        struct sd_row rows[64];
        memset(rows, 0, sizeof rows);
        for (int r = 0; r < n_real; r++) {
            rows[r].token = r == at ? other[0] : other[1 + r];
            rows[r].pos = P;
            rows[r].slot = P + r;
            rows[r].n_prefix = P;
            rows[r].anc[0] = 1ull << r;
        }
        assert_int_equal(sd_rt_decode(s->rt, &s->kv, rows, n_real, P, true, batch, &e), SDNPU_OK);
        const float *got = batch + (size_t)at * (size_t)nv;
        for (int32_t v = 0; v < nv; v++)
            if (got[v] != alone[v])
                fail_msg("%s: row at index %d of %d (L=%d): logit %d is %.9g, alone %.9g", path, at, n_real, L, v,
                         (double)got[v], (double)alone[v]);
        sd_kv_truncate(&s->kv, P);
    }
    free(prefix);
    free(alone);
    free(batch);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

static void test_row_invariance_tiny(void **state) {
    (void)state;
    for (int a = 0; a < 3; a++) {
        check_row_invariance(tiny_path(a), 37, 16);
        check_row_invariance(tiny_path(a), 5, 3);
    }
}

static void test_row_invariance_real(void **state) {
    (void)state;
    const char *path = SD_DEFAULT_MODEL;
    if (getenv("SDNPU_TEST_NO_MODEL") || access(path, R_OK) != 0) skip();
    check_row_invariance(path, 40, 16);
}

/* Prefill with every policy and chunk length gives the logits of plain
 * one-chunk prefill, bit for bit. */
static void test_prefill_policies(void **state) {
    (void)state;
    for (int a = 0; a < 3; a++) {
        struct sdnpu_model *m = load(tiny_path(a));
        int32_t nv = sdnpu_model_n_vocab(m);
        enum { N = 45 };
        int32_t toks[N];
        random_tokens(toks, N, nv, 3);
        float *ref = malloc(sizeof(float) * (size_t)nv * N), *got = malloc(sizeof(float) * (size_t)nv * N);
        struct sdnpu_session *s = session(m, 64, 4, 0, 1);
        assert_int_equal(sdnpu_session_eval(s, toks, N, ref, (size_t)nv * N), SDNPU_OK);
        sdnpu_session_free(s);
        const int cfg[][3] = {{16, 4, 1}, {16, 4, 2}, {16, 5, 0}, {32, 1, 2}, {8, 8, 2}};
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
            s = session(m, cfg[c][0], cfg[c][1], 0, cfg[c][2]);
            assert_int_equal(sdnpu_session_eval(s, toks, N, got, (size_t)nv * N), SDNPU_OK);
            assert_memory_equal(ref, got, sizeof(float) * (size_t)nv * N);
            sdnpu_session_free(s);
        }
        free(ref);
        free(got);
        sdnpu_model_free(m);
    }
}

static enum sdnpu_status gen(struct sdnpu_session *s, const char *method, struct sdnpu_stats *st) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.n_predict = 8;
    gp.sampling.temperature = 0;
    gp.spec = method;
    return sdnpu_session_generate(s, "abc abc abc", 11, &gp, st);
}

/* A graph past the memory limit fails with SDNPU_ERR_OOM and a message;
 * what was prepared stays usable, and so does the model. */
static void test_mem_limit(void **state) {
    (void)state;
    struct sdnpu_model *m = load(tiny_path(2));
    struct sdnpu_stats st;
    /* What a plain request prepares: G1, the one-row head, G0. */
    struct sdnpu_session *s = session(m, 64, 8, 0, 1);
    assert_int_equal(gen(s, "none", &st), SDNPU_OK);
    size_t plain = st.prepared_bytes;
    assert_true(plain > 0);
    assert_int_equal(sd_rt_prepared_bytes(s->rt), plain);
    assert_int_equal(gen(s, "sam", &st), SDNPU_OK);
    assert_true(st.prepared_bytes > plain); /* G2 and its head came on */
    sdnpu_session_free(s);

    s = session(m, 64, 8, plain, 1);
    sdnpu_session_reset(s);
    assert_int_equal(gen(s, "none", &st), SDNPU_OK);
    assert_int_equal(gen(s, "sam", &st), SDNPU_ERR_OOM);
    assert_non_null(strstr(sdnpu_session_last_error(s), "memory limit"));
    assert_int_equal(sd_rt_prepared_bytes(s->rt), plain); /* the half-prepared set was given back */
    sdnpu_session_reset(s);
    assert_int_equal(gen(s, "none", &st), SDNPU_OK);
    sdnpu_session_free(s);

    s = session(m, 64, 8, 1, 1);
    assert_int_equal(gen(s, "none", &st), SDNPU_ERR_OOM);
    assert_int_equal(sdnpu_session_n_past(s), 0);
    sdnpu_session_free(s);
    s = session(m, 64, 8, 0, 1);
    assert_int_equal(gen(s, "none", &st), SDNPU_OK);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* An unknown backend is an error; "opencl" where the build or machine has
 * none falls back to the cpu with a warning (both are fine here). */
static void test_backends(void **state) {
    (void)state;
    struct sdnpu_model *m = load(tiny_path(0));
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.backend = "tpu";
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(sdnpu_model_last_error(m), "unknown backend"));
    assert_null(s);
    sp.backend = "opencl";
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    struct sdnpu_stats st;
    assert_int_equal(gen(s, "none", &st), SDNPU_OK);
    assert_true(st.n_generated > 0);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_invariance_tiny), cmocka_unit_test(test_row_invariance_real),
        cmocka_unit_test(test_prefill_policies),    cmocka_unit_test(test_mem_limit),
        cmocka_unit_test(test_backends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
