/* tests/test_calib.c - in-context calibration on hand-built prediction
 * tables: the sampled successors, the searched tree and the order of its
 * records (worked out by hand below), node and depth budgets, cycles,
 * repeated tokens, a one-token context, a context past the store bound,
 * collecting from subset logits (against a direct softmax), the drafters
 * drafting from the calibrated store (sam, sam-tree, pld), and the subset
 * head of the graphs against the full head. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/calib.h"
#include "draft/draft.h"
#include "engine/api.h"
#include "engine/tools.h"
#include "util_common.h"
#include "util_tiny_model.h"

/* The records of a store: runs of tokens between separators. */
struct records {
    int32_t n;
    int32_t len[64];
    int32_t tok[64][48];
};

static void read_records(const struct sd_sam *store, struct records *r) {
    memset(r, 0, sizeof *r);
    const int32_t *t = sd_sam_text(store);
    size_t n = sd_sam_n_tokens(store);
    int32_t cur = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < 0) {
            r->len[r->n++] = cur;
            cur = 0;
            assert_true(r->n < 64);
            continue;
        }
        assert_true(cur < 48);
        r->tok[r->n][cur++] = t[i];
    }
    assert_int_equal(cur, 0); /* every record ends with a separator */
}

static void expect_record(const struct records *r, int32_t i, const int32_t *want, int32_t n) {
    if (i >= r->n) fail_msg("record %d missing (%d records)", i, r->n);
    if (r->len[i] != n || memcmp(r->tok[i], want, (size_t)n * sizeof *want) != 0) {
        char got[256] = "", exp[256] = "";
        for (int32_t k = 0; k < r->len[i]; k++) snprintf(got + strlen(got), sizeof got - strlen(got), " %d", r->tok[i][k]);
        for (int32_t k = 0; k < n; k++) snprintf(exp + strlen(exp), sizeof exp - strlen(exp), " %d", want[k]);
        fail_msg("record %d is [%s ], expected [%s ]", i, got, exp);
    }
}

#define REC(r, i, ...)                                                                                                \
    expect_record(r, i, (const int32_t[]){__VA_ARGS__}, (int32_t)(sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)))

/* A calibrator with parameters p over a prompt of n tokens (no earlier context). */
static struct sd_calib *calib_on(const struct sd_calib_params *p, const int32_t *prompt, int32_t n) {
    struct sd_calib *c;
    struct sd_err e = {0};
    assert_int_equal(sd_calib_create(p, &c, &e), SDNPU_OK);
    assert_int_equal(sd_calib_begin(c, NULL, 0, prompt, n, &e), SDNPU_OK);
    return c;
}

static void set1(struct sd_calib *c, int32_t pos, int32_t n, const int32_t *tok, const float *prob) {
    struct sd_err e = {0};
    assert_int_equal(sd_calib_set(c, pos, tok, prob, n, &e), SDNPU_OK);
}

/* The worked example. Context 1 2 3 4 5 6, key of 2 tokens, top_k 3,
 * min_prob 0.2:
 *   pos 0 (1): {2 .9}: the context's own next token, nothing else -> no root;
 *   pos 1 (2): {7 .5, 3 .4, 9 .1}: 9 is below min_prob; 7 is not in the
 *     context (a leaf); 3 is found at pos 2 (left context "1 2" shared),
 *     whose prediction {4 .8} continues it; pos 3 has none: a leaf;
 *   pos 2 (3): {4 .8} agrees with the context -> no root;
 *   pos 5 (6), the last: {2 .6, 8 .25}: 2 is found at pos 1 (left context
 *     "6 2" never occurs, "2" does), which continues with 7 (.3) and 3
 *     (.24); 3 continues from pos 2 with 4 (.192).
 * Records, each node's children least likely first: */
static struct sd_calib *worked(int32_t depth, int32_t budget) {
    struct sd_calib_params p = sd_calib_default_params();
    p.top_k = 3;
    p.min_prob = 0.2f;
    p.prefix = 2;
    p.max_depth = depth;
    p.node_budget = budget;
    p.max_store = 100;
    const int32_t ctx[] = {1, 2, 3, 4, 5, 6};
    struct sd_calib *c = calib_on(&p, ctx, 6);
    set1(c, 0, 1, (const int32_t[]){2}, (const float[]){0.9f});
    set1(c, 1, 3, (const int32_t[]){7, 3, 9}, (const float[]){0.5f, 0.4f, 0.1f});
    set1(c, 2, 1, (const int32_t[]){4}, (const float[]){0.8f});
    set1(c, 5, 2, (const int32_t[]){2, 8}, (const float[]){0.6f, 0.25f});
    return c;
}

static void build(struct sd_calib *c, struct records *r, struct sd_sam **store_out) {
    struct sd_sam *store;
    struct sd_err e = {0};
    assert_int_equal(sd_sam_create(0, &store, &e), SDNPU_OK);
    assert_int_equal(sd_calib_build(c, store, &e), SDNPU_OK);
    assert_true(sd_sam_frozen(store));
    read_records(store, r);
    if (store_out) *store_out = store;
    else sd_sam_free(store);
}

static void test_worked_example(void **state) {
    (void)state;
    struct sd_calib *c = worked(3, 12);
    struct records r;
    build(c, &r, NULL);
    assert_int_equal(r.n, 5);
    REC(&r, 0, 1, 2, 3, 4);
    REC(&r, 1, 1, 2, 7);
    REC(&r, 2, 5, 6, 8);
    REC(&r, 3, 5, 6, 2, 3, 4);
    REC(&r, 4, 5, 6, 2, 7);
    struct sd_calib_stats st = sd_calib_stats(c);
    assert_int_equal(st.n_roots, 2);
    assert_int_equal(st.n_records, 5);
    assert_int_equal(st.n_nodes, 3 + 5);
    assert_int_equal(st.n_tokens, 4 + 3 + 3 + 5 + 4 + 5);
    assert_false(st.truncated);
    sd_calib_free(c);
}

/* Budgets: two nodes per root take the two most probable paths' nodes
 * (best first); one level deep stops every path at its first token. */
static void test_budgets(void **state) {
    (void)state;
    struct records r;
    struct sd_calib *c = worked(3, 2);
    build(c, &r, NULL);
    assert_int_equal(r.n, 3);
    REC(&r, 0, 1, 2, 3);
    REC(&r, 1, 1, 2, 7);
    REC(&r, 2, 5, 6, 2, 7); /* 2 (.6), then 7 (.3) beats 8 (.25) */
    sd_calib_free(c);

    c = worked(1, 12);
    build(c, &r, NULL);
    assert_int_equal(r.n, 4);
    REC(&r, 0, 1, 2, 3);
    REC(&r, 1, 1, 2, 7);
    REC(&r, 2, 5, 6, 8);
    REC(&r, 3, 5, 6, 2);
    sd_calib_free(c);
}

/* Successors under min_prob or past top_k are never sampled. */
static void test_sampling_threshold(void **state) {
    (void)state;
    struct sd_calib_params p = sd_calib_default_params();
    p.top_k = 2;
    p.min_prob = 0.3f;
    p.prefix = 1;
    const int32_t ctx[] = {10, 11};
    struct sd_calib *c = calib_on(&p, ctx, 2);
    /* k = 3 is cut to top_k = 2; 21 (.29) is under min_prob. */
    set1(c, 1, 3, (const int32_t[]){20, 21, 22}, (const float[]){0.6f, 0.29f, 0.1f});
    struct records r;
    build(c, &r, NULL);
    assert_int_equal(r.n, 1);
    REC(&r, 0, 11, 20);
    int32_t tok[SD_CALIB_MAX_K];
    float prob[SD_CALIB_MAX_K];
    assert_int_equal(sd_calib_get(c, 1, tok, prob), 2);
    assert_int_equal(sd_calib_get(c, 0, tok, prob), 0);
    assert_int_equal(sd_calib_get(c, 2, tok, prob), 0);
    sd_calib_free(c);
}

/* A cycle (each position predicts the token the context has two back) is
 * followed until the depth limit, once. */
static void test_cycle(void **state) {
    (void)state;
    struct sd_calib_params p = sd_calib_default_params();
    p.prefix = 2;
    p.max_depth = 8;
    const int32_t ctx[] = {1, 2, 1, 2, 1, 2};
    struct sd_calib *c = calib_on(&p, ctx, 6);
    for (int32_t i = 0; i < 6; i++) set1(c, i, 1, (const int32_t[]){ctx[i] == 1 ? 2 : 1}, (const float[]){1.0f});
    struct records r;
    build(c, &r, NULL);
    /* Every position but the last agrees with the context: one root. */
    assert_int_equal(sd_calib_stats(c).n_roots, 1);
    assert_int_equal(r.n, 1);
    REC(&r, 0, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2);
    sd_calib_free(c);
}

/* A context of one token repeated, each position predicting a token the
 * context lacks besides: every position is a root, and the store stays
 * within max_store tokens per position; records are keyed and bounded. */
static void test_repeated_tokens(void **state) {
    (void)state;
    struct sd_calib_params p = sd_calib_default_params();
    struct sd_calib *c;
    struct sd_err e = {0};
    assert_int_equal(sd_calib_create(&p, &c, &e), SDNPU_OK);
    enum { N = 2000 };
    static int32_t ctx[N];
    for (int32_t i = 0; i < N; i++) ctx[i] = 5;
    assert_int_equal(sd_calib_begin(c, NULL, 0, ctx, N, &e), SDNPU_OK);
    int32_t n_sub;
    const int32_t *sub = sd_calib_subset(c, &n_sub);
    assert_int_equal(n_sub, 1);
    assert_int_equal(sub[0], 5);
    for (int32_t i = 0; i < N; i++) set1(c, i, 2, (const int32_t[]){5, 9}, (const float[]){0.7f, 0.3f});
    struct sd_sam *store;
    assert_int_equal(sd_sam_create(0, &store, &e), SDNPU_OK);
    assert_int_equal(sd_calib_build(c, store, &e), SDNPU_OK);
    struct sd_calib_stats st = sd_calib_stats(c);
    assert_true(st.n_tokens <= (int64_t)N * p.max_store);
    assert_int_equal((int64_t)sd_sam_n_tokens(store), st.n_tokens);
    assert_true(st.n_nodes <= (int64_t)N * p.node_budget);
    assert_true(st.truncated); /* 12 nodes a root need more than 24 tokens a position */
    const int32_t *t = sd_sam_text(store);
    int32_t len = 0;
    for (size_t i = 0; i < sd_sam_n_tokens(store); i++) {
        if (t[i] >= 0) {
            assert_true(t[i] == 5 || t[i] == 9);
            len++;
            continue;
        }
        assert_true(len >= 2 && len <= p.prefix + p.max_depth); /* a key (shorter at the start) and a path */
        len = 0;
    }
    sd_sam_free(store);
    sd_calib_free(c);
}

/* One token of context: the root is the last position; its own prediction
 * of itself is followed (a cycle of one) to the depth limit. */
static void test_one_token(void **state) {
    (void)state;
    struct sd_calib_params p = sd_calib_default_params();
    p.max_depth = 4;
    struct sd_calib *c = calib_on(&p, (const int32_t[]){42}, 1);
    set1(c, 0, 2, (const int32_t[]){42, 7}, (const float[]){0.5f, 0.4f});
    struct records r;
    build(c, &r, NULL);
    /* Best first with 12 nodes: 42 (.5), 7 (.4), 42 42 (.25), 42 7 (.2), ... */
    assert_true(r.n >= 2);
    REC(&r, r.n - 1, 42, 42, 42, 42, 42);
    for (int32_t i = 0; i < r.n; i++) assert_int_equal(r.tok[i][0], 42);
    /* No prompt at all: nothing to calibrate, an empty store. */
    struct sd_err e = {0};
    assert_int_equal(sd_calib_begin(c, (const int32_t[]){1, 2}, 2, NULL, 0, &e), SDNPU_OK);
    build(c, &r, NULL);
    assert_int_equal(r.n, 0);
    sd_calib_free(c);
}

/* A context far past the store bound: the build stops at the bound and
 * keeps what it stored. Earlier context (no predictions) is searched but
 * never a root. */
static void test_store_bound(void **state) {
    (void)state;
    struct sd_calib_params p = sd_calib_default_params();
    p.max_store = 2;
    struct sd_calib *c;
    struct sd_err e = {0};
    assert_int_equal(sd_calib_create(&p, &c, &e), SDNPU_OK);
    enum { N = 20000, OLD = 100 };
    static int32_t ctx[N];
    uint64_t rng = 7;
    for (int32_t i = 0; i < N; i++) ctx[i] = (int32_t)(sdt_rand_u64(&rng) % 50);
    assert_int_equal(sd_calib_begin(c, ctx, OLD, ctx + OLD, N - OLD, &e), SDNPU_OK);
    for (int32_t i = 0; i < N - OLD; i++)
        set1(c, i, 2, (const int32_t[]){(int32_t)(sdt_rand_u64(&rng) % 60), (int32_t)(sdt_rand_u64(&rng) % 60)},
             (const float[]){0.5f, 0.3f});
    struct sd_sam *store;
    assert_int_equal(sd_sam_create(0, &store, &e), SDNPU_OK);
    assert_int_equal(sd_calib_build(c, store, &e), SDNPU_OK);
    struct sd_calib_stats st = sd_calib_stats(c);
    assert_true(st.truncated);
    assert_true(st.n_tokens <= (int64_t)(N - OLD) * 2);
    assert_true(st.n_records > 0);
    assert_true(sd_sam_frozen(store));
    sd_sam_free(store);
    /* Bad input is a status with a message. */
    assert_int_equal(sd_calib_begin(c, NULL, 0, (const int32_t[]){3, -1}, 2, &e), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "negative"));
    assert_int_equal(sd_calib_set(c, N, NULL, NULL, 0, &e), SDNPU_ERR_INVALID_ARG);
    sd_calib_free(c);
    p = sd_calib_default_params();
    p.top_k = 0;
    assert_int_equal(sd_calib_create(&p, &c, &e), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "top_k"));
    assert_null(c);
}

/* Collecting: a row of subset logits becomes the top_k tokens with their
 * probabilities, normalised over the subset (a direct softmax here). */
static void test_collect(void **state) {
    (void)state;
    struct sd_calib_params p = sd_calib_default_params();
    p.top_k = 2;
    const int32_t prompt[] = {9, 3, 9, 5};
    struct sd_calib *c = calib_on(&p, prompt, 4);
    int32_t n_sub;
    const int32_t *sub = sd_calib_subset(c, &n_sub);
    assert_int_equal(n_sub, 3);
    assert_true(sub[0] == 3 && sub[1] == 5 && sub[2] == 9);
    /* Rows 1 and 2; columns are tokens 3, 5, 9. */
    const float lg[2][3] = {{1.0f, 3.0f, 2.0f}, {-4.0f, 0.5f, 0.5f}};
    assert_true(sd_calib_collect(c, 1, 2, &lg[0][0]));
    assert_false(sd_calib_collect(c, 3, 2, &lg[0][0])); /* past the prompt */
    int32_t tok[SD_CALIB_MAX_K];
    float prob[SD_CALIB_MAX_K];
    assert_int_equal(sd_calib_get(c, 1, tok, prob), 2);
    double z = exp(1.0) + exp(3.0) + exp(2.0);
    assert_true(tok[0] == 5 && tok[1] == 9);
    assert_float_equal(prob[0], exp(3.0) / z, 1e-6);
    assert_float_equal(prob[1], exp(2.0) / z, 1e-6);
    /* A tie goes to the lower token. */
    assert_int_equal(sd_calib_get(c, 2, tok, prob), 2);
    assert_true(tok[0] == 5 && tok[1] == 9);
    assert_float_equal(prob[0], prob[1], 0);
    assert_int_equal(sd_calib_get(c, 0, tok, prob), 0);
    assert_int_equal(sd_calib_stats(c).n_positions, 2);
    sd_calib_free(c);
}

/* A store with one record 2 3 9 8. */
static struct sd_sam *hand_store(void) {
    struct sd_sam *s;
    struct sd_err e = {0};
    assert_int_equal(sd_sam_create(0, &s, &e), SDNPU_OK);
    assert_int_equal(sd_sam_append_n(s, (const int32_t[]){2, 3, 9, 8, SD_SAM_SEP}, 5, &e), SDNPU_OK);
    assert_int_equal(sd_sam_freeze(s, &e), SDNPU_OK);
    return s;
}

static void draft_with(const char *name, const int32_t *ctx, size_t n, int32_t lead, struct sd_draft_tree *t) {
    struct sd_drafter *d;
    struct sd_err e = {0};
    struct sd_sam *store = hand_store();
    assert_int_equal(sd_drafter_create(name, 64, &d, &e), SDNPU_OK);
    assert_int_equal(sd_drafter_observe_context(d, ctx, n, &e), SDNPU_OK);
    assert_int_equal(sd_drafter_attach(d, SD_DRAFT_STORE_CALIB, store, &e), SDNPU_OK);
    struct sd_draft_params p = sd_draft_default_params();
    p.calib_lead = lead;
    assert_int_equal(sd_drafter_draft(d, &p, t, &e), SDNPU_OK);
    sd_drafter_free(d);
    sd_sam_free(store);
}

/* Every drafter drafts from the calibrated store: where the context has
 * no continuation the calibrated one is the main path; where the context
 * matches longer it wins, unless calib_lead lets a calibrated match of
 * that length lead. */
static void test_drafters(void **state) {
    (void)state;
    struct sd_draft_tree t;
    struct sd_err e = {0};
    assert_int_equal(sd_draft_tree_init(&t, 32, &e), SDNPU_OK);
    const char *names[] = {"pld", "sam", "sam-tree"};
    for (int k = 0; k < 3; k++) {
        draft_with(names[k], (const int32_t[]){1, 2, 3}, 3, 0, &t);
        assert_int_equal(t.main_store, SD_DRAFT_STORE_CALIB);
        assert_true(t.n_main == 2 && t.tok[0] == 9 && t.tok[1] == 8);
        /* 1 2 3 recurs in the context (match 3, then 4); calib matches 2 3. */
        const int32_t ctx[] = {1, 2, 3, 4, 1, 2, 3};
        draft_with(names[k], ctx, 7, 0, &t);
        assert_int_equal(t.main_store, SD_DRAFT_STORE_CONTEXT);
        assert_int_equal(t.tok[0], 4);
        draft_with(names[k], ctx, 7, 2, &t);
        assert_int_equal(t.main_store, SD_DRAFT_STORE_CALIB);
        assert_true(t.tok[0] == 9 && t.tok[1] == 8);
    }
    /* Calibrated sequences last (calib_lead -1, the default): a shorter
     * context match (3 -> 7) drafts before the calibrated 2 3 -> 9 8,
     * which leads by match length with calib_lead 0. */
    const int32_t ctx2[] = {5, 3, 7, 2, 3};
    for (int k = 0; k < 3; k++) {
        draft_with(names[k], ctx2, 5, -1, &t);
        assert_int_equal(t.main_store, SD_DRAFT_STORE_CONTEXT);
        assert_int_equal(t.tok[0], 7);
        if (k == 2) assert_true(sd_draft_tree_child(&t, -1, 9) >= 0);
        draft_with(names[k], ctx2, 5, 0, &t);
        assert_int_equal(t.main_store, SD_DRAFT_STORE_CALIB);
        assert_int_equal(t.tok[0], 9);
    }
    assert_int_equal(sd_draft_default_params().calib_lead, -1);
    /* sam-tree keeps the calibrated path as a side branch when the context leads. */
    draft_with("sam-tree", (const int32_t[]){1, 2, 3, 4, 1, 2, 3}, 7, 0, &t);
    assert_true(sd_draft_tree_child(&t, -1, 9) >= 0);
    /* Detaching works for every drafter; pld takes no history store. */
    struct sd_drafter *d;
    assert_int_equal(sd_drafter_create("pld", 8, &d, &e), SDNPU_OK);
    assert_int_equal(sd_drafter_attach(d, SD_DRAFT_STORE_CALIB, NULL, &e), SDNPU_OK);
    assert_int_equal(sd_drafter_attach(d, SD_DRAFT_STORE_HISTORY, NULL, &e), SDNPU_ERR_UNSUPPORTED);
    sd_drafter_free(d);
    sd_draft_tree_free(&t);
}

/* The subset head computes the full head's logits at those tokens, bit
 * for bit (each output's sum has its own fixed order), and the runtime's
 * subset sink hands every prefilled row's subset logits, equal to the full
 * sink's rows at those tokens. */
struct full_copy {
    float *dst;
    int32_t nv;
};
static bool full_sink(void *ud, int32_t pos0, int32_t n, const float *lg) {
    struct full_copy *f = ud;
    memcpy(f->dst + (size_t)pos0 * (size_t)f->nv, lg, (size_t)n * (size_t)f->nv * sizeof(float));
    return true;
}
struct sub_copy {
    float *dst;
    int32_t n_tok, rows;
};
static bool sub_sink(void *ud, int32_t pos0, int32_t n, const float *lg) {
    struct sub_copy *f = ud;
    memcpy(f->dst + (size_t)pos0 * (size_t)f->n_tok, lg, (size_t)n * (size_t)f->n_tok * sizeof(float));
    f->rows += n;
    return true;
}

static void test_subset_head(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/test_calib_tiny.gguf", SD_BUILD_DIR);
    struct sdnpu_model *m = sdt_tiny_load(&(struct sdt_tiny_opts){.arch = "gemma3"}, path);
    assert_non_null(m);
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 128;
    sp.n_batch = 16;
    sp.n_threads = 2;
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    struct sd_rt *rt = sd_tool_session_rt(s);
    int32_t nv = m->m->cfg.n_vocab;
    enum { N = 37 };
    int32_t toks[N];
    uint64_t rng = 3;
    for (int32_t i = 0; i < N; i++) toks[i] = 1 + (int32_t)(sdt_rand_u64(&rng) % (uint64_t)(nv - 1));
    const int32_t subset[] = {7, 1, (int32_t)nv - 1, 30, 2};
    const int32_t n_sub = 5;
    float *full = malloc((size_t)N * (size_t)nv * sizeof(float));
    float *sub = malloc((size_t)N * n_sub * sizeof(float));
    struct full_copy fc = {full, nv};
    struct sub_copy sc = {sub, n_sub, 0};
    struct sd_logit_sink fs = {full_sink, &fc};
    struct sd_subset_sink ss = {subset, n_sub, sub_sink, &sc};
    struct sd_err e = {0};
    size_t prepared0 = sd_rt_prepared_bytes(rt);
    assert_int_equal(sd_rt_prefill(rt, toks, N, 0, &fs, &ss, NULL, NULL, &e), SDNPU_OK);
    assert_int_equal(sc.rows, N);
    for (int32_t r = 0; r < N; r++)
        for (int32_t j = 0; j < n_sub; j++)
            if (memcmp(&sub[r * n_sub + j], &full[(size_t)r * (size_t)nv + (size_t)subset[j]], sizeof(float)) != 0)
                fail_msg("row %d token %d: subset head %.9g, full head %.9g", r, subset[j], (double)sub[r * n_sub + j],
                         (double)full[(size_t)r * (size_t)nv + (size_t)subset[j]]);
    /* The subset head is the call's own: released when the prefill returns. */
    assert_true(sd_rt_prepared_bytes(rt) >= prepared0);
    size_t after = sd_rt_prepared_bytes(rt);
    sd_rt_kv_truncate(rt, 0);
    assert_int_equal(sd_rt_prefill(rt, toks, N, 0, NULL, &ss, NULL, NULL, &e), SDNPU_OK);
    assert_int_equal(sd_rt_prepared_bytes(rt), after);
    /* A bad subset is refused by name, and prefills nothing. */
    const int32_t dup[] = {4, 4};
    struct sd_subset_sink bad = {dup, 2, sub_sink, &sc};
    sd_rt_kv_truncate(rt, 0);
    assert_int_equal(sd_rt_prefill(rt, toks, N, 0, NULL, &bad, NULL, NULL, &e), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "repeats token 4"));
    const int32_t out[] = {nv};
    struct sd_subset_sink bad2 = {out, 1, sub_sink, &sc};
    assert_int_equal(sd_rt_prefill(rt, toks, N, 0, NULL, &bad2, NULL, NULL, &e), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "outside"));
    free(full);
    free(sub);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* Text out of a generation. */
struct text {
    char buf[4096];
    size_t n;
};
static bool collect_text(const char *piece, size_t len, void *user) {
    struct text *t = user;
    if (t->n + len < sizeof t->buf) {
        memcpy(t->buf + t->n, piece, len);
        t->n += len;
    }
    return true;
}

static void generate(struct sdnpu_model *m, size_t mem_limit, const char *spec, struct text *out,
                     struct sdnpu_stats *st) {
    struct sd_err e = {0};
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 256;
    sp.n_batch = 32;
    sp.mem_limit = mem_limit;
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sp, &s), SDNPU_OK);
    /* Every graph set prepared up front: with a limit, nothing is left. */
    for (int set = 0; set < SD_SET_N; set++)
        assert_int_equal(sd_rt_prepare_set(sd_tool_session_rt(s), (enum sd_graph_set)set, &e), SDNPU_OK);
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.sampling.temperature = 0;
    gp.n_predict = 24;
    gp.on_text = collect_text;
    gp.user = out;
    assert_int_equal(sdnpu_spec_parse(spec, &gp.spec, NULL, 0), SDNPU_OK);
    const char *prompt = "ab cd ab ef gh ab cd abcd ef ab cd ab gh ef ab cd ab";
    int rc = sdnpu_session_generate(s, prompt, strlen(prompt), &gp, st);
    if (rc) fail_msg("%s: %s", spec, sdnpu_session_last_error(s));
    sdnpu_session_free(s);
}

/* Where the subset head does not fit the memory limit the request runs
 * without calibration, with the same output. */
static void test_memory_limit(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/test_calib_tiny_mem.gguf", SD_BUILD_DIR);
    struct sdnpu_model *m = sdt_tiny_load(&(struct sdt_tiny_opts){.arch = "llama"}, path);
    assert_non_null(m);
    struct text a = {0}, b = {0}, c = {0};
    struct sdnpu_stats sa, sb, sc;
    generate(m, 0, "sam", &a, &sa);
    /* A limit far above the need: the sets of a limited session (no
     * remainder set), calibration on. */
    generate(m, (size_t)1 << 40, "sam+calib", &b, &sb);
    assert_true(sb.n_calib_records > 0);
    /* What the request's graphs hold, without the subset head (released). */
    generate(m, sb.prepared_bytes, "sam+calib", &c, &sc);
    assert_int_equal(sc.n_calib_records, 0);
    assert_int_equal(a.n, b.n);
    assert_int_equal(a.n, c.n);
    assert_memory_equal(a.buf, b.buf, a.n);
    assert_memory_equal(a.buf, c.buf, a.n);
    sdnpu_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_example), cmocka_unit_test(test_budgets),    cmocka_unit_test(test_sampling_threshold),
        cmocka_unit_test(test_cycle),          cmocka_unit_test(test_repeated_tokens), cmocka_unit_test(test_one_token),
        cmocka_unit_test(test_store_bound),    cmocka_unit_test(test_collect),    cmocka_unit_test(test_drafters),
        cmocka_unit_test(test_subset_head),    cmocka_unit_test(test_memory_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
