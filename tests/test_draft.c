/* tests/test_draft.c - the drafters and the draft tree: pld and sam drafts
 * on hand-made sequences worked out by hand, the tree's invariants (parent
 * before child, distinct sibling tokens, depth, branching and budget, the
 * main path equal to the linear sam draft, every path grounded in a store),
 * the sam draft against a brute-force search, multi-store merging, API
 * misuse, and an allocation-failure sweep. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "draft/draft.h"
#include "engine/history.h"
#include "util_common.h"

static struct sd_drafter *mk(const char *name) {
    struct sd_drafter *d = NULL;
    struct sd_err err = {0};
    assert_int_equal(sd_drafter_create(name, 64, &d, &err), SDNPU_OK);
    assert_string_equal(sd_drafter_name(d), name);
    return d;
}

static void feed(struct sd_drafter *d, const int32_t *ctx, size_t n_ctx, const int32_t *out, size_t n_out) {
    assert_int_equal(sd_drafter_reset(d, NULL), SDNPU_OK);
    if (n_ctx) assert_int_equal(sd_drafter_observe_context(d, ctx, n_ctx, NULL), SDNPU_OK);
    for (size_t i = 0; i < n_out; i++)
        assert_int_equal(sd_drafter_observe_output(d, out[i], NULL), SDNPU_OK);
}

static void expect_tree(const struct sd_draft_tree *t, const int32_t *tok, const int32_t *parent, int32_t n) {
    assert_int_equal(t->n, n);
    for (int32_t i = 0; i < n; i++) {
        assert_int_equal(t->tok[i], tok[i]);
        assert_int_equal(t->parent[i], parent[i]);
    }
    assert_int_equal(sd_draft_tree_validate(t, NULL, NULL), SDNPU_OK);
}

/* ------------------------------------------------------------------ pld */

static void test_pld_lookup_hand(void **state) {
    (void)state;
    int32_t out[16], ng;
    /* The last 3-gram "1 2 3" occurred at 0..2; what followed is 4 5 6 7. */
    int32_t a[] = {1, 2, 3, 4, 5, 6, 7, 1, 2, 3};
    assert_int_equal(sd_pld_lookup(a, 10, 3, 1, out, 4, &ng), 4);
    assert_int_equal(ng, 3);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[3], 7);
    /* "5 1 2" is new; "1 2" occurred at 0..1 and 3..4: the most recent
     * wins, so the draft is 8 5 1. */
    int32_t b[] = {1, 2, 9, 1, 2, 8, 5, 1, 2};
    assert_int_equal(sd_pld_lookup(b, 9, 3, 1, out, 3, &ng), 3);
    assert_int_equal(ng, 2);
    assert_int_equal(out[0], 8);
    assert_int_equal(out[1], 5);
    assert_int_equal(out[2], 1);
    /* Down to unigrams: "7" at 0 is followed by 3 4 7. */
    int32_t c[] = {7, 3, 4, 7};
    assert_int_equal(sd_pld_lookup(c, 4, 3, 1, out, 16, &ng), 3);
    assert_int_equal(ng, 1);
    assert_int_equal(out[0], 3);
    assert_int_equal(out[2], 7);
    /* With min_ngram 2 the unigram does not count. */
    assert_int_equal(sd_pld_lookup(c, 4, 3, 2, out, 16, &ng), 0);
    assert_int_equal(ng, 0);
    /* Nothing repeats. */
    int32_t d[] = {1, 2, 3};
    assert_int_equal(sd_pld_lookup(d, 3, 3, 1, out, 16, NULL), 0);
    /* The copy may run into the n-gram itself: "5 5" ends at 1, then 5. */
    int32_t e[] = {5, 5, 5};
    assert_int_equal(sd_pld_lookup(e, 3, 3, 1, out, 16, &ng), 1);
    assert_int_equal(ng, 2);
    assert_int_equal(out[0], 5);
}

static void test_pld_drafter(void **state) {
    (void)state;
    struct sd_drafter *d = mk("pld");
    struct sd_draft_tree t;
    assert_int_equal(sd_draft_tree_init(&t, 64, NULL), SDNPU_OK);
    struct sd_draft_params p = sd_draft_default_params();
    /* prompt+output = 1 2 3 4 5 6 1 2 3 7 8 | 9 1 2: "9 1 2" is new, "1 2"
     * last occurred at 6..7, and pld copies on through the output. */
    int32_t ctx[] = {1, 2, 3, 4, 5, 6, 1, 2, 3, 7, 8}, out[] = {9, 1, 2};
    feed(d, ctx, 11, out, 3);
    assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
    int32_t want[] = {3, 7, 8, 9, 1, 2}, par[] = {-1, 0, 1, 2, 3, 4};
    expect_tree(&t, want, par, 6);
    assert_int_equal(t.n_main, 6);
    assert_int_equal(t.main_match, 2);
    /* max_depth cuts it. */
    p.max_depth = 2;
    assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
    expect_tree(&t, want, par, 2);
    struct sd_err err = {0};
    assert_int_equal(sd_drafter_attach(d, SD_DRAFT_STORE_HISTORY, NULL, &err), SDNPU_ERR_UNSUPPORTED);
    assert_true(strlen(err.msg) > 0);
    sd_draft_tree_free(&t);
    sd_drafter_free(d);
}

/* ------------------------------------------------------------------ sam */

static void test_sam_hand(void **state) {
    (void)state;
    struct sd_drafter *d = mk("sam");
    struct sd_draft_tree t;
    assert_int_equal(sd_draft_tree_init(&t, 64, NULL), SDNPU_OK);
    struct sd_draft_params p = sd_draft_default_params();

    /* Same text as the pld case, but the context store ends with the
     * context: "1 2" most recently at 6..7, followed by 3 7 8. */
    int32_t ctx[] = {1, 2, 3, 4, 5, 6, 1, 2, 3, 7, 8}, out[] = {9, 1, 2};
    feed(d, ctx, 11, out, 3);
    assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
    int32_t w1[] = {3, 7, 8}, p1[] = {-1, 0, 1};
    expect_tree(&t, w1, p1, 3);
    assert_int_equal(t.main_store, SD_DRAFT_STORE_CONTEXT);
    assert_int_equal(t.main_match, 2);

    /* Output store only: "5 6" recurs, first at 0..1, followed by 7 8 5 6
     * (the copy runs up to the present). */
    int32_t o2[] = {5, 6, 7, 8, 5, 6};
    feed(d, NULL, 0, o2, 6);
    assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
    int32_t w2[] = {7, 8, 5, 6}, p2[] = {-1, 0, 1, 2};
    expect_tree(&t, w2, p2, 4);
    assert_int_equal(t.main_store, SD_DRAFT_STORE_OUTPUT);
    assert_int_equal(t.main_match, 2);

    /* The context's own tail counts as generated text: right after
     * prefill, "... 1 2" already matches. */
    int32_t c3[] = {4, 1, 2, 6, 6, 1, 2};
    feed(d, c3, 7, NULL, 0);
    assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
    int32_t w3[] = {6, 6, 1, 2}, p3[] = {-1, 0, 1, 2};
    expect_tree(&t, w3, p3, 4);

    /* min_match 3: "1 2" is not enough. */
    p.min_match = 3;
    feed(d, ctx, 11, out, 3);
    assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
    assert_int_equal(t.n, 0);
    assert_int_equal(t.main_store, SD_DRAFT_STORE_NONE);
    sd_draft_tree_free(&t);
    sd_drafter_free(d);
}

static void test_sam_tree_hand(void **state) {
    (void)state;
    struct sd_drafter *d = mk("sam-tree");
    struct sd_draft_tree t;
    assert_int_equal(sd_draft_tree_init(&t, 64, NULL), SDNPU_OK);
    struct sd_draft_params p = sd_draft_default_params();
    /* Context 1 2 3 1 2 4 9, output 1 2. "1 2" occurred twice; the most
     * recent (ending at 4) gives the main path 4 9; the other occurrence
     * gives a sibling 3 with its continuation 1 2 4 9. */
    int32_t ctx[] = {1, 2, 3, 1, 2, 4, 9}, out[] = {1, 2};
    feed(d, ctx, 7, out, 2);
    assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
    int32_t w[] = {4, 9, 3, 1, 2, 4, 9}, par[] = {-1, 0, -1, 2, 3, 4, 5};
    expect_tree(&t, w, par, 7);
    assert_int_equal(t.n_main, 2);
    assert_int_equal(t.depth[6], 5);
    /* A budget of 4 keeps the main path and cuts the sibling chain. */
    p.budget = 4;
    assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
    expect_tree(&t, w, par, 4);
    /* max_branch 1: a chain only. */
    p = sd_draft_default_params();
    p.max_branch = 1;
    assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
    expect_tree(&t, w, par, 2);
    /* branch_levels 0 also leaves only the main path. */
    p = sd_draft_default_params();
    p.branch_levels = 0;
    assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
    expect_tree(&t, w, par, 2);
    sd_draft_tree_free(&t);
    sd_drafter_free(d);
}

/* Two stores, one tree: the history's continuation shares its first token
 * with the context's and branches after it. */
static void test_multi_store_merge(void **state) {
    (void)state;
    struct sd_history *h = NULL;
    assert_int_equal(sd_history_open(NULL, NULL, &h, NULL), SDNPU_OK);
    int32_t r0[] = {1, 2, 3, 8, 8}, r1[] = {7, 1, 2, 3, 5, 5};
    assert_int_equal(sd_history_append(h, r0, 5, "a", 1, NULL), SDNPU_OK);
    assert_int_equal(sd_history_append(h, r1, 6, NULL, 0, NULL), SDNPU_OK);
    struct sd_sam *hs = NULL;
    assert_int_equal(sd_sam_create(0, &hs, NULL), SDNPU_OK);
    assert_int_equal(sd_history_to_sam(h, hs, NULL), SDNPU_OK);
    assert_int_equal(sd_sam_n_tokens(hs), 13); /* 5 + 6 tokens, 2 separators */

    struct sd_drafter *tree = mk("sam-tree"), *lin = mk("sam");
    assert_int_equal(sd_drafter_attach(tree, SD_DRAFT_STORE_HISTORY, hs, NULL), SDNPU_OK);
    assert_int_equal(sd_drafter_attach(lin, SD_DRAFT_STORE_HISTORY, hs, NULL), SDNPU_OK);
    struct sd_draft_tree t;
    assert_int_equal(sd_draft_tree_init(&t, 64, NULL), SDNPU_OK);
    struct sd_draft_params p = sd_draft_default_params();

    /* Output "1 2": context and history both match 2 tokens; the tie goes
     * to the context (main path 3 4). In the history "1 2" occurred twice:
     * most recently in record 1 (then 3 5 5), so that is the history's
     * chain; it merges at 3 and branches to 5 5. The other history
     * occurrence (3 8 8) is not a separate candidate: one chain per store. */
    int32_t ctx[] = {5, 1, 2, 3, 4}, out[] = {1, 2};
    feed(tree, ctx, 5, out, 2);
    assert_int_equal(sd_drafter_draft(tree, &p, &t, NULL), SDNPU_OK);
    int32_t w[] = {3, 4, 5, 5}, par[] = {-1, 0, 0, 2};
    expect_tree(&t, w, par, 4);
    assert_int_equal(t.main_store, SD_DRAFT_STORE_CONTEXT);
    feed(lin, ctx, 5, out, 2);
    assert_int_equal(sd_drafter_draft(lin, &p, &t, NULL), SDNPU_OK);
    expect_tree(&t, w, par, 2);

    /* Output "7 1 2 3": the history matches 4 tokens, the context 3, so
     * the history leads (5 5) and the context adds a sibling 4. "7 1 2 3"
     * is unique in the history, but its shorter suffix "1 2 3" was also
     * followed by 8 8 (record 0): that fills the root's third branch. */
    int32_t out2[] = {7, 1, 2, 3};
    feed(tree, ctx, 5, out2, 4);
    assert_int_equal(sd_drafter_draft(tree, &p, &t, NULL), SDNPU_OK);
    int32_t w2[] = {5, 5, 4, 8, 8}, par2[] = {-1, 0, -1, -1, 3};
    expect_tree(&t, w2, par2, 5);
    assert_int_equal(t.main_store, SD_DRAFT_STORE_HISTORY);
    assert_int_equal(t.main_match, 4);

    /* Attaching after the context re-reads the generated tail: same draft. */
    struct sd_drafter *late = mk("sam-tree");
    feed(late, ctx, 5, out2, 4);
    assert_int_equal(sd_drafter_attach(late, SD_DRAFT_STORE_HISTORY, hs, NULL), SDNPU_OK);
    assert_int_equal(sd_drafter_draft(late, &p, &t, NULL), SDNPU_OK);
    expect_tree(&t, w2, par2, 5);
    /* Detaching drops it. */
    assert_int_equal(sd_drafter_attach(late, SD_DRAFT_STORE_HISTORY, NULL, NULL), SDNPU_OK);
    assert_int_equal(sd_drafter_draft(late, &p, &t, NULL), SDNPU_OK);
    assert_int_equal(t.main_store, SD_DRAFT_STORE_CONTEXT);
    int32_t w3[] = {4}, par3[] = {-1};
    expect_tree(&t, w3, par3, 1);

    sd_drafter_free(late);
    sd_drafter_free(tree);
    sd_drafter_free(lin);
    sd_draft_tree_free(&t);
    sd_sam_free(hs);
    sd_history_close(h);
}

/* ------------------------------------------------------------- the tree */

static void test_tree_builder(void **state) {
    (void)state;
    struct sd_draft_tree t;
    assert_int_equal(sd_draft_tree_init(&t, 8, NULL), SDNPU_OK);
    struct sd_draft_params p = sd_draft_default_params();
    p.max_depth = 3;
    p.max_branch = 2;
    int32_t a[] = {1, 2, 3, 4}, b[] = {1, 2, 5}, c[] = {1, 6}, e[] = {7}, f[] = {8};
    assert_int_equal(sd_draft_tree_add_chain(&t, -1, a, 4, &p), 3); /* depth 3 */
    assert_int_equal(sd_draft_tree_add_chain(&t, -1, b, 3, &p), 3); /* shares 1 2 */
    assert_int_equal(t.n, 4);
    assert_int_equal(sd_draft_tree_add_chain(&t, -1, c, 2, &p), 2);
    assert_int_equal(sd_draft_tree_add_chain(&t, -1, e, 1, &p), 1);
    assert_int_equal(sd_draft_tree_add_chain(&t, -1, f, 1, &p), 0); /* root has 2 children */
    assert_int_equal(sd_draft_tree_n_children(&t, -1), 2);
    assert_int_equal(sd_draft_tree_n_children(&t, 1), 2); /* 3 and 5 under 1 2 */
    assert_int_equal(sd_draft_tree_child(&t, 1, 5), 3);
    assert_int_equal(sd_draft_tree_child(&t, 1, 9), -1);
    assert_int_equal(sd_draft_tree_validate(&t, &p, NULL), SDNPU_OK);
    /* The array capacity caps the budget. */
    int32_t g[] = {7, 1, 1, 1};
    assert_int_equal(sd_draft_tree_add_chain(&t, -1, g, 4, &p), 3);
    assert_int_equal(t.n, 8);
    assert_int_equal(sd_draft_tree_add(&t, 7, 2, &p), -1);
    /* validate names broken trees. */
    struct sd_err err = {0};
    t.parent[5] = 5;
    assert_int_equal(sd_draft_tree_validate(&t, NULL, &err), SDNPU_ERR_STATE);
    assert_true(strstr(err.msg, "node 5") != NULL);
    t.parent[5] = -1;
    t.tok[3] = 3; /* now a duplicate of node 2 under node 1 */
    assert_int_equal(sd_draft_tree_validate(&t, NULL, &err), SDNPU_ERR_STATE);
    assert_true(strstr(err.msg, "siblings") != NULL);
    sd_draft_tree_free(&t);
    sd_draft_tree_free(&t); /* zeroed: fine */
    assert_int_equal(sd_draft_tree_init(&t, 0, NULL), SDNPU_ERR_INVALID_ARG);
}

/* ---------------------------------------------- random streams, brute force */

struct world {
    int32_t ctx[600];
    int32_t n_ctx;
    int32_t hist[900]; /* records separated by SD_SAM_SEP */
    int32_t n_hist;
    int32_t out[400];
    int32_t n_out;
};

/* Longest L >= min_match such that the generated text's last L tokens occur
 * in text[0..n) ending at some e <= e_max whose next token is a real token;
 * returns L (0: none) and the most recent such e. */
static int32_t bf_match(const int32_t *gen, int32_t n_gen, const int32_t *text, int32_t n, int32_t e_max,
                        int32_t min_match, int32_t from, int32_t *e_out) {
    /* For every end e, the common suffix of the generated text and
     * text[0..e]; the longest wins; among equals the first at or after
     * from (draft.h's follow; from < 0: none), else the latest. */
    int32_t best = 0, first_from = -1;
    for (int32_t e = 0; e <= SD_MIN(e_max, n - 2); e++) {
        if (text[e + 1] < 0) continue;
        int32_t l = 0;
        while (l <= e && l < n_gen && text[e - l] == gen[n_gen - 1 - l])
            l++;
        if (l > best) first_from = -1;
        if (l > 0 && l >= best) {
            best = l;
            *e_out = e;
            if (from >= 0 && e >= from && first_from < 0) first_from = e;
        }
    }
    if (first_from >= 0) *e_out = first_from;
    return best >= SD_MAX(min_match, 1) ? best : 0;
}

/* Does seq[0..m) occur in text[0..n)? */
static bool occurs(const int32_t *text, int32_t n, const int32_t *seq, int32_t m) {
    for (int32_t s = 0; s + m <= n; s++)
        if (memcmp(text + s, seq, (size_t)m * sizeof *seq) == 0) return true;
    return false;
}

static void gen_world(uint64_t *rng, struct world *w, int32_t alpha) {
    /* Phrases from a small phrase book, so texts share long spans. */
    int32_t book[8][12];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 12; j++)
            book[i][j] = (int32_t)(sdt_rand_u64(rng) % (uint64_t)alpha);
    w->n_ctx = 0;
    int32_t nc = 100 + (int32_t)(sdt_rand_u64(rng) % 400);
    while (w->n_ctx < nc) {
        uint64_t r = sdt_rand_u64(rng);
        if (r % 3 == 0) {
            w->ctx[w->n_ctx++] = (int32_t)((r >> 8) % (uint64_t)alpha);
        } else {
            const int32_t *ph = book[(r >> 8) % 8];
            int32_t len = 2 + (int32_t)((r >> 16) % 10);
            for (int32_t j = 0; j < len && w->n_ctx < nc; j++)
                w->ctx[w->n_ctx++] = ph[j];
        }
    }
    w->n_hist = 0;
    int32_t nh = (int32_t)(sdt_rand_u64(rng) % 800);
    while (w->n_hist < nh) {
        uint64_t r = sdt_rand_u64(rng);
        if (r % 20 == 0 && w->n_hist > 0 && w->hist[w->n_hist - 1] >= 0) {
            w->hist[w->n_hist++] = SD_SAM_SEP;
        } else if (r % 3 == 0) {
            w->hist[w->n_hist++] = (int32_t)((r >> 8) % (uint64_t)alpha);
        } else {
            const int32_t *ph = book[(r >> 8) % 8];
            int32_t len = 2 + (int32_t)((r >> 16) % 10);
            for (int32_t j = 0; j < len && w->n_hist < nh; j++)
                w->hist[w->n_hist++] = ph[j];
        }
    }
    w->n_out = 200 + (int32_t)(sdt_rand_u64(rng) % 200);
    for (int32_t i = 0; i < w->n_out;) {
        uint64_t r = sdt_rand_u64(rng);
        if (r % 4 == 0) {
            w->out[i++] = (int32_t)((r >> 8) % (uint64_t)alpha);
        } else {
            const int32_t *ph = book[(r >> 8) % 8];
            int32_t len = 2 + (int32_t)((r >> 16) % 10);
            for (int32_t j = 0; j < len && i < w->n_out; j++)
                w->out[i++] = ph[j];
        }
    }
}

static void test_random_streams(void **state) {
    (void)state;
    uint64_t rng = 2024;
    static struct world w;
    int32_t gen[1000];
    struct sd_draft_tree tt, tl, tp;
    assert_int_equal(sd_draft_tree_init(&tt, 80, NULL), SDNPU_OK);
    assert_int_equal(sd_draft_tree_init(&tl, 80, NULL), SDNPU_OK);
    assert_int_equal(sd_draft_tree_init(&tp, 80, NULL), SDNPU_OK);
    struct sd_drafter *dt = mk("sam-tree"), *dl = mk("sam"), *dp = mk("pld");
    long n_branchy = 0, n_steps = 0;
    for (int iter = 0; iter < 12; iter++) {
        int32_t alpha = 3 + iter % 6;
        gen_world(&rng, &w, alpha);
        struct sd_sam *hs = NULL;
        assert_int_equal(sd_sam_create(0, &hs, NULL), SDNPU_OK);
        assert_int_equal(sd_sam_append_n(hs, w.hist, (size_t)w.n_hist, NULL), SDNPU_OK);
        assert_int_equal(sd_sam_freeze(hs, NULL), SDNPU_OK);
        bool with_hist = iter % 3 != 2;
        const struct sd_sam *att = with_hist ? hs : NULL;
        assert_int_equal(sd_drafter_attach(dt, SD_DRAFT_STORE_HISTORY, att, NULL), SDNPU_OK);
        assert_int_equal(sd_drafter_attach(dl, SD_DRAFT_STORE_HISTORY, att, NULL), SDNPU_OK);
        feed(dt, w.ctx, (size_t)w.n_ctx, NULL, 0);
        feed(dl, w.ctx, (size_t)w.n_ctx, NULL, 0);
        feed(dp, w.ctx, (size_t)w.n_ctx, NULL, 0);
        memcpy(gen, w.ctx, (size_t)w.n_ctx * sizeof *gen);
        int32_t n_gen = w.n_ctx;
        /* Where the copying from the context stands (draft.h's follow): the
         * context end the last draft was copied from, and the context
         * position of the last copied token the output took. */
        int32_t copy_e = -1, read_at = -1;
        for (int32_t i = 0; i <= w.n_out; i++) {
            struct sd_draft_params p = sd_draft_default_params();
            uint64_t r = sdt_rand_u64(&rng);
            if (r % 2) {
                p.max_depth = 1 + (int32_t)((r >> 8) % 20);
                p.max_branch = 1 + (int32_t)((r >> 16) % 5);
                p.budget = 1 + (int32_t)((r >> 24) % 70);
                p.branch_levels = (int32_t)((r >> 32) % 5);
                p.min_match = 1 + (int32_t)((r >> 40) % 3);
            }
            assert_int_equal(sd_drafter_draft(dt, &p, &tt, NULL), SDNPU_OK);
            assert_int_equal(sd_drafter_draft(dl, &p, &tl, NULL), SDNPU_OK);
            assert_int_equal(sd_drafter_draft(dp, &p, &tp, NULL), SDNPU_OK);
            struct sd_err err = {0};
            int rc = sd_draft_tree_validate(&tt, &p, &err);
            if (rc) fail_msg("iter %d step %d: %s", iter, i, err.msg);
            assert_int_equal(sd_draft_tree_validate(&tl, &p, NULL), SDNPU_OK);
            assert_int_equal(sd_draft_tree_validate(&tp, &p, NULL), SDNPU_OK);
            assert_int_equal(tl.n, tl.n_main);
            assert_int_equal(tp.n, tp.n_main);
            /* The tree's main path is the linear draft. */
            assert_int_equal(tt.n_main, tl.n);
            assert_memory_equal(tt.tok, tl.tok, (size_t)tl.n * sizeof *tl.tok);
            assert_int_equal(tt.main_store, tl.main_store);
            assert_int_equal(tt.main_match, tl.main_match);
            n_branchy += tt.n > tt.n_main;
            n_steps++;

            /* The linear draft against brute force: the longest suffix of
             * the generated text with a continuation, per store; ties by the
             * store order; copied from the most recent occurrence in a
             * frozen store, from some occurrence in the output store. */
            int32_t ec = -1, eh = -1, eo = -1;
            int32_t lc = bf_match(gen, n_gen, w.ctx, w.n_ctx, w.n_ctx, p.min_match, read_at, &ec);
            int32_t lh = with_hist ? bf_match(gen, n_gen, w.hist, w.n_hist, w.n_hist, p.min_match, -1, &eh) : 0;
            int32_t lo = bf_match(gen, n_gen, w.out, i, i - 2, p.min_match, -1, &eo);
            int32_t best = SD_MAX(lc, SD_MAX(lh, lo));
            int32_t cap = SD_MIN(p.max_depth, p.budget);
            if (best == 0) {
                assert_int_equal(tl.n, 0);
            } else if (lc == best || (lh == best && lo < best)) {
                bool c = lc == best;
                assert_int_equal(tl.main_store, c ? SD_DRAFT_STORE_CONTEXT : SD_DRAFT_STORE_HISTORY);
                assert_int_equal(tl.main_match, best);
                const int32_t *text = c ? w.ctx : w.hist;
                int32_t n = c ? w.n_ctx : w.n_hist, e = c ? ec : eh, k = 0;
                while (k < cap && e + 1 + k < n && text[e + 1 + k] >= 0)
                    k++;
                assert_int_equal(tl.n, k);
                assert_memory_equal(tl.tok, text + e + 1, (size_t)k * sizeof *text);
            } else {
                assert_int_equal(tl.main_store, SD_DRAFT_STORE_OUTPUT);
                assert_int_equal(tl.main_match, best);
                bool found = false;
                for (int32_t e = best - 1; e <= i - 2 && !found; e++) {
                    if (memcmp(w.out + e - best + 1, gen + n_gen - best, (size_t)best * sizeof *gen) != 0)
                        continue;
                    int32_t k = SD_MIN(cap, i - 1 - e);
                    found = tl.n == k && memcmp(tl.tok, w.out + e + 1, (size_t)k * sizeof *gen) == 0;
                }
                assert_true(found);
            }

            /* Every path of the tree, after the last generated token, occurs
             * in a store: the tree only proposes what was seen. */
            int32_t path[80];
            for (int32_t v = 0; v < tt.n; v++) {
                int32_t m = 0;
                for (int32_t u = v; u >= 0; u = tt.parent[u])
                    m++;
                int32_t k = m;
                for (int32_t u = v; u >= 0; u = tt.parent[u])
                    path[k--] = tt.tok[u];
                path[0] = gen[n_gen - 1];
                bool ok = occurs(w.ctx, w.n_ctx, path, m + 1) || occurs(w.out, i, path, m + 1) ||
                          (with_hist && occurs(w.hist, w.n_hist, path, m + 1));
                if (!ok) fail_msg("iter %d step %d: node %d's path is in no store", iter, i, v);
            }
            /* pld copies the most recent occurrence of the last n-gram. */
            int32_t ng = 0, buf[256];
            int32_t n_pld =
                sd_pld_lookup(gen, (size_t)n_gen, p.pld_max_ngram, p.pld_min_ngram, buf, cap, &ng);
            assert_int_equal(tp.n, n_pld);
            assert_memory_equal(tp.tok, buf, (size_t)n_pld * sizeof *buf);

            if (i == w.n_out) break;
            copy_e = tl.n > 0 && tl.main_store == SD_DRAFT_STORE_CONTEXT ? ec : -1;
            if (copy_e >= 0 && w.out[i] == tl.tok[0]) read_at = copy_e + 1;
            assert_int_equal(sd_drafter_observe_output(dt, w.out[i], NULL), SDNPU_OK);
            assert_int_equal(sd_drafter_observe_output(dl, w.out[i], NULL), SDNPU_OK);
            assert_int_equal(sd_drafter_observe_output(dp, w.out[i], NULL), SDNPU_OK);
            gen[n_gen++] = w.out[i];
        }
        sd_sam_free(hs);
    }
    /* The streams must actually exercise branching. */
    assert_true(n_branchy > n_steps / 4);
    sd_drafter_free(dt);
    sd_drafter_free(dl);
    sd_drafter_free(dp);
    sd_draft_tree_free(&tt);
    sd_draft_tree_free(&tl);
    sd_draft_tree_free(&tp);
}

/* ------------------------------------------------------------- API misuse */

static void test_api_errors(void **state) {
    (void)state;
    struct sd_drafter *d = NULL;
    struct sd_err err = {0};
    assert_int_equal(sd_drafter_create("eagle", 0, &d, &err), SDNPU_ERR_NOT_FOUND);
    assert_null(d);
    assert_true(strstr(err.msg, "eagle") != NULL);
    const char *names[] = {"pld", "sam", "sam-tree"};
    struct sd_draft_tree t;
    assert_int_equal(sd_draft_tree_init(&t, 32, NULL), SDNPU_OK);
    for (int k = 0; k < 3; k++) {
        d = mk(names[k]);
        int32_t ctx[] = {1, 2, 3};
        assert_int_equal(sd_drafter_observe_context(d, ctx, 3, NULL), SDNPU_OK);
        assert_int_equal(sd_drafter_observe_output(d, 1, NULL), SDNPU_OK);
        assert_int_equal(sd_drafter_observe_context(d, ctx, 3, &err), SDNPU_ERR_STATE);
        assert_true(strstr(err.msg, "reset") != NULL);
        struct sd_draft_params p = sd_draft_default_params();
        p.budget = 0;
        assert_int_equal(sd_drafter_draft(d, &p, &t, &err), SDNPU_ERR_INVALID_ARG);
        p = sd_draft_default_params();
        assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
        /* "1" -> 2 3 (pld reads on into the output: 2 3 1). */
        assert_int_equal(t.n, k == 0 ? 3 : 2);
        if (k > 0) {
            assert_int_equal(sd_drafter_observe_output(d, -5, &err), SDNPU_ERR_INVALID_ARG);
            assert_int_equal(sd_drafter_attach(d, SD_DRAFT_STORE_CONTEXT, NULL, &err), SDNPU_ERR_INVALID_ARG);
        }
        /* reset: a new request, same drafts for the same input. */
        assert_int_equal(sd_drafter_reset(d, NULL), SDNPU_OK);
        assert_int_equal(sd_drafter_observe_context(d, ctx, 3, NULL), SDNPU_OK);
        assert_int_equal(sd_drafter_observe_output(d, 1, NULL), SDNPU_OK);
        assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
        assert_int_equal(t.n, k == 0 ? 3 : 2);
        assert_int_equal(t.tok[0], 2);
        sd_drafter_free(d);
    }
    assert_int_equal(sd_drafter_reset(NULL, &err), SDNPU_ERR_INVALID_ARG);
    sd_drafter_free(NULL);
    sd_draft_tree_free(&t);
}

/* Every allocation of a drafter's life fails once: create, context,
 * output, freeze. Each failure is a status; the drafter stays usable; no
 * leaks. */
static void test_alloc_failure_sweep(void **state) {
    (void)state;
    uint64_t rng = 77;
    static struct world w;
    gen_world(&rng, &w, 5);
    struct sd_sam *hs = NULL;
    assert_int_equal(sd_sam_create(0, &hs, NULL), SDNPU_OK);
    assert_int_equal(sd_sam_append_n(hs, w.hist, (size_t)w.n_hist, NULL), SDNPU_OK);
    assert_int_equal(sd_sam_freeze(hs, NULL), SDNPU_OK);
    struct sd_draft_tree t;
    assert_int_equal(sd_draft_tree_init(&t, 32, NULL), SDNPU_OK);
    struct sd_draft_params p = sd_draft_default_params();
    long base = sdt_alloc_live();
    const char *names[] = {"pld", "sam-tree"};
    for (int k = 0; k < 2; k++) {
        int failures = 0;
        for (long f = 0;; f++) {
            struct sd_drafter *d = NULL;
            struct sd_err err = {0};
            bool hit = false;
            sdt_alloc_fail_after(f);
            int rc = sd_drafter_create(names[k], 0, &d, &err);
            if (rc) {
                assert_int_equal(rc, SDNPU_ERR_OOM);
                assert_null(d);
                sdt_alloc_fail_after(-1);
                assert_int_equal(sdt_alloc_live(), base);
                failures++;
                continue;
            }
            if (k == 1) sd_drafter_attach(d, SD_DRAFT_STORE_HISTORY, hs, NULL);
            rc = sd_drafter_observe_context(d, w.ctx, (size_t)w.n_ctx, &err);
            if (rc) {
                assert_int_equal(rc, SDNPU_ERR_OOM);
                assert_true(strlen(err.msg) > 0);
                hit = true;
            }
            for (int32_t i = 0; i < w.n_out; i++) {
                rc = sd_drafter_observe_output(d, w.out[i], &err);
                if (rc) {
                    assert_int_equal(rc, SDNPU_ERR_OOM);
                    hit = true;
                }
                rc = sd_drafter_draft(d, &p, &t, &err);
                if (rc) {
                    assert_int_equal(rc, SDNPU_ERR_OOM);
                    hit = true;
                } else {
                    assert_int_equal(sd_draft_tree_validate(&t, &p, NULL), SDNPU_OK);
                }
            }
            sdt_alloc_fail_after(-1);
            /* Still usable after the failure. */
            feed(d, w.ctx, (size_t)w.n_ctx, w.out, 50);
            assert_int_equal(sd_drafter_draft(d, &p, &t, NULL), SDNPU_OK);
            sd_drafter_free(d);
            assert_int_equal(sdt_alloc_live(), base);
            if (!hit) break;
            failures++;
        }
        assert_true(failures >= 2);
    }
    sd_draft_tree_free(&t);
    sd_sam_free(hs);
}

int main(void) {
    sdt_alloc_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pld_lookup_hand),
        cmocka_unit_test(test_pld_drafter),
        cmocka_unit_test(test_sam_hand),
        cmocka_unit_test(test_sam_tree_hand),
        cmocka_unit_test(test_multi_store_merge),
        cmocka_unit_test(test_tree_builder),
        cmocka_unit_test(test_random_streams),
        cmocka_unit_test(test_api_errors),
        cmocka_unit_test(test_alloc_failure_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
