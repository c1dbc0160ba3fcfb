/* tests/test_schema.c - replies held to a JSON Schema (grammar/grammar.h's
 * sd_schema, SDNPU_FORMAT_JSON_SCHEMA): what compiles and what is refused
 * by name; the recogniser against a validator written from the
 * specification (tests/util_json.h) on random schemas, their documents and
 * edits of them; no state it accepts is a dead end; and end to end,
 * lossless across decoding methods on a tiny model and valid on the
 * default one. */
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
#include "sdnpu.h"
#include "util_common.h"
#include "util_json.h"
#include "util_tiny_model.h"

static struct sd_schema *compile(const char *text) {
    struct sd_schema *s = NULL;
    struct sd_err e = {0};
    if (sd_schema_compile(text, strlen(text), &s, &e)) fail_msg("%s: %s", text, e.msg);
    return s;
}

/* Whether doc is accepted whole (complete: an object the schema allows),
 * and whether its every prefix is viable. */
static bool accepts(const struct sd_schema *s, const char *doc, size_t n, bool *viable) {
    struct sd_json j;
    sd_json_init_schema(&j, s);
    size_t i = 0;
    while (i < n && sd_json_feed(&j, doc + i, 1))
        i++;
    *viable = i == n;
    return i == n && sd_json_complete(&j);
}

/* A schema as Pydantic writes one: models in $defs reached by $ref,
 * Optional fields as anyOf with null, a Literal, a union of scalars, and
 * a union of an array, an object and null. */
static const char k_pydantic[] =
    "{\"$defs\":{\"Change\":{\"properties\":{"
    "\"kind\":{\"enum\":[\"feature\",\"fix\"],\"title\":\"Kind\",\"type\":\"string\"},"
    "\"detail\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}],\"default\":null,\"title\":\"Detail\"}"
    "},"
    "\"required\":[\"kind\"],\"title\":\"Change\",\"type\":\"object\"}},"
    "\"properties\":{"
    "\"version\":{\"title\":\"Version\",\"type\":\"string\"},"
    "\"changes\":{\"items\":{\"$ref\":\"#/$defs/Change\"},\"title\":\"Changes\",\"type\":\"array\"},"
    "\"level\":{\"anyOf\":[{\"enum\":[\"low\",\"high\"]},{\"type\":\"null\"},{\"const\":3}]},"
    "\"count\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"boolean\"}]},"
    "\"size\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]},"
    "\"extra\":{\"anyOf\":[{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":2},"
    "{\"$ref\":\"#/$defs/Change\"},{\"type\":\"null\"}]}},"
    "\"required\":[\"version\",\"changes\"],\"title\":\"Release\",\"type\":\"object\"}";

/* ------------------------------------------------------------ compiling */

static void test_schema_refusals(void **state) {
    (void)state;
    static const char *const cases[][2] = {
        {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"string\",\"pattern\":\"a+\"}}}",
         "at '/properties/n': 'pattern' is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":0}}}",
         "'/properties/age': 'minimum'"},
        {"{\"type\":\"object\",\"oneOf\":[{\"type\":\"object\"}]}", "'type' beside 'oneOf' is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/x\"}}}",
         "at '/properties/a': '$ref' \"#/$defs/x\" points at nothing"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"other.json#/a\"}}}",
         "a reference within the schema"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}}}", "'$ref' \"#\" refers to itself"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/n\"}},\"$defs\":{\"n\":{\"type\":"
         "\"object\",\"properties\":{\"next\":{\"$ref\":\"#/$defs/n\"}}}}}",
         "at '/$defs/n/properties/next': '$ref' \"#/$defs/n\" refers to itself"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/"
         "s\",\"minLength\":1}},\"$defs\":{\"s\":{}}}",
         "'minLength' beside '$ref' is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/"
         "s\"}},\"$defs\":{\"s\":{\"pattern\":\"x\"}}}",
         "at '/$defs/s': 'pattern' is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[]}}}", "'anyOf' must be a non-empty array"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"anyOf\":[{\"type\":\"null\"}]}}}",
         "'type' beside 'anyOf' is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"type\":\"object\"},{\"type\":[\"null\","
         "\"object\"]}]}}}",
         "'anyOf': alternative 0 is one of several objects, which are told apart by their first property"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"type\":\"array\"},{}]}}}",
         "alternatives 0 and 1 both allow an array"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"enum\":[\"x\"]},{\"type\":\"string\"}]}}"
         "}",
         "joins an enum with an alternative that is not a finite set"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"string\","
         "\"format\":\"date\"}]}}}",
         "at '/properties/a/anyOf/1': 'format' is not supported"},
        {"{\"type\":\"string\"}", "the root schema must allow one"},
        {"{\"type\":[\"object\",\"string\"],\"enum\":[\"a\"]}", "the root schema must allow one"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[]}}}", "nothing satisfies it"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"enum\":[1,2]}}}",
         "no value of 'enum' has an allowed type"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[1.5]}}}",
         "not a string, integer, boolean or null"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[\"x\"],\"const\":\"x\"}}}", "together"},
        {"{\"type\":\"object\",\"properties\":{\"a\":false}}", "the schema false"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}}}",
         "'minItems' 3 is over 'maxItems' 2"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":[{}]}}}", "a tuple"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "names \"b\", which"},
        {"{\"type\":\"object\",\"required\":[\"b\"]}", "'properties' does not define them"},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}", "a map's value schema"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"text\"}}}", "'type' must be a type name"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":[]}}}", "lists no type"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[1234567890123456]}}}",
         "cannot be written as strict JSON"},
        {"{\"type\":\"object\",\"properties\":{\"a\":1}}", "a schema must be an object"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"a\":{}}}", "not JSON"},
        {"{\"type\":\"object\"", "not JSON"},
        {"{\"type\":\"object\",\"nullable\":true}", "'nullable' is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"a/b~c\":{\"maximum\":1}}}",
         "at '/properties/a~1b~0c': 'maximum'"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"format\":\"x\"}}}}",
         "at '/properties/a/items': 'format'"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":[\"null\","
         "\"string\"]}]}}}",
         "at '/properties/a': 'oneOf': alternatives 0 and 1 both allow a string"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}"
         "]}}}",
         "'oneOf': alternatives 0 and 1 both allow a number"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"oneOf\":[{\"enum\":[null]},{\"type\":\"null\"}]}}}",
         "'oneOf': alternatives 0 and 1 both allow null"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"oneOf\":[{\"enum\":[\"x\",\"y\"]},{\"const\":\"y\"}]}"
         "}}",
         "'oneOf': two alternatives allow the same value: \"y\""},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":["
         "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"}},\"required\":[\"kind\"]},"
         "{\"type\":\"object\",\"properties\":{\"type\":{\"const\":\"b\"}},\"required\":[\"type\"]}]}}}",
         "'anyOf': alternatives 0 and 1 begin with different properties (\"kind\", \"type\")"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"oneOf\":["
         "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"}},\"required\":[\"kind\"]},"
         "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"}}}]}}}",
         "'oneOf': alternative 1 is one of several objects"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"oneOf\":["
         "{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"a\",\"b\"]}},\"required\":[\"kind\"]},"
         "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"}},\"required\":[\"kind\"]}]}}}",
         "'oneOf': two objects have the same tag: \"b\""},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":["
         "{\"type\":\"object\",\"properties\":{\"kind\":{\"type\":\"string\"}},\"required\":[\"kind\"]},"
         "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"}},\"required\":[\"kind\"]}]}}}",
         "it must be required and a const or enum"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"type\":\"object\"},"
         "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"}},\"required\":[\"kind\"]}]}}}",
         "'anyOf': alternative 0 is one of several objects"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"allOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}}"
         "}",
         "'allOf' is supported with one schema only"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"allOf\":[{\"type\":\"string\",\"pattern\":\"x\"}]}}}",
         "at '/properties/a/allOf/0': 'pattern' is not supported"},
    };
    for (size_t i = 0; i < SD_ARRAY_LEN(cases); i++) {
        struct sd_schema *s = NULL;
        struct sd_err e = {0};
        assert_int_equal(sd_schema_compile(cases[i][0], strlen(cases[i][0]), &s, &e), SDNPU_ERR_INVALID_ARG);
        assert_null(s);
        if (!strstr(e.msg, cases[i][1]))
            fail_msg("%s: got \"%s\", want \"%s\"", cases[i][0], e.msg, cases[i][1]);
        char msg[512];
        assert_int_equal(sdnpu_json_schema_check(cases[i][0], msg, sizeof msg), SDNPU_ERR_INVALID_ARG);
        assert_string_equal(msg, e.msg);
    }
    char msg[64] = "x";
    assert_int_equal(sdnpu_json_schema_check("{\"type\":\"object\"}", msg, sizeof msg), SDNPU_OK);
    assert_string_equal(msg, "");
    assert_int_equal(sdnpu_json_schema_check(NULL, msg, sizeof msg), SDNPU_ERR_INVALID_ARG);
}

/* Objects and arrays nested 16 deep compile; 17 do not (a free object
 * does not count). */
static void test_schema_depth(void **state) {
    (void)state;
    char buf[2048];
    for (int deep = 16; deep <= 17; deep++) {
        size_t n = 0;
        for (int i = 0; i < deep; i++)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s",
                                  i % 2 ? "{\"type\":\"array\",\"items\":"
                                        : "{\"type\":\"object\",\"properties\":{\"k\":");
        n += (size_t)snprintf(buf + n, sizeof buf - n, "{\"type\":\"object\"}");
        for (int i = deep - 1; i >= 0; i--)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s", i % 2 ? "}" : "}}");
        struct sd_schema *s = NULL;
        struct sd_err e = {0};
        int rc = sd_schema_compile(buf, n, &s, &e);
        assert_int_equal(rc, deep == 16 ? SDNPU_OK : SDNPU_ERR_INVALID_ARG);
        if (rc) assert_non_null(strstr(e.msg, "nest more than 16 deep"));
        /* The deepest document: 16 constrained levels, and a free object
         * with anything in it below. */
        if (!rc) {
            char doc[512];
            size_t m = 0;
            for (int i = 0; i < deep; i++)
                m += (size_t)snprintf(doc + m, sizeof doc - m, "%s", i % 2 ? "[" : "{\"k\":");
            m += (size_t)snprintf(doc + m, sizeof doc - m, "{\"z\":[[{}]]}");
            for (int i = deep - 1; i >= 0; i--)
                m += (size_t)snprintf(doc + m, sizeof doc - m, "%s", i % 2 ? "]" : "}");
            bool viable;
            if (!accepts(s, doc, m, &viable)) fail_msg("refused %s", doc);
        }
        sd_schema_free(s);
    }
    /* A free array or object opens no level: any depth inside, to the
     * recogniser's own bound, even below 16 constrained levels. */
    struct sd_schema *s =
        compile("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\"},\"b\":true}}");
    char doc[256];
    size_t m = (size_t)snprintf(doc, sizeof doc, "{\"a\":");
    for (int i = 0; i < 40; i++)
        doc[m++] = '[';
    for (int i = 0; i < 40; i++)
        doc[m++] = ']';
    m += (size_t)snprintf(doc + m, sizeof doc - m, ",\"b\":[[{\"x\":[[]]}]]}");
    bool viable;
    if (!accepts(s, doc, m, &viable)) fail_msg("refused %.*s", (int)m, doc);
    sd_schema_free(s);
}

/* ------------------------------------------------------------- examples */

static const char k_person[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"description\":\"who\"},"
    "\"age\":{\"type\":\"integer\"},"
    "\"nick\":{\"type\":[\"string\",\"null\"]},"
    "\"role\":{\"enum\":[\"admin\",\"ad\",\"user\",7,null,true]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,\"maxItems\":2},"
    "\"meta\":{\"type\":\"object\"},"
    "\"score\":{\"type\":\"number\"}},"
    "\"required\":[\"name\",\"tags\"],\"additionalProperties\":false}";

static void test_schema_examples(void **state) {
    (void)state;
    struct sd_schema *s = compile(k_person);
    static const struct {
        const char *doc;
        bool ok;
    } cases[] = {
        {"{\"name\":\"Ann\",\"tags\":[\"x\"]}", true},
        {"{\"name\": \"Ann\",\n  \"age\": -3, \"nick\": null, \"role\": \"ad\", \"tags\": [\"x\", \"y\"],"
         " \"meta\": {\"any\": [1, {\"deep\": 2.5e3}]}, \"score\": 1.5e-3}",
         true},
        {"{\"name\":\"Ann\",\"role\":7,\"tags\":[\"\\u00e9\"]}", true},
        {"{\"name\":\"Ann\",\"role\":true,\"tags\":[\"x\"]}", true},
        {"{\"name\":\"Ann\",\"role\":null,\"tags\":[\"x\"],\"score\":3}", true},
        {"{\"tags\":[\"x\"],\"name\":\"Ann\"}", false},             /* out of the schema's order */
        {"{\"name\":\"Ann\"}", false},                              /* tags is required */
        {"{\"name\":\"Ann\",\"tags\":[]}", false},                  /* minItems */
        {"{\"name\":\"Ann\",\"tags\":[\"a\",\"b\",\"c\"]}", false}, /* maxItems */
        {"{\"name\":\"Ann\",\"age\":1.5,\"tags\":[\"x\"]}", false}, /* an integer */
        {"{\"name\":\"Ann\",\"age\":1e2,\"tags\":[\"x\"]}", false},
        {"{\"name\":\"Ann\",\"role\":\"a\",\"tags\":[\"x\"]}", false}, /* a prefix of an enum value */
        {"{\"name\":\"Ann\",\"role\":\"adm\",\"tags\":[\"x\"]}", false},
        {"{\"name\":\"Ann\",\"role\":70,\"tags\":[\"x\"]}", false},
        {"{\"name\":\"Ann\",\"role\":false,\"tags\":[\"x\"]}", false},
        {"{\"name\":\"Ann\",\"tags\":[\"x\"],\"extra\":1}", false}, /* no other properties */
        {"{\"name\":\"Ann\",\"name\":\"Bo\",\"tags\":[\"x\"]}", false},
        {"{\"name\":1,\"tags\":[\"x\"]}", false},
        {"{\"name\":\"Ann\",\"nick\":false,\"tags\":[\"x\"]}", false},
        {"{\"name\":\"Ann\",\"tags\":[1]}", false},
        {"{\"na\\u006de\":\"Ann\",\"tags\":[\"x\"]}", false}, /* a name spelled otherwise */
        {"{}", false},
    };
    for (size_t i = 0; i < SD_ARRAY_LEN(cases); i++) {
        bool viable;
        const size_t n = strlen(cases[i].doc);
        if (accepts(s, cases[i].doc, n, &viable) != cases[i].ok)
            fail_msg("want %d: %s", cases[i].ok, cases[i].doc);
        /* The validator agrees wherever order and spelling are not what differs. */
        if (cases[i].ok) assert_true(sdt_schema_valid_text(k_person, cases[i].doc, n));
    }
    sd_schema_free(s);
    /* additionalProperties false without properties: only the empty object. */
    s = compile("{\"type\":\"object\",\"additionalProperties\":false}");
    bool viable;
    assert_true(accepts(s, "{}", 2, &viable));
    assert_false(accepts(s, "{\"a\":1}", 7, &viable));
    sd_schema_free(s);
}

/* $ref and anyOf (k_pydantic): what each alternative allows, and nothing
 * else; every verdict the reference validator's too. */
static void test_schema_ref_any_of(void **state) {
    (void)state;
    struct sd_schema *s = compile(k_pydantic);
    static const struct {
        const char *doc;
        bool ok;
    } cases[] = {
        {"{\"version\":\"2.33\",\"changes\":[]}", true},
        {"{\"version\":\"2.33\",\"changes\":[{\"kind\":\"fix\"},{\"kind\":\"feature\",\"detail\":null},"
         "{\"kind\":\"fix\",\"detail\":\"ort\"}],\"level\":\"high\",\"count\":12,\"size\":1.5,\"extra\":[1,2]"
         "}",
         true},
        {"{\"version\":\"1\",\"changes\":[],\"level\":null,\"count\":true,\"size\":-3,\"extra\":{\"kind\":"
         "\"fix\"}}",
         true},
        {"{\"version\":\"1\",\"changes\":[],\"level\":3,\"extra\":null}", true},
        {"{\"version\":\"1\",\"changes\":[{}]}", false},                              /* kind is required */
        {"{\"version\":\"1\",\"changes\":[{\"kind\":\"docs\"}]}", false},             /* not in the Literal */
        {"{\"version\":\"1\",\"changes\":[{\"kind\":\"fix\",\"detail\":7}]}", false}, /* string or null */
        {"{\"version\":\"1\",\"changes\":[],\"level\":\"mid\"}", false},
        {"{\"version\":\"1\",\"changes\":[],\"level\":4}", false},
        {"{\"version\":\"1\",\"changes\":[],\"level\":true}", false},
        {"{\"version\":\"1\",\"changes\":[],\"count\":1.5}", false}, /* integer or boolean */
        {"{\"version\":\"1\",\"changes\":[],\"count\":null}", false},
        {"{\"version\":\"1\",\"changes\":[],\"size\":\"1\"}", false},
        {"{\"version\":\"1\",\"changes\":[],\"extra\":[1,2,3]}", false}, /* maxItems */
        {"{\"version\":\"1\",\"changes\":[],\"extra\":[\"a\"]}", false},
        {"{\"version\":\"1\",\"changes\":[],\"extra\":{}}", false}, /* the Change's kind */
        {"{\"version\":\"1\",\"changes\":[],\"extra\":\"x\"}", false},
    };
    for (size_t i = 0; i < SD_ARRAY_LEN(cases); i++) {
        bool viable;
        const size_t n = strlen(cases[i].doc);
        if (accepts(s, cases[i].doc, n, &viable) != cases[i].ok)
            fail_msg("want %d: %s", cases[i].ok, cases[i].doc);
        if (sdt_schema_valid_text(k_pydantic, cases[i].doc, n) != cases[i].ok)
            fail_msg("the reference validator disagrees: %s", cases[i].doc);
    }
    sd_schema_free(s);
    /* A name with '/' in it (~1 in the pointer), and anyOf of an object
     * and a referenced integer. */
    s = compile(
        "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/o\"}},"
        "\"$defs\":{\"o\":{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a/b\":{\"type\":\"null\"}}},"
        "{\"$ref\":\"#/$defs/x~1y\"}]},\"x/y\":{\"type\":\"integer\"}}}");
    static const char *const yes[] = {"{\"a\":{\"a/b\":null}}", "{\"a\":-4}", "{}"},
                             *const no[] = {"{\"a\":\"x\"}", "{\"a\":{\"a/b\":1}}", "{\"a\":1.5}"};
    bool viable;
    for (size_t i = 0; i < SD_ARRAY_LEN(yes); i++)
        if (!accepts(s, yes[i], strlen(yes[i]), &viable)) fail_msg("refused %s", yes[i]);
    for (size_t i = 0; i < SD_ARRAY_LEN(no); i++)
        if (accepts(s, no[i], strlen(no[i]), &viable)) fail_msg("accepted %s", no[i]);
    sd_schema_free(s);
}

/* A UI step as Pydantic writes a discriminated union (oneOf of models in
 * $defs, each with a Literal tag first, and the discriminator beside);
 * an optional second step (the union inside anyOf with null); the
 * root a oneOf itself is tried below. */
static const char k_actions[] =
    "{\"$defs\":{"
    "\"Click\":{\"properties\":{\"action\":{\"const\":\"click\",\"title\":\"Action\",\"type\":\"string\"},"
    "\"x\":{\"type\":\"integer\"},\"y\":{\"type\":\"integer\"}},\"required\":[\"action\",\"x\",\"y\"],"
    "\"title\":\"Click\",\"type\":\"object\"},"
    "\"Type\":{\"properties\":{\"action\":{\"const\":\"type\",\"type\":\"string\"},\"text\":{\"type\":"
    "\"string\"},"
    "\"submit\":{\"default\":false,\"type\":\"boolean\"}},\"required\":[\"action\",\"text\"],\"type\":"
    "\"object\"},"
    "\"Scroll\":{\"properties\":{\"action\":{\"enum\":[\"up\",\"down\"],\"type\":\"string\"},"
    "\"by\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}],\"default\":null}},"
    "\"required\":[\"action\"],\"type\":\"object\"}},"
    "\"properties\":{\"thought\":{\"type\":\"string\"},"
    "\"step\":{\"discriminator\":{\"mapping\":{\"click\":\"#/$defs/Click\",\"type\":\"#/$defs/Type\"},"
    "\"propertyName\":\"action\"},\"oneOf\":[{\"$ref\":\"#/$defs/Click\"},{\"$ref\":\"#/$defs/Type\"},"
    "{\"$ref\":\"#/$defs/Scroll\"}]},"
    "\"then\":{\"anyOf\":[{\"oneOf\":[{\"$ref\":\"#/$defs/Click\"},{\"$ref\":\"#/$defs/Type\"}]},"
    "{\"type\":\"null\"}]},"
    "\"done\":{\"allOf\":[{\"type\":\"boolean\"}],\"description\":\"finished\"},"
    "\"mode\":{\"oneOf\":[{\"enum\":[\"fast\",1]},{\"const\":\"slow\"},{\"type\":\"null\"}]}},"
    "\"required\":[\"thought\",\"step\"],\"type\":\"object\"}";

/* oneOf, allOf of one, and unions of objects told apart by a tag: the
 * recogniser's verdict on each document is the validator's, and every
 * prefix of an accepted one is viable. */
static void test_schema_unions(void **state) {
    (void)state;
    static const struct {
        const char *doc;
        bool ok;
    } cases[] = {
        {"{\"thought\":\"\",\"step\":{\"action\":\"click\",\"x\":1,\"y\":2}}", true},
        {"{\"thought\":\"t\",\"step\":{\"action\":\"type\",\"text\":\"hi\",\"submit\":true},"
         "\"then\":{\"action\":\"click\",\"x\":0,\"y\":-3},\"done\":false,\"mode\":1}",
         true},
        {"{\"thought\":\"t\",\"step\":{\"action\":\"up\"},\"then\":null}", true},
        {"{\"thought\":\"t\",\"step\":{\"action\":\"up\"},\"mode\":[1]}", false},
        {"{\"thought\":\"t\",\"step\":{\"action\":\"down\",\"by\":null},\"mode\":\"slow\"}", true},
        {"{\"thought\":\"t\",\"step\":{\"action\":\"down\",\"by\":3},\"mode\":null}", true},
        {"{\"thought\":\"t\",\"step\":{\"action\":\"type\",\"text\":\"hi\"},\"mode\":\"fast\"}", true},
        {"{\"thought\":\"t\",\"step\":{\"action\":\"click\",\"x\":1}}", false},        /* y is required */
        {"{\"thought\":\"t\",\"step\":{\"action\":\"click\",\"text\":\"a\"}}", false}, /* Type's property */
        {"{\"thought\":\"t\",\"step\":{\"action\":\"type\",\"x\":1,\"y\":2}}", false}, /* Click's */
        {"{\"thought\":\"t\",\"step\":{\"action\":\"drag\"}}", false},                 /* no such tag */
        {"{\"thought\":\"t\",\"step\":{}}", false},                                    /* and must come */
        {"{\"thought\":\"t\",\"step\":{\"action\":\"up\"},\"then\":{\"action\":\"up\"}}",
         false}, /* not Scroll */
        {"{\"thought\":\"t\",\"step\":{\"action\":\"up\"},\"done\":1}", false},
        {"{\"thought\":\"t\",\"step\":{\"action\":\"up\"},\"mode\":\"x\"}", false},
        {"{\"thought\":\"t\",\"step\":{\"action\":\"up\"},\"mode\":2}", false},
        {"{\"thought\":\"t\",\"step\":{\"action\":\"up\"},\"mode\":true}", false},
        {"{\"thought\":\"t\",\"step\":null}", false},
    };
    struct sd_schema *s = compile(k_actions);
    for (size_t i = 0; i < SD_ARRAY_LEN(cases); i++) {
        bool viable;
        const size_t n = strlen(cases[i].doc);
        if (accepts(s, cases[i].doc, n, &viable) != cases[i].ok)
            fail_msg("want %d: %s", cases[i].ok, cases[i].doc);
        if (cases[i].ok && !viable) fail_msg("a prefix is not viable: %s", cases[i].doc);
        if (sdt_schema_valid_text(k_actions, cases[i].doc, n) != cases[i].ok)
            fail_msg("the reference validator disagrees: %s", cases[i].doc);
    }
    /* Properties come in the schema's order, so the tag first (a
     * validator does not mind the order; the reply is written in it). */
    static const char late_tag[] = "{\"thought\":\"t\",\"step\":{\"x\":1,\"y\":2,\"action\":\"click\"}}";
    bool viable;
    assert_false(accepts(s, late_tag, strlen(late_tag), &viable));
    assert_true(sdt_schema_valid_text(k_actions, late_tag, strlen(late_tag)));
    sd_schema_free(s);
    /* The root a union of objects tagged by booleans, one of them a union
     * itself (its tags join the outer ones). */
    static const char root[] =
        "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"ok\":{\"const\":true},\"value\":{\"type\":"
        "\"integer\"}},"
        "\"required\":[\"ok\",\"value\"]},"
        "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"ok\":{\"const\":false},\"error\":{\"type\":"
        "\"string\"}},"
        "\"required\":[\"ok\"]},"
        "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"null\"}},\"required\":[\"ok\"]}]}]}";
    s = compile(root);
    static const char *const yes[] = {"{\"ok\":true,\"value\":3}", "{\"ok\":false}",
                                      "{\"ok\":false,\"error\":\"e\"}", "{\"ok\":null}"},
                             *const no[] = {"{\"ok\":true}", "{\"ok\":false,\"error\":3}", "{\"ok\":1}",
                                            "{}"};
    for (size_t i = 0; i < SD_ARRAY_LEN(yes); i++) {
        if (!accepts(s, yes[i], strlen(yes[i]), &viable)) fail_msg("refused %s", yes[i]);
        assert_true(sdt_schema_valid_text(root, yes[i], strlen(yes[i])));
    }
    for (size_t i = 0; i < SD_ARRAY_LEN(no); i++) {
        if (accepts(s, no[i], strlen(no[i]), &viable)) fail_msg("accepted %s", no[i]);
        assert_false(sdt_schema_valid_text(root, no[i], strlen(no[i])));
    }
    sd_schema_free(s);
}

/* -------------------------------------------------------- random schemas */

static const char *const k_names[] = {"a",   "ab",   "abc",  "b", "name", "\xc3\xa9t\xc3\xa9",
                                      "x y", "q\"t", "tab\t"};
static const char *const k_strings[] = {"red", "re", "r", "", "\xc3\xa9\"", "a\\b", "line\nnext"};

static json_t *gen_schema(struct sdt_gen *g, int level);

static json_t *gen_enum(struct sdt_gen *g) {
    json_t *e = json_array();
    for (uint32_t i = 1 + sdt_gen_pick(g, 4); i > 0; i--) {
        uint32_t k = sdt_gen_pick(g, 10);
        json_array_append_new(e, k < 7    ? json_string(k_strings[k])
                                 : k == 7 ? json_integer(-12 + 5 * (int)i)
                                 : k == 8 ? json_boolean(i % 2)
                                          : json_null());
    }
    return e;
}

static json_t *gen_object_schema(struct sdt_gen *g, int level) {
    json_t *o = json_object(), *props = json_object(), *req = json_array();
    json_object_set_new(o, "type", json_string("object"));
    uint32_t first = sdt_gen_pick(g, SD_ARRAY_LEN(k_names)), n = sdt_gen_pick(g, 5);
    for (uint32_t i = 0; i < n; i++) {
        const char *name = k_names[(first + i * 2) % SD_ARRAY_LEN(k_names)];
        if (json_object_get(props, name)) continue;
        json_object_set_new(props, name, gen_schema(g, level + 1));
        if (sdt_gen_pick(g, 2)) json_array_append_new(req, json_string(name));
    }
    uint32_t shape = sdt_gen_pick(g, 6);
    if (shape > 0) json_object_set(o, "properties", props); /* 0: a free object */
    if (shape > 0 && json_array_size(req)) json_object_set(o, "required", req);
    if (shape == 2 || shape == 3) json_object_set_new(o, "additionalProperties", json_boolean(shape == 3));
    json_decref(props);
    json_decref(req);
    return o;
}

/* A union of two or three objects told apart by a first property
 * "kind" (values that are prefixes of each other), in anyOf or oneOf,
 * sometimes with null beside. */
static json_t *gen_union(struct sdt_gen *g, int level) {
    json_t *alts = json_array();
    for (uint32_t i = 0, n = 2 + sdt_gen_pick(g, 2); i < n; i++) {
        json_t *o = gen_object_schema(g, level), *props = json_object(),
               *req = json_object_get(o, "required");
        json_object_set_new(props, "kind", json_pack("{s:s}", "const", k_strings[i]));
        json_object_update(props, json_object_get(o, "properties")); /* after the tag, in their order */
        json_object_set_new(o, "properties", props);
        if (!req) json_object_set_new(o, "required", req = json_array());
        json_array_append_new(req, json_string("kind"));
        json_array_append_new(alts, o);
    }
    if (sdt_gen_pick(g, 2)) json_array_append_new(alts, json_pack("{s:s}", "type", "null"));
    return json_pack("{s:o}", sdt_gen_pick(g, 2) ? "oneOf" : "anyOf", alts);
}

static json_t *gen_schema(struct sdt_gen *g, int level) {
    static const char *const scalars[] = {"string", "integer", "number", "boolean", "null"};
    uint32_t k = level >= 4 ? 4 + sdt_gen_pick(g, 5) : sdt_gen_pick(g, 9);
    if (k == 8 && sdt_gen_pick(g, 2)) return json_true();
    json_t *o;
    if (k <= 1) return sdt_gen_pick(g, 4) ? gen_object_schema(g, level) : gen_union(g, level);
    if (k <= 3) {
        o = json_pack("{s:s}", "type", "array");
        json_object_set_new(o, "items", gen_schema(g, level + 1));
        uint32_t lo = sdt_gen_pick(g, 3);
        if (lo) json_object_set_new(o, "minItems", json_integer(lo));
        if (sdt_gen_pick(g, 2)) json_object_set_new(o, "maxItems", json_integer(lo + sdt_gen_pick(g, 3)));
    } else if (k <= 5) {
        o = json_object();
        json_object_set_new(o, k == 4 ? "enum" : "const", k == 4 ? gen_enum(g) : json_string("red"));
    } else if (k == 6) {
        o = json_pack("{s:[s,s]}", "type", scalars[sdt_gen_pick(g, 5)], scalars[sdt_gen_pick(g, 5)]);
    } else {
        o = json_pack("{s:s}", "type", scalars[sdt_gen_pick(g, 5)]);
    }
    if (!sdt_gen_pick(g, 4)) json_object_set_new(o, "description", json_string("d"));
    return sdt_gen_pick(g, 8) ? o : json_pack("{s:[o]}", "allOf", o);
}

static void gen_doc(struct sdt_gen *g, const json_t *sch, int depth);

static void put_json(struct sdt_gen *g, const json_t *v) {
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    sdt_gen_put(g, t);
    free(t);
}

/* The properties in the schema's order, the required ones and about half
 * of the others. */
static void gen_props(struct sdt_gen *g, const json_t *sch, int depth) {
    const json_t *props = json_object_get(sch, "properties"), *req = json_object_get(sch, "required");
    sdt_gen_put(g, "{");
    const char *key;
    json_t *sub;
    bool first = true;
    json_object_foreach((json_t *)props, key, sub) {
        bool must = false;
        for (size_t i = 0; i < json_array_size(req); i++)
            must |= !strcmp(json_string_value(json_array_get(req, i)), key);
        if (!must && sdt_gen_pick(g, 2)) continue;
        sdt_gen_put(g, first ? "" : ",");
        sdt_gen_ws(g);
        json_t *name = json_string(key);
        put_json(g, name);
        json_decref(name);
        sdt_gen_put(g, ":");
        sdt_gen_ws(g);
        gen_doc(g, sub, depth + 1);
        first = false;
    }
    sdt_gen_put(g, "}");
}

/* One of the types a schema's "type" allows (any, without one). */
static const char *gen_type(struct sdt_gen *g, const json_t *t) {
    static const char *const all[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    if (!t) return all[sdt_gen_pick(g, 7)];
    if (json_is_string(t)) return json_string_value(t);
    return json_string_value(json_array_get(t, sdt_gen_pick(g, (uint32_t)json_array_size(t))));
}

/* A document the schema allows, written as the grammar writes it. */
static void gen_doc(struct sdt_gen *g, const json_t *sch, int depth) {
    const json_t *e = json_object_get(sch, "enum"), *c = json_object_get(sch, "const");
    if (json_is_true(sch)) return sdt_gen_value(g, depth);
    const json_t *alts = json_object_get(sch, "anyOf");
    if (!alts) alts = json_object_get(sch, "oneOf");
    if (!alts) alts = json_object_get(sch, "allOf");
    if (alts)
        return gen_doc(g, json_array_get(alts, sdt_gen_pick(g, (uint32_t)json_array_size(alts))), depth);
    if (c || e) return put_json(g, c ? c : json_array_get(e, sdt_gen_pick(g, (uint32_t)json_array_size(e))));
    const char *t = gen_type(g, json_object_get(sch, "type"));
    static const char *const ints[] = {"0", "-7", "42", "123456789012345"}, *const reals[] = {
                                                                                "1.5", "-0.25e-2", "3E7"};
    if (!strcmp(t, "object")) {
        if (json_object_get(sch, "properties")) return gen_props(g, sch, depth);
        if (json_is_false(json_object_get(sch, "additionalProperties"))) return sdt_gen_put(g, "{}");
        return sdt_gen_container(g, depth, true);
    }
    if (!strcmp(t, "array")) {
        const json_t *items = json_object_get(sch, "items");
        json_int_t lo = json_integer_value(json_object_get(sch, "minItems")), hi = lo + 2;
        if (json_object_get(sch, "maxItems")) hi = json_integer_value(json_object_get(sch, "maxItems"));
        json_int_t n = lo + (json_int_t)sdt_gen_pick(g, (uint32_t)(hi - lo + 1));
        sdt_gen_put(g, "[");
        for (json_int_t i = 0; i < n; i++) {
            sdt_gen_put(g, i ? ", " : "");
            if (items)
                gen_doc(g, items, depth + 1);
            else
                sdt_gen_value(g, depth + 1);
        }
        return sdt_gen_put(g, "]");
    }
    if (!strcmp(t, "string")) return sdt_gen_string(g);
    if (!strcmp(t, "integer")) return sdt_gen_put(g, ints[sdt_gen_pick(g, 4)]);
    if (!strcmp(t, "number"))
        return sdt_gen_put(g, sdt_gen_pick(g, 2) ? ints[sdt_gen_pick(g, 4)] : reals[sdt_gen_pick(g, 3)]);
    sdt_gen_put(g, !strcmp(t, "null") ? "null" : sdt_gen_pick(g, 2) ? "true" : "false");
}

/* A walk from the empty output, each byte drawn from those the state
 * allows (early: any; later: closing ones first, so that it ends): some
 * byte is always allowed until the object is complete, and what
 * completes is an object the validator accepts. Returns whether it
 * completed within the step bound. */
static bool walk(struct sdt_gen *g, const struct sd_schema *s, const json_t *sch) {
    static const char closing[] = "\"}]0";
    struct sd_json j;
    sd_json_init_schema(&j, s);
    char out[4096];
    size_t n = 0;
    while (!sd_json_complete(&j)) {
        unsigned char ok[256];
        const int n_ok = sdt_json_next_bytes(&j, ok);
        if (n_ok == 0) fail_msg("dead end after %zu bytes: %.*s", n, (int)n, out);
        if (n == sizeof out) return false;
        unsigned char c = ok[sdt_gen_pick(g, (uint32_t)n_ok)];
        for (int k = 0; n > 64 && closing[k]; k++)
            if (memchr(ok, closing[k], (size_t)n_ok)) {
                c = (unsigned char)closing[k];
                break;
            }
        out[n++] = (char)c;
        assert_true(sd_json_feed(&j, (char *)&c, 1));
    }
    if (!sdt_json_object_ok(out, n)) fail_msg("not strict JSON: %.*s", (int)n, out);
    json_t *v = json_loadb(out, n, 0, NULL);
    if (!v || !sdt_schema_valid(sch, v)) fail_msg("invalid under the schema: %.*s", (int)n, out);
    json_decref(v);
    return true;
}

/* Random schemas of the subset: each compiles; its documents (written in
 * the schema's order) are accepted, with every prefix viable; every edit
 * of one the recogniser still completes is valid (whatever it accepts,
 * the validator does); and walks end in valid objects. */
static void test_schema_random(void **state) {
    (void)state;
    static const char alphabet[] = "{}[]\",:0123456789.eE+-tfrulnas \n\\\xc3\xa9";
    struct sdt_gen g = {.rng = 20261206};
    int n_edit_accepted = 0, n_walked = 0, n_walks = 0;
    for (int iter = 0; iter < 400; iter++) {
        json_t *sch = gen_object_schema(&g, 0);
        char *text = json_dumps(sch, JSON_COMPACT);
        struct sd_schema *s = compile(text);
        for (int d = 0; d < 10; d++) {
            g.n = 0;
            gen_doc(&g, sch, 0);
            bool viable;
            if (!accepts(s, g.buf, g.n, &viable)) fail_msg("schema %s refused %.*s", text, (int)g.n, g.buf);
            if (!sdt_schema_valid_text(text, g.buf, g.n)) fail_msg("the generator: %.*s", (int)g.n, g.buf);
            size_t at = sdt_gen_pick(&g, (uint32_t)g.n);
            if (sdt_gen_pick(&g, 3) == 0)
                memmove(g.buf + at, g.buf + at + 1, --g.n - at);
            else
                g.buf[at] = alphabet[sdt_gen_pick(&g, sizeof alphabet - 1)];
            if (accepts(s, g.buf, g.n, &viable)) {
                n_edit_accepted++;
                if (!sdt_schema_valid_text(text, g.buf, g.n) || !sdt_json_object_ok(g.buf, g.n))
                    fail_msg("schema %s accepted the invalid %.*s", text, (int)g.n, g.buf);
            }
        }
        for (int w = 0; w < 3; w++, n_walks++)
            n_walked += walk(&g, s, sch);
        sd_schema_free(s);
        free(text);
        json_decref(sch);
    }
    assert_true(n_edit_accepted > 100); /* edits that stay valid are seen */
    assert_true(n_walked > n_walks * 9 / 10);
}

/* ------------------------------------------------------------ end to end */

static const char k_release[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"version\":{\"type\":\"string\"},"
    "\"changes\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,\"maxItems\":3},"
    "\"kind\":{\"enum\":[\"major\",\"minor\",\"patch\"]},"
    "\"breaking\":{\"type\":\"boolean\"}},"
    "\"required\":[\"version\",\"changes\",\"kind\",\"breaking\"],\"additionalProperties\":false}";

static enum sdnpu_status run_schema(struct sdnpu_session *s, const char *prompt, bool chat, const char *spec,
                                    float temp, int32_t n, const char *schema, struct sdt_text *out,
                                    struct sdnpu_stats *st) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.format = SDNPU_FORMAT_JSON_SCHEMA;
    gp.json_schema = schema;
    gp.chat = chat;
    gp.n_predict = n;
    gp.sampling.temperature = temp;
    gp.sampling.seed = 5;
    gp.spec = sdt_spec(spec);
    gp.new_context = true;
    gp.on_text = sdt_collect;
    gp.user = out;
    memset(out, 0, sizeof *out);
    return sdnpu_session_generate(s, prompt, strlen(prompt), &gp, st);
}

/* Ended by the model: a valid object; cut: a viable prefix. */
static void check_reply(const char *schema, const struct sdt_text *t, const struct sdnpu_stats *st) {
    struct sd_schema *s = compile(schema);
    bool viable, whole = accepts(s, t->buf, t->n, &viable);
    sd_schema_free(s);
    if (st->stop_reason == SDNPU_STOP_EOG) {
        if (!whole || !sdt_schema_valid_text(schema, t->buf, t->n) || !sdt_json_object_ok(t->buf, t->n))
            fail_msg("not valid: %.*s", (int)t->n, t->buf);
    } else {
        assert_int_equal(st->stop_reason, SDNPU_STOP_LENGTH);
        if (!viable) fail_msg("not the start of a valid object: %.*s", (int)t->n, t->buf);
    }
}

static const char *const k_specs[] = {"none",     "npu-vanilla",    "pld",           "sam",
                                      "sam-tree", "sam-tree+reuse", "sam-tree+calib"};

/* Random weights under a schema: nearly every token is the mask's, the
 * enum's and names' letters forced: every method gives plain decoding's
 * text. A bad schema is refused by name before anything runs. */
static void test_schema_tiny_lossless(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/test_schema_tiny.gguf", SD_BUILD_DIR);
    struct sdt_tiny_opts o = {.arch = "qwen2"};
    struct sdnpu_model *m = sdt_tiny_load(&o, path);
    assert_non_null(m);
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sdnpu_session_default_params(), &s), SDNPU_OK);
    const char *prompt = "{\"version\": \"2.33\", \"changes\": [\"ort\"], \"kind\": \"minor\"} {\"version\":";
    struct sdt_text plain, t;
    struct sdnpu_stats st;
    static const char *const schemas[] = {k_release, k_pydantic, k_actions};
    for (size_t q = 0; q < SD_ARRAY_LEN(schemas); q++) {
        for (size_t k = 0; k < SD_ARRAY_LEN(k_specs); k++) {
            assert_int_equal(
                run_schema(s, prompt, false, k_specs[k], 0.0f, 96, schemas[q], k ? &t : &plain, &st),
                SDNPU_OK);
            check_reply(schemas[q], k ? &t : &plain, &st);
            if (k && (t.n != plain.n || memcmp(t.buf, plain.buf, t.n)))
                fail_msg("%s: %.*s\nplain: %.*s", k_specs[k], (int)t.n, t.buf, (int)plain.n, plain.buf);
        }
        assert_true(plain.n > 12); /* past the first name: {"version":" */
        assert_int_equal(run_schema(s, prompt, false, "sam-tree", 0.9f, 96, schemas[q], &t, &st), SDNPU_OK);
        check_reply(schemas[q], &t, &st);
    }
    assert_int_equal(
        run_schema(s, prompt, false, "none", 0.0f, 8, "{\"type\":\"object\",\"format\":\"x\"}", &t, &st),
        SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(sdnpu_session_last_error(s), "'format' is not supported"));
    assert_int_equal(run_schema(s, prompt, false, "none", 0.0f, 8, NULL, &t, &st), SDNPU_ERR_INVALID_ARG);
    assert_non_null(strstr(sdnpu_session_last_error(s), "without a json_schema"));
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

/* The default model held to a schema: an object it ends itself, valid,
 * the same from every method; sampled, valid too. */
static void test_schema_default_model(void **state) {
    (void)state;
    if (!sdt_file_exists(SD_DEFAULT_MODEL)) skip();
    struct sdnpu_model *m = sdt_model(SD_DEFAULT_MODEL, 0, true);
    struct sdnpu_session *s;
    assert_int_equal(sdnpu_session_create(m, sdnpu_session_default_params(), &s), SDNPU_OK);
    const char *prompt = "Release notes: Git 2.33 adds git merge -s ort, faster renames and a new "
                         "--diff-merges option. Describe this release as JSON.";
    struct sdt_text plain, t;
    struct sdnpu_stats st;
    static const char *const specs[] = {"none", "sam-tree", "sam-tree+reuse+calib"};
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(run_schema(s, prompt, true, specs[k], 0.0f, 160, k_release, k ? &t : &plain, &st),
                         SDNPU_OK);
        assert_int_equal(st.stop_reason, SDNPU_STOP_EOG);
        check_reply(k_release, k ? &t : &plain, &st);
        if (k && (t.n != plain.n || memcmp(t.buf, plain.buf, t.n)))
            fail_msg("%s: %.*s\nplain: %.*s", specs[k], (int)t.n, t.buf, (int)plain.n, plain.buf);
    }
    assert_non_null(strstr(plain.buf, "2.33"));
    assert_int_equal(run_schema(s, prompt, true, "sam-tree", 0.7f, 160, k_release, &t, &st), SDNPU_OK);
    assert_int_equal(st.stop_reason, SDNPU_STOP_EOG);
    check_reply(k_release, &t, &st);
    sdnpu_session_free(s);
    sdnpu_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_refusals),      cmocka_unit_test(test_schema_depth),
        cmocka_unit_test(test_schema_examples),      cmocka_unit_test(test_schema_ref_any_of),
        cmocka_unit_test(test_schema_unions),        cmocka_unit_test(test_schema_random),
        cmocka_unit_test(test_schema_tiny_lossless), cmocka_unit_test(test_schema_default_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
