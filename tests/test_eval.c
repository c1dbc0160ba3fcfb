/* tests/test_eval.c - the eval harness's readers: the strict JSON parser
 * (cli/json.c) on valid and hostile input, dataset-line validation and
 * loading (cli/dataset.c), the prompts per task, and the shipped datasets.
 * The end-to-end run of `sdnpu eval` on a tiny model is tests/eval.cmake. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/dataset.h"
#include "cli/json.h"

/* Parse from an exact-size heap copy, so reading one byte too far is an
 * AddressSanitizer error rather than a lucky NUL. */
static int parse(const char *text, size_t len, struct json_value *v, char *err, size_t err_size) {
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, text, len);
    int rc = json_parse(copy, len, v, err, err_size);
    free(copy);
    return rc;
}

static int parse_s(const char *text, struct json_value *v, char *err, size_t err_size) {
    return parse(text, strlen(text), v, err, err_size);
}

/* Expect a failure whose message contains want. */
static void expect_fail(const char *text, size_t len, const char *want) {
    struct json_value v;
    char err[256];
    if (parse(text, len, &v, err, sizeof err) == 0) fail_msg("parsed but should not: '%.*s'", (int)len, text);
    assert_int_equal(v.type, JSON_NULL);
    if (!strstr(err, want)) fail_msg("for '%.*s': message '%s' lacks '%s'", (int)len, text, err, want);
    assert_non_null(strstr(err, "column "));
}

static void test_json_valid(void **state) {
    (void)state;
    struct json_value v;
    char err[256];
    const char *doc = " {\"a\": [1, -0, 2.5e3, 0.125, -7E-2, true, false, null], \"b\": {\"c\": \"d\", \"e\": []},"
                      " \"f\": {}}\n";
    assert_int_equal(parse_s(doc, &v, err, sizeof err), 0);
    assert_int_equal(v.type, JSON_OBJECT);
    assert_int_equal(v.u.obj.n, 3);
    const struct json_value *a = json_get(&v, "a");
    assert_non_null(a);
    assert_int_equal(a->type, JSON_ARRAY);
    assert_int_equal(a->u.arr.n, 8);
    assert_true(a->u.arr.items[0].u.num == 1.0);
    assert_true(a->u.arr.items[2].u.num == 2500.0);
    assert_true(a->u.arr.items[3].u.num == 0.125);
    assert_true(a->u.arr.items[4].u.num == -0.07);
    assert_int_equal(a->u.arr.items[5].type, JSON_BOOL);
    assert_true(a->u.arr.items[5].u.b);
    assert_false(a->u.arr.items[6].u.b);
    assert_int_equal(a->u.arr.items[7].type, JSON_NULL);
    const struct json_value *c = json_get(json_get(&v, "b"), "c");
    assert_non_null(c);
    assert_string_equal(c->u.str.s, "d");
    assert_int_equal(json_get(json_get(&v, "b"), "e")->u.arr.n, 0);
    assert_int_equal(json_get(&v, "f")->u.obj.n, 0);
    assert_null(json_get(&v, "zz"));
    assert_null(json_get(a, "a")); /* not an object */
    json_free(&v);
    assert_int_equal(v.type, JSON_NULL);
    json_free(&v); /* twice is fine */
    json_free(NULL);
    /* Scalars at the top level. */
    assert_int_equal(parse_s("\"x\"", &v, err, sizeof err), 0);
    json_free(&v);
    assert_int_equal(parse_s("  42 ", &v, err, sizeof err), 0);
    assert_true(v.u.num == 42.0);
    /* Underflow to zero is a number, not an error. */
    assert_int_equal(parse_s("1e-400", &v, err, sizeof err), 0);
    assert_true(v.u.num == 0.0);
}

static void test_json_escapes(void **state) {
    (void)state;
    struct json_value v;
    char err[256];
    assert_int_equal(parse_s("\"q\\\"b\\\\s\\/b\\bf\\fn\\nr\\rt\\t\"", &v, err, sizeof err), 0);
    assert_string_equal(v.u.str.s, "q\"b\\s/b\bf\fn\nr\rt\t");
    json_free(&v);
    /* \u escapes: 1, 2 and 3 UTF-8 bytes, and a surrogate pair for 4. */
    assert_int_equal(parse_s("\"\\u0041\\u00e9\\u20AC\\uD83D\\uDE00\"", &v, err, sizeof err), 0);
    assert_int_equal(v.u.str.len, 1 + 2 + 3 + 4);
    assert_memory_equal(v.u.str.s, "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 10);
    json_free(&v);
    /* Raw UTF-8 passes through unchanged. */
    assert_int_equal(parse_s("\"h\xC3\xA9llo \xE4\xB8\x96\xF0\x9F\x98\x80\"", &v, err, sizeof err), 0);
    assert_string_equal(v.u.str.s, "h\xC3\xA9llo \xE4\xB8\x96\xF0\x9F\x98\x80");
    json_free(&v);
    /* \u0000 is valid JSON: kept, and counted in len. */
    assert_int_equal(parse_s("\"a\\u0000b\"", &v, err, sizeof err), 0);
    assert_int_equal(v.u.str.len, 3);
    assert_memory_equal(v.u.str.s, "a\0b", 3);
    json_free(&v);
    /* The writer escapes what the reader needs escaped; the round trip is exact. */
    const char raw[] = "tab\there \"q\" back\\slash nl\n ctl\x01 \xC3\xA9";
    char *buf = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    assert_non_null(f);
    json_write_string(f, raw, sizeof raw - 1);
    fclose(f);
    assert_int_equal(parse(buf, blen, &v, err, sizeof err), 0);
    assert_int_equal(v.u.str.len, sizeof raw - 1);
    assert_memory_equal(v.u.str.s, raw, sizeof raw - 1);
    json_free(&v);
    free(buf);
}

static void test_json_malformed(void **state) {
    (void)state;
    expect_fail("", 0, "unexpected end of input");
    expect_fail("   ", 3, "unexpected end of input");
    expect_fail("{\"a\": 1,}", 9, "expected a string key");
    expect_fail("[1, 2,]", 7, "unexpected character ']'");
    expect_fail("{'a': 1}", 8, "expected a string key");
    expect_fail("{\"a\" 1}", 7, "expected ':'");
    expect_fail("{\"a\": 1 \"b\": 2}", 15, "expected ',' or '}'");
    expect_fail("[1 2]", 5, "expected ',' or ']'");
    expect_fail("{\"a\": 1, \"a\": 2}", 16, "duplicate key \"a\"");
    expect_fail("{} x", 4, "unexpected text after the value");
    expect_fail("01", 2, "leading zero");
    expect_fail("-", 1, "invalid number");
    expect_fail("1.", 2, "digit after '.'");
    expect_fail(".5", 2, "unexpected character '.'");
    expect_fail("1e", 2, "digit in the exponent");
    expect_fail("+1", 2, "unexpected character '+'");
    expect_fail("tru", 3, "unexpected character 't'");
    expect_fail("nul", 3, "unexpected character 'n'");
    expect_fail("NaN", 3, "unexpected character 'N'");
    expect_fail("\"abc", 4, "unterminated string");
    expect_fail("\"abc\\", 5, "unterminated string");
    expect_fail("\"a\tb\"", 5, "control character 0x09");
    expect_fail("\"a\nb\"", 5, "control character 0x0a");
    expect_fail("\"\\x\"", 4, "invalid escape '\\x'");
    expect_fail("\"\\u12\"", 6, "4 hex digits");
    expect_fail("\"\\u12G4\"", 8, "4 hex digits");
    expect_fail("\"\\uD800\"", 8, "not followed by a low surrogate");
    expect_fail("\"\\uD800\\u0041\"", 14, "not followed by a low surrogate");
    expect_fail("\"\\uDC00\"", 8, "lone low surrogate");
    expect_fail("{\"a\\u0000\": 1}", 14, "key holds a NUL");
    expect_fail("[", 1, "unexpected end of input");
    expect_fail("[1", 2, "unterminated array");
    expect_fail("{\"a\": 1", 7, "unterminated object");
    expect_fail("{", 1, "unterminated object");
    expect_fail("\x01", 1, "unexpected byte 0x01");
    /* The column points at the fault. */
    struct json_value v;
    char err[256];
    assert_int_not_equal(parse_s("[1, 2, x]", &v, err, sizeof err), 0);
    assert_non_null(strstr(err, "column 8:"));
    /* A tiny error buffer is still terminated; none at all is fine too. */
    char small[8];
    assert_int_not_equal(parse_s("[1, 2, x]", &v, small, sizeof small), 0);
    assert_true(strlen(small) < sizeof small);
    assert_int_not_equal(parse_s("[1, 2, x]", &v, NULL, 0), 0);
    assert_int_not_equal(json_parse(NULL, 0, &v, err, sizeof err), 0);
}

static void test_json_invalid_utf8(void **state) {
    (void)state;
    expect_fail("\"\xFF\"", 3, "invalid UTF-8 byte 0xff");
    expect_fail("\"\xC0\xAF\"", 4, "invalid UTF-8 byte 0xc0");       /* overlong '/' */
    expect_fail("\"\xE0\x80\xAF\"", 5, "invalid UTF-8 byte 0xe0");   /* overlong, 3 bytes */
    expect_fail("\"\xED\xA0\x80\"", 5, "invalid UTF-8 byte 0xed");   /* an encoded surrogate */
    expect_fail("\"\xF4\x90\x80\x80\"", 6, "invalid UTF-8 byte 0xf4"); /* past U+10FFFF */
    expect_fail("\"\x80\"", 3, "invalid UTF-8 byte 0x80");           /* a stray continuation */
    expect_fail("\"\xC3\"", 3, "invalid UTF-8 byte 0xc3");           /* cut short by the quote */
    expect_fail("\"\xE2\x82", 4, "unterminated string");             /* cut short by the end */
    expect_fail("\xC3\xA9", 2, "unexpected byte 0xc3");              /* outside a string */
    size_t bad = 0;
    assert_true(json_utf8_valid("ok \xC3\xA9", 5, &bad));
    assert_false(json_utf8_valid("ok \xC3", 4, &bad));
    assert_int_equal(bad, 3);
}

static void test_json_limits(void **state) {
    (void)state;
    struct json_value v;
    char err[256];
    /* Nesting: JSON_MAX_DEPTH levels parse, one more does not, and a
     * hundred thousand fail fast (no stack overflow). */
    char deep[2 * JSON_MAX_DEPTH + 4];
    for (int extra = 0; extra <= 1; extra++) {
        size_t d = JSON_MAX_DEPTH + (size_t)extra, n = 0;
        for (size_t i = 0; i < d; i++) deep[n++] = '[';
        for (size_t i = 0; i < d; i++) deep[n++] = ']';
        int rc = parse(deep, n, &v, err, sizeof err);
        if (extra == 0) {
            assert_int_equal(rc, 0);
            json_free(&v);
        } else {
            assert_int_not_equal(rc, 0);
            assert_non_null(strstr(err, "nested deeper than 64 levels"));
        }
    }
    size_t big = 100000;
    char *many = malloc(big * 2);
    assert_non_null(many);
    memset(many, '[', big);
    assert_int_not_equal(parse(many, big, &v, err, sizeof err), 0);
    assert_non_null(strstr(err, "nested deeper"));
    for (size_t i = 0; i < big; i++) many[i] = (i % 2) ? '{' : '[';
    assert_int_not_equal(parse(many, big, &v, err, sizeof err), 0);
    /* Huge numbers: out of a double's range is an error, a long but finite
     * one parses. */
    expect_fail("1e999", 5, "number out of range");
    expect_fail("-1e999", 6, "number out of range");
    memset(many, '9', 5000);
    expect_fail(many, 5000, "number out of range");
    many[0] = '0', many[1] = '.';
    assert_int_equal(parse(many, 5000, &v, err, sizeof err), 0);
    assert_true(v.u.num > 0.99 && v.u.num <= 1.0);
    /* A long array and a long string. */
    size_t n = 0;
    many[n++] = '[';
    for (size_t i = 0; i < 20000; i++) many[n++] = '0', many[n++] = ',';
    many[n - 1] = ']';
    assert_int_equal(parse(many, n, &v, err, sizeof err), 0);
    assert_int_equal(v.u.arr.n, 20000);
    json_free(&v);
    free(many);
}

/* Every strict prefix of a document is an error, and random corruption of
 * it never crashes and never leaks (ASan checks both). */
static void test_json_truncated_and_fuzzed(void **state) {
    (void)state;
    const char *doc = "{\"id\": \"x-1\", \"task\": \"rag\", \"context\": [\"p\\u00e9 \\uD83D\\uDE00\", \"q\"], "
                      "\"n\": -12.5e-3, \"ok\": [true, false, null], \"o\": {\"k\": {}}}";
    size_t len = strlen(doc);
    struct json_value v;
    char err[256];
    for (size_t n = 0; n < len; n++) {
        if (parse(doc, n, &v, err, sizeof err) == 0) fail_msg("prefix of %zu bytes parsed", n);
        assert_non_null(strstr(err, "column "));
    }
    assert_int_equal(parse(doc, len, &v, err, sizeof err), 0);
    json_free(&v);
    uint64_t s = 0x5eed;
    char *buf = malloc(len);
    assert_non_null(buf);
    for (int round = 0; round < 3000; round++) {
        memcpy(buf, doc, len);
        int flips = 1 + round % 4;
        for (int k = 0; k < flips; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(s >> 33) % len;
            buf[at] = (char)(s >> 13);
        }
        if (parse(buf, len, &v, err, sizeof err) == 0) json_free(&v);
        else assert_non_null(strstr(err, "column "));
    }
    free(buf);
}

/* ----------------------------------------------------------- datasets */

static void expect_line_error(const char *line, const char *want) {
    struct ds_sample s;
    char err[300];
    if (ds_parse_line(line, strlen(line), &s, err, sizeof err) == 0) fail_msg("accepted: %s", line);
    if (!strstr(err, want)) fail_msg("for %s: message '%s' lacks '%s'", line, err, want);
    assert_null(s.id);
}

static void test_dataset_line(void **state) {
    (void)state;
    struct ds_sample s;
    char err[300];
    const char *good = "{\"id\": \"a1\", \"task\": \"tweet\", \"instruction\": \"Reply as @me.\", "
                       "\"context\": [\"@x: hi\", \"@y: yo\"], \"history\": [\"earlier\"], \"reference\": \"hey\", "
                       "\"source\": \"ignored\"}";
    assert_int_equal(ds_parse_line(good, strlen(good), &s, err, sizeof err), 0);
    assert_string_equal(s.id, "a1");
    assert_string_equal(s.task, "tweet");
    assert_int_equal(s.n_context, 2);
    assert_string_equal(s.context[1], "@y: yo");
    assert_int_equal(s.n_history, 1);
    assert_string_equal(s.reference, "hey");
    ds_sample_free(&s);
    /* Optional members may be absent or null; context may be empty. */
    const char *min = "{\"id\": \"m\", \"task\": \"summary\", \"instruction\": \"\", \"context\": [], "
                      "\"history\": null, \"reference\": null}";
    assert_int_equal(ds_parse_line(min, strlen(min), &s, err, sizeof err), 0);
    assert_null(s.history);
    assert_int_equal(s.n_history, 0);
    assert_null(s.reference);
    ds_sample_free(&s);

    expect_line_error("[1, 2]", "expected a JSON object, got array");
    expect_line_error("{\"id\": \"a\"", "invalid JSON: column 11: unterminated object");
    expect_line_error("{\"task\": \"t\", \"instruction\": \"i\", \"context\": []}", "missing field 'id'");
    expect_line_error("{\"id\": \"\", \"task\": \"t\", \"instruction\": \"i\", \"context\": []}",
                      "field 'id': must not be empty");
    expect_line_error("{\"id\": 7, \"task\": \"t\", \"instruction\": \"i\", \"context\": []}",
                      "field 'id': expected a string, got number");
    expect_line_error("{\"id\": \"a\", \"instruction\": \"i\", \"context\": []}", "missing field 'task'");
    expect_line_error("{\"id\": \"a\", \"task\": \"t\", \"context\": []}", "missing field 'instruction'");
    expect_line_error("{\"id\": \"a\", \"task\": \"t\", \"instruction\": \"i\"}", "missing field 'context'");
    expect_line_error("{\"id\": \"a\", \"task\": \"t\", \"instruction\": \"i\", \"context\": \"doc\"}",
                      "field 'context': expected an array of strings, got string");
    expect_line_error("{\"id\": \"a\", \"task\": \"t\", \"instruction\": \"i\", \"context\": [\"ok\", 3]}",
                      "field 'context': item 2 is a number, expected a string");
    expect_line_error("{\"id\": \"a\", \"task\": \"t\", \"instruction\": \"i\", \"context\": [], \"history\": [{}]}",
                      "field 'history': item 1 is an object");
    expect_line_error("{\"id\": \"a\", \"task\": \"t\", \"instruction\": \"i\", \"context\": [], \"history\": true}",
                      "field 'history': expected an array of strings, got boolean");
    expect_line_error("{\"id\": \"a\", \"task\": \"t\", \"instruction\": \"i\", \"context\": [], \"reference\": 1}",
                      "field 'reference': expected a string, got number");
    expect_line_error("{\"id\": \"a\", \"task\": \"t\", \"instruction\": \"i\\u0000\", \"context\": []}",
                      "field 'instruction': the string holds a NUL");
    expect_line_error("{\"id\": \"a\", \"task\": \"t\", \"instruction\": \"\xFF\", \"context\": []}",
                      "invalid UTF-8 byte 0xff");
}

static char *write_temp(const char *content, size_t len) {
    static char path[256];
    snprintf(path, sizeof path, "%s/test_eval_%d.jsonl", SD_BUILD_DIR, (int)len);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(content, 1, len, f);
    fclose(f);
    return path;
}

static void test_dataset_load(void **state) {
    (void)state;
    static const char file[] =
        "\xEF\xBB\xBF{\"id\": \"s1\", \"task\": \"summary\", \"instruction\": \"Sum.\", \"context\": [\"doc\"]}\r\n"
        "\n"
        "{\"id\": \"s2\", \"task\": \"summary\", \"instruction\": \"Sum.\", \"context\": [1]}\n"
        "   \n"
        "not json at all\n"
        "{\"id\": \"s1\", \"task\": \"summary\", \"instruction\": \"Sum.\", \"context\": []}\n"
        "{\"id\": \"s3\", \"task\": \"rag\", \"instruction\": \"Q?\", \"context\": [\"p\"], \"reference\": \"A\"}";
    char *path = write_temp(file, sizeof file - 1);
    char *diag = NULL;
    size_t dlen = 0;
    FILE *d = open_memstream(&diag, &dlen);
    assert_non_null(d);
    struct ds_set set;
    assert_int_equal(ds_load(path, false, d, &set), 0);
    fclose(d);
    assert_int_equal(set.n, 2);
    assert_int_equal(set.n_bad, 3);
    assert_string_equal(set.samples[0].id, "s1");
    assert_int_equal(set.samples[0].line, 1);
    assert_string_equal(set.samples[1].id, "s3");
    assert_int_equal(set.samples[1].line, 7); /* the last line has no newline */
    char want[512];
    snprintf(want, sizeof want, "%s:3: field 'context': item 1 is a number, expected a string (line skipped)", path);
    if (!strstr(diag, want)) fail_msg("diagnostics lack '%s':\n%s", want, diag);
    snprintf(want, sizeof want, "%s:5: invalid JSON: column 1: unexpected character 'n'", path);
    if (!strstr(diag, want)) fail_msg("diagnostics lack '%s':\n%s", want, diag);
    snprintf(want, sizeof want, "%s:6: field 'id': \"s1\" repeats the id of line 1", path);
    if (!strstr(diag, want)) fail_msg("diagnostics lack '%s':\n%s", want, diag);
    snprintf(want, sizeof want, "test_eval_%d", (int)(sizeof file - 1));
    assert_string_equal(set.name, want); /* the file name without .jsonl */
    ds_set_free(&set);
    free(diag);

    /* Strict: the first bad line fails the load, naming it. */
    diag = NULL;
    d = open_memstream(&diag, &dlen);
    assert_int_equal(ds_load(path, true, d, &set), -1);
    fclose(d);
    assert_int_equal(set.n, 0);
    assert_null(set.samples);
    snprintf(want, sizeof want, "%s:3: field 'context'", path);
    assert_non_null(strstr(diag, want));
    assert_null(strstr(diag, ":5:")); /* stopped at the first */
    free(diag);
    remove(path);

    /* A missing file is an error with the path and the reason. */
    diag = NULL;
    d = open_memstream(&diag, &dlen);
    assert_int_equal(ds_load("/nonexistent/x.jsonl", false, d, &set), -1);
    fclose(d);
    assert_non_null(strstr(diag, "/nonexistent/x.jsonl: cannot open"));
    free(diag);
}

static void test_prompts(void **state) {
    (void)state;
    char *ctx[] = {"First passage.", "Second passage."};
    char *hist[] = {"tap(1, 'A')", "tap(2, 'B')"};
    struct ds_sample s = {.id = "x", .task = "rag", .instruction = "What?", .context = ctx, .n_context = 2};
    const char *stops[DS_MAX_STOPS];
    size_t n_stops, len;
    char *p;
    assert_int_equal(ds_build_prompt(&s, &p, &len, stops, &n_stops), 0);
    assert_string_equal(p, "Passage 1:\nFirst passage.\n\nPassage 2:\nSecond passage.\n\nQuestion: What?\nAnswer:");
    assert_int_equal(len, strlen(p));
    assert_int_equal(n_stops, 2);
    free(p);
    s.task = "summary";
    s.instruction = "Summarize.";
    s.n_context = 1;
    assert_int_equal(ds_build_prompt(&s, &p, &len, stops, &n_stops), 0);
    assert_string_equal(p, "Summarize.\n\nFirst passage.\n\nTL;DR:");
    assert_string_equal(stops[0], "\n\n");
    free(p);
    s.task = "ui";
    s.instruction = "Do it";
    s.history = hist;
    s.n_history = 2;
    assert_int_equal(ds_build_prompt(&s, &p, &len, stops, &n_stops), 0);
    assert_non_null(strstr(p, "Goal: Do it\n"));
    assert_non_null(strstr(p, "Step 1: tap(1, 'A')\nStep 2: tap(2, 'B')\nStep 3:"));
    assert_string_equal(stops[0], "\n");
    free(p);
    s.task = "tweet";
    s.instruction = "Write @mira_dev's reply.";
    s.n_history = 0;
    assert_int_equal(ds_build_prompt(&s, &p, &len, stops, &n_stops), 0);
    assert_string_equal(p, "Write @mira_dev's reply.\n\nThread:\nFirst passage.\n\n@mira_dev's reply:");
    free(p);
    s.task = "other";
    assert_int_equal(ds_build_prompt(&s, &p, &len, stops, &n_stops), 0);
    assert_non_null(strstr(p, "Answer:"));
    free(p);
}

/* The chat turns an instruction-tuned model gets: a system turn naming the
 * task, a user turn with the context and the instruction, no base-model cue;
 * only ui stops before the end of the turn (one action a line). */
static void test_chat_prompts(void **state) {
    (void)state;
    const char *ctx[] = {"First passage.", "Second passage."};
    const char *hist[] = {"tap(1, 'A')"};
    struct ds_sample s = {
        .id = "x", .task = "rag", .instruction = "What?", .context = (char **)ctx, .n_context = 2};
    const char *stops[DS_MAX_STOPS], *sys;
    size_t n_stops, len;
    char *p;
    assert_int_equal(ds_build_chat(&s, &sys, &p, &len, stops, &n_stops), 0);
    assert_string_equal(p, "Passage 1:\nFirst passage.\n\nPassage 2:\nSecond passage.\n\nQuestion: What?");
    assert_int_equal(len, strlen(p));
    assert_non_null(strstr(sys, "passages"));
    assert_int_equal(n_stops, 0);
    free(p);
    s.task = "summary";
    s.instruction = "Summarize.";
    assert_int_equal(ds_build_chat(&s, &sys, &p, &len, stops, &n_stops), 0);
    assert_string_equal(p, "Summarize.\n\nFirst passage.\n\nSecond passage.");
    assert_int_equal(n_stops, 0);
    free(p);
    s.task = "ui";
    s.n_context = 1;
    s.history = (char **)hist;
    s.n_history = 1;
    assert_int_equal(ds_build_chat(&s, &sys, &p, &len, stops, &n_stops), 0);
    assert_string_equal(
        p, "Screen:\nFirst passage.\n\nGoal: Summarize.\nActions so far:\ntap(1, 'A')\nNext action:");
    assert_int_equal(n_stops, 1);
    assert_string_equal(stops[0], "\n");
    free(p);
    s.task = "tweet";
    s.instruction = "Write @mira_dev's reply.";
    assert_int_equal(ds_build_chat(&s, &sys, &p, &len, stops, &n_stops), 0);
    assert_string_equal(p, "Thread:\nFirst passage.\n\nWrite @mira_dev's reply.");
    assert_null(strstr(p, "tap(")); /* the history stays in the drafting store */
    free(p);
}

/* The shipped datasets: each loads without a bad line and has at least 30
 * samples of its own task. */
static void test_shipped_datasets(void **state) {
    (void)state;
    const char *names[] = {"summary", "rag", "ui", "tweet"};
    for (int i = 0; i < 4; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/../../datasets/%s.jsonl", SD_TEST_DATA, names[i]);
        struct ds_set set;
        assert_int_equal(ds_load(path, true, stderr, &set), 0);
        assert_int_equal(set.n_bad, 0);
        if (set.n < 30) fail_msg("%s has %zu samples", path, set.n);
        for (size_t k = 0; k < set.n; k++) {
            assert_string_equal(set.samples[k].task, names[i]);
            assert_true(set.samples[k].n_context > 0);
            char *p;
            size_t len, n_stops;
            const char *stops[DS_MAX_STOPS];
            assert_int_equal(ds_build_prompt(&set.samples[k], &p, &len, stops, &n_stops), 0);
            assert_true(len > 0 && n_stops > 0);
            free(p);
            const char *sys;
            assert_int_equal(ds_build_chat(&set.samples[k], &sys, &p, &len, stops, &n_stops), 0);
            assert_true(len > 0 && *sys);
            free(p);
        }
        ds_set_free(&set);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_valid),
        cmocka_unit_test(test_json_escapes),
        cmocka_unit_test(test_json_malformed),
        cmocka_unit_test(test_json_invalid_utf8),
        cmocka_unit_test(test_json_limits),
        cmocka_unit_test(test_json_truncated_and_fuzzed),
        cmocka_unit_test(test_dataset_line),
        cmocka_unit_test(test_dataset_load),
        cmocka_unit_test(test_prompts),
        cmocka_unit_test(test_chat_prompts),
        cmocka_unit_test(test_shipped_datasets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
