/* tests/test_policy.c - cost-aware drafting (verify/policy.c) driven by
 * synthetic cost tables and acceptance streams: the expected-acceptance
 * formula worked by hand, the counts a verified or skipped draft leaves,
 * and the choices for drafts that are always accepted, never accepted,
 * alternating and drifting, for free and for dear verification, with
 * costs learned from measurements, per match length, with the policy off,
 * and with the one-row graph gone. Each stream's right choice is worked
 * out from the true acceptance, not from the policy's own estimate. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "util_common.h"
#include "verify/verify.h"

enum { L2 = 8, DRAFT = L2 - 1 };

static struct sd_draft_tree g_tree;

static int setup(void **state) {
    (void)state;
    return sd_draft_tree_init(&g_tree, 64, NULL);
}

static int teardown(void **state) {
    (void)state;
    sd_draft_tree_free(&g_tree);
    return 0;
}

/* A chain draft of n tokens 100, 101, ... from a match of length match. */
static const struct sd_draft_tree *chain(int32_t n, int32_t match) {
    struct sd_draft_params dp = sd_draft_default_params();
    dp.budget = 64;
    dp.max_depth = 64;
    sd_draft_tree_clear(&g_tree);
    int32_t tok[64];
    for (int32_t i = 0; i < n; i++) tok[i] = 100 + i;
    g_tree.n_main = sd_draft_tree_add_chain(&g_tree, -1, tok, n, &dp);
    g_tree.main_store = n ? SD_DRAFT_STORE_CONTEXT : SD_DRAFT_STORE_NONE;
    g_tree.main_match = match;
    return &g_tree;
}

static void init(struct sd_policy *p, bool adaptive, double c0, double c2) {
    const int32_t L[2] = {1, L2};
    const double c[2] = {c0, c2};
    sd_policy_init(p, adaptive, L, c, 2);
}

/* Run one step of a synthetic stream: the draft (a chain of DRAFT tokens
 * from a match of length match) would have its first `good` tokens
 * accepted. Returns whether the policy verified it. */
static bool step(struct sd_policy *p, int32_t match, int32_t good) {
    const struct sd_draft_tree *t = chain(DRAFT, match);
    int32_t nv;
    int32_t opt = sd_policy_choose(p, t, t->n, &nv);
    if (nv > 0) {
        int32_t path[DRAFT];
        int32_t acc = SD_MIN(good, nv);
        for (int32_t i = 0; i < acc; i++) path[i] = i;
        sd_policy_observe(p, t, nv, path, acc);
    } else {
        /* The model's own next token: the draft's first one when it is good. */
        sd_policy_observe_skipped(p, t, t->n, good > 0 ? 100 : 7);
    }
    assert_int_equal(p->L[opt] > 1, nv > 0);
    return nv > 0;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Accepted tokens of a draft whose levels are each accepted with
 * probability a (a geometric stream). */
static int32_t geometric(uint64_t *rng, double a) {
    int32_t k = 0;
    while (k < DRAFT && (double)(splitmix(rng) >> 11) / 9007199254740992.0 < a) k++;
    return k;
}

/* The right choice for a geometric stream: verify when
 * (1 + sum_{i<=DRAFT} a^i) / c2 > 1 / c0. */
static bool worth(double a, double c0, double c2) {
    double e = 0, r = 1;
    for (int i = 0; i < DRAFT; i++) e += (r *= a);
    return (1 + e) / c2 > 1 / c0;
}

static void test_expected_by_hand(void **state) {
    (void)state;
    struct sd_policy p;
    init(&p, true, 10, 16);
    /* Nothing seen: every level at the prior 1/2. */
    assert_true(fabs(sd_policy_expected(&p, chain(3, 1), 3) - (0.5 + 0.25 + 0.125)) < 1e-12);
    /* Only the first n nodes count. */
    assert_true(fabs(sd_policy_expected(&p, chain(7, 1), 2) - 0.75) < 1e-12);
    assert_true(sd_policy_expected(&p, chain(0, 0), 0) == 0.0);
    /* A verified chain of 2 from a match of 1, both accepted and nothing
     * below: one accepted level in the bucket of match 1 and one in that
     * of match 2, no rejection (the path ran off the draft). */
    int32_t path[2] = {0, 1};
    sd_policy_observe(&p, chain(2, 1), 2, path, 2);
    assert_true(p.succ[0] == 1.0 && p.succ[1] == 1.0 && p.fail[0] == 0.0 && p.fail[1] == 0.0);
    /* Pooled: two accepted levels, the first decayed once (x 0.97), so
     * 1.97; with the prior (weight 1, rate 1/2) pool = 2.47 / 2.97; a
     * bucket with one accepted level: (1 + pool) / (1 + 1); an empty
     * bucket: the pool. */
    const double pool = (1.97 + 0.5) / (1.97 + 1.0);
    assert_true(fabs(p.rate[0] - (1.0 + pool) / 2.0) < 1e-12);
    assert_true(fabs(p.rate[6] - pool) < 1e-12);
    /* A chain of 3 from a match of 4 with one accepted: a success in the
     * bucket of 4 (index 2) and the rejection in that of 5 (index 3). */
    sd_policy_observe(&p, chain(3, 4), 3, path, 1);
    assert_true(fabs(p.succ[2] - 1.0) < 1e-12 && fabs(p.fail[3] - 1.0) < 1e-12);
    /* A skipped draft whose first token the model then chose counts as one
     * accepted level, and one it did not as one rejected level. */
    sd_policy_observe_skipped(&p, chain(4, 9), 4, 100);
    assert_true(fabs(p.succ[4] - 1.0) < 1e-12);
    sd_policy_observe_skipped(&p, chain(4, 9), 4, 5);
    assert_true(fabs(p.succ[4] - 0.95) < 1e-12 && fabs(p.fail[4] - 1.0) < 1e-12);
    /* Expected value uses the buckets level by level: from a match of 8,
     * level 1 is bucket 3 (5..8), levels 2.. are bucket 4 (9..16). */
    double r3 = p.rate[3], r4 = p.rate[4];
    double want = r3 + r3 * r4 + r3 * r4 * r4;
    assert_true(fabs(sd_policy_expected(&p, chain(3, 8), 3) - want) < 1e-12);
}

static void test_always_accepted(void **state) {
    (void)state;
    struct sd_policy p;
    init(&p, true, 10, 16);
    int verified = 0;
    for (int i = 0; i < 200; i++) verified += step(&p, 3, DRAFT);
    assert_int_equal(verified, 200);
    assert_int_equal(p.n_plain, 0);
}

static void test_never_accepted(void **state) {
    (void)state;
    struct sd_policy p;
    init(&p, true, 10, 16);
    int verified = 0, late = 0;
    for (int i = 0; i < 200; i++) {
        bool v = step(&p, 1, 0);
        verified += v;
        late += v && i >= 10;
    }
    /* It tries while it knows nothing, then stops within a few steps and
     * stays stopped: the skipped drafts keep failing. */
    assert_true(verified >= 1 && verified <= 5);
    assert_int_equal(late, 0);
    assert_int_equal(p.n_plain, 200 - verified);
}

static void test_alternating(void **state) {
    (void)state;
    /* Every other draft is fully accepted, the rest rejected at once: a
     * verified step yields (8 + 1) / 2 = 4.5 tokens for 1.6 plain steps'
     * cost, so verifying every step is right. */
    struct sd_policy p;
    init(&p, true, 10, 16);
    int verified = 0;
    for (int i = 0; i < 200; i++) verified += step(&p, 2, i % 2 ? DRAFT : 0);
    assert_true(verified >= 195);
}

static void test_drifting(void **state) {
    (void)state;
    /* Three phases of 150 steps: levels accepted with probability 0.9,
     * then 0.1, then 0.9 again. In the second half of each phase the
     * choice must be the right one (worked out from the true rate) on at
     * least 90% of the steps. */
    const double rates[3] = {0.9, 0.1, 0.9};
    const double c0 = 10, c2 = 16;
    struct sd_policy p;
    init(&p, true, c0, c2);
    uint64_t rng = 42;
    for (int ph = 0; ph < 3; ph++) {
        assert_true(worth(rates[ph], c0, c2) == (rates[ph] > 0.5));
        int right = 0;
        for (int i = 0; i < 150; i++) {
            bool v = step(&p, 3, geometric(&rng, rates[ph]));
            if (i >= 75) right += v == worth(rates[ph], c0, c2);
        }
        if (right < 68) fail_msg("phase %d (rate %.1f): right choice on %d of 75 steps", ph, rates[ph], right);
    }
}

static void test_cost_table(void **state) {
    (void)state;
    uint64_t rng = 7;
    /* Free verification (an ideal NPU): any draft is worth a try, even one
     * accepted a tenth of the time. */
    struct sd_policy p;
    init(&p, true, 10, 10);
    int verified = 0;
    for (int i = 0; i < 200; i++) verified += step(&p, 2, geometric(&rng, 0.1));
    assert_int_equal(verified, 200);
    /* Verification at ten plain steps: even drafts accepted 80% of the time
     * (E = 3.2 tokens, 4.2 a step) do not pay. */
    assert_false(worth(0.8, 10, 100));
    init(&p, true, 10, 100);
    int late = 0;
    for (int i = 0; i < 200; i++) late += step(&p, 2, geometric(&rng, 0.8)) && i >= 20;
    assert_true(late <= 5);
}

static void test_costs_learned(void **state) {
    (void)state;
    /* No profile: costs start as guesses in row units, the first measured
     * step turns them into milliseconds, and measurements then move them. */
    struct sd_policy p;
    init(&p, true, 0, 0);
    assert_true(!p.measured[0] && !p.measured[1]);
    assert_true(fabs(p.cost_ms[1] / p.cost_ms[0] - 16.0 / 9.0) < 1e-12);
    sd_policy_observe_cost(&p, 0, 9.0);
    assert_true(p.measured[0] && !p.measured[1]);
    assert_true(fabs(p.cost_ms[0] - 9.0) < 1e-12 && fabs(p.cost_ms[1] - 16.0) < 1e-12);
    /* This machine turns out to run G2 at 4x a plain step. */
    for (int i = 0; i < 40; i++) {
        sd_policy_observe_cost(&p, 0, 10.0);
        sd_policy_observe_cost(&p, 1, 40.0);
    }
    assert_true(fabs(p.cost_ms[0] - 10.0) < 0.01 && fabs(p.cost_ms[1] - 40.0) < 0.01);
    /* At 4x, drafts accepted 60% a level (E = 1.4) are not worth it. */
    assert_false(worth(0.6, 10, 40));
    uint64_t rng = 3;
    int late = 0;
    for (int i = 0; i < 200; i++) late += step(&p, 2, geometric(&rng, 0.6)) && i >= 20;
    assert_true(late <= 10);
    /* One known cost fills the other by the guessed shape. */
    init(&p, true, 0, 32.0);
    assert_true(!p.measured[0] && p.measured[1]);
    assert_true(fabs(p.cost_ms[0] - 18.0) < 1e-12);
    /* Nonsense measurements are ignored. */
    sd_policy_observe_cost(&p, 0, -1.0);
    sd_policy_observe_cost(&p, 0, NAN);
    sd_policy_observe_cost(&p, 5, 1.0);
    assert_true(fabs(p.cost_ms[0] - 18.0) < 1e-12);
}

static void test_guessed_cost_timed_once(void **state) {
    (void)state;
    /* No profile: the first drafted step goes by the guessed shape (8 rows
     * at 16/9 of a row: the draft is verified), and once that pass is
     * timed the next drafted step runs the one-row graph, whose cost is
     * still a guess, so the choices after it rest on measured costs. */
    struct sd_policy p;
    init(&p, true, 0, 0);
    const struct sd_draft_tree *t = chain(DRAFT, 2);
    int32_t nv;
    assert_int_equal(sd_policy_choose(&p, t, DRAFT, &nv), 1);
    assert_int_equal(nv, DRAFT);
    sd_policy_observe_cost(&p, 1, 40.0);
    /* The guess alone would verify again: 1 + E(0.5 a level) over 40 ms
     * beats one token over the one-row cost scaled from it (22.5 ms). */
    assert_true((1.0 + sd_policy_expected(&p, t, DRAFT)) / p.cost_ms[1] > 1.0 / p.cost_ms[0]);
    assert_int_equal(sd_policy_choose(&p, t, DRAFT, &nv), 0);
    assert_int_equal(nv, 0);
    sd_policy_observe_cost(&p, 0, 10.0);
    assert_true(p.measured[0] && p.measured[1]);
    /* Measured at 4x, the same draft is not worth its pass. */
    assert_int_equal(sd_policy_choose(&p, t, DRAFT, &nv), 0);
    /* A step without a draft does not time the L2-row graph for nothing. */
    init(&p, true, 0, 0);
    sd_policy_observe_cost(&p, 0, 10.0);
    assert_int_equal(sd_policy_choose(&p, chain(0, 0), 0, &nv), 0);
    assert_false(p.measured[1]);
    /* ... a drafted one does, once. */
    assert_int_equal(sd_policy_choose(&p, chain(DRAFT, 2), DRAFT, &nv), 1);
    assert_int_equal(nv, DRAFT);
    /* A profile's costs count as measured: nothing is tried. */
    init(&p, true, 10, 40);
    assert_int_equal(sd_policy_choose(&p, chain(DRAFT, 2), DRAFT, &nv), 0);
    /* One known cost: the other graph is tried on the first drafted step. */
    init(&p, true, 0, 40);
    assert_int_equal(sd_policy_choose(&p, chain(DRAFT, 2), DRAFT, &nv), 0);
    assert_int_equal(nv, 0);
    /* A reproducible request never decides by timing: no trial. */
    init(&p, true, 0, 40);
    sd_policy_new_request(&p, true);
    assert_int_equal(sd_policy_choose(&p, chain(DRAFT, 2), DRAFT, &nv), 1);
}

static void test_match_length(void **state) {
    (void)state;
    /* Drafts from one-token matches are always rejected, drafts from long
     * matches always accepted, interleaved: the match-length estimator
     * tells them apart and verifies only the long ones; one pooled rate
     * cannot, and makes the same choice for both. */
    struct sd_policy p;
    init(&p, true, 10, 16);
    int short_v = 0, long_v = 0;
    for (int i = 0; i < 300; i++) {
        bool v = step(&p, i % 2 ? 40 : 1, i % 2 ? DRAFT : 0);
        if (i >= 100) *(i % 2 ? &long_v : &short_v) += v;
    }
    assert_int_equal(long_v, 100);
    assert_int_equal(short_v, 0);
    init(&p, true, 10, 16);
    p.estimator = SD_EST_GLOBAL;
    int same = 0;
    for (int i = 0; i < 300; i += 2) {
        bool a = step(&p, 1, 0), b = step(&p, 40, DRAFT);
        same += a == b;
    }
    assert_true(same >= 140);
}

static void test_fixed_and_empty(void **state) {
    (void)state;
    struct sd_policy p;
    init(&p, false, 10, 16);
    int32_t nv;
    /* Off: every draft is verified whole on the largest graph, however bad. */
    for (int i = 0; i < 50; i++) assert_true(step(&p, 1, 0));
    assert_int_equal(sd_policy_choose(&p, chain(5, 1), 5, &nv), 1);
    assert_int_equal(nv, 5);
    /* Off, an empty step stays on the largest graph (the padded step the
     * non-adaptive method always ran). */
    assert_int_equal(sd_policy_choose(&p, chain(0, 0), 0, &nv), 1);
    assert_int_equal(nv, 0);
    assert_int_equal(p.n_plain, 0);
    /* On, an empty step runs one row and is no skipped draft. */
    init(&p, true, 10, 16);
    assert_int_equal(sd_policy_choose(&p, chain(0, 0), 0, &nv), 0);
    assert_int_equal(nv, 0);
    assert_int_equal(p.n_plain, 0);
    /* A draft longer than the graph holds is verified up to L2 - 1 nodes. */
    assert_int_equal(sd_policy_choose(&p, chain(20, 30), 20, &nv), 1);
    assert_int_equal(nv, DRAFT);
}

static void test_one_row_graph_gone(void **state) {
    (void)state;
    /* When G0 cannot be prepared (memory limit) every step runs on G2,
     * drafts or not. */
    struct sd_policy p;
    init(&p, true, 10, 16);
    sd_policy_drop(&p, 0);
    for (int i = 0; i < 50; i++) assert_true(step(&p, 1, 0));
    int32_t nv;
    assert_int_equal(sd_policy_choose(&p, chain(0, 0), 0, &nv), 1);
    assert_int_equal(nv, 0);
}

static void test_new_request_keeps_a_weak_prior(void **state) {
    (void)state;
    struct sd_policy p;
    init(&p, true, 10, 16);
    for (int i = 0; i < 100; i++) step(&p, 1, 0);
    double before = p.rate[0];
    sd_policy_new_request(&p, false);
    /* Same direction, less weight: a few good drafts now win it back. */
    assert_true(p.succ[0] + p.fail[0] <= 4.0 + 1e-9);
    assert_true(p.rate[0] < 0.5 && p.rate[0] >= before - 1e-12);
    assert_true(p.n_choices == 0 && p.n_plain == 0);
    int verified = 0;
    for (int i = 0; i < 30; i++) verified += step(&p, 40, DRAFT);
    assert_true(verified >= 28);
}

static void test_reproducible_request(void **state) {
    (void)state;
    /* Sampling: the choices may depend neither on timing nor on earlier
     * requests, so two runs of one request choose alike. */
    struct sd_policy p;
    init(&p, true, 10, 16);
    for (int i = 0; i < 50; i++) step(&p, 1, 0);
    sd_policy_observe_cost(&p, 1, 80.0);
    assert_true(p.cost_ms[1] > 16.0);
    sd_policy_new_request(&p, true);
    assert_true(p.cost_ms[0] == 10.0 && p.cost_ms[1] == 16.0);
    assert_true(p.succ_all == 0 && p.fail_all == 0 && p.succ[0] == 0 && p.fail[0] == 0);
    assert_true(fabs(p.rate[0] - 0.5) < 1e-12);
    sd_policy_observe_cost(&p, 1, 80.0);
    assert_true(p.cost_ms[1] == 16.0);
    /* The same stream twice from a new request: the same choices. */
    bool first[40];
    for (int i = 0; i < 40; i++) first[i] = step(&p, 2, (i * 7) % 5 ? DRAFT : 0);
    sd_policy_new_request(&p, true);
    for (int i = 0; i < 40; i++) assert_true(step(&p, 2, (i * 7) % 5 ? DRAFT : 0) == first[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expected_by_hand),  cmocka_unit_test(test_always_accepted),
        cmocka_unit_test(test_never_accepted),    cmocka_unit_test(test_alternating),
        cmocka_unit_test(test_drifting),          cmocka_unit_test(test_cost_table),
        cmocka_unit_test(test_costs_learned),     cmocka_unit_test(test_guessed_cost_timed_once),
        cmocka_unit_test(test_match_length),
        cmocka_unit_test(test_fixed_and_empty),   cmocka_unit_test(test_one_row_graph_gone),
        cmocka_unit_test(test_new_request_keeps_a_weak_prior), cmocka_unit_test(test_reproducible_request),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
