/*
 * cli/json.h - a small, strict JSON reader and a string writer for the
 * command's data files (dataset lines, eval results).
 *
 * The input is untrusted: the parser never reads past len, nests at most
 * JSON_MAX_DEPTH arrays/objects deep, rejects anything RFC 8259 rejects
 * (trailing commas, single quotes, bare control characters, leading zeros,
 * lone surrogates, invalid UTF-8, text after the value) and also duplicate
 * object keys and numbers that do not fit a double. Every failure is a
 * message naming the byte offset (1-based column) and what was expected.
 */
#ifndef SD_CLI_JSON_H
#define SD_CLI_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 64

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json_member;

struct json_value {
    enum json_type type;
    union {
        bool b;
        double num;
        struct {
            char *s;    /* unescaped UTF-8, NUL-terminated (may hold inner NULs: use len) */
            size_t len; /* bytes, without the terminating NUL */
        } str;
        struct {
            struct json_value *items;
            size_t n;
        } arr;
        struct {
            struct json_member *members; /* in file order; keys are unique */
            size_t n;
        } obj;
    } u;
};

struct json_member {
    char *key; /* NUL-terminated; a key holding a NUL is rejected */
    struct json_value val;
};

/* Parse exactly one JSON value (surrounded by optional whitespace) from
 * len bytes of text. On success *out owns the tree (free with json_free)
 * and 0 is returned. On failure *out is a JSON_NULL that owns nothing, -1 is
 * returned and err (if err_size > 0; always NUL-terminated) reads like
 * "column 17: expected ',' or '}' in an object". */
int json_parse(const char *text, size_t len, struct json_value *out, char *err, size_t err_size);

/* Free what v owns and leave it a JSON_NULL. NULL is fine. */
void json_free(struct json_value *v);

/* The member named key of an object, or NULL (also when obj is no object). */
const struct json_value *json_get(const struct json_value *obj, const char *key);

/* "null", "boolean", "number", "string", "array", "object". */
const char *json_type_name(enum json_type t);

/* Write s (len bytes of UTF-8) as a quoted JSON string: quotes, backslashes
 * and control characters are escaped, other bytes are written as they are. */
void json_write_string(FILE *f, const char *s, size_t len);

/* Whether len bytes are valid UTF-8 (no overlong forms, surrogates or code
 * points past U+10FFFF). On failure *bad_offset (if not NULL) is the offset
 * of the first bad byte. */
bool json_utf8_valid(const char *s, size_t len, size_t *bad_offset);

#endif /* SD_CLI_JSON_H */
