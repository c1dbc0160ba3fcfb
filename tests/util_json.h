/* tests/util_json.h - the reference the JSON grammar (grammar/grammar.h)
 * is tested against. */
#ifndef SD_TEST_UTIL_JSON_H
#define SD_TEST_UTIL_JSON_H

#include <stdbool.h>
#include <stddef.h>

/* Whether s[0..n) is what SDNPU_FORMAT_JSON may output: jansson reads it
 * as one object, it starts with '{' and ends with '}', and its whitespace
 * keeps the grammar's bounds (runs outside strings of at most one '\n',
 * one '\r' and SD_JSON_MAX_WS bytes), numbers (integer and exponent
 * digits) and escapes (no \u of a surrogate, even in a valid pair). */
bool sdt_json_object_ok(const char *s, size_t n);

#endif
