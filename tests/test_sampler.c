/* tests/test_sampler.c - the sampler chain: greedy, top-k, top-p, min-p,
 * penalties, and seeded reproducibility, checked against distributions
 * worked out by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sampler.h"
#include "util_common.h"

static struct sd_sampler *mk(float temp, int32_t top_k, float top_p, float min_p, float pen, int32_t n) {
    struct sd_sampler_params p = {temp, top_k, top_p, min_p, pen, 64, 42};
    struct sd_sampler *s;
    assert_int_equal(sd_sampler_create(&p, n, &s, NULL), SDNPU_OK);
    return s;
}

/* sd_argmax against the plain running argmax (first index of the largest
 * value, NaNs never chosen unless first), on random rows with ties, NaNs,
 * signed zeros and infinities, at lengths around the 8-lane blocking. */
static void test_argmax_reference(void **state) {
    (void)state;
    uint64_t rng = 99;
    float x[300];
    for (int trial = 0; trial < 4000; trial++) {
        const int32_t n = 1 + (int32_t)(sdt_rand_u64(&rng) % 300);
        for (int32_t i = 0; i < n; i++) {
            const uint64_t r = sdt_rand_u64(&rng) % 100;
            x[i] = r < 3 ? NAN : r < 5 ? -0.0f : r < 7 ? 0.0f : r < 8 ? INFINITY : r < 9 ? -INFINITY
                                                                      : (float)(int)(sdt_rand_u64(&rng) % 7) - 3.0f;
        }
        int32_t want = 0;
        for (int32_t i = 1; i < n; i++)
            if (x[i] > x[want]) want = i;
        if (sd_argmax(x, n) != want) fail_msg("n=%d trial %d: got %d, want %d", n, trial, sd_argmax(x, n), want);
    }
}

/* The same choice taken piece by piece, as a head takes it while its
 * logits are written: pieces of random lengths, each scanned by one of up
 * to four "threads" (a thread's pieces in index order, the threads'
 * interleaved, as they take them from a shared counter), whose results are
 * merged in index order and in reverse. */
static void test_argmax_pieces(void **state) {
    (void)state;
    uint64_t rng = 7;
    float x[300];
    for (int trial = 0; trial < 4000; trial++) {
        const int32_t n = 1 + (int32_t)(sdt_rand_u64(&rng) % 300);
        for (int32_t i = 0; i < n; i++) {
            const uint64_t r = sdt_rand_u64(&rng) % 100;
            x[i] = r < 6 ? NAN : r < 8 ? -0.0f : r < 10 ? 0.0f : r < 11 ? INFINITY : r < 13 ? -INFINITY
                                                                       : (float)(int)(sdt_rand_u64(&rng) % 5) - 2.0f;
        }
        const int n_threads = 1 + (int)(sdt_rand_u64(&rng) % 4);
        struct sd_amax part[4];
        for (int t = 0; t < n_threads; t++) sd_amax_init(&part[t]);
        for (int32_t at = 0; at < n;) {
            const int32_t k = 1 + (int32_t)(sdt_rand_u64(&rng) % 40);
            const int32_t e = at + k < n ? at + k : n;
            sd_amax_scan(&part[sdt_rand_u64(&rng) % (uint64_t)n_threads], x + at, e - at, at);
            at = e;
        }
        struct sd_amax fwd, rev;
        sd_amax_init(&fwd);
        sd_amax_init(&rev);
        for (int t = 0; t < n_threads; t++) {
            sd_amax_merge(&fwd, &part[t]);
            sd_amax_merge(&rev, &part[n_threads - 1 - t]);
        }
        int32_t want = 0;
        for (int32_t i = 1; i < n; i++)
            if (x[i] > x[want]) want = i;
        if (sd_amax_index(&fwd) != want || sd_amax_index(&rev) != want)
            fail_msg("n=%d trial %d: got %d (threads in order), %d (reversed), want %d", n, trial,
                     sd_amax_index(&fwd), sd_amax_index(&rev), want);
    }
}

static void test_argmax_ties_low(void **state) {
    (void)state;
    float x[5] = {1, 3, 3, 2, -1};
    assert_int_equal(sd_argmax(x, 5), 1);
}

static void test_greedy(void **state) {
    (void)state;
    struct sd_sampler *s = mk(0, 40, 0.95f, 0.05f, 1.0f, 6);
    float l[6] = {0.1f, 0.5f, 2.0f, 1.9f, -3, 0};
    assert_true(sd_sampler_is_greedy(s));
    assert_int_equal(sd_sampler_sample(s, l), 2);
    sd_sampler_free(s);
}

/* logits ln(4), ln(3), ln(2), ln(1): probabilities 0.4 0.3 0.2 0.1. */
static void fill(float *l) {
    l[0] = logf(4);
    l[1] = logf(3);
    l[2] = logf(2);
    l[3] = logf(1);
}

static void test_top_k_probs(void **state) {
    (void)state;
    struct sd_sampler *s = mk(1.0f, 2, 1.0f, 0.0f, 1.0f, 4);
    float l[4], p[4];
    fill(l);
    sd_sampler_probs(s, l, p);
    /* top-2 renormalised: 4/7, 3/7 */
    assert_float_equal(p[0], 4.0 / 7, 1e-6);
    assert_float_equal(p[1], 3.0 / 7, 1e-6);
    assert_float_equal(p[2], 0, 0);
    assert_float_equal(p[3], 0, 0);
    sd_sampler_free(s);
}

static void test_top_p_probs(void **state) {
    (void)state;
    /* cumulative 0.4, 0.7, 0.9: top_p 0.75 keeps three tokens. */
    struct sd_sampler *s = mk(1.0f, 0, 0.75f, 0.0f, 1.0f, 4);
    float l[4], p[4];
    fill(l);
    sd_sampler_probs(s, l, p);
    assert_float_equal(p[0], 4.0 / 9, 1e-6);
    assert_float_equal(p[2], 2.0 / 9, 1e-6);
    assert_float_equal(p[3], 0, 0);
    sd_sampler_free(s);
}

static void test_min_p_probs(void **state) {
    (void)state;
    /* min_p 0.45: keep p >= 0.45 * 0.4 = 0.18 -> three tokens. */
    struct sd_sampler *s = mk(1.0f, 0, 1.0f, 0.45f, 1.0f, 4);
    float l[4], p[4];
    fill(l);
    sd_sampler_probs(s, l, p);
    assert_float_equal(p[1], 3.0 / 9, 1e-6);
    assert_float_equal(p[3], 0, 0);
    sd_sampler_free(s);
}

static void test_temperature(void **state) {
    (void)state;
    /* T = 0.5 squares the odds: 16:9:4:1 over 30. */
    struct sd_sampler *s = mk(0.5f, 0, 1.0f, 0.0f, 1.0f, 4);
    float l[4], p[4];
    fill(l);
    sd_sampler_probs(s, l, p);
    assert_float_equal(p[0], 16.0 / 30, 1e-5);
    assert_float_equal(p[3], 1.0 / 30, 1e-5);
    sd_sampler_free(s);
}

static void test_penalty(void **state) {
    (void)state;
    struct sd_sampler *s = mk(0, 0, 1.0f, 0.0f, 2.0f, 4);
    float l[4] = {3.0f, 2.0f, -1.0f, 0.5f};
    sd_sampler_accept(s, 0);
    sd_sampler_accept(s, 0);
    sd_sampler_accept(s, 2);
    /* 3 -> 1.5 (once, though seen twice), -1 -> -2: token 1 (2.0) wins. */
    assert_int_equal(sd_sampler_sample(s, l), 1);
    assert_float_equal(l[0], 1.5, 1e-6);
    assert_float_equal(l[2], -2.0, 1e-6);
    sd_sampler_free(s);
}

/* What a sampler says it reads of the logits (sd_sampler_topk), and that
 * it draws the same token from logits that keep only that: its k best and
 * the penalized tokens, the rest -infinity. */
static void test_topk_reads(void **state) {
    (void)state;
    int32_t k, n_keep;
    const int32_t *keep;
    struct sd_sampler *s = mk(0.8f, 3, 0.95f, 0.05f, 1.0f, 8);
    assert_true(sd_sampler_topk(s, &k, &keep, &n_keep) && k == 3 && n_keep == 0);
    sd_sampler_free(s);
    s = mk(0.8f, 0, 1.0f, 0.0f, 1.0f, 8); /* top-k off: every logit */
    assert_false(sd_sampler_topk(s, &k, &keep, &n_keep));
    sd_sampler_free(s);
    s = mk(0.8f, 8, 1.0f, 0.0f, 1.0f, 8); /* as wide as the vocabulary */
    assert_false(sd_sampler_topk(s, &k, &keep, &n_keep));
    sd_sampler_free(s);
    s = mk(0, 0, 1.0f, 0.0f, 2.0f, 8); /* greedy with a penalty: the best one, the penalized whole */
    sd_sampler_accept(s, 5);
    sd_sampler_accept(s, 2);
    assert_true(sd_sampler_topk(s, &k, &keep, &n_keep) && k == 1 && n_keep == 2);
    assert_true((keep[0] == 5 && keep[1] == 2) || (keep[0] == 2 && keep[1] == 5));
    sd_sampler_free(s);
    for (int seed = 0; seed < 50; seed++) {
        struct sd_sampler *a = mk(1.0f, 3, 1.0f, 0.0f, 1.5f, 8), *b = mk(1.0f, 3, 1.0f, 0.0f, 1.5f, 8);
        float la[8] = {0.5f, 2.0f, -1.0f, 1.9f, 0.1f, 2.2f, 1.0f, -3.0f}, lb[8];
        sd_sampler_accept(a, 5), sd_sampler_accept(b, 5); /* 2.2 -> 1.47: out of the best 3 */
        for (int i = 0; i < seed; i++) sd_sampler_uniform(a), sd_sampler_uniform(b);
        for (int j = 0; j < 8; j++) lb[j] = (j == 1 || j == 3 || j == 5 || j == 6) ? la[j] : -INFINITY;
        assert_int_equal(sd_sampler_sample(a, la), sd_sampler_sample(b, lb));
        sd_sampler_free(a), sd_sampler_free(b);
    }
}

/* Same seed, same draws; the empirical frequencies follow the distribution. */
static void test_seeded_draws(void **state) {
    (void)state;
    int counts[4] = {0};
    int32_t seq1[200], seq2[200];
    for (int rep = 0; rep < 2; rep++) {
        struct sd_sampler *s = mk(1.0f, 0, 1.0f, 0.0f, 1.0f, 4);
        for (int i = 0; i < 200; i++) {
            float l[4];
            fill(l);
            int32_t t = sd_sampler_sample(s, l);
            (rep ? seq2 : seq1)[i] = t;
        }
        sd_sampler_free(s);
    }
    assert_memory_equal(seq1, seq2, sizeof seq1);
    struct sd_sampler *s = mk(1.0f, 0, 1.0f, 0.0f, 1.0f, 4);
    for (int i = 0; i < 20000; i++) {
        float l[4];
        fill(l);
        counts[sd_sampler_sample(s, l)]++;
    }
    sd_sampler_free(s);
    /* Expected 8000, 6000, 4000, 2000; 5 sigma is about 350. */
    assert_true(abs(counts[0] - 8000) < 350);
    assert_true(abs(counts[1] - 6000) < 350);
    assert_true(abs(counts[2] - 4000) < 350);
    assert_true(abs(counts[3] - 2000) < 300);
}

static void test_bad_params(void **state) {
    (void)state;
    struct sd_sampler_params p = {NAN, 40, 0.9f, 0.0f, 1.0f, 64, 1};
    struct sd_sampler *s = (struct sd_sampler *)0x1;
    struct sd_err e = {0};
    assert_int_equal(sd_sampler_create(&p, 10, &s, &e), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "temperature"));
    p.temperature = 1;
    p.repeat_penalty = 0;
    assert_int_equal(sd_sampler_create(&p, 10, &s, &e), SDNPU_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argmax_ties_low), cmocka_unit_test(test_argmax_reference), cmocka_unit_test(test_argmax_pieces), cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_top_k_probs),     cmocka_unit_test(test_top_p_probs),
        cmocka_unit_test(test_min_p_probs),     cmocka_unit_test(test_temperature),
        cmocka_unit_test(test_penalty),         cmocka_unit_test(test_topk_reads),         cmocka_unit_test(test_seeded_draws),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
