/* tests/test_prefix.c - prefix reuse and the prompt cache: a request on a
 * new context keeps what the session or its cache holds of its prompt, and
 * gives the KV cache and the output a fresh prefill gives, bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tools.h"
#include "sched/runtime.h"
#include "sdnpu.h"
#include "util_common.h"
#include "util_tiny_model.h"


static struct sdnpu_model *g_model;

static int setup(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/test_prefix_tiny.gguf", SD_BUILD_DIR);
    struct sdt_tiny_opts o = {.arch = "qwen2"};
    g_model = sdt_tiny_load(&o, path);
    return g_model ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    sdnpu_model_free(g_model);
    return 0;
}

static struct sdnpu_session *session_limited(size_t cache_bytes, size_t mem_limit) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 1024;
    sp.n_batch = 32; /* several prefill chunks, so the kept prefix ends inside one */
    sp.prompt_cache_bytes = cache_bytes;
    sp.mem_limit = mem_limit;
    struct sdnpu_session *s = NULL;
    assert_int_equal(sdnpu_session_create(g_model, sp, &s), SDNPU_OK);
    return s;
}

static struct sdnpu_session *session(size_t cache_bytes) { return session_limited(cache_bytes, 0); }

/* Documents long enough to be cached (SD_PCACHE_MIN_TOKENS and more). */
static const char *DOC1 = "the cat sat on the mat and the dog sat on the log; the bird sat on the wire and the "
                          "fish swam in the bowl, while the owl watched the moon over the hill and the fox ran.";
static const char *DOC2 = "zebra quartz jumps over vexing fog; a wizard's job is to vex chumps quickly in fog, "
                          "and five boxing wizards jump quickly while the quick brown fox jumps over lazy dogs.";

static const char *DOC3 = "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
                          "incididunt ut labore et dolore magna aliqua; ut enim ad minim veniam, quis nostrud.";

/* How many leading tokens two prompts share. */
static int32_t shared_tokens(const char *a, const char *b) {
    sdnpu_token ta[512], tb[512];
    size_t na = 0, nb = 0;
    assert_int_equal(sdnpu_tokenize(g_model, a, strlen(a), SDNPU_TOKENIZE_ADD_SPECIAL, ta, 512, &na), SDNPU_OK);
    assert_int_equal(sdnpu_tokenize(g_model, b, strlen(b), SDNPU_TOKENIZE_ADD_SPECIAL, tb, 512, &nb), SDNPU_OK);
    int32_t i = 0;
    while ((size_t)i < na && (size_t)i < nb && ta[i] == tb[i]) i++;
    return i;
}

static char *prompt_of(const char *doc, const char *question) {
    size_t n = strlen(doc) + strlen(question) + 8;
    char *p = malloc(n);
    snprintf(p, n, "%s\n\nQ: %s", doc, question);
    return p;
}

struct run {
    struct sdt_text out;
    struct sdnpu_stats st;
};

/* One request on a new context (prefix reuse) or on a reset session. */
static void run(struct sdnpu_session *s, const char *prompt, bool new_context, struct sdnpu_spec spec, float temp,
                struct run *r) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.n_predict = 12;
    gp.sampling.temperature = temp;
    gp.spec = spec;
    gp.new_context = new_context;
    gp.on_text = sdt_collect;
    memset(r, 0, sizeof *r);
    gp.user = &r->out;
    if (!new_context) sdnpu_session_reset(s);
    assert_int_equal(sdnpu_session_generate(s, prompt, strlen(prompt), &gp, &r->st), SDNPU_OK);
}

/* The KV cache of the context's first n slots. */
static void *kv_of(struct sdnpu_session *s, int32_t n, size_t *bytes) {
    struct sd_rt *rt = sd_tool_session_rt(s);
    *bytes = sd_rt_kv_snapshot_bytes(rt, n);
    void *kv = malloc(*bytes);
    sd_rt_kv_snapshot(rt, n, kv);
    return kv;
}

static void assert_same_run(const struct run *a, const struct run *b) {
    assert_int_equal(a->out.n, b->out.n);
    assert_memory_equal(a->out.buf, b->out.buf, a->out.n);
    assert_int_equal(a->st.n_generated, b->st.n_generated);
    assert_int_equal(a->st.n_prompt_tokens, b->st.n_prompt_tokens);
}

/* A follow-up question on the same document keeps the document's tokens
 * and writes, for the whole prompt, the KV cache a fresh prefill writes. */
static void test_live_prefix_bit_identical(void **state) {
    (void)state;
    struct sdnpu_spec none = {SDNPU_DRAFTER_NONE, false, false, false};
    struct sdnpu_session *a = session(0), *b = session(0);
    char *p1 = prompt_of(DOC1, "who sat on the mat?"), *p2 = prompt_of(DOC1, "where did the fish swim?");
    struct run r1, r2, f2;
    run(a, p1, true, none, 0.0f, &r1);
    assert_int_equal(r1.st.n_prompt_reused, 0);
    run(a, p2, true, none, 0.0f, &r2);
    run(b, p2, false, none, 0.0f, &f2);
    /* The document and "\n\nQ:" are shared: at least the document's tokens. */
    assert_true(r2.st.n_prompt_reused > r2.st.n_prompt_tokens / 2);
    assert_true(r2.st.n_prompt_reused < r2.st.n_prompt_tokens);
    assert_same_run(&r2, &f2);
    size_t na, nb;
    void *ka = kv_of(a, r2.st.n_prompt_tokens, &na), *kb = kv_of(b, f2.st.n_prompt_tokens, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ka, kb, na);
    /* The same prompt again: everything but its last token is kept. */
    struct run r3;
    run(a, p2, true, none, 0.0f, &r3);
    assert_int_equal(r3.st.n_prompt_reused, r3.st.n_prompt_tokens - 1);
    assert_same_run(&r3, &f2);
    free(ka), free(kb), free(p1), free(p2);
    sdnpu_session_free(a);
    sdnpu_session_free(b);
}

/* A request returning to an earlier document after another came between
 * takes it from the prompt cache, with the output of a fresh prefill, for
 * every drafter and for sampling. */
static void test_cache_returns_to_document(void **state) {
    (void)state;
    struct sdnpu_spec specs[] = {{SDNPU_DRAFTER_NONE, false, false, false},
                                 {SDNPU_DRAFTER_SAM_TREE, true, false, false},
                                 {SDNPU_DRAFTER_PLD, false, false, false}};
    char *p1 = prompt_of(DOC1, "who sat on the mat?"), *p2 = prompt_of(DOC2, "who jumps?"),
         *p3 = prompt_of(DOC1, "what did the owl watch?");
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        for (int sampled = 0; sampled < 2; sampled++) {
            float temp = sampled ? 0.9f : 0.0f;
            struct sdnpu_session *a = session(64u << 20), *b = session(0);
            struct run r, f;
            run(a, p1, true, specs[k], temp, &r);
            run(a, p2, true, specs[k], temp, &r);
            run(a, p3, true, specs[k], temp, &r);
            run(b, p3, false, specs[k], temp, &f);
            assert_same_run(&r, &f);
            assert_true(r.st.n_prompt_reused > r.st.n_prompt_tokens / 2);
            struct sdnpu_prompt_cache_stats cs;
            assert_int_equal(sdnpu_session_prompt_cache_stats(a, &cs), SDNPU_OK);
            assert_int_equal(cs.hits, 1);
            assert_int_equal(cs.misses, 2);
            assert_true(cs.n_entries >= 1);
            assert_true(cs.bytes > 0 && cs.bytes <= cs.capacity);
            assert_int_equal(cs.evictions, 0);
            size_t na, nb;
            void *ka = kv_of(a, r.st.n_prompt_tokens, &na), *kb = kv_of(b, f.st.n_prompt_tokens, &nb);
            assert_memory_equal(ka, kb, na);
            free(ka), free(kb);
            sdnpu_session_free(a);
            sdnpu_session_free(b);
        }
    }
    free(p1), free(p2), free(p3);
}

/* The cache holds at most its capacity: with room for one snapshot, each
 * new document evicts the last, and a cache of too few bytes keeps none. */
static void test_cache_bounded(void **state) {
    (void)state;
    struct sdnpu_spec none = {SDNPU_DRAFTER_NONE, false, false, false};
    char *p1 = prompt_of(DOC1, "who sat on the mat?"), *p2 = prompt_of(DOC2, "who jumps?"),
         *p3 = prompt_of(DOC3, "what is lorem?"), *p4 = prompt_of(DOC1, "what did the owl watch?");
    struct sdnpu_session *probe = session(0);
    struct run r;
    run(probe, p2, false, none, 0.0f, &r);
    /* A snapshot holds the prompt and the reply; room for one and a half. */
    size_t one = sd_rt_kv_snapshot_bytes(sd_tool_session_rt(probe), r.st.n_prompt_tokens + r.st.n_generated) +
                 (size_t)(r.st.n_prompt_tokens + r.st.n_generated) * sizeof(int32_t);
    struct sdnpu_session *a = session(one + one / 2);
    run(a, p1, true, none, 0.0f, &r);
    run(a, p2, true, none, 0.0f, &r); /* DOC1's context is kept */
    run(a, p3, true, none, 0.0f, &r); /* DOC2's evicts it */
    run(a, p4, true, none, 0.0f, &r); /* DOC1 is gone: a miss; DOC3's evicts DOC2's */
    struct sdnpu_prompt_cache_stats cs;
    assert_int_equal(sdnpu_session_prompt_cache_stats(a, &cs), SDNPU_OK);
    assert_int_equal(cs.hits, 0);
    assert_int_equal(cs.misses, 4);
    assert_int_equal(cs.n_entries, 1);
    assert_int_equal(cs.evictions, 2);
    assert_true(cs.bytes <= cs.capacity);
    assert_int_equal(r.st.n_prompt_reused, shared_tokens(p3, p4));
    struct sdnpu_session *tiny = session(64);
    run(tiny, p1, true, none, 0.0f, &r);
    run(tiny, p2, true, none, 0.0f, &r);
    assert_int_equal(sdnpu_session_prompt_cache_stats(tiny, &cs), SDNPU_OK);
    assert_int_equal(cs.n_entries, 0);
    assert_int_equal(cs.bytes, 0);
    free(p1), free(p2), free(p3), free(p4);
    sdnpu_session_free(probe);
    sdnpu_session_free(a);
    sdnpu_session_free(tiny);
}

/* Under a memory limit the cache keeps only what the prepared graphs
 * leave: a limit they fill already leaves it nothing. */
static void test_cache_under_mem_limit(void **state) {
    (void)state;
    struct sdnpu_spec none = {SDNPU_DRAFTER_NONE, false, false, false};
    /* A limit far above the need gives the graphs of a limited session
     * (no remainder set). */
    struct sdnpu_session *probe = session_limited(0, (size_t)1 << 40);
    char *p1 = prompt_of(DOC1, "who sat on the mat?"), *p2 = prompt_of(DOC2, "who jumps?");
    struct run r;
    run(probe, p1, false, none, 0.0f, &r);
    /* exactly what the graphs take */
    struct sdnpu_session *a = session_limited(64u << 20, r.st.prepared_bytes);
    run(a, p1, true, none, 0.0f, &r);
    run(a, p2, true, none, 0.0f, &r);
    struct sdnpu_prompt_cache_stats cs;
    assert_int_equal(sdnpu_session_prompt_cache_stats(a, &cs), SDNPU_OK);
    assert_int_equal(cs.n_entries, 0);
    free(p1), free(p2);
    sdnpu_session_free(probe);
    sdnpu_session_free(a);
}

/* With calibration a kept prefix keeps its positions' predictions: the
 * second request on the same document prefills only the question, still
 * builds a calibrated store, and its output is plain greedy's. */
static void test_calibration_kept(void **state) {
    (void)state;
    struct sdnpu_spec calib = {SDNPU_DRAFTER_SAM, false, true, false};
    struct sdnpu_spec none = {SDNPU_DRAFTER_NONE, false, false, false};
    struct sdnpu_session *a = session(64u << 20), *b = session(0);
    char *p1 = prompt_of(DOC1, "who sat on the mat?"), *p2 = prompt_of(DOC1, "where did the fish swim?"),
         *p3 = prompt_of(DOC2, "who jumps?");
    struct run r, f, fresh_calib;
    run(a, p1, true, calib, 0.0f, &r);
    assert_int_equal(r.st.n_prompt_reused, 0);
    run(a, p2, true, calib, 0.0f, &r);
    run(b, p2, false, calib, 0.0f, &fresh_calib);
    run(b, p2, false, none, 0.0f, &f);
    assert_true(r.st.n_prompt_reused > r.st.n_prompt_tokens / 2);
    assert_true(r.st.n_calib_records > 0);
    assert_same_run(&r, &f);
    /* The kept positions' predictions were collected over the first
     * request's subset; the store is built from every position. */
    assert_true(r.st.n_calib_records >= fresh_calib.st.n_calib_records / 2);
    /* A request without calibration in between: the live prefix stays
     * usable for calibration as far as it is kept. */
    run(a, p3, true, none, 0.0f, &r);
    run(a, p1, true, calib, 0.0f, &r);
    /* DOC2 replaced the context: calibration cannot take DOC1 from a
     * snapshot (it holds no predictions), so all of it is prefilled. */
    assert_int_equal(r.st.n_prompt_reused, shared_tokens(p1, p3));
    assert_true(r.st.n_calib_records > 0);
    free(p1), free(p2), free(p3);
    sdnpu_session_free(a);
    sdnpu_session_free(b);
}

/* The prompt as tokens is the prompt as text; tokens outside the
 * vocabulary are refused with the offending index. */
static void test_prompt_tokens(void **state) {
    (void)state;
    struct sdnpu_spec none = {SDNPU_DRAFTER_NONE, false, false, false};
    struct sdnpu_session *a = session(0), *b = session(0);
    char *p1 = prompt_of(DOC1, "who sat on the mat?");
    sdnpu_token toks[512];
    size_t n = 0;
    assert_int_equal(sdnpu_tokenize(g_model, p1, strlen(p1), SDNPU_TOKENIZE_ADD_SPECIAL, toks, 512, &n), SDNPU_OK);
    struct run r, f;
    run(b, p1, false, none, 0.0f, &f);
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.n_predict = 12;
    gp.sampling.temperature = 0.0f;
    gp.prompt_tokens = toks;
    gp.n_prompt_tokens = n;
    gp.new_context = true;
    gp.on_text = sdt_collect;
    memset(&r, 0, sizeof r);
    gp.user = &r.out;
    assert_int_equal(sdnpu_session_generate(a, NULL, 0, &gp, &r.st), SDNPU_OK);
    assert_same_run(&r, &f);
    /* The prefix the session holds now, as the router sees it. */
    assert_int_equal(sdnpu_session_prefix_match(a, toks, n), (int32_t)n - 1);
    assert_int_equal(sdnpu_session_prefix_match(a, toks, 5), 4);
    toks[7] = 1 << 20;
    assert_int_equal(sdnpu_session_generate(a, NULL, 0, &gp, &r.st), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(sdnpu_session_last_error(a), "index 7"));
    assert_int_equal(sdnpu_session_prefix_match(a, toks, n), 7);
    free(p1);
    sdnpu_session_free(a);
    sdnpu_session_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_live_prefix_bit_identical),
        cmocka_unit_test(test_cache_returns_to_document),
        cmocka_unit_test(test_cache_bounded),
        cmocka_unit_test(test_cache_under_mem_limit),
        cmocka_unit_test(test_calibration_kept),
        cmocka_unit_test(test_prompt_tokens),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
