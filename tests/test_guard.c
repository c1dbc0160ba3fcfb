/* tests/test_guard.c - the degeneration guard (engine/guard.c) on outputs
 * written out by hand as token pieces: where it stops and what it keeps
 * for a repeated sentence, a repeated line, a loop without punctuation;
 * where it must not stop (short sentences, decimals, different sentences,
 * the same words spaced differently are the same sentence); growth past
 * the size hint. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "engine/guard.h"
#include "util_common.h"

/* A token id per distinct piece text, as a vocabulary would give. */
static int32_t id_of(const char *piece) {
    uint32_t h = 2166136261u;
    for (const char *p = piece; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return (int32_t)(h & 0x7fffffff);
}

/* Push pieces[0..n); returns the index of the piece at which the guard
 * said "repeats", or -1. */
static int push_all(struct sd_guard *g, const char *const *pieces, int n) {
    for (int i = 0; i < n; i++) {
        bool rep;
        assert_int_equal(sd_guard_push(g, id_of(pieces[i]), pieces[i], strlen(pieces[i]), &rep, NULL), SDNPU_OK);
        if (rep) return i;
    }
    return -1;
}

static void test_repeated_sentence(void **state) {
    (void)state;
    struct sd_guard g = {0};
    assert_int_equal(sd_guard_reset(&g, 64, NULL), SDNPU_OK);
    const char *p[] = {"It", " is", " a", " free", " system", ".", " It", " is", " a", " free", " system", ".", " More"};
    /* The second sentence is known to be over when " More" starts the
     * next one: the guard stops there and keeps the first sentence. */
    assert_int_equal(push_all(&g, p, 13), 12);
    assert_int_equal(g.kept_tok, 6);
    assert_int_equal(g.kept_bytes, strlen("It is a free system."));
    sd_guard_free(&g);
}

static void test_repeated_line_with_decimals(void **state) {
    (void)state;
    struct sd_guard g = {0};
    assert_int_equal(sd_guard_reset(&g, 64, NULL), SDNPU_OK);
    const char *p[] = {"*", " Git", " 2", ".", "36", " Release", " Notes", "\n",
                       "*", " Git", " 2", ".", "36", " Release", " Notes", "\n"};
    /* "2.36": the "." is followed by "36", so no sentence ends there. */
    assert_int_equal(push_all(&g, p, 4), -1);
    assert_int_equal(g.kept_tok, 0);
    assert_int_equal(push_all(&g, p + 4, 4), -1);
    assert_int_equal(g.kept_tok, 8); /* the line ended at the newline */
    /* The same line again: stopped at its newline, the first one kept. */
    assert_int_equal(push_all(&g, p + 8, 8), 7);
    assert_int_equal(g.kept_tok, 8);
    assert_int_equal(g.kept_bytes, strlen("* Git 2.36 Release Notes\n"));
    sd_guard_free(&g);
}

static void test_no_stop(void **state) {
    (void)state;
    struct sd_guard g = {0};
    assert_int_equal(sd_guard_reset(&g, 64, NULL), SDNPU_OK);
    /* Short sentences may repeat ("Yes." is 4 characters). */
    const char *yes[] = {"Yes", ".", " Yes", ".", " Yes", ".", " Fine", "."};
    assert_int_equal(push_all(&g, yes, 8), -1);
    /* Similar sentences that differ are not repeats. */
    const char *sim[] = {" The", " cat", " sat", " down", ".", " The", " cat", " sat", " up", ".", " End"};
    assert_int_equal(push_all(&g, sim, 11), -1);
    /* A "." inside a word ("e.g.,") ends nothing. */
    const char *eg[] = {" See", " e", ".", "g", ".,", " the", " notes", ".", "\n"};
    assert_int_equal(push_all(&g, eg, 9), -1);
    sd_guard_free(&g);
}

static void test_whitespace_collapsed(void **state) {
    (void)state;
    struct sd_guard g = {0};
    assert_int_equal(sd_guard_reset(&g, 64, NULL), SDNPU_OK);
    const char *p[] = {"It", "  is", " a", "\t", "dog", " today", ".", "\n",
                       " It", " is", " a", " dog", " today", ".", " And"};
    assert_int_equal(push_all(&g, p, 15), 14);
    assert_int_equal(g.kept_tok, 8);
    sd_guard_free(&g);
}

static void test_token_loop(void **state) {
    (void)state;
    struct sd_guard g = {0};
    assert_int_equal(sd_guard_reset(&g, 64, NULL), SDNPU_OK);
    /* " a b c" over and over with no sentence end: the last 16 tokens
     * first recur after 16 + 3 tokens (the 19th, index 18). */
    const char *cyc[] = {" a", " b", " c"};
    int at = -1;
    for (int i = 0; i < 60 && at < 0; i++) {
        bool rep;
        assert_int_equal(sd_guard_push(&g, id_of(cyc[i % 3]), cyc[i % 3], 2, &rep, NULL), SDNPU_OK);
        if (rep) at = i;
    }
    assert_int_equal(at, 18);
    assert_int_equal(g.kept_tok, 0); /* no sentence ended: nothing is kept */
    sd_guard_free(&g);
}

static void test_growth(void **state) {
    (void)state;
    /* A hint of 1 token: 200 different sentences grow every table, and the
     * first sentence repeated at the end is still found. */
    struct sd_guard g = {0};
    assert_int_equal(sd_guard_reset(&g, 1, NULL), SDNPU_OK);
    char buf[64];
    for (int i = 0; i < 200; i++) {
        bool rep;
        snprintf(buf, sizeof buf, " Sentence number %d here", i);
        assert_int_equal(sd_guard_push(&g, 1000 + i, buf, strlen(buf), &rep, NULL), SDNPU_OK);
        assert_false(rep);
        assert_int_equal(sd_guard_push(&g, 7, ".", 1, &rep, NULL), SDNPU_OK);
        assert_false(rep);
    }
    bool rep;
    snprintf(buf, sizeof buf, " Sentence number %d here", 0);
    assert_int_equal(sd_guard_push(&g, 1000, buf, strlen(buf), &rep, NULL), SDNPU_OK);
    assert_false(rep);
    assert_int_equal(sd_guard_push(&g, 7, ".", 1, &rep, NULL), SDNPU_OK);
    assert_int_equal(sd_guard_push(&g, 8, " x", 2, &rep, NULL), SDNPU_OK);
    assert_true(rep);
    assert_int_equal(g.kept_tok, 400);
    /* Reset empties it for the next output. */
    assert_int_equal(sd_guard_reset(&g, 8, NULL), SDNPU_OK);
    assert_int_equal(g.n_tok, 0);
    assert_int_equal(sd_guard_push(&g, 1000, buf, strlen(buf), &rep, NULL), SDNPU_OK);
    assert_int_equal(sd_guard_push(&g, 7, ".", 1, &rep, NULL), SDNPU_OK);
    assert_int_equal(sd_guard_push(&g, 8, " x", 2, &rep, NULL), SDNPU_OK);
    assert_false(rep);
    sd_guard_free(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeated_sentence), cmocka_unit_test(test_repeated_line_with_decimals),
        cmocka_unit_test(test_no_stop),           cmocka_unit_test(test_whitespace_collapsed),
        cmocka_unit_test(test_token_loop),        cmocka_unit_test(test_growth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
