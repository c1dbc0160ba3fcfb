/*
 * grammar/schema.h - a compiled JSON Schema's layout, and the checks the
 * recogniser (json.c) makes against it as the bytes come. Private to the
 * folder: grammar.h is the face.
 *
 * A schema is a table of nodes; node 0 accepts any value (a value the
 * schema leaves free). A free object or array opens no level: whatever
 * is inside is any JSON, however deep (to the recogniser's own bound). An anyOf is one node that merges
 * its alternatives (a value's first byte picks among them; objects, by their first property's value),
 * and a $ref is compiled where it is used, so the recogniser meets neither. Property names and enum values
 * are literal sets: each value's exact JSON text (as jansson writes it), sorted bytewise, so the entries that
 * begin with the bytes read so far are one range [lo, hi) that each byte narrows by binary search. A property
 * name carries its property's index: the names that may come next are those from the next property up to the
 * next required one.
 */
#ifndef SD_GRAMMAR_SCHEMA_H
#define SD_GRAMMAR_SCHEMA_H

#include "grammar/grammar.h"

enum {
    SD_T_OBJECT = 1,
    SD_T_ARRAY = 2,
    SD_T_STRING = 4,
    SD_T_NUMBER = 8,
    SD_T_INTEGER = 16,
    SD_T_BOOLEAN = 32,
    SD_T_NULL = 64,
    SD_T_ANY = 127
};

#define SD_SCHEMA_NO_SET 0xFFFFu

struct sd_schema_node {
    uint8_t types;     /* SD_T_* the value may be */
    bool free_object;  /* an object's contents are left free (no properties given) */
    bool free_array;   /* an array's are (no items schema, no bounds) */
    uint16_t items;    /* an array's items' node */
    uint16_t enum_set; /* the values allowed, or SD_SCHEMA_NO_SET */
    uint16_t key_set;  /* an object's property names (free_object: none) */
    uint16_t min_items, max_items;
    uint32_t props; /* an object's properties: props[props .. props + n_props) */
    uint16_t n_props;
    /* A union of objects told apart by their first property (a tag): this
     * node's one property is the tag, whose value node's literals each
     * carry (as their order) the node of the alternative they pick; once
     * the tag's value is read, the object goes on as that alternative
     * (its properties after the first). */
    bool tagged;
};

struct sd_schema_prop {
    uint16_t node;
    uint16_t next_req; /* the first required property at this index or after; n_props: none */
};

/* One literal: pool[off .. off + len), and for a property name its index. */
struct sd_schema_lit {
    uint32_t off;
    uint16_t len;
    uint16_t order;
};

struct sd_schema_set {
    uint16_t first, n; /* lits[first .. first + n) */
};

struct sd_schema {
    uint16_t root;
    struct sd_schema_node *nodes;
    struct sd_schema_prop *props;
    struct sd_schema_lit *lits;
    struct sd_schema_set *sets;
    char *pool;
    uint32_t n_nodes, n_props, n_lits, n_sets, n_pool;
};

/* The kinds of value a first byte starts. */
static inline uint8_t sd_schema_kinds_of(unsigned char c) {
    switch (c) {
    case '{':
        return SD_T_OBJECT;
    case '[':
        return SD_T_ARRAY;
    case '"':
        return SD_T_STRING;
    case 't':
    case 'f':
        return SD_T_BOOLEAN;
    case 'n':
        return SD_T_NULL;
    default:
        return c == '-' || (c >= '0' && c <= '9') ? SD_T_NUMBER | SD_T_INTEGER : 0;
    }
}

/* The checks, each called where the recogniser is constrained: the
 * innermost open container is one the schema constrains (or none is open
 * yet). false: the byte may not come. */
static inline bool sd_schema_on(const struct sd_json *j) { return j->schema && j->depth == j->sdepth; }
/* The first byte c of a value. */
bool sd_schema_value_start(struct sd_json *j, unsigned char c);
/* A container was opened (depth already counts it); was_on: the schema
 * constrained the position it opened at. */
bool sd_schema_open(struct sd_json *j, bool object, bool was_on);
/* May the innermost container close now. */
bool sd_schema_close(struct sd_json *j);
/* May a ',' follow the value just read. */
bool sd_schema_comma(struct sd_json *j);
/* The '"' that opens a property name. */
bool sd_schema_key_start(struct sd_json *j);
/* A byte of the value or name being matched against a literal set. */
bool sd_schema_lit_byte(struct sd_json *j, unsigned char c);
/* The property name just closed: is it one that may come. */
bool sd_schema_key_end(struct sd_json *j);
/* A value ended in a constrained container (or at the top). */
bool sd_schema_value_end(struct sd_json *j);

#endif /* SD_GRAMMAR_SCHEMA_H */
