/* tests/util_json.c - the JSON grammar's reference (util_json.h). */
#include "util_json.h"

#include <jansson.h>
#include <string.h>

#include "grammar/grammar.h"
#include "util_common.h"

/* An escape \uXXXX of a surrogate (D800-DFFF), which the grammar refuses
 * even in a valid pair. */
static bool surrogate_escape(const char *s, size_t n, size_t i) {
    return i + 3 < n && s[i] == 'u' && (s[i + 1] == 'd' || s[i + 1] == 'D') &&
           strchr("89abcdefABCDEF", s[i + 2]) && s[i + 2] != 0;
}

/* A number at s[i..): its integer part and exponent within the grammar's
 * digit bounds. Returns where it ends (the caller's scan goes on there),
 * or 0 past a bound. */
static size_t number_ok(const char *s, size_t n, size_t i) {
    size_t d = 0;
    if (i < n && s[i] == '-') i++;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++, d++;
    if (d > SD_JSON_MAX_INT_DIGITS) return 0;
    while (i < n && (s[i] == '.' || (s[i] >= '0' && s[i] <= '9')))
        i++;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        for (d = 0; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            d++;
        if (d > SD_JSON_MAX_EXP_DIGITS) return 0;
    }
    return i;
}

/* The grammar's bounds, read outside strings (whitespace, numbers), and
 * its refused escapes. */
static bool bounds_ok(const char *s, size_t n) {
    bool in_str = false;
    int run = 0, nl = 0, cr = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\' && surrogate_escape(s, n, i + 1)) return false;
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            run++, nl += c == '\n', cr += c == '\r';
            if (run > SD_JSON_MAX_WS || nl > 1 || cr > 1) return false;
            continue;
        }
        run = nl = cr = 0;
        in_str = c == '"';
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t end = number_ok(s, n, i);
            if (end == 0) return false;
            i = end - 1;
        }
    }
    return true;
}

bool sdt_json_object_ok(const char *s, size_t n) {
    json_error_t e;
    json_t *v = json_loadb(s, n, 0, &e);
    bool ok = v && json_is_object(v);
    json_decref(v);
    /* jansson passes over a NUL byte after a number, where a strict
     * parser (Python's json) refuses it: so do we. */
    return ok && n > 0 && s[0] == '{' && s[n - 1] == '}' && !memchr(s, 0, n) && bounds_ok(s, n);
}

/* ------------------------------------------------- JSON Schema reference */

static bool type_is(const char *name, const json_t *v) {
    if (!strcmp(name, "object")) return json_is_object(v);
    if (!strcmp(name, "array")) return json_is_array(v);
    if (!strcmp(name, "string")) return json_is_string(v);
    if (!strcmp(name, "number")) return json_is_number(v);
    if (!strcmp(name, "integer")) return json_is_integer(v);
    if (!strcmp(name, "boolean")) return json_is_boolean(v);
    return !strcmp(name, "null") && json_is_null(v);
}

static bool type_ok(const json_t *t, const json_t *v) {
    if (!t) return true;
    if (json_is_string(t)) return type_is(json_string_value(t), v);
    for (size_t i = 0; i < json_array_size(t); i++)
        if (type_is(json_string_value(json_array_get(t, i)), v)) return true;
    return false;
}

static bool enum_ok(const json_t *sch, const json_t *v) {
    const json_t *e = json_object_get(sch, "enum"), *c = json_object_get(sch, "const");
    if (c && !json_equal(c, v)) return false;
    if (!e) return true;
    for (size_t i = 0; i < json_array_size(e); i++)
        if (json_equal(json_array_get(e, i), v)) return true;
    return false;
}

static bool valid_in(const json_t *root, const json_t *sch, const json_t *v);

static bool object_ok(const json_t *root, const json_t *sch, const json_t *v) {
    const json_t *props = json_object_get(sch, "properties"),
                 *more = json_object_get(sch, "additionalProperties");
    const json_t *req = json_object_get(sch, "required");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (!json_object_get(v, json_string_value(json_array_get(req, i)))) return false;
    const char *key;
    json_t *x;
    json_object_foreach((json_t *)v, key, x) {
        const json_t *p = props ? json_object_get(props, key) : NULL;
        if (p ? !valid_in(root, p, x) : more && !valid_in(root, more, x)) return false;
    }
    return true;
}

static bool array_ok(const json_t *root, const json_t *sch, const json_t *v) {
    const json_t *items = json_object_get(sch, "items"), *lo = json_object_get(sch, "minItems"),
                 *hi = json_object_get(sch, "maxItems");
    size_t n = json_array_size(v);
    if ((lo && (json_int_t)n < json_integer_value(lo)) || (hi && (json_int_t)n > json_integer_value(hi)))
        return false;
    for (size_t i = 0; items && i < n; i++)
        if (!valid_in(root, items, json_array_get(v, i))) return false;
    return true;
}

/* A "#/a/b" reference's target in root (RFC 6901: ~1 is '/', ~0 '~'). */
static const json_t *ref_target(const json_t *root, const char *ref) {
    const json_t *at = root;
    for (const char *p = ref + 1; at && *p == '/';) {
        char name[256];
        size_t n = 0;
        for (p++; *p && *p != '/' && n + 1 < sizeof name; p++) {
            if (*p == '~') {
                name[n++] = *++p == '1' ? '/' : '~';
            } else {
                name[n++] = *p;
            }
        }
        name[n] = 0;
        at = json_object_get(at, name);
    }
    return at;
}

static bool valid_in(const json_t *root, const json_t *sch, const json_t *v) {
    if (json_is_boolean(sch)) return json_is_true(sch);
    const json_t *ref = json_object_get(sch, "$ref"), *any = json_object_get(sch, "anyOf"),
                 *one = json_object_get(sch, "oneOf"), *all = json_object_get(sch, "allOf");
    if (ref) return valid_in(root, ref_target(root, json_string_value(ref)), v);
    size_t n_any = 0, n_one = 0, n_all = 0;
    for (size_t i = 0; i < json_array_size(any); i++)
        n_any += valid_in(root, json_array_get(any, i), v);
    for (size_t i = 0; i < json_array_size(one); i++)
        n_one += valid_in(root, json_array_get(one, i), v);
    for (size_t i = 0; i < json_array_size(all); i++)
        n_all += valid_in(root, json_array_get(all, i), v);
    if ((any && n_any == 0) || (one && n_one != 1) || n_all < json_array_size(all)) return false;
    if (any || one || all) return true; /* beside them, only annotations (sd_schema_compile) */
    if (!type_ok(json_object_get(sch, "type"), v) || !enum_ok(sch, v)) return false;
    if (json_is_object(v)) return object_ok(root, sch, v);
    return !json_is_array(v) || array_ok(root, sch, v);
}

bool sdt_schema_valid(const json_t *sch, const json_t *v) { return valid_in(sch, sch, v); }

bool sdt_schema_valid_text(const char *schema, const char *doc, size_t n) {
    json_t *sch = json_loads(schema, 0, NULL), *v = json_loadb(doc, n, 0, NULL);
    bool ok = sch && v && sdt_schema_valid(sch, v);
    json_decref(sch);
    json_decref(v);
    return ok;
}

/* ------------------------------------------------------------ generator */

uint32_t sdt_gen_pick(struct sdt_gen *g, uint32_t n) { return (uint32_t)(sdt_rand_u64(&g->rng) % n); }

void sdt_gen_put(struct sdt_gen *g, const char *s) {
    size_t len = strlen(s);
    if (g->n + len < sizeof g->buf) memcpy(g->buf + g->n, s, len), g->n += len;
}

void sdt_gen_ws(struct sdt_gen *g) {
    static const char *ws[] = {"", "", " ", "\n  ", "\r\n", "\t", "\n"};
    sdt_gen_put(g, ws[sdt_gen_pick(g, 7)]);
}

void sdt_gen_string(struct sdt_gen *g) {
    static const char *parts[] = {
        "a",       "key",     " ",       "\\n",      "\\\"",         "\\\\",
        "\\u00e9", "\\u2603", "\\u0041", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80",
        "\\/",     "\\t",     "1"};
    sdt_gen_put(g, "\"");
    for (uint32_t i = sdt_gen_pick(g, 5); i > 0; i--)
        sdt_gen_put(g, parts[sdt_gen_pick(g, 15)]);
    sdt_gen_put(g, "\"");
}

void sdt_gen_container(struct sdt_gen *g, int depth, bool object) {
    sdt_gen_put(g, object ? "{" : "[");
    uint32_t n = depth > 4 ? 0 : sdt_gen_pick(g, 4);
    for (uint32_t i = 0; i < n; i++) {
        if (i) sdt_gen_put(g, ",");
        sdt_gen_ws(g);
        if (object) {
            sdt_gen_string(g);
            sdt_gen_ws(g);
            sdt_gen_put(g, ":");
            sdt_gen_ws(g);
        }
        sdt_gen_value(g, depth + 1);
        sdt_gen_ws(g);
    }
    sdt_gen_put(g, object ? "}" : "]");
}

void sdt_gen_value(struct sdt_gen *g, int depth) {
    static const char *atoms[] = {"0",    "-1",    "12.5", "3e7",  "-0.25E-2",
                                  "true", "false", "null", "1e+2", "907"};
    switch (sdt_gen_pick(g, 4)) {
    case 0:
        sdt_gen_container(g, depth, true);
        break;
    case 1:
        sdt_gen_container(g, depth, false);
        break;
    case 2:
        sdt_gen_string(g);
        break;
    default:
        sdt_gen_put(g, atoms[sdt_gen_pick(g, 10)]);
    }
}

int sdt_json_next_bytes(const struct sd_json *j, unsigned char ok[256]) {
    int n = 0;
    for (int c = 0; c < 256; c++) {
        struct sd_json t = *j;
        char b = (char)c;
        if (sd_json_feed(&t, &b, 1)) ok[n++] = (unsigned char)c;
    }
    return n;
}
