/* tests/test_grammar.c - constrained output (grammar/grammar.h): the JSON
 * recogniser against jansson, the token mask over a vocabulary, the
 * sampler under a grammar, and SDNPU_FORMAT_JSON end to end, lossless
 * across decoding methods on a tiny model and the default one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "sample/sampler.h"
#include "sdnpu.h"
#include "util_common.h"
#include "util_json.h"
#include "util_tiny_model.h"

/* ------------------------------------------------------------ recogniser */

static bool accepts(const char *s, size_t n) {
    struct sd_json j;
    sd_json_init(&j);
    return sd_json_feed(&j, s, n) && sd_json_complete(&j);
}

/* Whether s is a viable prefix: some continuation completes it. */
static bool viable(const char *s, size_t n) {
    struct sd_json j;
    sd_json_init(&j);
    return sd_json_feed(&j, s, n);
}

static void test_json_examples(void **state) {
    (void)state;
    static const char *good[] = {
        "{}",
        "{\"a\":1}",
        "{\"a\": [1, 2.5, -0.5e+3, 0, -0, 1E9, true, false, null]}",
        "{\n  \"k\": {\"x\": \"\\u00e9\\n\\\"\\\\\\/\\b\\f\\r\\t\"},\n  \"v\": []\n}",
        "{\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\":\"\xed\x9f\xbf\"}",
        "{\"a\":{\"b\":{\"c\":[[],[{}]]}}}",
        "{\r\n\"a\" :\t1 }",
        "{\"a\":123456789012345,\"b\":-1.5e99,\"c\":2E-07}",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        assert_true(accepts(good[i], strlen(good[i])));
    static const char *bad[] = {
        "[]",
        " {}",
        "{} ",
        "{}\n",
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":.5}",
        "{\"a\":1e}",
        "{\"a\":+1}",
        "{\"a\":tru}",
        "{\"a\":1,}",
        "{,}",
        "{\"a\" 1}",
        "{'a':1}",
        "{\"a\":[1,]}",
        "{\"a\":\"\x01\"}",
        "{\"a\":\"\\x\"}",
        "{\"a\":\"\\ud800\"}",
        "{\"a\":\"\\u0000\"}",
        "{\"a\":\"\xc0\xaf\"}",
        "{\"a\":\"\xed\xa0\x80\"}",
        "{\"a\":\"\xf4\x90\x80\x80\"}",
        "{\"a\":\"\xe0\x80\xaf\"}",
        "{\"a\":1]",
        "{\"a\":[1}",
        "{\n\n\"a\":1}",
        "{\"a\":1}}",
        "{\"a\":nulll}",
        "{\"a\":-}",
        "{\"a\":1.5e+}",
        "{\"a\":1234567890123456}",
        "{\"a\":1e100}",
        "{\"a\":\"\\uDE2D\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(accepts(bad[i], strlen(bad[i])));
    /* Prefixes: viable but not complete. */
    assert_true(viable("{\"a\":[1, tr", 11));
    assert_false(accepts("{\"a\":[1, tr", 11));
    assert_true(viable("{\"a\":\"\xe4\xb8", 8)); /* inside a character */
    assert_false(viable("{\"a\"::", 6));
}

static void test_json_bounds(void **state) {
    (void)state;
    char buf[300];
    /* SD_JSON_MAX_DEPTH containers, the object included. */
    size_t n = 0;
    buf[n++] = '{', buf[n++] = '"', buf[n++] = 'a', buf[n++] = '"', buf[n++] = ':';
    for (int d = 1; d < SD_JSON_MAX_DEPTH; d++)
        buf[n++] = '[';
    assert_true(viable(buf, n));
    buf[n] = '[';
    assert_false(viable(buf, n + 1));
    for (int d = 1; d < SD_JSON_MAX_DEPTH; d++)
        buf[n++] = ']';
    buf[n++] = '}';
    assert_true(accepts(buf, n));
    /* A whitespace run of SD_JSON_MAX_WS bytes, not one more. */
    n = 0;
    buf[n++] = '{';
    for (int i = 0; i < SD_JSON_MAX_WS; i++)
        buf[n++] = i == 0 ? '\n' : ' ';
    buf[n++] = '}';
    assert_true(accepts(buf, n));
    memmove(buf + 2, buf + 1, n - 1);
    buf[1] = ' ';
    assert_false(viable(buf, n + 1));
}

/* Valid objects and their one-byte edits (replaced or deleted, never
 * inserted: a longer number could leave what jansson's doubles hold):
 * ours completes exactly what the reference (tests/util_json.h: jansson,
 * and the grammar's whitespace bounds) accepts, every prefix of an
 * accepted text is viable, and feeding in pieces equals feeding at once. */
static void test_json_against_jansson(void **state) {
    (void)state;
    static const char alphabet[] = "{}[]\",:0123456789.eE+-tfrulnas \n\r\t\\/\x01\x80\xc3\xa9\xff";
    struct sdt_gen g = {.rng = 20261206};
    int n_valid = 0, n_edit_valid = 0;
    for (int iter = 0; iter < 4000; iter++) {
        g.n = 0;
        sdt_gen_container(&g, 0, true);
        if (iter % 2) {
            size_t at = sdt_gen_pick(&g, (uint32_t)g.n);
            if (sdt_gen_pick(&g, 3) == 0)
                memmove(g.buf + at, g.buf + at + 1, --g.n - at);
            else
                g.buf[at] = alphabet[sdt_gen_pick(&g, sizeof alphabet - 1)];
        }
        const bool ref = sdt_json_object_ok(g.buf, g.n);
        if (accepts(g.buf, g.n) != ref) fail_msg("ours %d, reference %d: %.*s", !ref, ref, (int)g.n, g.buf);
        n_valid += ref && iter % 2 == 0;
        n_edit_valid += ref && iter % 2;
        if (ref)
            for (size_t k = 0; k < g.n; k++)
                assert_true(viable(g.buf, k));
        /* In pieces, as tokens bring it. */
        struct sd_json j;
        sd_json_init(&j);
        bool fed = true;
        for (size_t at = 0; at < g.n && fed;) {
            size_t len = 1 + sdt_gen_pick(&g, 6);
            if (len > g.n - at) len = g.n - at;
            fed = sd_json_feed(&j, g.buf + at, len);
            at += len;
        }
        assert_int_equal(fed && sd_json_complete(&j), ref);
    }
    assert_int_equal(n_valid, 2000); /* the generator writes only valid objects */
    assert_true(n_edit_valid > 50);  /* and some edits stay valid: both sides of the comparison are seen */
}

/* ----------------------------------------------------------- token mask */

/* A toy vocabulary: texts by id, id 7 ends generation, 6 is a control
 * token (no text). */
static const char *const k_toks[] = {"{", "}", "\"a\"", ":",   "1",    "x", "",
                                     "",  " ", "{\"",   "\"}", "\n\n", ",", "}\n"};
#define N_TOKS ((int32_t)(sizeof k_toks / sizeof *k_toks))

static int32_t toy_piece(const void *ud, int32_t id, char *buf, size_t cap) {
    (void)ud;
    size_t len = strlen(k_toks[id]);
    if (len > cap) return -(int32_t)len;
    memcpy(buf, k_toks[id], len);
    return (int32_t)len;
}

static bool toy_eog(const void *ud, int32_t id) {
    (void)ud;
    return id == 7;
}

static struct sd_grammar *toy(void) {
    struct sd_grammar *g = NULL;
    struct sd_err err = {0};
    assert_int_equal(sd_grammar_create(N_TOKS, toy_piece, toy_eog, NULL, &g, &err), SDNPU_OK);
    return g;
}

/* Every allocation sd_grammar_create makes may fail: an OOM status with
 * a message, nothing left allocated. */
static void test_grammar_alloc_failure(void **state) {
    (void)state;
    sdt_alloc_install();
    const long base = sdt_alloc_live();
    for (long f = 0;; f++) {
        struct sd_err err = {0};
        struct sd_grammar *g = (struct sd_grammar *)&err; /* set to NULL on failure */
        sdt_alloc_fail_after(f);
        int rc = sd_grammar_create(N_TOKS, toy_piece, toy_eog, NULL, &g, &err);
        sdt_alloc_fail_after(-1);
        if (rc == SDNPU_OK) {
            sd_grammar_free(g);
            assert_int_equal(sdt_alloc_live(), base);
            assert_true(f >= 4); /* the struct, the offsets, the marks, the texts */
            break;
        }
        assert_int_equal(rc, SDNPU_ERR_OOM);
        assert_null(g);
        assert_non_null(strstr(err.msg, "grammar"));
        assert_int_equal(sdt_alloc_live(), base);
    }
}

/* Which of the toy tokens the state after text allows. */
static void expect_allowed(const struct sd_grammar *g, const char *text, const char *want) {
    struct sd_json j;
    sd_json_init(&j);
    assert_true(sd_json_feed(&j, text, strlen(text)));
    for (int32_t t = 0; t < N_TOKS; t++)
        if (sd_grammar_allows(g, &j, t) != (want[t] == '1'))
            fail_msg("after %s, token %d (\"%s\"): allowed %d, want %c", text, t, k_toks[t],
                     !(want[t] == '1'), want[t]);
}

static void test_mask(void **state) {
    (void)state;
    struct sd_grammar *g = toy();
    /* Tokens:            {}"a":1x--_{"\n,}  ("-" control and end, "_" a space) */
    expect_allowed(g, "", "10000000010000");
    expect_allowed(g, "{", "01100000101000");   /* '"}' opens a key holding '}' */
    expect_allowed(g, "{\"", "11011100110010"); /* in a key: text, not '"a"' (a after the key) nor \n */
    expect_allowed(g, "{\"a\"", "00010000100000");
    expect_allowed(g, "{\"a\":", "10101000111000");
    expect_allowed(g, "{\"a\":1", "01001000100010");
    expect_allowed(g, "{\"a\":1}", "00000001000000"); /* complete: the end alone, no trailing "}\n" */
    struct sd_json j;
    sd_json_init(&j);
    assert_false(sd_grammar_allows(g, &j, -1));
    assert_false(sd_grammar_allows(g, &j, N_TOKS));
    float l[N_TOKS];
    for (int32_t t = 0; t < N_TOKS; t++)
        l[t] = (float)t; /* the best tokens are refused */
    assert_int_equal(sd_grammar_argmax(g, &j, l), 9);
    for (int32_t t = 0; t < N_TOKS; t++)
        l[t] = 1.0f; /* ties go to the lower id */
    assert_int_equal(sd_grammar_argmax(g, &j, l), 0);
    /* No token continues "t": the mask leaves the end alone. */
    assert_true(sd_json_feed(&j, "{\"a\":t", 6));
    for (int32_t t = 0; t < N_TOKS; t++)
        l[t] = 1.0f;
    sd_grammar_mask(g, &j, l);
    for (int32_t t = 0; t < N_TOKS; t++)
        assert_true(t == 7 ? l[t] == 1.0f : l[t] == -INFINITY);
    /* A token forced past the grammar: only the end may come. */
    sd_json_init(&j);
    assert_false(sd_grammar_advance(g, &j, 5));
    assert_true(sd_json_dead(&j));
    for (int32_t t = 0; t < N_TOKS; t++)
        assert_int_equal(sd_grammar_allows(g, &j, t), t == 7);
    sd_grammar_free(g);
}

/* A random vocabulary for the mask: texts of 1-6 pieces drawn from JSON's
 * structural bytes, digits, letters, escapes, whole and partial UTF-8
 * characters and bytes no JSON text holds; id 0 ends generation and a few
 * ids have no text. */
#define RV_N 3000
struct rand_vocab {
    char text[RV_N][32];
    uint8_t len[RV_N];
};

static int32_t rv_piece(const void *ud, int32_t id, char *buf, size_t cap) {
    const struct rand_vocab *v = ud;
    if (v->len[id] > cap) return -(int32_t)v->len[id];
    memcpy(buf, v->text[id], v->len[id]);
    return v->len[id];
}

static bool rv_eog(const void *ud, int32_t id) {
    (void)ud;
    return id == 0;
}

static void rv_make(struct rand_vocab *v, struct sdt_gen *g) {
    static const char *const pieces[] = {
        "{",        "}",    "[",     "]",    "\"",       ",",        ":",    " ",
        "\n",       "\r",   "\t",    "0",    "1",        "7",        "-",    ".",
        "e",        "+",    "t",     "true", "fals",     "null",     "a",    "b",
        "name",     "kind", "alpha", "be",   "ta",       "\\",       "\\n",  "\\u00e9",
        "\\u",      "d8",   "\xc3",  "\xa9", "\xc3\xa9", "\xe4\xb8", "\xad", "\xf0\x9f\x98\x80",
        "\xed\xa0", "\x01", "\xff",  "\x7f", "/",        "x"};
    for (int32_t id = 0; id < RV_N; id++) {
        size_t n = 0;
        const uint32_t k = id % 97 == 5 ? 0 : 1 + sdt_gen_pick(g, 6);
        for (uint32_t i = 0; i < k; i++) {
            const char *p = pieces[sdt_gen_pick(g, sizeof pieces / sizeof *pieces)];
            if (n + strlen(p) >= sizeof v->text[id]) break;
            memcpy(v->text[id] + n, p, strlen(p));
            n += strlen(p);
        }
        v->len[id] = (uint8_t)n;
    }
}

/* The mask after the state j equals each token's sd_grammar_allows (the
 * end tokens by the rule beside it: allowed where the object is complete,
 * the state dead, or nothing else is). Returns whether j was inside a free
 * string. */
static bool expect_mask(const struct sd_grammar *g, const struct sd_json *j, const char *what) {
    static float l[RV_N];
    for (int32_t t = 0; t < RV_N; t++)
        l[t] = 0.0f;
    sd_grammar_mask(g, j, l);
    int32_t kept = 0;
    for (int32_t t = 1; t < RV_N; t++) {
        const bool ok = sd_grammar_allows(g, j, t);
        kept += ok;
        if (ok != (l[t] == 0.0f))
            fail_msg("after %s: token %d masked %d, allowed %d", what, t, l[t] != 0.0f, ok);
    }
    const bool end = sd_json_dead(j) || sd_json_complete(j) || kept == 0;
    assert_int_equal(l[0] == 0.0f, end);
    return sd_json_free_text(j);
}

/* The mask's short cuts (the tokens' string classes inside a free string,
 * the first byte elsewhere) against feeding every token whole, after
 * every prefix of random objects and of objects under a schema (whose
 * property names and enum values are literals to match). */
static void test_mask_short_cuts(void **state) {
    (void)state;
    static struct rand_vocab v;
    struct sdt_gen gen = {.rng = 20261207};
    rv_make(&v, &gen);
    struct sd_grammar *g = NULL;
    struct sd_err err = {0};
    assert_int_equal(sd_grammar_create(RV_N, rv_piece, rv_eog, &v, &g, &err), SDNPU_OK);
    int in_string = 0, states = 0;
    for (int doc = 0; doc < 40; doc++) {
        gen.n = 0;
        sdt_gen_container(&gen, 0, true);
        struct sd_json j;
        sd_json_init(&j);
        for (size_t i = 0; i <= gen.n; i++) {
            in_string += expect_mask(g, &j, "a random object's prefix"), states++;
            if (i < gen.n) assert_true(sd_json_feed(&j, gen.buf + i, 1));
        }
        sd_json_kill(&j);
        expect_mask(g, &j, "a dead state");
    }
    static const char schema[] =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
        "\"kind\":{\"enum\":[\"alpha\",\"beta\",\"b\\u00e9\"]},\"n\":{\"type\":\"integer\"},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
        "\"required\":[\"name\",\"kind\"]}";
    static const char doc[] =
        "{\"name\": \"x\\u00e9 \\\"q\\\" \xc3\xa9\", \"kind\": \"b\xc3\xa9\", \"n\": -12,\n"
        "  \"tags\": [\"a\", \"b\\n\"]}";
    struct sd_schema *sc = NULL;
    assert_int_equal(sd_schema_compile(schema, strlen(schema), &sc, &err), SDNPU_OK);
    struct sd_json j;
    sd_json_init_schema(&j, sc);
    for (size_t i = 0; i < sizeof doc; i++) {
        in_string += expect_mask(g, &j, "a prefix under the schema"), states++;
        if (i + 1 < sizeof doc) assert_true(sd_json_feed(&j, doc + i, 1));
    }
    assert_true(sd_json_complete(&j));
    /* Both paths were taken, many times. */
    assert_true(in_string > 100);
    assert_true(states - in_string > 100);
    sd_schema_free(sc);
    sd_grammar_free(g);
}

/* The sampler under the toy grammar, greedy and sampling, on random
 * logits: every token it picks is allowed after the text so far, the end
 * comes only after a complete object, and such runs parse. */
static void test_sampler_constrained(void **state) {
    (void)state;
    struct sd_grammar *g = toy();
    struct sd_err err = {0};
    uint64_t rng = 7;
    int finished = 0;
    for (int run = 0; run < 60; run++) {
        struct sd_sampler_params sp = {run % 2 ? 1.0f : 0.0f, 0, 1.0f, 0.0f, 1.0f, 0, (uint64_t)run};
        struct sd_sampler *smp;
        assert_int_equal(sd_sampler_create(&sp, N_TOKS, &smp, &err), SDNPU_OK);
        sd_sampler_accept(smp, 5); /* a prompt token: before the constraint, it is not output */
        sd_sampler_constrain(smp, g, NULL);
        assert_false(sd_sampler_allows(smp, 5)); /* "x" cannot open the object */
        int32_t k, n_keep;
        const int32_t *keep;
        assert_false(sd_sampler_topk(smp, &k, &keep, &n_keep)); /* the allowed ones may be anywhere */
        char text[1024];
        size_t n = 0;
        for (int step = 0; step < 200; step++) {
            float l[N_TOKS];
            for (int32_t t = 0; t < N_TOKS; t++)
                l[t] = 3.0f * sdt_rand_float(&rng);
            struct sd_json j;
            sd_json_init(&j);
            assert_true(sd_json_feed(&j, text, n));
            int32_t tok = sd_sampler_sample(smp, l);
            assert_true(sd_grammar_allows(g, &j, tok));
            sd_sampler_accept(smp, tok);
            if (tok == 7) {
                assert_true(sdt_json_object_ok(text, n));
                assert_true(sd_sampler_output_complete(smp));
                finished++;
                break;
            }
            size_t len = strlen(k_toks[tok]);
            assert_true(n + len < sizeof text);
            memcpy(text + n, k_toks[tok], len);
            n += len;
        }
        sd_sampler_free(smp);
    }
    assert_true(finished >= 10);
    sd_grammar_free(g);
}

/* ------------------------------------------------------------ end to end */

/* One JSON request's text and stats. */
static enum sdnpu_status run_json(struct sdnpu_session *s, const char *prompt, bool chat, const char *spec,
                                  float temp, int32_t n, struct sdt_text *out, struct sdnpu_stats *st) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.format = SDNPU_FORMAT_JSON;
    gp.chat = chat;
    gp.n_predict = n;
    gp.sampling.temperature = temp;
    gp.sampling.seed = 11;
    gp.spec = sdt_spec(spec);
    gp.new_context = true;
    gp.on_text = sdt_collect;
    gp.user = out;
    memset(out, 0, sizeof *out);
    return sdnpu_session_generate(s, prompt, strlen(prompt), &gp, st);
}

/* What a JSON reply must be: one object where the model ended it, else
 * (cut by the length) a viable prefix of one. */
static void check_reply(const struct sdt_text *t, const struct sdnpu_stats *st) {
    if (st->stop_reason == SDNPU_STOP_EOG) {
        if (!sdt_json_object_ok(t->buf, t->n)) fail_msg("not a JSON object: %.*s", (int)t->n, t->buf);
    } else {
        assert_int_equal(st->stop_reason, SDNPU_STOP_LENGTH);
        if (!viable(t->buf, t->n)) fail_msg("not the start of a JSON object: %.*s", (int)t->n, t->buf);
    }
}

static const char *const k_specs[] = {"none",     "npu-vanilla",    "pld",           "sam",
                                      "sam-tree", "sam-tree+reuse", "sam-tree+calib"};
#define N_SPECS (sizeof k_specs / sizeof *k_specs)

/* Random weights write whatever the mask leaves them, so most steps
 * refuse the model's first choice: every method gives plain decoding's
 * text, greedy, and a seed its own text again when sampling. */
static void test_json_tiny_lossless(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/test_grammar_tiny.gguf", SD_BUILD_DIR);
    struct sdt_tiny_opts o = {.arch = "qwen2"};
    struct sdnpu_model *m = sdt_tiny_load(&o, path);
    assert_non_null(m);
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sdnpu_session_default_params(), &s), SDNPU_OK);
    const char *prompt = "{\"a\": 1, \"b\": [1, 2, 3]} {\"a\": 1, \"b\": [1, 2, 3]} {\"a\":";
    struct sdt_text plain, t;
    struct sdnpu_stats st;
    for (size_t k = 0; k < N_SPECS; k++) {
        assert_int_equal(run_json(s, prompt, false, k_specs[k], 0.0f, 64, k ? &t : &plain, &st), SDNPU_OK);
        check_reply(k ? &t : &plain, &st);
        if (k && (t.n != plain.n || memcmp(t.buf, plain.buf, t.n)))
            fail_msg("%s: %.*s\nplain: %.*s", k_specs[k], (int)t.n, t.buf, (int)plain.n, plain.buf);
    }
    assert_true(plain.n > 1);
    struct sdt_text again;
    assert_int_equal(run_json(s, prompt, false, "sam-tree", 0.9f, 64, &t, &st), SDNPU_OK);
    check_reply(&t, &st);
    assert_int_equal(run_json(s, prompt, false, "sam-tree", 0.9f, 64, &again, &st), SDNPU_OK);
    assert_true(t.n == again.n && !memcmp(t.buf, again.buf, t.n));
    /* An unknown format is refused by name. */
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.format = (enum sdnpu_format)7;
    assert_int_equal(sdnpu_session_generate(s, "x", 1, &gp, &st), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(sdnpu_session_last_error(s), "format 7"));
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* The default model asked for JSON: an object it ends itself, the same
 * from every method; sampled, an object too. */
static void test_json_default_model(void **state) {
    (void)state;
    if (!sdt_file_exists(SD_DEFAULT_MODEL)) skip();
    struct sdnpu_model *m = sdt_model(SD_DEFAULT_MODEL, 0, true);
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sdnpu_session_default_params(), &s), SDNPU_OK);
    const char *prompt = "Release notes: Git 2.33 adds git merge -s ort, faster renames and a new "
                         "--diff-merges option. Give the version and the three changes as JSON.";
    struct sdt_text plain, t;
    struct sdnpu_stats st;
    static const char *const specs[] = {"none", "sam-tree", "sam-tree+reuse+calib"};
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(run_json(s, prompt, true, specs[k], 0.0f, 160, k ? &t : &plain, &st), SDNPU_OK);
        assert_int_equal(st.stop_reason, SDNPU_STOP_EOG);
        check_reply(k ? &t : &plain, &st);
        if (k && (t.n != plain.n || memcmp(t.buf, plain.buf, t.n)))
            fail_msg("%s: %.*s\nplain: %.*s", specs[k], (int)t.n, t.buf, (int)plain.n, plain.buf);
    }
    assert_non_null(strstr(plain.buf, "2.33"));
    assert_int_equal(run_json(s, prompt, true, "sam-tree", 0.7f, 160, &t, &st), SDNPU_OK);
    assert_int_equal(st.stop_reason, SDNPU_STOP_EOG);
    check_reply(&t, &st);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_examples),        cmocka_unit_test(test_json_bounds),
        cmocka_unit_test(test_json_against_jansson), cmocka_unit_test(test_mask),
        cmocka_unit_test(test_mask_short_cuts),      cmocka_unit_test(test_grammar_alloc_failure),
        cmocka_unit_test(test_sampler_constrained),  cmocka_unit_test(test_json_tiny_lossless),
        cmocka_unit_test(test_json_default_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
