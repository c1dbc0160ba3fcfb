/* tests/util_json.h - the reference the JSON grammar (grammar/grammar.h)
 * is tested against. */
#ifndef SD_TEST_UTIL_JSON_H
#define SD_TEST_UTIL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether s[0..n) is what SDNPU_FORMAT_JSON may output: jansson reads it
 * as one object, it starts with '{' and ends with '}', and its whitespace
 * keeps the grammar's bounds (runs outside strings of at most one '\n',
 * one '\r' and SD_JSON_MAX_WS bytes), numbers (integer and exponent
 * digits) and escapes (no \u of a surrogate, even in a valid pair). */
bool sdt_json_object_ok(const char *s, size_t n);

/* JSON Schema validation of the subset grammar.h compiles, written from
 * the specification's semantics over jansson values (not from the
 * grammar's tables): what a client's validator checks. Key order and
 * how a value is spelled do not matter here; an integer is what jansson
 * reads as one. */
typedef struct json_t json_t;
bool sdt_schema_valid(const json_t *schema, const json_t *v);
/* The same from texts (a repeated name: the last one counts, as jansson
 * reads it); false where either is not JSON. */
bool sdt_schema_valid_text(const char *schema, const char *doc, size_t n);

/* The bytes the recogniser's state j allows next, in ok[0 .. return). */
struct sd_json;
int sdt_json_next_bytes(const struct sd_json *j, unsigned char ok[256]);

/* A generator of valid JSON text (seeded: the same seed, the same text),
 * with whitespace within the grammar's bounds and strings full of
 * escapes and UTF-8. Output past the buffer is dropped. */
struct sdt_gen {
    char buf[8192];
    size_t n;
    uint64_t rng;
};
uint32_t sdt_gen_pick(struct sdt_gen *g, uint32_t n); /* uniform in [0, n) */
void sdt_gen_put(struct sdt_gen *g, const char *s);
void sdt_gen_ws(struct sdt_gen *g);
void sdt_gen_string(struct sdt_gen *g);
void sdt_gen_value(struct sdt_gen *g, int depth);
void sdt_gen_container(struct sdt_gen *g, int depth, bool object);

#endif
