/* tests/util_json.c - the JSON grammar's reference (util_json.h). */
#include "util_json.h"

#include <jansson.h>
#include <string.h>

#include "grammar/grammar.h"

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
