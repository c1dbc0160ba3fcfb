/* tests/test_server_tools.c - sdnpu serve's tools (server/tools.h): a
 * request's tools and tool_choice read and refused by name, the schema a
 * forced call is held to, an OpenAI conversation's calls and results
 * written as the model reads them, and calls read back out of replies in
 * either form, with what a stream may send before them. End to end (the
 * server, the default model, the openai client): tests/server_e2e.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/server.h"
#include "server/tools.h"

static const char k_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"now\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]}},"
    "\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"click\",\"parameters\":{\"type\":\"object\","
    "\"properties\":"
    "{\"x\":{\"type\":\"integer\"},\"y\":{\"type\":\"integer\"}},\"required\":[\"x\",\"y\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}]";

/* Parse a request body's tools into a fresh job; the status. */
static int parse(const char *body, struct job *j, char *msg, size_t cap) {
    memset(j, 0, sizeof *j);
    snprintf(j->id, sizeof j->id, "chatcmpl-7");
    json_t *root = json_loads(body, 0, NULL);
    assert_non_null(root);
    int rc = sd_srv_tools_parse(root, j, msg, cap);
    json_decref(root);
    return rc;
}

static void clear(struct job *j) {
    free(j->tools);
    free(j->schema);
}

/* Whether the JSON text doc is one the schema's recogniser completes. */
static bool held(const char *schema, const char *doc) {
    struct sd_schema *s = NULL;
    struct sd_err e = {0};
    assert_int_equal(sd_schema_compile(schema, strlen(schema), &s, &e), 0);
    struct sd_json st;
    sd_json_init_schema(&st, s);
    bool ok = sd_json_feed(&st, doc, strlen(doc)) && sd_json_complete(&st);
    sd_schema_free(s);
    return ok;
}

static void test_parse(void **state) {
    (void)state;
    char body[4096], msg[512];
    struct job j;
    /* auto (the default): the tools listed, nothing forced. */
    snprintf(body, sizeof body, "{\"tools\":%s}", k_tools);
    assert_int_equal(parse(body, &j, msg, sizeof msg), 0);
    assert_non_null(j.tools);
    assert_false(j.tool_call);
    assert_null(j.schema);
    clear(&j);
    /* none: not even listed. */
    snprintf(body, sizeof body, "{\"tools\":%s,\"tool_choice\":\"none\"}", k_tools);
    assert_int_equal(parse(body, &j, msg, sizeof msg), 0);
    assert_null(j.tools);
    /* required: one call of any tool, each told apart by its name. */
    snprintf(body, sizeof body, "{\"tools\":%s,\"tool_choice\":\"required\"}", k_tools);
    assert_int_equal(parse(body, &j, msg, sizeof msg), 0);
    assert_true(j.tool_call);
    assert_true(
        held(j.schema, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}"));
    assert_true(held(j.schema, "{\"name\":\"click\",\"arguments\":{\"x\":1,\"y\":-2}}"));
    assert_true(
        held(j.schema, "{\"name\":\"noop\",\"arguments\":{\"any\":[1]}}")); /* no parameters: any object */
    assert_false(held(j.schema, "{\"name\":\"click\",\"arguments\":{\"x\":1}}"));
    assert_false(held(j.schema, "{\"name\":\"drag\",\"arguments\":{}}"));
    assert_false(held(j.schema, "{\"arguments\":{},\"name\":\"noop\"}"));
    clear(&j);
    /* A named function: that one only. */
    snprintf(body, sizeof body,
             "{\"tools\":%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
             "\"click\"}}}",
             k_tools);
    assert_int_equal(parse(body, &j, msg, sizeof msg), 0);
    assert_true(held(j.schema, "{\"name\":\"click\",\"arguments\":{\"x\":1,\"y\":2}}"));
    assert_false(held(j.schema, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"P\"}}"));
    clear(&j);
    /* Refusals, each by name. */
    static const char *const bad[][2] = {
        {"{\"tools\":{}}", "'tools' must be an array"},
        {"{\"tools\":[]}", "'tools' must be an array of 1 to"},
        {"{\"tools\":[{\"type\":\"retrieval\"}]}",
         "'tools[0]' must be an object with \"type\": \"function\""},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]}", "'tools[0].function' must be"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":3}}]}",
         "'tools[0].function.parameters' must be a JSON Schema object"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":"
         "\"string\"}}}]}",
         "'tools[0].function.parameters' must allow an object"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},{\"type\":\"function\","
         "\"function\":"
         "{\"name\":\"b\"}},{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]}",
         "'tools[2]' is named \"a\" as 'tools[0]' is"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"tool_choice\":\"sometimes\"}",
         "'tool_choice' must be"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"tool_choice\":{\"type\":"
         "\"function\","
         "\"function\":{\"name\":\"b\"}}}",
         "'tool_choice' names \"b\", which 'tools' does not define"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":"
         "\"object\","
         "\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"x\"}}}}}],\"tool_choice\":\"required\"}",
         "'pattern' is not supported"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(bad[i][0], &j, msg, sizeof msg), 400);
        if (!strstr(msg, bad[i][1])) fail_msg("%s: got \"%s\", want \"%s\"", bad[i][0], msg, bad[i][1]);
        clear(&j);
    }
    /* A forced call beside response_format: refused. */
    snprintf(body, sizeof body, "{\"tools\":%s,\"tool_choice\":\"required\"}", k_tools);
    json_t *root = json_loads(body, 0, NULL);
    memset(&j, 0, sizeof j);
    j.json = true;
    assert_int_equal(sd_srv_tools_parse(root, &j, msg, sizeof msg), 400);
    assert_non_null(strstr(msg, "cannot be asked together"));
    clear(&j);
    json_decref(root);
}

/* A message of the conversation as the model reads it. */
static char *message(const char *m, const char **role, char *msg, size_t cap) {
    json_t *v = json_loads(m, 0, NULL);
    assert_non_null(v);
    char *t = sd_srv_tools_message(v, 3, role, msg, cap);
    json_decref(v);
    return t;
}

static void test_messages(void **state) {
    (void)state;
    char msg[256];
    const char *role;
    char *t =
        message("{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"21 C\"}", &role, msg, sizeof msg);
    assert_string_equal(role, "tool");
    assert_string_equal(t, "21 C");
    free(t);
    /* The calls after the text, the arguments (a string of JSON, or an
     * object) as json.dumps writes them, as the template writes them. */
    t = message("{\"role\":\"assistant\",\"content\":\"Looking.\",\"tool_calls\":["
                "{\"id\":\"1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
                "\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
                "{\"id\":\"2\",\"type\":\"function\",\"function\":{\"name\":\"click\",\"arguments\":{\"x\":1,"
                "\"y\":2}}}]}",
                &role, msg, sizeof msg);
    assert_string_equal(role, "assistant");
    assert_string_equal(
        t, "Looking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
           "</tool_call>\n<tool_call>\n{\"name\": \"click\", \"arguments\": {\"x\": 1, \"y\": 2}}\n"
           "</tool_call>");
    free(t);
    t = message("{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{\"name\":\"noop\","
                "\"arguments\":\"{}\"}}]}",
                &role, msg, sizeof msg);
    assert_string_equal(t, "<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>");
    free(t);
    static const char *const bad[][2] = {
        {"{\"role\":\"tool\",\"content\":[1]}", "messages[3].content must be a string"},
        {"{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":\"{}\"}}]}",
         "messages[3].tool_calls[0].function must have a string 'name'"},
        {"{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"a\",\"arguments\":\"[1\"}}]}",
         "messages[3].tool_calls[0].function.arguments must be a JSON object"},
        {"{\"role\":\"assistant\",\"content\":7,\"tool_calls\":[]}",
         "messages[3].content must be a string or null"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msg[0] = 0;
        assert_null(message(bad[i][0], &role, msg, sizeof msg));
        if (!strstr(msg, bad[i][1])) fail_msg("%s: got \"%s\", want \"%s\"", bad[i][0], msg, bad[i][1]);
    }
}

/* The calls of a reply: their names and arguments, joined "name args;". */
static char *calls_of(const char *text, bool forced, size_t *content) {
    struct job j = {0};
    snprintf(j.id, sizeof j.id, "chatcmpl-7");
    j.tools = strdup(k_tools);
    json_t *c = sd_srv_tools_calls(&j, text, strlen(text), forced, content);
    free(j.tools);
    if (!c) return NULL;
    char *out = calloc(1, 1024);
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *f = json_object_get(json_array_get(c, i), "function");
        char id[64];
        snprintf(id, sizeof id, "call_chatcmpl-7_%zu", i);
        assert_string_equal(json_string_value(json_object_get(json_array_get(c, i), "id")), id);
        snprintf(out + strlen(out), 1024 - strlen(out), "%s %s;",
                 json_string_value(json_object_get(f, "name")),
                 json_string_value(json_object_get(f, "arguments")));
    }
    json_decref(c);
    return out;
}

static void test_calls(void **state) {
    (void)state;
    static const struct {
        const char *text;
        bool forced;
        const char *calls; /* NULL: none, all content */
        size_t content;
    } cases[] = {
        {"Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
         "\"Paris\"}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"click\", \"arguments\": {\"x\": 1, \"y\": 2}}\n</tool_call>",
         false, "get_weather {\"city\":\"Paris\"};click {\"x\":1,\"y\":2};", 9},
        {"```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Oslo\", \"unit\": "
         "\"c\"}\n}\n```",
         false, "get_weather {\"city\":\"Oslo\",\"unit\":\"c\"};", 0},
        {"<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}", false, "noop {};",
         0}, /* cut before its close */
        {"{\"name\": \"click\", \"arguments\": {\"x\": 3, \"y\": 4}}", true, "click {\"x\":3,\"y\":4};", 0},
        {"Bonjour", false, NULL, 7},
        {"<tool_call>\n{\"name\": \"drag\", \"arguments\": {}}\n</tool_call>", false, NULL,
         0}, /* no such tool */
        {"<tool_call>\n{\"name\": \"noop\", \"arguments\": 3}\n</tool_call>", false, NULL, 0},
        {"<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>\nDone.", false, NULL,
         0},                                                               /* text after */
        {"```json\n{\"a\": 1}\n```", false, NULL, 0},                      /* JSON, not a call */
        {"{\"name\": \"click\", \"arguments\": {\"x\": 3", true, NULL, 0}, /* a forced call cut */
        {"Use <tool_call", false, NULL, 0},
        {"```json\n{\"a\": 1}\n```\n<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>",
         false, "noop {};", 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t content = 12345;
        char *got = calls_of(cases[i].text, cases[i].forced, &content);
        if (!cases[i].calls != !got || (got && strcmp(got, cases[i].calls)))
            fail_msg("%s: got %s, want %s", cases[i].text, got ? got : "none",
                     cases[i].calls ? cases[i].calls : "none");
        assert_int_equal(content, cases[i].calls ? cases[i].content : strlen(cases[i].text));
        free(got);
    }
}

/* A stream sends, piece by piece, what cannot begin a call: whatever way
 * a reply is cut into pieces, what it sent is the content the whole reply
 * reads as (where it calls) or a prefix of the text (where it does not). */
static void test_sendable(void **state) {
    (void)state;
    struct job j = {0};
    j.tools = strdup(k_tools);
    static const char *const replies[] = {
        "Checking the weather.\n\n<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>",
        "Here:\n```json\n{\"name\": \"click\", \"arguments\": {\"x\": 1, \"y\": 2}}\n```",
        "Code:\n```python\nprint(1 < 2)\n```\nand a < b <tool",
        "plain text, no calls at all  \n",
        "A config:\n```json\n{\"a\": 1}\n```\nThen more.",
        "```json\n{\"a\": 1}\n```\n<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>",
    };
    uint64_t rng = 88172645463325252ull;
    for (size_t r = 0; r < sizeof replies / sizeof replies[0]; r++) {
        const size_t n = strlen(replies[r]);
        size_t content;
        char *calls = calls_of(replies[r], false, &content);
        for (int trial = 0; trial < 50; trial++) {
            size_t sent = 0;
            bool calling = false;
            for (size_t at = 0; at < n;) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                at += 1 + rng % 5;
                at = at > n ? n : at;
                if (calling) continue;
                size_t k = sd_srv_tools_sendable(&j, replies[r], at, sent, &calling); /* as the server */
                sent = k > sent ? k : sent;
            }
            if (calls) {
                assert_int_equal(sent, content);
            } else {
                assert_true(sent <= n);
            }
        }
        free(calls);
    }
    bool calling = false;
    assert_int_equal(sd_srv_tools_sendable(&j, "Hi <tool", 8, 0, &calling), 2);
    assert_false(calling);
    assert_int_equal(sd_srv_tools_sendable(&j, "Hi ``", 5, 0, &calling), 2);
    assert_int_equal(sd_srv_tools_sendable(&j, "Hi ```py", 8, 0, &calling), 8);
    /* A fenced JSON block is held until it closes; then it is content
     * unless it is a call. */
    assert_int_equal(sd_srv_tools_sendable(&j, "Hi ```json\n{\"a\"", 16, 0, &calling), 2);
    assert_false(calling);
    const char *config = replies[4];
    assert_int_equal(sd_srv_tools_sendable(&j, config, strlen(config), 0, &calling), strlen(config));
    assert_false(calling);
    assert_int_equal(sd_srv_tools_sendable(&j, replies[1], strlen(replies[1]), 0, &calling), 5);
    assert_true(calling);
    calling = false;
    assert_int_equal(sd_srv_tools_sendable(&j, "Hi\n<tool_call>\n{", 16, 0, &calling), 2);
    assert_true(calling);
    free(j.tools);
}

/* Through the whole request parser (server/openai.c): a conversation
 * with tools, a call and its result becomes the messages the model reads;
 * a forced call beside response_format is refused. */
static void test_request(void **state) {
    (void)state;
    static const struct sd_server_params sp = {.max_tokens = 2048, .default_tokens = 256, .spec = "sam-tree"};
    char body[4096], msg[512] = "";
    snprintf(
        body, sizeof body,
        "{\"tools\":%s,\"tool_choice\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"Paris?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}]}",
        k_tools);
    struct job *j = sd_srv_job_new();
    assert_int_equal(sd_srv_openai_parse(JOB_CHAT, body, strlen(body), &sp, j, msg, sizeof msg), 0);
    assert_int_equal(j->n_msgs, 3);
    assert_string_equal(j->roles[1], "assistant");
    assert_string_equal(j->texts[1],
                        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                        "</tool_call>");
    assert_string_equal(j->roles[2], "tool");
    assert_string_equal(j->texts[2], "sunny");
    assert_non_null(j->tools);
    assert_false(j->tool_call);
    sd_srv_job_release(j);
    snprintf(body, sizeof body,
             "{\"tools\":%s,\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
             k_tools);
    j = sd_srv_job_new();
    assert_int_equal(sd_srv_openai_parse(JOB_CHAT, body, strlen(body), &sp, j, msg, sizeof msg), 400);
    assert_non_null(strstr(msg, "cannot be asked together"));
    sd_srv_job_release(j);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),    cmocka_unit_test(test_messages), cmocka_unit_test(test_calls),
        cmocka_unit_test(test_sendable), cmocka_unit_test(test_request),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
