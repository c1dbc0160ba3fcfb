/* grammar/schema.c - a JSON Schema compiled to the recogniser's tables
 * (grammar/grammar.h, grammar/schema.h). The schema is untrusted (an HTTP
 * request's): every size is bounded and every refusal names the keyword
 * and its JSON pointer. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/schema.h"

#define MAX_NODES 4096
#define MAX_LITS 65535
#define MAX_LIT_BYTES 4096
#define MAX_POOL (1u << 20)
#define MAX_ITEMS 65535
#define MAX_ANY_OF 64
#define MAX_REF_DEPTH 32

struct build {
    struct sd_schema *s;
    uint32_t cap_nodes, cap_props, cap_lits, cap_sets, cap_pool;
    struct sd_err *err;
    char path[256]; /* the JSON pointer of the schema being read */
    json_t *root;   /* the whole schema, which '$ref' points into */
    const char *refs[MAX_REF_DEPTH]; /* the references being expanded, outermost first */
    int n_refs;
};

SD_PRINTF(2, 3) static int fail(struct build *b, const char *fmt, ...) {
    char msg[SD_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sd_err_set(b->err, SDNPU_ERR_INVALID_ARG, "json schema at '%s': %s", b->path[0] ? b->path : "/",
                      msg);
}

/* Room for one more of n elements of size sz in *p (capacity *cap). */
static bool grow(void *p, uint32_t *cap, uint32_t n, size_t sz) {
    if (n < *cap) return true;
    uint32_t c = *cap ? *cap * 2 : 16;
    void *q = sd_realloc(*(void **)p, (size_t)c * sz);
    if (!q) return false;
    *(void **)p = q;
    *cap = c;
    return true;
}

static int oom(struct build *b) {
    return sd_err_set(b->err, SDNPU_ERR_OOM, "out of memory for the json schema");
}

/* The path of a child (a property's name escaped as RFC 6901 says: ~0
 * for '~', ~1 for '/'), restored by the caller from the length
 * returned; cut short where it does not fit. */
static size_t path_push(struct build *b, const char *a, const char *name) {
    const size_t n = strlen(b->path), cap = sizeof b->path - 1;
    size_t k = n + (size_t)snprintf(b->path + n, cap + 1 - n, "/%s%s", a, name ? "/" : "");
    for (const char *c = name; c && *c && k + 2 <= cap; c++) {
        if (*c == '~' || *c == '/') b->path[k++] = '~';
        b->path[k++] = *c == '~' ? '0' : *c == '/' ? '1' : *c;
    }
    b->path[SD_MIN(k, cap)] = 0;
    return n;
}

static int add_node(struct build *b, uint16_t *out) {
    struct sd_schema *s = b->s;
    if (s->n_nodes >= MAX_NODES) return fail(b, "more than %d schemas", MAX_NODES);
    if (!grow(&s->nodes, &b->cap_nodes, s->n_nodes, sizeof *s->nodes)) return oom(b);
    s->nodes[s->n_nodes] = (struct sd_schema_node){.types = SD_T_ANY,
                                                   .free_object = true,
                                                   .free_array = true,
                                                   .enum_set = SD_SCHEMA_NO_SET,
                                                   .key_set = SD_SCHEMA_NO_SET,
                                                   .max_items = MAX_ITEMS};
    *out = (uint16_t)s->n_nodes++;
    return SDNPU_OK;
}

/* Whether text, in place of X in "{X:0}" (a name) or "{"k":X}" (a value),
 * reads as a JSON object to the recogniser: a literal it could not
 * write would leave a set no output completes. */
static bool writable(const char *text, size_t n, bool name) {
    struct sd_json j;
    sd_json_init(&j);
    return sd_json_feed(&j, name ? "{" : "{\"k\":", name ? 1 : 5) && sd_json_feed(&j, text, n) &&
           sd_json_feed(&j, name ? ":0}" : "}", name ? 3 : 1) && sd_json_complete(&j);
}

/* Add a value's JSON text (n bytes) as a literal (order: a property's
 * index). */
static int add_lit_text(struct build *b, const char *text, size_t n, uint16_t order, bool name) {
    struct sd_schema *s = b->s;
    int rc = SDNPU_OK;
    if (n > MAX_LIT_BYTES)
        rc = fail(b, "a %s of %zu bytes (at most %d)", name ? "property name" : "value", n, MAX_LIT_BYTES);
    else if (!writable(text, n, name))
        rc = fail(b, "%s %s cannot be written as strict JSON", name ? "property name" : "value", text);
    else if (s->n_lits >= MAX_LITS || s->n_pool + n > MAX_POOL)
        rc = fail(b, "more than %d names and values or %u bytes of them", MAX_LITS, MAX_POOL);
    else if (!grow(&s->lits, &b->cap_lits, s->n_lits, sizeof *s->lits))
        rc = oom(b);
    while (!rc && s->n_pool + n > b->cap_pool)
        if (!grow(&s->pool, &b->cap_pool, b->cap_pool, 1)) rc = oom(b);
    if (!rc) {
        memcpy(s->pool + s->n_pool, text, n);
        s->lits[s->n_lits++] = (struct sd_schema_lit){.off = s->n_pool, .len = (uint16_t)n, .order = order};
        s->n_pool += (uint32_t)n;
    }
    return rc;
}

/* Add v's JSON text, as jansson writes it, as a literal. */
static int add_lit(struct build *b, json_t *v, uint16_t order, bool name) {
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!text) return oom(b);
    int rc = add_lit_text(b, text, strlen(text), order, name);
    free(text);
    return rc;
}

struct lit_view {
    const char *p;
    struct sd_schema_lit lit;
};

/* Bytewise, a prefix before what extends it (schema_match.c's order). */
static int lit_cmp(const void *a, const void *b) {
    const struct lit_view *x = a, *y = b;
    int c = memcmp(x->p, y->p, SD_MIN(x->lit.len, y->lit.len));
    return c ? c : (int)x->lit.len - (int)y->lit.len;
}

/* The literals from first on become one set, sorted, repeats dropped;
 * where repeat is given, a repeat is refused with it and the value. */
static int add_set(struct build *b, uint32_t first, uint16_t *out, const char *repeat) {
    struct sd_schema *s = b->s;
    uint32_t n = s->n_lits - first;
    struct lit_view *v = sd_malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v || !grow(&s->sets, &b->cap_sets, s->n_sets, sizeof *s->sets)) {
        sd_free(v);
        return oom(b);
    }
    for (uint32_t i = 0; i < n; i++)
        v[i] = (struct lit_view){s->pool + s->lits[first + i].off, s->lits[first + i]};
    qsort(v, n, sizeof *v, lit_cmp);
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (k > 0 && !lit_cmp(&v[k - 1], &v[i]) && repeat) {
            const int rc = fail(b, "%s: %.*s", repeat, (int)v[i].lit.len, v[i].p);
            sd_free(v);
            return rc;
        }
        if (k == 0 || lit_cmp(&v[k - 1], &v[i])) v[k++] = v[i];
    }
    for (uint32_t i = 0; i < k; i++)
        s->lits[first + i] = v[i].lit;
    sd_free(v);
    s->n_lits = first + k;
    s->sets[s->n_sets] = (struct sd_schema_set){.first = (uint16_t)first, .n = (uint16_t)k};
    *out = (uint16_t)s->n_sets++;
    return SDNPU_OK;
}

static int types_of(struct build *b, json_t *t, uint8_t *out) {
    static const char *const NAMES[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    if (!t) return *out = SD_T_ANY, SDNPU_OK;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    *out = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = json_string_value(json_is_array(t) ? json_array_get(t, i) : t);
        size_t k = 0;
        while (name && k < SD_ARRAY_LEN(NAMES) && strcmp(name, NAMES[k]))
            k++;
        if (!name || k == SD_ARRAY_LEN(NAMES))
            return fail(b, "'type' must be a type name (object, array, string, number, integer, boolean, "
                           "null) or a list of them");
        *out |= (uint8_t)(1u << k);
    }
    return *out ? SDNPU_OK : fail(b, "'type' lists no type: nothing satisfies it");
}

static bool one_of(const char *key, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(key, list[i])) return true;
    return false;
}

/* Annotations: read past, nothing to enforce. */
static const char *const k_notes[] = {"description", "title",     "default",      "examples",    "$schema",
                                      "$id",         "$comment",  "$defs",        "definitions", "deprecated",
                                      "readOnly",    "writeOnly", "discriminator"};

/* Every keyword must be one the recogniser enforces, or an annotation. */
static int check_keywords(struct build *b, json_t *sch) {
    static const char *const KNOWN[] = {"type",  "properties", "required", "additionalProperties",
                                        "items", "minItems",   "maxItems", "enum",
                                        "const", "anyOf",      "$ref"};
    const char *key;
    json_t *v;
    json_object_foreach(sch, key, v) {
        if (!one_of(key, KNOWN, SD_ARRAY_LEN(KNOWN)) && !one_of(key, k_notes, SD_ARRAY_LEN(k_notes)))
            return fail(b,
                        "'%s' is not supported (a reply is held to type, properties, required, "
                        "additionalProperties, items, minItems, maxItems, enum, const, anyOf, oneOf, "
                        "allOf of one schema and $ref)",
                        key);
    }
    return SDNPU_OK;
}

static uint8_t kind_of_value(json_t *v) {
    switch (json_typeof(v)) {
    case JSON_STRING:
        return SD_T_STRING;
    case JSON_INTEGER:
        return SD_T_INTEGER | SD_T_NUMBER;
    case JSON_TRUE:
    case JSON_FALSE:
        return SD_T_BOOLEAN;
    case JSON_NULL:
        return SD_T_NULL;
    default:
        return 0;
    }
}

/* enum or const: the values of an allowed type become the node's set. */
static int compile_enum(struct build *b, json_t *sch, uint16_t node) {
    json_t *e = json_object_get(sch, "enum"), *c = json_object_get(sch, "const");
    if (!e && !c) return SDNPU_OK;
    if (e && c) return fail(b, "'enum' and 'const' together are not supported");
    if (e && !json_is_array(e)) return fail(b, "'enum' must be an array");
    const uint8_t types = b->s->nodes[node].types;
    const uint32_t first = b->s->n_lits;
    size_t n = e ? json_array_size(e) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *v = e ? json_array_get(e, i) : c;
        uint8_t k = kind_of_value(v);
        if (!k)
            return fail(b, "'%s' holds a value that is not a string, integer, boolean or null",
                        e ? "enum" : "const");
        int rc;
        if ((k & types) && (rc = add_lit(b, v, 0, false))) return rc;
    }
    if (b->s->n_lits == first)
        return fail(b, "no value of '%s' has an allowed type: nothing satisfies it", e ? "enum" : "const");
    return add_set(b, first, &b->s->nodes[node].enum_set, NULL);
}

static int node_of(struct build *b, json_t *sch, int level, uint16_t *out);

static int required_of(struct build *b, json_t *sch, json_t *props, uint16_t np, uint8_t *req) {
    json_t *r = json_object_get(sch, "required");
    if (!r) return SDNPU_OK;
    if (!json_is_array(r)) return fail(b, "'required' must be an array of property names");
    for (size_t i = 0; i < json_array_size(r); i++) {
        const char *name = json_string_value(json_array_get(r, i));
        if (!name) return fail(b, "'required' must be an array of property names");
        uint16_t k = 0;
        for (void *it = props ? json_object_iter(props) : NULL; it;
             it = json_object_iter_next(props, it), k++)
            if (!strcmp(json_object_iter_key(it), name)) break;
        if (k >= np) return fail(b, "'required' names \"%s\", which 'properties' does not define", name);
        req[k] = 1;
    }
    return SDNPU_OK;
}

/* An object's properties (props NULL: none): their schemas first (they
 * add nodes, literals and properties of their own), then this object's
 * properties and names, each contiguous. */
static int compile_props(struct build *b, json_t *sch, json_t *props, int level, uint16_t node) {
    size_t np = json_object_size(props);
    if (np > 65535) return fail(b, "more than 65,535 properties");
    uint16_t *child = sd_calloc(np ? np : 1, sizeof *child);
    uint8_t *req = sd_calloc(np ? np : 1, 1);
    int rc = !child || !req ? oom(b) : required_of(b, sch, props, (uint16_t)np, req);
    const char *key;
    json_t *v;
    uint16_t k = 0;
    json_object_foreach(props, key, v) {
        if (rc) break;
        size_t back = path_push(b, "properties", key);
        rc = node_of(b, v, level + 1, &child[k++]);
        if (!rc) b->path[back] = 0;
    }
    struct sd_schema *s = b->s;
    const uint32_t first_prop = s->n_props, first_lit = s->n_lits;
    k = 0;
    json_object_foreach(props, key, v) {
        if (rc) break;
        json_t *name = json_string(key);
        rc = !name ? oom(b) : add_lit(b, name, k, true);
        json_decref(name);
        if (!rc && !grow(&s->props, &b->cap_props, s->n_props, sizeof *s->props)) rc = oom(b);
        if (!rc) s->props[s->n_props++] = (struct sd_schema_prop){.node = child[k]};
        k++;
    }
    for (uint32_t i = (uint32_t)np, next = (uint32_t)np; !rc && i-- > 0;)
        s->props[first_prop + i].next_req = (uint16_t)(next = req[i] ? i : next);
    if (!rc) rc = add_set(b, first_lit, &s->nodes[node].key_set, NULL);
    if (!rc) {
        s->nodes[node].props = first_prop;
        s->nodes[node].n_props = (uint16_t)np;
        s->nodes[node].free_object = false;
    }
    sd_free(child);
    sd_free(req);
    return rc;
}

static int compile_object(struct build *b, json_t *sch, int level, uint16_t node) {
    json_t *props = json_object_get(sch, "properties"), *more = json_object_get(sch, "additionalProperties");
    if (props && !json_is_object(props)) return fail(b, "'properties' must be an object");
    if (more && !json_is_boolean(more) && !(json_is_object(more) && props))
        return fail(b,
                    "'additionalProperties' must be true or false (a map's value schema is not supported)");
    if (!props && !json_is_false(more)) {
        if (json_object_get(sch, "required"))
            return fail(b, "'required' names properties, but 'properties' does not define them");
        return SDNPU_OK; /* its contents are free */
    }
    if (level >= SD_SCHEMA_MAX_DEPTH)
        return fail(b, "objects and arrays nest more than %d deep", SD_SCHEMA_MAX_DEPTH);
    return compile_props(b, sch, props, level, node); /* props NULL: none (jansson reads NULL as empty) */
}

static int items_bound(struct build *b, json_t *sch, const char *key, uint16_t *out) {
    json_t *v = json_object_get(sch, key);
    if (!v) return SDNPU_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(b, "'%s' must be an integer 0 or more", key);
    json_int_t n = json_integer_value(v);
    if (n > MAX_ITEMS && !strcmp(key, "minItems")) return fail(b, "'minItems' over %d", MAX_ITEMS);
    *out = (uint16_t)SD_MIN(n, MAX_ITEMS); /* a lower maxItems is kept to: the reply still satisfies it */
    return SDNPU_OK;
}

static int compile_array(struct build *b, json_t *sch, int level, uint16_t node) {
    uint16_t lo = 0, hi = MAX_ITEMS, items = 0;
    int rc;
    if ((rc = items_bound(b, sch, "minItems", &lo)) || (rc = items_bound(b, sch, "maxItems", &hi))) return rc;
    if (lo > hi) return fail(b, "'minItems' %u is over 'maxItems' %u: nothing satisfies it", lo, hi);
    json_t *it = json_object_get(sch, "items");
    if (it && json_is_array(it)) return fail(b, "'items' as a list (a tuple) is not supported");
    if ((!it || json_is_true(it)) && lo == 0 && hi == MAX_ITEMS) return SDNPU_OK; /* free */
    if (level >= SD_SCHEMA_MAX_DEPTH)
        return fail(b, "objects and arrays nest more than %d deep", SD_SCHEMA_MAX_DEPTH);
    if (it) {
        size_t back = path_push(b, "items", NULL);
        if ((rc = node_of(b, it, level + 1, &items))) return rc;
        b->path[back] = 0;
    }
    struct sd_schema_node *n = &b->s->nodes[node];
    n->min_items = lo, n->max_items = hi, n->items = items, n->free_array = false;
    return SDNPU_OK;
}

/* Only annotations may stand beside key ('$ref', 'anyOf', 'oneOf',
 * 'allOf'): what another
 * keyword there would add is not enforced. */
static int alone(struct build *b, json_t *sch, const char *key) {
    const char *k;
    json_t *v;
    json_object_foreach(sch, k, v) {
        if (strcmp(k, key) && !one_of(k, k_notes, SD_ARRAY_LEN(k_notes)))
            return fail(b, "'%s' beside '%s' is not supported", k, key);
    }
    return SDNPU_OK;
}

/* What a reference within the schema ("#", "#/$defs/item": a JSON pointer
 * into the root, ~1 for '/' and ~0 for '~') points at; NULL where nothing. */
static json_t *resolve(json_t *root, const char *ref) {
    json_t *at = root;
    const char *p = ref + 1;
    char tok[256];
    while (at && *p == '/') {
        size_t n = 0;
        for (p++; *p && *p != '/'; p++) {
            if (n + 1 >= sizeof tok) return NULL;
            const bool esc = *p == '~' && (p[1] == '0' || p[1] == '1');
            tok[n++] = esc ? (p[1] == '0' ? '~' : '/') : *p;
            p += esc;
        }
        tok[n] = 0;
        char *end;
        const unsigned long i = strtoul(tok, &end, 10);
        at = json_is_object(at)                ? json_object_get(at, tok)
             : json_is_array(at) && n && !*end ? json_array_get(at, i)
                                               : NULL;
    }
    return *p ? NULL : at;
}

/* '$ref': the schema it points at, compiled where it is used (each use
 * its own nodes); a reference met again inside its own expansion is a
 * recursive schema, refused. Errors inside name the target's pointer. */
static int node_of_ref(struct build *b, json_t *sch, int level, uint16_t *out) {
    int rc = alone(b, sch, "$ref");
    if (rc) return rc;
    const char *ref = json_string_value(json_object_get(sch, "$ref"));
    if (!ref || ref[0] != '#')
        return fail(b, "'$ref' must be a reference within the schema (such as \"#/$defs/item\")");
    for (int i = 0; i < b->n_refs; i++)
        if (!strcmp(b->refs[i], ref))
            return fail(b, "'$ref' \"%s\" refers to itself: a recursive schema is not supported", ref);
    if (b->n_refs == MAX_REF_DEPTH) return fail(b, "'$ref' nests more than %d deep", MAX_REF_DEPTH);
    json_t *target = resolve(b->root, ref);
    if (!target) return fail(b, "'$ref' \"%s\" points at nothing in the schema", ref);
    char saved[sizeof b->path];
    memcpy(saved, b->path, sizeof saved);
    snprintf(b->path, sizeof b->path, "%s", ref + 1);
    b->refs[b->n_refs++] = ref;
    rc = node_of(b, target, level, out);
    b->n_refs--;
    memcpy(b->path, saved, sizeof saved);
    return rc;
}

/* ------------------------------------------------------------- unions */

/* anyOf and oneOf: the recogniser never goes back, so the alternatives
 * merge into one node, told apart as the value comes: by its first byte
 * (at most one alternative may allow an array; scalars' kinds join), by
 * its text where they are finite sets (enums, const, null, booleans:
 * one set of literals), and, where several allow an object, by the
 * object's first property (a tag such as "kind": "click", required in
 * each, with values no two share), after which the object is the
 * alternative's. */
struct alts {
    const char *kw;      /* "anyOf" or "oneOf" */
    const uint16_t *alt; /* the alternatives' nodes */
    size_t n;
};

/* A node whose values are a finite set of literals: an enum, or only null
 * and booleans. */
static bool finite(const struct sd_schema_node *n) {
    return n->enum_set != SD_SCHEMA_NO_SET || !(n->types & ~(SD_T_NULL | SD_T_BOOLEAN));
}

/* The values of a finite node i as literals of the set being built, each
 * with the given order (negative: each keeps its own). */
static int add_finite_lits(struct build *b, uint16_t i, int order) {
    const struct sd_schema_node n = b->s->nodes[i];
    const uint16_t o = (uint16_t)SD_MAX(order, 0);
    if (n.enum_set == SD_SCHEMA_NO_SET) {
        int rc = SDNPU_OK;
        if (n.types & SD_T_NULL) rc = add_lit_text(b, "null", 4, o, false);
        if (!rc && (n.types & SD_T_BOOLEAN)) rc = add_lit_text(b, "true", 4, o, false);
        if (!rc && (n.types & SD_T_BOOLEAN)) rc = add_lit_text(b, "false", 5, o, false);
        return rc;
    }
    const struct sd_schema_set set = b->s->sets[n.enum_set];
    for (uint32_t k = set.first; k < (uint32_t)set.first + set.n; k++) {
        char text[MAX_LIT_BYTES];
        const struct sd_schema_lit l = b->s->lits[k];
        memcpy(text, b->s->pool + l.off, l.len); /* the pool may move as literals are added */
        int rc = add_lit_text(b, text, l.len, order < 0 ? l.order : o, false);
        if (rc) return rc;
    }
    return SDNPU_OK;
}

/* The kinds of value node i allows (an enum's: its values' own), an
 * integer counted a number too. */
static uint8_t value_kinds(const struct sd_schema *s, uint16_t i) {
    const struct sd_schema_node *n = &s->nodes[i];
    uint8_t k = n->enum_set == SD_SCHEMA_NO_SET ? n->types : 0;
    const struct sd_schema_set set = k ? (struct sd_schema_set){0} : s->sets[n->enum_set];
    for (uint32_t l = set.first; l < (uint32_t)set.first + set.n; l++)
        k |= sd_schema_kinds_of((unsigned char)s->pool[s->lits[l].off]);
    return k & (SD_T_NUMBER | SD_T_INTEGER) ? k | SD_T_NUMBER | SD_T_INTEGER : k;
}

/* oneOf: no value may match two alternatives. Two that allow the same
 * kind of scalar are refused unless both are enums (their values are
 * then kept apart as the set is made); objects are kept apart by their
 * tags, arrays by there being one. */
static int disjoint(struct build *b, const struct alts *u) {
    static const uint8_t kinds[] = {SD_T_STRING, SD_T_NUMBER | SD_T_INTEGER, SD_T_BOOLEAN, SD_T_NULL};
    static const char *const names[] = {"a string", "a number", "a boolean", "null"};
    for (size_t i = 0; i < u->n; i++)
        for (size_t k = i + 1; k < u->n; k++) {
            const struct sd_schema_node *x = &b->s->nodes[u->alt[i]], *y = &b->s->nodes[u->alt[k]];
            const uint8_t both = value_kinds(b->s, u->alt[i]) & value_kinds(b->s, u->alt[k]);
            if (x->enum_set != SD_SCHEMA_NO_SET && y->enum_set != SD_SCHEMA_NO_SET) continue;
            for (size_t t = 0; t < SD_ARRAY_LEN(kinds); t++)
                if (both & kinds[t])
                    return fail(b, "'oneOf': alternatives %zu and %zu both allow %s (a value must match one)",
                                i, k, names[t]);
        }
    return SDNPU_OK;
}

/* Object alternative i's tag: its first property, required, a finite
 * set (a merged union's is its own tag). name: the name's literal;
 * vals: the values' node. */
static int tag_of(struct build *b, const struct alts *u, size_t i, uint32_t *name, uint16_t *vals) {
    const struct sd_schema *s = b->s;
    const struct sd_schema_node *a = &s->nodes[u->alt[i]];
    if (a->free_object || a->n_props == 0 || s->props[a->props].next_req != 0 ||
        !finite(&s->nodes[s->props[a->props].node]))
        return fail(b,
                    "'%s': alternative %zu is one of several objects, which are told apart by their first "
                    "property: it must be required and a const or enum (a tag such as \"kind\": "
                    "{\"const\": \"click\"})",
                    u->kw, i);
    const struct sd_schema_set names = s->sets[a->key_set];
    for (uint32_t k = names.first; k < (uint32_t)names.first + names.n; k++)
        if (s->lits[k].order == 0) *name = k;
    *vals = s->props[a->props].node;
    return SDNPU_OK;
}

static bool same_lit(const struct sd_schema *s, uint32_t x, uint32_t y) {
    const struct sd_schema_lit *a = &s->lits[x], *c = &s->lits[y];
    return a->len == c->len && !memcmp(s->pool + a->off, s->pool + c->off, a->len);
}

/* The union's object part, m, for the object alternatives obj[0 .. n):
 * one property, the tag, whose values are every alternative's tag values,
 * each literal's order naming the node it picks (schema_match.c then
 * goes on in that node). */
static int merge_objects(struct build *b, const struct alts *u, const size_t *obj, size_t n,
                         struct sd_schema_node *m) {
    uint32_t name0 = 0, name = 0;
    uint16_t vals, tag, names;
    uint8_t types = 0;
    int rc;
    const uint32_t first = b->s->n_lits;
    for (size_t k = 0; k < n; k++) {
        if ((rc = tag_of(b, u, obj[k], &name, &vals))) return rc;
        if (k == 0) name0 = name;
        const struct sd_schema_lit l0 = b->s->lits[name0], l = b->s->lits[name];
        if (!same_lit(b->s, name0, name))
            return fail(
                b,
                "'%s': alternatives %zu and %zu begin with different properties (%.*s, %.*s): objects "
                "are told apart by a first property they share",
                u->kw, obj[0], obj[k], (int)l0.len, b->s->pool + l0.off, (int)l.len, b->s->pool + l.off);
        types |= b->s->nodes[vals].types;
        const uint16_t a = u->alt[obj[k]];
        if ((rc = add_finite_lits(b, vals, b->s->nodes[a].tagged ? -1 : a))) return rc;
    }
    char msg[64], text[MAX_LIT_BYTES];
    snprintf(msg, sizeof msg, "'%s': two objects have the same tag", u->kw);
    const struct sd_schema_lit l0 = b->s->lits[name0];
    memcpy(text, b->s->pool + l0.off, l0.len); /* the pool may move */
    const uint32_t first_name = b->s->n_lits;
    struct sd_schema *s = b->s;
    if ((rc = add_set(b, first, &vals, msg)) || (rc = add_node(b, &tag)) ||
        (rc = add_lit_text(b, text, l0.len, 0, true)) || (rc = add_set(b, first_name, &names, NULL)))
        return rc;
    s->nodes[tag].types = types, s->nodes[tag].enum_set = vals;
    if (!grow(&s->props, &b->cap_props, s->n_props, sizeof *s->props)) return oom(b);
    s->props[s->n_props] = (struct sd_schema_prop){.node = tag, .next_req = 0};
    m->props = s->n_props++, m->n_props = 1, m->key_set = names, m->free_object = false, m->tagged = true;
    return SDNPU_OK;
}

/* One node for the alternatives u (see struct alts). */
static int merge_union(struct build *b, const struct alts *u, uint16_t *out) {
    size_t obj[MAX_ANY_OF], n_obj = 0;
    int arr = -1, rc;
    bool enums = false, all_finite = true;
    uint8_t types = 0;
    for (size_t i = 0; i < u->n; i++) {
        const struct sd_schema_node *a = &b->s->nodes[u->alt[i]];
        const bool lits = a->enum_set != SD_SCHEMA_NO_SET;
        types |= a->types, enums |= lits, all_finite &= finite(a);
        if (!lits && (a->types & SD_T_ARRAY) && arr >= 0)
            return fail(b,
                        "'%s': alternatives %d and %zu both allow an array (alternatives are told apart "
                        "by a value's first byte)",
                        u->kw, arr, i);
        if (!lits && (a->types & SD_T_OBJECT)) obj[n_obj++] = i;
        if (!lits && (a->types & SD_T_ARRAY)) arr = (int)i;
    }
    if (enums && !all_finite)
        return fail(b,
                    "'%s' joins an enum with an alternative that is not a finite set of values (enums, "
                    "const, null and booleans join one)",
                    u->kw);
    if (!strcmp(u->kw, "oneOf") && (rc = disjoint(b, u))) return rc;
    if ((rc = add_node(b, out))) return rc;
    struct sd_schema_node m = b->s->nodes[*out];
    m.types = types;
    if (n_obj == 1) {
        const struct sd_schema_node *o = &b->s->nodes[u->alt[obj[0]]];
        m.free_object = o->free_object, m.key_set = o->key_set, m.props = o->props, m.n_props = o->n_props,
        m.tagged = o->tagged;
    }
    if (n_obj > 1 && (rc = merge_objects(b, u, obj, n_obj, &m))) return rc;
    if (arr >= 0) {
        const struct sd_schema_node *a = &b->s->nodes[u->alt[arr]];
        m.free_array = a->free_array, m.items = a->items, m.min_items = a->min_items,
        m.max_items = a->max_items;
    }
    if (enums) {
        const uint32_t first = b->s->n_lits;
        for (size_t i = 0; i < u->n; i++)
            if ((rc = add_finite_lits(b, u->alt[i], 0))) return rc;
        const bool one = !strcmp(u->kw, "oneOf");
        if ((rc = add_set(b, first, &m.enum_set,
                          one ? "'oneOf': two alternatives allow the same value" : NULL)))
            return rc;
    }
    b->s->nodes[*out] = m;
    return SDNPU_OK;
}

static int node_of_union(struct build *b, json_t *sch, const char *kw, int level, uint16_t *out) {
    int rc = alone(b, sch, kw);
    if (rc) return rc;
    json_t *list = json_object_get(sch, kw);
    const size_t n = json_array_size(list);
    if (!json_is_array(list) || n == 0) return fail(b, "'%s' must be a non-empty array of schemas", kw);
    if (n > MAX_ANY_OF) return fail(b, "'%s' of more than %d schemas", kw, MAX_ANY_OF);
    uint16_t alt[MAX_ANY_OF];
    for (size_t i = 0; i < n; i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        const size_t back = path_push(b, kw, idx);
        if ((rc = node_of(b, json_array_get(list, i), level, &alt[i]))) return rc;
        b->path[back] = 0;
    }
    return merge_union(b, &(struct alts){kw, alt, n}, out);
}

/* allOf of one schema (as Pydantic 1 writes a described reference): that
 * schema. More would be an intersection, which is not merged. */
static int node_of_all(struct build *b, json_t *sch, int level, uint16_t *out) {
    int rc = alone(b, sch, "allOf");
    if (rc) return rc;
    json_t *list = json_object_get(sch, "allOf");
    if (!json_is_array(list) || json_array_size(list) != 1)
        return fail(b, "'allOf' is supported with one schema only (an intersection is not merged)");
    const size_t back = path_push(b, "allOf", "0");
    if ((rc = node_of(b, json_array_get(list, 0), level, out))) return rc;
    b->path[back] = 0;
    return SDNPU_OK;
}

/* One schema (an object, or true: anything) at the given nesting of
 * constrained containers. */
static int node_of(struct build *b, json_t *sch, int level, uint16_t *out) {
    if (json_is_true(sch)) return *out = 0, SDNPU_OK;
    if (json_is_false(sch)) return fail(b, "the schema false: nothing satisfies it");
    if (!json_is_object(sch)) return fail(b, "a schema must be an object");
    if (json_object_get(sch, "$ref")) return node_of_ref(b, sch, level, out);
    if (json_object_get(sch, "anyOf")) return node_of_union(b, sch, "anyOf", level, out);
    if (json_object_get(sch, "oneOf")) return node_of_union(b, sch, "oneOf", level, out);
    if (json_object_get(sch, "allOf")) return node_of_all(b, sch, level, out);
    int rc;
    uint8_t types;
    if ((rc = check_keywords(b, sch)) || (rc = types_of(b, json_object_get(sch, "type"), &types)) ||
        (rc = add_node(b, out)))
        return rc;
    b->s->nodes[*out].types = types;
    if ((rc = compile_enum(b, sch, *out))) return rc;
    if ((types & SD_T_OBJECT) && (rc = compile_object(b, sch, level, *out))) return rc;
    if ((types & SD_T_ARRAY) && (rc = compile_array(b, sch, level, *out))) return rc;
    return SDNPU_OK;
}

static int compile_root(struct build *b, const char *text, size_t n) {
    json_error_t je;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return sd_err_set(b->err, SDNPU_ERR_INVALID_ARG, "json schema: not JSON (line %d, column %d: %s)",
                          je.line, je.column, je.text);
    uint16_t any;
    b->root = root;
    int rc = add_node(b, &any); /* node 0: anything */
    if (!rc) rc = node_of(b, root, 0, &b->s->root);
    if (!rc) {
        const struct sd_schema_node *r = &b->s->nodes[b->s->root];
        if (!(r->types & SD_T_OBJECT) || r->enum_set != SD_SCHEMA_NO_SET)
            rc = fail(b, "the reply is an object: the root schema must allow one ('type': 'object')");
    }
    json_decref(root);
    return rc;
}

int sd_schema_compile(const char *text, size_t n, struct sd_schema **out, struct sd_err *err) {
    *out = NULL;
    struct build b = {.err = err};
    if (!(b.s = sd_calloc(1, sizeof *b.s))) return oom(&b);
    int rc = compile_root(&b, text, n);
    if (rc) {
        sd_schema_free(b.s);
        return rc;
    }
    *out = b.s;
    return SDNPU_OK;
}

void sd_schema_free(struct sd_schema *s) {
    if (!s) return;
    sd_free(s->nodes);
    sd_free(s->props);
    sd_free(s->lits);
    sd_free(s->sets);
    sd_free(s->pool);
    sd_free(s);
}
