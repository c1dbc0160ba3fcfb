/* tests/test_sam.c - the suffix automaton checked against brute force:
 * every state's strings, end positions, counts and edges, the number of
 * distinct substrings, the matching cursor at every step (static and
 * growing stores), ranked successors, and an allocation-failure sweep in
 * which every failure is a status, leaves a consistent automaton, and
 * leaks nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "draft/draft.h"
#include "util_common.h"

/* ---------------------------------------------------------- brute force */

struct occ {
    int32_t count, first, last, cont; /* cont: last end with a continuation */
};

/* All occurrences of pat[0..m) in text[0..n) (m >= 1, pat has no
 * separators, so a match cannot cover one). */
static struct occ bf_occ(const int32_t *text, int32_t n, const int32_t *pat, int32_t m) {
    struct occ o = {0, -1, -1, -1};
    for (int32_t e = m - 1; e < n; e++) {
        if (memcmp(text + e - m + 1, pat, (size_t)m * sizeof *pat) != 0) continue;
        o.count++;
        if (o.first < 0) o.first = e;
        o.last = e;
        if (e + 1 < n && text[e + 1] >= 0) o.cont = e;
    }
    return o;
}

/* The longest suffix of q[0..i] that occurs in text; at most prev + 1, the
 * previous answer plus one (a match ending at i minus its last token is a
 * match ending at i - 1). */
static int32_t bf_longest(const int32_t *text, int32_t n, const int32_t *q, int32_t i, int32_t prev) {
    for (int32_t len = prev + 1; len >= 1; len--) {
        bool sep = false;
        for (int32_t j = i - len + 1; j <= i; j++)
            sep |= q[j] < 0;
        if (!sep && bf_occ(text, n, q + i - len + 1, len).count > 0) return len;
    }
    return 0;
}

/* Distinct non-empty substrings that cross no separator: sort the
 * separator-truncated suffixes; the count of distinct prefixes is the sum of
 * their lengths minus the common prefixes of neighbours (trie nodes). */
static const int32_t *g_text;
static int32_t g_n;
static int32_t run_len(int32_t i) {
    int32_t m = 0;
    while (i + m < g_n && g_text[i + m] >= 0)
        m++;
    return m;
}
static int cmp_suffix(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    int32_t mi = run_len(i), mj = run_len(j);
    for (int32_t k = 0; k < mi && k < mj; k++)
        if (g_text[i + k] != g_text[j + k]) return g_text[i + k] < g_text[j + k] ? -1 : 1;
    return (mi > mj) - (mi < mj);
}
static int64_t bf_distinct(const int32_t *text, int32_t n) {
    int32_t *idx = malloc((size_t)(n + 1) * sizeof *idx);
    g_text = text;
    g_n = n;
    for (int32_t i = 0; i < n; i++)
        idx[i] = i;
    qsort(idx, (size_t)n, sizeof *idx, cmp_suffix);
    int64_t total = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t m = run_len(idx[k]);
        total += m;
        if (k > 0) {
            int32_t p = idx[k - 1], mp = run_len(p), l = 0;
            while (l < m && l < mp && text[idx[k] + l] == text[p + l])
                l++;
            total -= l;
        }
    }
    free(idx);
    return total;
}

/* ------------------------------------------------------- full validation */

/* Every state is checked against brute force: its longest string (read from
 * first_end), the exact class of lengths (len(link), len], end positions,
 * counts and continuation when frozen, and every edge. */
static void validate(const struct sd_sam *s) {
    const int32_t *text = sd_sam_text(s);
    int32_t n = (int32_t)sd_sam_n_tokens(s);
    int32_t n_st = (int32_t)sd_sam_n_states(s);
    bool frozen = sd_sam_frozen(s);
    int64_t distinct = 0;
    size_t n_edges = 0;
    int32_t tok[64], to[64];
    int32_t *ext = malloc((size_t)(n + 2) * sizeof *ext);
    assert_int_equal(sd_sam_len(s, 0), 0);
    assert_int_equal(sd_sam_link(s, 0), -1);
    for (int32_t v = 1; v < n_st; v++) {
        int32_t len = sd_sam_len(s, v), link = sd_sam_link(s, v), fe = sd_sam_first_end(s, v);
        assert_true(link >= 0 && link < n_st);
        int32_t minlen = sd_sam_len(s, link) + 1;
        assert_true(minlen <= len);
        distinct += len - minlen + 1;
        assert_true(fe >= len - 1 && fe < n);
        const int32_t *str = text + fe - len + 1; /* the longest string */
        for (int32_t j = 0; j < len; j++)
            assert_true(str[j] >= 0);
        struct occ o = bf_occ(text, n, str, len);
        assert_int_equal(o.first, fe);
        /* Same class: the shortest string has the same occurrences; one
         * shorter (the link's class) has more, one longer has fewer. */
        struct occ os = bf_occ(text, n, text + fe - minlen + 1, minlen);
        assert_int_equal(os.count, o.count);
        assert_int_equal(os.last, o.last);
        if (minlen > 1) assert_true(bf_occ(text, n, text + fe - minlen + 2, minlen - 1).count > o.count);
        if (fe - len >= 0 && text[fe - len] >= 0)
            assert_true(bf_occ(text, n, text + fe - len, len + 1).count < o.count);
        if (frozen) {
            assert_int_equal(sd_sam_count(s, v), o.count);
            assert_int_equal(sd_sam_last_end(s, v), o.last);
            assert_int_equal(sd_sam_cont_end(s, v), o.cont);
        } else {
            assert_int_equal(sd_sam_count(s, v), 0);
            /* Recorded positions are real end positions, maybe not the last. */
            int32_t le = sd_sam_last_end(s, v);
            assert_true(le >= fe && le <= o.last);
            assert_int_equal(bf_occ(text, le + 1, str, len).last, le);
            int32_t ce = sd_sam_cont_end(s, v);
            if (ce >= 0) {
                assert_true(ce + 1 < n && text[ce + 1] >= 0);
                assert_int_equal(bf_occ(text, ce + 1, str, len).last, ce);
            }
        }
        /* Edges: exactly the distinct tokens that follow the strings. */
        int32_t deg = sd_sam_degree(s, v);
        n_edges += (size_t)deg;
        int32_t follow = 0;
        int32_t seen[64];
        for (int32_t e = o.first; e >= 0 && e < n; e++) {
            if (e + 1 >= n || text[e + 1] < 0) continue;
            if (memcmp(text + e - len + 1, str, (size_t)len * sizeof *str) != 0) continue;
            bool dup = false;
            for (int32_t k = 0; k < follow; k++)
                dup |= seen[k] == text[e + 1];
            if (!dup && follow < 64) seen[follow++] = text[e + 1];
        }
        assert_int_equal(deg, follow);
        assert_true(deg <= 64);
        int32_t got = sd_sam_top_edges(s, v, 64, SD_SAM_SEP, tok, to);
        assert_int_equal(got, deg);
        memcpy(ext, str, (size_t)len * sizeof *ext);
        for (int32_t k = 0; k < got; k++) {
            assert_int_equal(sd_sam_next(s, v, tok[k]), to[k]);
            ext[len] = tok[k];
            struct occ oe = bf_occ(text, n, ext, len + 1);
            assert_true(oe.count > 0);
            int32_t u = to[k];
            assert_true(sd_sam_len(s, sd_sam_link(s, u)) < len + 1 && len + 1 <= sd_sam_len(s, u));
            assert_int_equal(sd_sam_first_end(s, u), oe.first);
            if (frozen) {
                assert_int_equal(sd_sam_count(s, u), oe.count);
                /* Ranked: count desc, then last_end desc, then token. */
                if (k > 0) {
                    int32_t cu = sd_sam_count(s, to[k - 1]), cv = sd_sam_count(s, u);
                    assert_true(cu > cv ||
                                (cu == cv && (sd_sam_last_end(s, to[k - 1]) > sd_sam_last_end(s, u) ||
                                              (sd_sam_last_end(s, to[k - 1]) == sd_sam_last_end(s, u) &&
                                               tok[k - 1] < tok[k]))));
                }
            }
        }
    }
    /* Root edges: every token of the text. */
    int32_t root_follow = 0;
    for (int32_t i = 0; i < n; i++) {
        if (text[i] < 0) continue;
        bool dup = false;
        for (int32_t j = 0; j < i; j++)
            dup |= text[j] == text[i];
        root_follow += !dup;
    }
    assert_int_equal(sd_sam_degree(s, 0), root_follow);
    n_edges += (size_t)root_follow;
    assert_int_equal(sd_sam_n_edges(s), n_edges);
    assert_int_equal(distinct, bf_distinct(text, n));
    /* At most 2n - 1 states (plus the root) for a text of n tokens. */
    assert_true(n_st <= 2 * SD_MAX(n, 1));
    free(ext);
}

/* --------------------------------------------------------------- inputs */

static const int32_t g_large[5] = {262143, 7, 131072, 2147483000, 65536};

/* A random text over an alphabet of `alpha`, with copied spans so long
 * repeats occur, and separators with probability sep_pct percent. */
static void gen_text(uint64_t *rng, int32_t *t, int32_t n, int32_t alpha, int32_t sep_pct, bool large) {
    for (int32_t i = 0; i < n; i++) {
        uint64_t r = sdt_rand_u64(rng);
        if (i > 4 && r % 100 < 15) {
            int32_t from = (int32_t)(sdt_rand_u64(rng) % (uint64_t)i);
            int32_t span = 1 + (int32_t)(sdt_rand_u64(rng) % 8);
            for (int32_t k = 0; k < span && i < n; k++)
                t[i++] = t[from + k];
            i--;
            continue;
        }
        if ((int32_t)(r % 100) >= 100 - sep_pct) {
            t[i] = SD_SAM_SEP;
            continue;
        }
        int32_t a = (int32_t)((r >> 8) % (uint64_t)alpha);
        t[i] = large ? g_large[a] : a;
    }
}

static struct sd_sam *build(const int32_t *t, int32_t n) {
    struct sd_sam *s = NULL;
    assert_int_equal(sd_sam_create(0, &s, NULL), SDNPU_OK);
    for (int32_t i = 0; i < n; i++)
        assert_int_equal(sd_sam_append(s, t[i], NULL, NULL), SDNPU_OK);
    return s;
}

/* ---------------------------------------------------------------- tests */

static void test_hand_example(void **state) {
    (void)state;
    /* "1 2 3 | 2 3 4": "2 3" ends at 2 and 5; after 2 comes the separator,
     * so the only occurrence with a continuation is the one ending at 5. */
    int32_t t[] = {1, 2, 3, SD_SAM_SEP, 2, 3, 4};
    struct sd_sam *s = build(t, 7);
    assert_int_equal(sd_sam_freeze(s, NULL), SDNPU_OK);
    struct sd_sam_cursor c;
    sd_sam_cursor_reset(&c);
    int32_t q[] = {9, 2, 3};
    for (int i = 0; i < 3; i++)
        sd_sam_cursor_advance(s, &c, q[i]);
    assert_int_equal(c.len, 2);
    assert_int_equal(sd_sam_count(s, c.state), 2);
    assert_int_equal(sd_sam_first_end(s, c.state), 2);
    assert_int_equal(sd_sam_last_end(s, c.state), 5);
    assert_int_equal(sd_sam_cont_end(s, c.state), 5);
    int32_t out[8];
    assert_int_equal(sd_sam_continuation(s, 5, out, 8), 1);
    assert_int_equal(out[0], 4);
    assert_int_equal(sd_sam_continuation(s, 2, out, 8), 0); /* stops at the separator */
    /* "1 2 3 4" never occurs: the separator breaks it. */
    sd_sam_cursor_reset(&c);
    int32_t q2[] = {1, 2, 3, 4};
    for (int i = 0; i < 4; i++)
        sd_sam_cursor_advance(s, &c, q2[i]);
    assert_int_equal(c.len, 3);
    /* A separator in the query resets the cursor. */
    sd_sam_cursor_advance(s, &c, SD_SAM_SEP);
    assert_int_equal(c.len, 0);
    assert_int_equal(c.state, 0);
    validate(s);
    sd_sam_free(s);
}

static void test_random_vs_brute(void **state) {
    (void)state;
    uint64_t rng = 42;
    int32_t t[160];
    for (int iter = 0; iter < 240; iter++) {
        int32_t alpha = 2 + iter % 4;
        int32_t n = 1 + (int32_t)(sdt_rand_u64(&rng) % 140);
        int32_t sep = (iter % 3 == 0) ? 6 : 0;
        bool large = iter % 5 == 4;
        gen_text(&rng, t, n, alpha, sep, large);
        struct sd_sam *s = build(t, n);
        validate(s); /* unfrozen: first_end exact, recorded ends valid */
        assert_int_equal(sd_sam_freeze(s, NULL), SDNPU_OK);
        validate(s);
        /* Appending unfreezes; freezing again is exact again. */
        int32_t extra = large ? g_large[iter % 5] : iter % alpha;
        assert_int_equal(sd_sam_append(s, extra, NULL, NULL), SDNPU_OK);
        assert_false(sd_sam_frozen(s));
        assert_int_equal(sd_sam_freeze(s, NULL), SDNPU_OK);
        validate(s);
        sd_sam_free(s);
    }
}

/* The end-position index: for every state and a spread of positions, the
 * first end at or after the position that has a continuation, as brute
 * force finds it over the state's longest string; -1 before the index is
 * built and once the text has grown past it. */
static void test_end_index_vs_brute(void **state) {
    (void)state;
    uint64_t rng = 7;
    int32_t t[160];
    for (int iter = 0; iter < 60; iter++) {
        int32_t alpha = 2 + iter % 4, n = 1 + (int32_t)(sdt_rand_u64(&rng) % 140);
        gen_text(&rng, t, n, alpha, iter % 3 == 0 ? 6 : 0, false);
        struct sd_sam *s = build(t, n);
        assert_int_equal(sd_sam_freeze(s, NULL), SDNPU_OK);
        assert_int_equal(sd_sam_end_from(s, sd_sam_n_states(s) > 1 ? 1 : 0, 0), -1); /* not built */
        assert_int_equal(sd_sam_index_ends(s, NULL), SDNPU_OK);
        assert_true(sd_sam_indexed(s));
        const int32_t *text = sd_sam_text(s);
        for (int32_t v = 1; v < (int32_t)sd_sam_n_states(s); v++) {
            int32_t len = sd_sam_len(s, v), fe = sd_sam_first_end(s, v);
            const int32_t *str = text + fe - len + 1;
            for (int32_t pos = iter % 3; pos <= n; pos += 3) {
                int32_t want = -1;
                for (int32_t e = SD_MAX(pos, len - 1); e < n && want < 0; e++)
                    if (memcmp(text + e - len + 1, str, (size_t)len * sizeof *str) == 0 && e + 1 < n && text[e + 1] >= 0)
                        want = e;
                assert_int_equal(sd_sam_end_from(s, v, pos), want);
            }
        }
        assert_int_equal(sd_sam_append(s, 0, NULL, NULL), SDNPU_OK);
        assert_false(sd_sam_indexed(s));
        if (sd_sam_n_states(s) > 1) assert_int_equal(sd_sam_end_from(s, 1, 0), -1);
        sd_sam_free(s);
    }
}

static void check_cursor(const struct sd_sam *s, const int32_t *q, int32_t i, struct sd_sam_cursor c,
                         int32_t want) {
    assert_int_equal(c.len, want);
    if (want == 0) {
        assert_int_equal(c.state, 0);
        return;
    }
    /* The matched suffix is in the cursor's class. */
    assert_true(sd_sam_len(s, sd_sam_link(s, c.state)) < c.len && c.len <= sd_sam_len(s, c.state));
    int32_t fe = sd_sam_first_end(s, c.state);
    assert_memory_equal(sd_sam_text(s) + fe - c.len + 1, q + i - c.len + 1, (size_t)c.len * sizeof *q);
}

static void test_cursor_vs_brute(void **state) {
    (void)state;
    uint64_t rng = 7;
    int32_t t[200], q[300];
    for (int iter = 0; iter < 120; iter++) {
        int32_t alpha = 2 + iter % 4;
        bool large = iter % 4 == 3;
        int32_t n = 20 + (int32_t)(sdt_rand_u64(&rng) % 180);
        gen_text(&rng, t, n, alpha, iter % 2 ? 4 : 0, large);
        struct sd_sam *s = build(t, n);
        assert_int_equal(sd_sam_freeze(s, NULL), SDNPU_OK);
        /* The query copies spans of the text, mutates, and jumps. */
        int32_t m = 300;
        for (int32_t i = 0; i < m;) {
            int32_t from = (int32_t)(sdt_rand_u64(&rng) % (uint64_t)n);
            int32_t span = 1 + (int32_t)(sdt_rand_u64(&rng) % 30);
            for (int32_t k = 0; k < span && i < m && from + k < n; k++)
                q[i++] = t[from + k];
            if (i < m) {
                int32_t a = (int32_t)(sdt_rand_u64(&rng) % (uint64_t)(alpha + 1));
                q[i++] = a == alpha ? 999 : (large ? g_large[a] : a); /* 999: never in the text */
            }
        }
        struct sd_sam_cursor c;
        sd_sam_cursor_reset(&c);
        int32_t want = 0;
        for (int32_t i = 0; i < m; i++) {
            sd_sam_cursor_advance(s, &c, q[i]);
            want = bf_longest(t, n, q, i, want);
            check_cursor(s, q, i, c, want);
        }
        sd_sam_free(s);
    }
}

/* The output store: the cursor reads each token before it is appended (so
 * it is the longest suffix that occurred earlier) and is carried across the
 * append, which may split its state. */
static void test_growing_cursor(void **state) {
    (void)state;
    uint64_t rng = 99;
    int32_t t[300];
    for (int iter = 0; iter < 80; iter++) {
        int32_t alpha = 2 + iter % 4;
        int32_t n = 10 + (int32_t)(sdt_rand_u64(&rng) % 290);
        gen_text(&rng, t, n, alpha, 0, iter % 3 == 2);
        struct sd_sam *s = NULL;
        assert_int_equal(sd_sam_create(0, &s, NULL), SDNPU_OK);
        struct sd_sam_cursor c;
        sd_sam_cursor_reset(&c);
        int32_t want = 0;
        for (int32_t i = 0; i < n; i++) {
            sd_sam_cursor_advance(s, &c, t[i]);
            /* Longest suffix of t[0..i] occurring in t[0..i). */
            want = bf_longest(t, i, t, i, want);
            check_cursor(s, t, i, c, want);
            assert_int_equal(sd_sam_append(s, t[i], &c, NULL), SDNPU_OK);
            check_cursor(s, t, i, c, want);
            if (want > 0) {
                /* The match has a continuation in the text (the drafter
                 * relies on it) and it ends before i. */
                int32_t e = sd_sam_cont_end(s, c.state);
                assert_true(e >= 0 && e < i);
                assert_memory_equal(t + e - want + 1, t + i - want + 1, (size_t)want * sizeof *t);
            }
        }
        if (iter % 8 == 0) validate(s);
        sd_sam_free(s);
    }
}

static void test_top_edges_ranked(void **state) {
    (void)state;
    /* After "1": 2 three times (ends 1, 5, 10), 3 twice (3, 8), 4 once
     * (12, the most recent): count decides. */
    int32_t t[] = {1, 2, 1, 3, 1, 2, 0, 1, 3, 1, 2, 1, 4};
    struct sd_sam *s = build(t, 13);
    assert_int_equal(sd_sam_freeze(s, NULL), SDNPU_OK);
    int32_t v = sd_sam_next(s, 0, 1);
    assert_true(v > 0);
    int32_t tok[4], to[4];
    assert_int_equal(sd_sam_top_edges(s, v, 4, SD_SAM_SEP, tok, to), 3);
    assert_int_equal(tok[0], 2);
    assert_int_equal(tok[1], 3);
    assert_int_equal(tok[2], 4);
    assert_int_equal(sd_sam_count(s, to[0]), 3);
    assert_int_equal(sd_sam_count(s, to[1]), 2);
    assert_int_equal(sd_sam_top_edges(s, v, 2, 2, tok, to), 2); /* excluding 2 */
    assert_int_equal(tok[0], 3);
    assert_int_equal(tok[1], 4);
    assert_int_equal(sd_sam_top_edges(s, v, 1, SD_SAM_SEP, tok, to), 1);
    assert_int_equal(tok[0], 2);
    /* After "5": 8, 6 and 7 once each: the most recent first. */
    int32_t t2[] = {5, 8, 5, 6, 5, 7};
    struct sd_sam *s2 = build(t2, 6);
    assert_int_equal(sd_sam_freeze(s2, NULL), SDNPU_OK);
    int32_t v2 = sd_sam_next(s2, 0, 5);
    assert_int_equal(sd_sam_top_edges(s2, v2, 4, SD_SAM_SEP, tok, to), 3);
    assert_int_equal(tok[0], 7); /* all once: most recent first */
    assert_int_equal(tok[1], 6);
    assert_int_equal(tok[2], 8);
    sd_sam_free(s);
    sd_sam_free(s2);
}

static void test_clear_and_reuse(void **state) {
    (void)state;
    uint64_t rng = 5;
    int32_t t[100];
    struct sd_sam *s = NULL;
    assert_int_equal(sd_sam_create(16, &s, NULL), SDNPU_OK);
    for (int r = 0; r < 5; r++) {
        gen_text(&rng, t, 100, 3, 5, false);
        for (int i = 0; i < 100; i++)
            assert_int_equal(sd_sam_append(s, t[i], NULL, NULL), SDNPU_OK);
        assert_int_equal(sd_sam_freeze(s, NULL), SDNPU_OK);
        validate(s);
        struct sd_sam_cursor c = {(int32_t)sd_sam_n_states(s) - 1, 3};
        sd_sam_clear(s);
        assert_int_equal(sd_sam_n_tokens(s), 0);
        assert_int_equal(sd_sam_n_states(s), 1);
        /* A stale cursor starts over instead of reading freed states. */
        sd_sam_cursor_advance(s, &c, 1);
        assert_int_equal(c.len, 0);
    }
    assert_true(sd_sam_memory(s) > 0);
    sd_sam_free(s);
    sd_sam_free(NULL);
}

/* Fail the k-th allocation for k = 0, 1, ...: creation fails cleanly, or an
 * append fails with the automaton still that of the text before it (the
 * rest is appended with allocation working again and the result checked
 * against brute force), or the freeze fails and can be retried. */
static void test_alloc_failure_sweep(void **state) {
    (void)state;
    uint64_t rng = 1234;
    int32_t t[120];
    gen_text(&rng, t, 120, 3, 5, false);
    long base = sdt_alloc_live();
    int failures = 0;
    for (long k = 0;; k++) {
        struct sd_err err = {0};
        struct sd_sam *s = NULL;
        bool hit = false;
        sdt_alloc_fail_after(k);
        int rc = sd_sam_create(0, &s, &err);
        if (rc) {
            assert_int_equal(rc, SDNPU_ERR_OOM);
            assert_null(s);
            assert_true(strstr(err.msg, "out of memory") != NULL);
            sdt_alloc_fail_after(-1);
            assert_int_equal(sdt_alloc_live(), base);
            failures++;
            continue;
        }
        int32_t i = 0;
        for (; i < 120; i++) {
            rc = sd_sam_append(s, t[i], NULL, &err);
            if (rc) break;
        }
        if (rc) {
            assert_int_equal(rc, SDNPU_ERR_OOM);
            hit = true;
            sdt_alloc_fail_after(-1);
            assert_int_equal(sd_sam_n_tokens(s), (size_t)i);
            for (; i < 120; i++)
                assert_int_equal(sd_sam_append(s, t[i], NULL, NULL), SDNPU_OK);
        }
        rc = sd_sam_freeze(s, &err);
        if (rc) {
            assert_int_equal(rc, SDNPU_ERR_OOM);
            assert_false(sd_sam_frozen(s));
            hit = true;
            sdt_alloc_fail_after(-1);
            assert_int_equal(sd_sam_freeze(s, NULL), SDNPU_OK);
        }
        rc = sd_sam_index_ends(s, &err);
        if (rc) {
            assert_int_equal(rc, SDNPU_ERR_OOM);
            assert_false(sd_sam_indexed(s));
            hit = true;
            sdt_alloc_fail_after(-1);
            assert_int_equal(sd_sam_index_ends(s, NULL), SDNPU_OK);
        }
        sdt_alloc_fail_after(-1);
        if (hit) validate(s);
        sd_sam_free(s);
        assert_int_equal(sdt_alloc_live(), base);
        if (!hit) break;
        failures++;
    }
    assert_true(failures >= 5);
}

int main(void) {
    sdt_alloc_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_example),        cmocka_unit_test(test_random_vs_brute),
        cmocka_unit_test(test_cursor_vs_brute),     cmocka_unit_test(test_growing_cursor),
        cmocka_unit_test(test_top_edges_ranked),    cmocka_unit_test(test_clear_and_reuse),
        cmocka_unit_test(test_alloc_failure_sweep), cmocka_unit_test(test_end_index_vs_brute),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
