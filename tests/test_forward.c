/* tests/test_forward.c - the forward pass and plain generation on the tiny
 * models: batch invariance (chunked prefill == one token at a time, bit for
 * bit), tree-masked rows == sequential rows, bad models, context overflow. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/api.h"
#include "graphs/quant.h"
#include "sdnpu.h"
#include "util_common.h"
#include "util_tiny_model.h"

static const char *ARCHS[] = {"llama", "qwen2", "gemma3"};

static const char *tiny_path(const char *arch) {
    static char paths[3][256];
    int i = !strcmp(arch, "llama") ? 0 : !strcmp(arch, "qwen2") ? 1 : 2;
    snprintf(paths[i], sizeof paths[i], "%s/test_forward_tiny_%s.gguf", SD_BUILD_DIR, arch);
    struct sdt_tiny_opts o = {.arch = arch};
    assert_int_equal(sdt_tiny_write(&o, paths[i]), 0);
    return paths[i];
}

static struct sdnpu_model *load(const char *path, int n_threads) { return sdt_model(path, n_threads, true); }

/* n_verify: rows of the verification graph; 0 the engine's default. */
static struct sdnpu_session *session_rows(struct sdnpu_model *m, int n_ctx, int n_batch, int n_verify) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = n_batch;
    sp.n_verify = n_verify;
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    return s;
}

static struct sdnpu_session *session(struct sdnpu_model *m, int n_ctx, int n_batch) {
    return session_rows(m, n_ctx, n_batch, 0);
}

static void random_tokens(int32_t *t, int n, int32_t n_vocab, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(3 + sdt_rand_u64(&seed) % (uint64_t)(n_vocab - 3));
}

/* Logits of every position: all at once in chunks of n_batch, versus one
 * token per call: must be equal bit for bit, for 1 and 2 threads. Past 128
 * positions a one-row step with two threads splits its keys and output
 * values between them, where a chunk's rows run as tiles. */
static void test_batch_invariance(void **state) {
    (void)state;
    for (int a = 0; a < 3; a++) {
        const char *path = tiny_path(ARCHS[a]);
        for (int threads = 1; threads <= 2; threads++) {
            struct sdnpu_model *m = load(path, threads);
            int32_t nv = sdnpu_model_n_vocab(m);
            enum { N = 170 };
            int32_t toks[N];
            random_tokens(toks, N, nv, 99 + (uint64_t)a);
            float *ref = malloc((size_t)N * (size_t)nv * sizeof(float));
            float *got = malloc((size_t)N * (size_t)nv * sizeof(float));
            /* One token at a time. */
            struct sdnpu_session *s1 = session(m, 256, 1);
            for (int i = 0; i < N; i++)
                assert_int_equal(sdnpu_session_eval(s1, &toks[i], 1, ref + (size_t)i * (size_t)nv, (size_t)nv), SDNPU_OK);
            /* Chunks of several sizes, including ones that do not divide N. */
            int batches[] = {16, 32, 7, 64};
            for (size_t b = 0; b < SD_ARRAY_LEN(batches); b++) {
                struct sdnpu_session *s2 = session(m, 256, batches[b]);
                assert_int_equal(sdnpu_session_eval(s2, toks, N, got, (size_t)N * (size_t)nv), SDNPU_OK);
                for (size_t i = 0; i < (size_t)N * (size_t)nv; i++) {
                    if (ref[i] != got[i]) {
                        fail_msg("%s, %d threads, batch %d: logit %zu (pos %zu) differs: %.9g vs %.9g", ARCHS[a],
                                 threads, batches[b], i, i / (size_t)nv, (double)ref[i], (double)got[i]);
                    }
                }
                sdnpu_session_free(s2);
            }
            /* Logits are finite and not all equal (the model computes something). */
            float lo = ref[0], hi = ref[0];
            for (size_t i = 0; i < (size_t)nv; i++) {
                assert_true(isfinite(ref[i]));
                lo = fminf(lo, ref[i]);
                hi = fmaxf(hi, ref[i]);
            }
            assert_true(hi - lo > 0.1f);
            sdnpu_session_free(s1);
            free(ref);
            free(got);
            sdnpu_model_free(m);
        }
    }
}

/* The scalar reference and the SIMD kernels give the same logits, bit for
 * bit, through whole passes: chunks of rows (tiles) and, past 128 keys,
 * one-row steps split between 2 threads; every stage (matmuls, attention,
 * norms, RoPE, GELU) in the same order. */
static void test_impls_same_logits(void **state) {
    (void)state;
    enum { N = 150, CHUNK = 16, STEPS = 4 };
    for (int a = 0; a < 3; a++) {
        const char *path = tiny_path(ARCHS[a]);
        float *ref = NULL;
        for (int i = 0; i < SDT_N_IMPLS; i++) {
            if (!sdt_use_impl((enum sdt_impl)i)) continue;
            struct sdnpu_model *m = load(path, 2);
            const int32_t nv = sdnpu_model_n_vocab(m);
            int32_t toks[N];
            random_tokens(toks, N, nv, 7 + (uint64_t)a);
            const size_t n_out = (size_t)(N - STEPS + STEPS) * (size_t)nv;
            float *got = malloc(n_out * sizeof(float));
            struct sdnpu_session *s = session(m, 256, CHUNK);
            assert_int_equal(sdnpu_session_eval(s, toks, N - STEPS, got, (size_t)(N - STEPS) * (size_t)nv), SDNPU_OK);
            for (int k = N - STEPS; k < N; k++)
                assert_int_equal(sdnpu_session_eval(s, &toks[k], 1, got + (size_t)k * (size_t)nv, (size_t)nv), SDNPU_OK);
            if (!ref) {
                ref = got;
            } else {
                for (size_t j = 0; j < n_out; j++)
                    if (ref[j] != got[j])
                        fail_msg("%s, kernels %d: logit %zu (pos %zu) differs from the scalar one: %.9g vs %.9g", ARCHS[a],
                                 i, j, j / (size_t)nv, (double)got[j], (double)ref[j]);
                free(got);
            }
            sdnpu_session_free(s);
            sdnpu_model_free(m);
        }
        free(ref);
    }
    sdt_use_auto();
}

/* A tree batch through the internal forward API: each row sees the prefix
 * and its ancestors only. Every row's logits must equal those of decoding
 * its root-to-row path sequentially. */
static void test_tree_rows_match_sequential(void **state) {
    (void)state;
    for (int a = 0; a < 3; a++) {
        struct sdnpu_model *m = load(tiny_path(ARCHS[a]), 2);
        int32_t nv = sdnpu_model_n_vocab(m);
        struct sdnpu_session *s = session_rows(m, 256, 32, 8); /* room for the 7-node tree */
        enum { P = 20, R = 7 };
        int32_t prefix[P];
        random_tokens(prefix, P, nv, 5);
        assert_int_equal(sdnpu_session_eval(s, prefix, P, NULL, 0), SDNPU_OK);
        /* Tree: 0 -> 1 -> 2, 0 -> 3, 3 -> 4, 1 -> 5, 5 -> 6 */
        int32_t parent[R] = {-1, 0, 1, 0, 3, 1, 5};
        int32_t tok[R];
        random_tokens(tok, R, nv, 77);
        struct sd_row rows[R];
        memset(rows, 0, sizeof rows);
        for (int r = 0; r < R; r++) {
            int depth = 0;
            for (int p = r; p >= 0; p = parent[p]) {
                rows[r].anc[0] |= 1ull << p;
                depth++;
            }
            rows[r].token = tok[r];
            rows[r].pos = P + depth - 1;
            rows[r].slot = P + r;
            rows[r].n_prefix = P;
        }
        /* The tree runs as the session's verification graph (L2 rows,
         * padding after the R real rows). */
        float *tree = malloc((size_t)R * (size_t)nv * sizeof(float));
        struct sd_err e = {0};
        assert_int_equal(sd_rt_decode(s->rt, rows, R, P, true, tree, NULL, &e), SDNPU_OK);
        float *seq = malloc((size_t)nv * sizeof(float));
        for (int r = 0; r < R; r++) {
            int32_t path[R], n = 0;
            for (int p = r; p >= 0; p = parent[p]) path[n++] = tok[p];
            struct sdnpu_session *s2 = session(m, 256, 1);
            assert_int_equal(sdnpu_session_eval(s2, prefix, P, NULL, 0), SDNPU_OK);
            for (int i = n - 1; i >= 0; i--) assert_int_equal(sdnpu_session_eval(s2, &path[i], 1, seq, (size_t)nv), SDNPU_OK);
            for (int32_t v = 0; v < nv; v++)
                if (seq[v] != tree[(size_t)r * (size_t)nv + (size_t)v])
                    fail_msg("%s: tree row %d logit %d: %.9g vs sequential %.9g", ARCHS[a], r, v,
                             (double)tree[(size_t)r * (size_t)nv + (size_t)v], (double)seq[v]);
            sdnpu_session_free(s2);
        }
        free(tree);
        free(seq);
        sdnpu_session_free(s);
        sdnpu_model_free(m);
    }
}

static void expect_load_fail(const struct sdt_tiny_opts *o, int status, const char *needle) {
    char path[256];
    snprintf(path, sizeof path, "%s/test_forward_bad.gguf", SD_BUILD_DIR);
    assert_int_equal(sdt_tiny_write(o, path), 0);
    struct sdnpu_model *m = (struct sdnpu_model *)0x1;
    char err[512];
    int rc = sdnpu_model_load(path, sdnpu_model_default_params(), &m, err, sizeof err);
    if (rc != status || !strstr(err, needle))
        fail_msg("expected %s with '%s', got %s: %s", sdnpu_status_str(status), needle, sdnpu_status_str(rc), err);
    assert_null(m);
}

static void test_bad_models(void **state) {
    (void)state;
    struct sdt_tiny_opts o1 = {.arch = "llama", .omit_tensor = "blk.1.ffn_down.weight"};
    expect_load_fail(&o1, SDNPU_ERR_FORMAT, "blk.1.ffn_down.weight");
    struct sdt_tiny_opts o2 = {.arch = "qwen2", .omit_tensor = "blk.0.attn_k.bias"};
    expect_load_fail(&o2, SDNPU_ERR_FORMAT, "blk.0.attn_k.bias");
    struct sdt_tiny_opts o3 = {.arch = "gemma3", .bad_shape_tensor = "blk.0.attn_q.weight"};
    expect_load_fail(&o3, SDNPU_ERR_FORMAT, "blk.0.attn_q.weight");
    struct sdt_tiny_opts o4 = {.arch = "gemma3", .omit_tensor = "blk.2.attn_q_norm.weight"};
    expect_load_fail(&o4, SDNPU_ERR_FORMAT, "attn_q_norm");
    struct sdt_tiny_opts o5 = {.arch = "llama", .bad_shape_tensor = "output_norm.weight"};
    expect_load_fail(&o5, SDNPU_ERR_FORMAT, "output_norm.weight");
    struct sdt_tiny_opts o6 = {.arch = "mamba"};
    expect_load_fail(&o6, SDNPU_ERR_UNSUPPORTED, "mamba");
    struct sdt_tiny_opts o7 = {.arch = "llama", .omit_tensor = "token_embd.weight"};
    expect_load_fail(&o7, SDNPU_ERR_FORMAT, "token_embd.weight");
}

struct textbuf {
    char buf[4096];
    size_t n;
};

static bool collect(const char *piece, size_t len, void *user) {
    struct textbuf *t = user;
    if (t->n + len < sizeof t->buf) {
        memcpy(t->buf + t->n, piece, len);
        t->n += len;
        t->buf[t->n] = '\0';
    }
    return true;
}

static void test_context_overflow(void **state) {
    (void)state;
    struct sdnpu_model *m = load(tiny_path("llama"), 1);
    struct sdnpu_session *s = session(m, 32, 16);
    int32_t toks[40];
    random_tokens(toks, 40, sdnpu_model_n_vocab(m), 3);
    assert_int_equal(sdnpu_session_eval(s, toks, 40, NULL, 0), SDNPU_ERR_CONTEXT_FULL);
    assert_non_null(strstr(sdnpu_session_last_error(s), "32"));
    assert_int_equal(sdnpu_session_n_past(s), 0); /* nothing evaluated */
    assert_int_equal(sdnpu_session_eval(s, toks, 20, NULL, 0), SDNPU_OK);
    assert_int_equal(sdnpu_session_eval(s, toks, 13, NULL, 0), SDNPU_ERR_CONTEXT_FULL);
    assert_int_equal(sdnpu_session_n_past(s), 20);
    /* A prompt that does not fit through generate. */
    char text[400];
    memset(text, 'a', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    struct textbuf tb = {.n = 0};
    gp.on_text = collect;
    gp.user = &tb;
    sdnpu_session_reset(s);
    assert_int_equal(sdnpu_session_generate(s, text, strlen(text), &gp, NULL), SDNPU_ERR_CONTEXT_FULL);
    assert_non_null(strstr(sdnpu_session_last_error(s), "context"));
    /* Generation that reaches the end of the context stops cleanly. */
    struct sdnpu_stats st;
    gp.n_predict = -1;
    gp.sampling.temperature = 0;
    sdnpu_session_reset(s);
    assert_int_equal(sdnpu_session_generate(s, "ab", 2, &gp, &st), SDNPU_OK);
    assert_true(st.stop_reason == SDNPU_STOP_CONTEXT_FULL || st.stop_reason == SDNPU_STOP_EOG);
    assert_true(sdnpu_session_n_past(s) <= 32);
    /* Invalid token ids. */
    int32_t bad = 1 << 30;
    assert_int_equal(sdnpu_session_eval(s, &bad, 1, NULL, 0), SDNPU_ERR_INVALID_ARG);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* Greedy generation is deterministic and seeded sampling is reproducible. */
static void test_generate_reproducible(void **state) {
    (void)state;
    struct sdnpu_model *m = load(tiny_path("gemma3"), 2);
    static struct textbuf out[3];
    for (int run = 0; run < 3; run++) {
        struct sdnpu_session *s = session(m, 256, 32);
        struct sdnpu_generate_params gp = sdnpu_generate_default_params();
        gp.n_predict = 40;
        gp.sampling.temperature = 1.5f;
        gp.sampling.top_k = 0;
        gp.sampling.top_p = 1.0f;
        gp.sampling.min_p = 0.0f;
        gp.sampling.seed = run == 2 ? 999 : 1234;
        struct sdnpu_stats st;
        out[run].n = 0;
        out[run].buf[0] = '\0';
        gp.on_text = collect;
        gp.user = &out[run];
        assert_true(sdnpu_session_generate(s, "abc def", 7, &gp, &st) >= 0);
        assert_true(st.n_generated > 0);
        assert_int_equal(st.n_prompt_tokens > 0, 1);
        sdnpu_session_free(s);
    }
    /* Same seed, same text; another seed, another text. */
    assert_true(out[0].n > 0);
    assert_string_equal(out[0].buf, out[1].buf);
    if (!strcmp(out[0].buf, out[2].buf)) fail_msg("seeds 1234 and 999 gave the same text: '%s'", out[0].buf);
    sdnpu_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_impls_same_logits),
        cmocka_unit_test(test_tree_rows_match_sequential),
        cmocka_unit_test(test_bad_models),
        cmocka_unit_test(test_context_overflow),
        cmocka_unit_test(test_generate_reproducible),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
