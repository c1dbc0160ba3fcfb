/* tests/test_eval.c - the eval harness's readers and writer: dataset lines
 * as jansson reads them (valid and hostile JSON, invalid UTF-8) and as
 * cli/dataset.c validates and loads them, the JSON string writer
 * (cli/json.c), the prompts per task, and the shipped datasets. The
 * end-to-end run of `sdnpu eval` on a tiny model is tests/eval.cmake. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/dataset.h"
#include "cli/json.h"

/* Parse a dataset line from an exact-size heap copy, so reading one byte
 * too far is an AddressSanitizer error rather than a lucky NUL. */
static int parse_line(const char *text, size_t len, struct ds_sample *s, char *err, size_t err_size) {
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, text, len);
    int rc = cli_ds_parse_line(copy, len, s, err, err_size);
    free(copy);
    return rc;
}

/* Expect a line that is no valid JSON, reported with the column and
 * jansson's words for the fault (want); the sample then owns nothing. */
static void expect_json_error(const char *text, size_t len, const char *want) {
    struct ds_sample s;
    char err[300];
    if (parse_line(text, len, &s, err, sizeof err) == 0)
        fail_msg("parsed but should not: '%.*s'", (int)len, text);
    assert_null(s.id);
    if (strncmp(err, "invalid JSON: column ", 21)) fail_msg("for '%.*s': message '%s'", (int)len, text, err);
    if (!strstr(err, want)) fail_msg("for '%.*s': message '%s' lacks '%s'", (int)len, text, err, want);
}

/* A valid line whose instruction member is the JSON text str. */
#define LINE(str) "{\"id\": \"a\", \"task\": \"t\", \"context\": [], \"instruction\": " str "}"

static void expect_instruction(const char *line, const char *want, size_t want_len) {
    struct ds_sample s;
    char err[300];
    if (parse_line(line, strlen(line), &s, err, sizeof err)) fail_msg("for %s: %s", line, err);
    assert_int_equal(strlen(s.instruction), want_len);
    assert_memory_equal(s.instruction, want, want_len);
    cli_ds_sample_free(&s);
}

static void test_json_valid(void **state) {
    (void)state;
    /* Members the dataset does not know may hold any JSON: they are read
     * and ignored. Numbers are doubles, so a long integer or an underflow
     * is a number, not an error. */
    const char *line =
        " {\"id\": \"v\", \"task\": \"t\", \"instruction\": \"i\", \"context\": [\"c\"],"
        " \"a\": [1, -0, 2.5e3, 0.125, -7E-2, true, false, null, 1e-400, 99999999999999999999999],"
        " \"b\": {\"c\": \"d\", \"e\": [], \"f\": {}}}\n";
    struct ds_sample s;
    char err[300];
    assert_int_equal(parse_line(line, strlen(line), &s, err, sizeof err), 0);
    assert_string_equal(s.id, "v");
    assert_int_equal(s.n_context, 1);
    cli_ds_sample_free(&s);
}

static void test_json_limits(void **state) {
    (void)state;
    struct ds_sample s;
    char err[300];
    /* Nesting to jansson's limit parses, one level more does not, and a
     * hundred thousand fail fast (no stack overflow). */
    const char *head = "{\"id\": \"a\", \"task\": \"t\", \"instruction\": \"\", \"context\": [], \"x\": ";
    size_t big = 100000;
    char *many = malloc(big + 2 * JSON_PARSER_MAX_DEPTH + 200);
    assert_non_null(many);
    for (int extra = 0; extra <= 1; extra++) {
        size_t d = JSON_PARSER_MAX_DEPTH - 1 + (size_t)extra; /* the line's object is one level */
        size_t n = strlen(head);
        memcpy(many, head, n);
        for (size_t i = 0; i < d; i++)
            many[n++] = '[';
        for (size_t i = 0; i < d; i++)
            many[n++] = ']';
        many[n++] = '}';
        int rc = parse_line(many, n, &s, err, sizeof err);
        if (extra == 0) {
            if (rc) fail_msg("%d levels: %s", JSON_PARSER_MAX_DEPTH, err);
            cli_ds_sample_free(&s);
        } else {
            assert_int_not_equal(rc, 0);
            assert_non_null(strstr(err, "maximum parsing depth reached"));
        }
    }
    memset(many, '[', big);
    expect_json_error(many, big, "maximum parsing depth reached");
    for (size_t i = 0; i < big; i++)
        many[i] = (i % 2) ? '{' : '[';
    expect_json_error(many, big, "string or '}' expected");
    /* Out of a double's range is an error, a long but finite number is not. */
    expect_json_error("1e999", 5, "real number overflow");
    expect_json_error("-1e999", 6, "real number overflow");
    memset(many, '9', 5000);
    expect_json_error(many, 5000, "real number overflow");
    free(many);
}

static void test_json_escapes(void **state) {
    (void)state;
    expect_instruction(LINE("\"q\\\"b\\\\s\\/b\\bf\\fn\\nr\\rt\\t\""), "q\"b\\s/b\bf\fn\nr\rt\t", 16);
    /* \u escapes: 1, 2 and 3 UTF-8 bytes, and a surrogate pair for 4. */
    expect_instruction(LINE("\"\\u0041\\u00e9\\u20AC\\uD83D\\uDE00\""),
                       "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 10);
    /* Raw UTF-8 passes through unchanged. */
    expect_instruction(LINE("\"h\xC3\xA9llo \xE4\xB8\x96\xF0\x9F\x98\x80\""),
                       "h\xC3\xA9llo \xE4\xB8\x96\xF0\x9F\x98\x80", 14);
}

/* The writer escapes what a reader needs escaped and passes every other
 * byte through: a model's output cut inside a UTF-8 sequence is written as
 * it came, which jansson's writer would refuse. */
static void test_json_writer(void **state) {
    (void)state;
    const char raw[] = "tab\there \"q\" back\\slash nl\n cr\r ctl\x01 del\x7f nul\0 \xC3\xA9";
    char *buf = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    assert_non_null(f);
    cli_json_write_string(f, raw, sizeof raw - 1);
    fclose(f);
    assert_string_equal(buf,
                        "\"tab\\there \\\"q\\\" back\\\\slash nl\\n cr\\r ctl\\u0001 del\\u007f nul\\u0000 "
                        "\xC3\xA9\"");
    json_error_t je;
    json_t *v = json_loadb(buf, blen, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v) fail_msg("jansson cannot read the writer's %s: %s", buf, je.text);
    assert_int_equal(json_string_length(v), sizeof raw - 1);
    assert_memory_equal(json_string_value(v), raw, sizeof raw - 1);
    json_decref(v);
    free(buf);
    buf = NULL;
    f = open_memstream(&buf, &blen);
    assert_non_null(f);
    cli_json_write_string(f, "cut \xE2\x82", 6);
    cli_json_write_cstr(f, NULL);
    cli_json_write_cstr(f, "ok");
    fclose(f);
    assert_string_equal(buf, "\"cut \xE2\x82\"\"\"\"ok\"");
    free(buf);
}

static void test_json_malformed(void **state) {
    (void)state;
    expect_json_error("", 0, "unexpected token near end of file");
    expect_json_error("   ", 3, "unexpected token near end of file");
    expect_json_error("{\"a\": 1,}", 9, "string or '}' expected near '}'");
    expect_json_error("[1, 2,]", 7, "unexpected token near ']'");
    expect_json_error("{'a': 1}", 8, "string or '}' expected near '''");
    expect_json_error("{\"a\" 1}", 7, "':' expected near '1'");
    expect_json_error("{\"a\": 1 \"b\": 2}", 15, "'}' expected near '\"b\"'");
    expect_json_error("[1 2]", 5, "']' expected near '2'");
    expect_json_error("{\"a\": 1, \"a\": 2}", 16, "duplicate object key near '\"a\"'");
    expect_json_error("{} x", 4, "end of file expected near 'x'");
    expect_json_error("{}\0x", 4, "end of file expected");
    expect_json_error("01", 2, "invalid token near '0'");
    expect_json_error("-", 1, "invalid token near '-'");
    expect_json_error("1.", 2, "invalid token near '1.'");
    expect_json_error(".5", 2, "invalid token near '.'");
    expect_json_error("1e", 2, "invalid token near '1e'");
    expect_json_error("+1", 2, "invalid token near '+'");
    expect_json_error("tru", 3, "invalid token near 'tru'");
    expect_json_error("nul", 3, "invalid token near 'nul'");
    expect_json_error("NaN", 3, "invalid token near 'NaN'");
    expect_json_error("\"abc", 4, "premature end of input");
    expect_json_error("\"abc\\", 5, "invalid escape");
    expect_json_error("\"a\tb\"", 5, "control character 0x9");
    expect_json_error("\"a\nb\"", 5, "unexpected newline");
    expect_json_error("\"\\x\"", 4, "invalid escape near '\"\\x'");
    expect_json_error("\"\\u12\"", 6, "invalid escape");
    expect_json_error("\"\\u12G4\"", 8, "invalid escape");
    expect_json_error("\"\\uD800\"", 8, "invalid Unicode '\\uD800'");
    expect_json_error("\"\\uD800\\u0041\"", 14, "invalid Unicode '\\uD800\\u0041'");
    expect_json_error("\"\\uDC00\"", 8, "invalid Unicode '\\uDC00'");
    expect_json_error("{\"a\\u0000\": 1}", 14, "NUL byte in object key not supported");
    expect_json_error("[", 1, "']' expected near end of file");
    expect_json_error("[1", 2, "']' expected near end of file");
    expect_json_error("{\"a\": 1", 7, "'}' expected near end of file");
    expect_json_error("{", 1, "string or '}' expected near end of file");
    expect_json_error("\x01", 1, "invalid token");
    /* The column points at the fault. */
    struct ds_sample s;
    char err[300];
    assert_int_not_equal(parse_line("[1, 2, x]", 9, &s, err, sizeof err), 0);
    assert_non_null(strstr(err, "column 8:"));
    /* A tiny error buffer is still terminated. */
    char small[8];
    assert_int_not_equal(parse_line("[1, 2, x]", 9, &s, small, sizeof small), 0);
    assert_true(strlen(small) < sizeof small);
}

static void test_json_invalid_utf8(void **state) {
    (void)state;
    expect_json_error("\"\xFF\"", 3, "unable to decode byte 0xff");
    expect_json_error("\"\xC0\xAF\"", 4, "unable to decode byte 0xc0");         /* overlong '/' */
    expect_json_error("\"\xE0\x80\xAF\"", 5, "unable to decode byte 0xe0");     /* overlong, 3 bytes */
    expect_json_error("\"\xED\xA0\x80\"", 5, "unable to decode byte 0xed");     /* an encoded surrogate */
    expect_json_error("\"\xF4\x90\x80\x80\"", 6, "unable to decode byte 0xf4"); /* past U+10FFFF */
    expect_json_error("\"\x80\"", 3, "unable to decode byte 0x80");             /* a stray continuation */
    expect_json_error("\"\xC3\"", 3, "unable to decode byte 0xc3");             /* cut short by the quote */
    expect_json_error("\"\xE2\x82", 3, "unable to decode byte 0xe2");           /* cut short by the end */
    expect_json_error("\xC3\xA9", 2, "invalid token");                          /* outside a string */
}

/* Every strict prefix of a line is an error, and random corruption of it
 * never crashes and never leaks (ASan checks both). */
static void test_json_truncated_and_fuzzed(void **state) {
    (void)state;
    const char *doc =
        "{\"id\": \"x-1\", \"task\": \"rag\", \"instruction\": \"q\", \"context\": [\"p\\u00e9 "
        "\\uD83D\\uDE00\", \"q\"], \"n\": -12.5e-3, \"ok\": [true, false, null], \"o\": {\"k\": {}}}";
    size_t len = strlen(doc);
    struct ds_sample s;
    char err[300];
    for (size_t n = 0; n < len; n++) {
        if (parse_line(doc, n, &s, err, sizeof err) == 0) fail_msg("prefix of %zu bytes parsed", n);
        assert_non_null(strstr(err, "invalid JSON: column "));
    }
    assert_int_equal(parse_line(doc, len, &s, err, sizeof err), 0);
    cli_ds_sample_free(&s);
    uint64_t st = 0x5eed;
    char *buf = malloc(len);
    assert_non_null(buf);
    for (int round = 0; round < 3000; round++) {
        memcpy(buf, doc, len);
        int flips = 1 + round % 4;
        for (int k = 0; k < flips; k++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(st >> 33) % len;
            buf[at] = (char)(st >> 13);
        }
        err[0] = '\0';
        if (parse_line(buf, len, &s, err, sizeof err) == 0) {
            cli_ds_sample_free(&s);
        } else {
            assert_true(err[0] != '\0');
            assert_null(s.id);
        }
    }
    free(buf);
}

/* ----------------------------------------------------------- datasets */

static void expect_line_error(const char *line, const char *want) {
    struct ds_sample s;
    char err[300];
    if (cli_ds_parse_line(line, strlen(line), &s, err, sizeof err) == 0) fail_msg("accepted: %s", line);
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
    assert_int_equal(cli_ds_parse_line(good, strlen(good), &s, err, sizeof err), 0);
    assert_string_equal(s.id, "a1");
    assert_string_equal(s.task, "tweet");
    assert_int_equal(s.n_context, 2);
    assert_string_equal(s.context[1], "@y: yo");
    assert_int_equal(s.n_history, 1);
    assert_string_equal(s.reference, "hey");
    cli_ds_sample_free(&s);
    /* Optional members may be absent or null; context may be empty. */
    const char *min = "{\"id\": \"m\", \"task\": \"summary\", \"instruction\": \"\", \"context\": [], "
                      "\"history\": null, \"reference\": null}";
    assert_int_equal(cli_ds_parse_line(min, strlen(min), &s, err, sizeof err), 0);
    assert_null(s.history);
    assert_int_equal(s.n_history, 0);
    assert_null(s.reference);
    cli_ds_sample_free(&s);

    expect_line_error("[1, 2]", "expected a JSON object, got array");
    expect_line_error("{\"id\": \"a\"", "invalid JSON: column 10: '}' expected near end of file");
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
                      "invalid JSON: column 41: unable to decode byte 0xff");
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
    assert_int_equal(cli_ds_load(path, false, d, &set), 0);
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
    snprintf(want, sizeof want, "%s:5: invalid JSON: column 3: invalid token near 'not'", path);
    if (!strstr(diag, want)) fail_msg("diagnostics lack '%s':\n%s", want, diag);
    snprintf(want, sizeof want, "%s:6: field 'id': \"s1\" repeats the id of line 1", path);
    if (!strstr(diag, want)) fail_msg("diagnostics lack '%s':\n%s", want, diag);
    snprintf(want, sizeof want, "test_eval_%d", (int)(sizeof file - 1));
    assert_string_equal(set.name, want); /* the file name without .jsonl */
    cli_ds_set_free(&set);
    free(diag);

    /* Strict: the first bad line fails the load, naming it. */
    diag = NULL;
    d = open_memstream(&diag, &dlen);
    assert_int_equal(cli_ds_load(path, true, d, &set), -1);
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
    assert_int_equal(cli_ds_load("/nonexistent/x.jsonl", false, d, &set), -1);
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
    assert_int_equal(cli_ds_build_prompt(&s, &p, &len, stops, &n_stops), 0);
    assert_string_equal(p, "Passage 1:\nFirst passage.\n\nPassage 2:\nSecond passage.\n\nQuestion: What?\nAnswer:");
    assert_int_equal(len, strlen(p));
    assert_int_equal(n_stops, 2);
    free(p);
    s.task = "summary";
    s.instruction = "Summarize.";
    s.n_context = 1;
    assert_int_equal(cli_ds_build_prompt(&s, &p, &len, stops, &n_stops), 0);
    assert_string_equal(p, "Summarize.\n\nFirst passage.\n\nTL;DR:");
    assert_string_equal(stops[0], "\n\n");
    free(p);
    s.task = "ui";
    s.instruction = "Do it";
    s.history = hist;
    s.n_history = 2;
    assert_int_equal(cli_ds_build_prompt(&s, &p, &len, stops, &n_stops), 0);
    assert_non_null(strstr(p, "Goal: Do it\n"));
    assert_non_null(strstr(p, "Step 1: tap(1, 'A')\nStep 2: tap(2, 'B')\nStep 3:"));
    assert_string_equal(stops[0], "\n");
    free(p);
    s.task = "tweet";
    s.instruction = "Write @mira_dev's reply.";
    s.n_history = 0;
    assert_int_equal(cli_ds_build_prompt(&s, &p, &len, stops, &n_stops), 0);
    assert_string_equal(p, "Write @mira_dev's reply.\n\nThread:\nFirst passage.\n\n@mira_dev's reply:");
    free(p);
    s.task = "other";
    assert_int_equal(cli_ds_build_prompt(&s, &p, &len, stops, &n_stops), 0);
    assert_non_null(strstr(p, "Answer:"));
    free(p);
}

/* The chat turns an instruction-tuned model gets: rag and summary as the
 * product asks (the request API, `sdnpu summarize`), ui and tweet with a
 * system turn naming the task; a user turn with the context and the
 * instruction, no base-model cue; only ui stops before the end of the turn
 * (one action a line). */
static void test_chat_prompts(void **state) {
    (void)state;
    const char *ctx[] = {"First passage.", "Second passage."};
    const char *hist[] = {"tap(1, 'A')"};
    struct ds_sample s = {
        .id = "x", .task = "rag", .instruction = "What?", .context = (char **)ctx, .n_context = 2};
    const char *stops[DS_MAX_STOPS], *sys;
    size_t n_stops, len;
    char *p;
    /* rag as the request API asks: its system turn, the passages as
     * documents, then the question. */
    assert_int_equal(cli_ds_build_chat(&s, &sys, &p, &len, stops, &n_stops), 0);
    assert_string_equal(
        p, "<document>\nFirst passage.\n</document>\n\n<document>\nSecond passage.\n</document>\n\n"
           "What?");
    assert_int_equal(len, strlen(p));
    assert_string_equal(sys, "You are a helpful assistant. Answer from the documents the user gives.");
    assert_int_equal(n_stops, 0);
    free(p);
    /* summary as `sdnpu summarize` asks: no system turn, the document,
     * then its own instruction (the dataset's is the base model's). */
    s.task = "summary";
    s.instruction = "Summarize.";
    s.n_context = 1;
    assert_int_equal(cli_ds_build_chat(&s, &sys, &p, &len, stops, &n_stops), 0);
    assert_string_equal(p, "<document>\nFirst passage.\n</document>\n\n"
                           "Summarize the document above in two or three short sentences of your own.");
    assert_string_equal(sys, "");
    assert_int_equal(n_stops, 0);
    free(p);
    s.task = "ui";
    s.n_context = 1;
    s.history = (char **)hist;
    s.n_history = 1;
    assert_int_equal(cli_ds_build_chat(&s, &sys, &p, &len, stops, &n_stops), 0);
    assert_string_equal(
        p, "Screen:\nFirst passage.\n\nGoal: Summarize.\nActions so far:\ntap(1, 'A')\nNext action:");
    assert_int_equal(n_stops, 1);
    assert_string_equal(stops[0], "\n");
    free(p);
    s.task = "tweet";
    s.instruction = "Write @mira_dev's reply.";
    assert_int_equal(cli_ds_build_chat(&s, &sys, &p, &len, stops, &n_stops), 0);
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
        assert_int_equal(cli_ds_load(path, true, stderr, &set), 0);
        assert_int_equal(set.n_bad, 0);
        if (set.n < 30) fail_msg("%s has %zu samples", path, set.n);
        for (size_t k = 0; k < set.n; k++) {
            assert_string_equal(set.samples[k].task, names[i]);
            assert_true(set.samples[k].n_context > 0);
            char *p;
            size_t len, n_stops;
            const char *stops[DS_MAX_STOPS];
            assert_int_equal(cli_ds_build_prompt(&set.samples[k], &p, &len, stops, &n_stops), 0);
            assert_true(len > 0 && n_stops > 0);
            free(p);
            const char *sys;
            assert_int_equal(cli_ds_build_chat(&set.samples[k], &sys, &p, &len, stops, &n_stops), 0);
            /* Every task but summary states itself in a system turn. */
            assert_true(len > 0 && sys && (*sys || !strcmp(names[i], "summary")));
            free(p);
        }
        cli_ds_set_free(&set);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_valid),
        cmocka_unit_test(test_json_escapes),
        cmocka_unit_test(test_json_writer),
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
