/* cli/json.c - a strict JSON reader (recursive descent, bounded depth) and
 * a string writer; see json.h. */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct parser {
    const unsigned char *p;   /* next byte */
    const unsigned char *beg; /* start of the text, for columns */
    const unsigned char *end;
    char *err;
    size_t err_size;
    bool failed;
};

static void fail(struct parser *ps, const unsigned char *at, const char *fmt, ...) {
    if (ps->failed) return;
    ps->failed = true;
    if (!ps->err || ps->err_size == 0) return;
    int n = snprintf(ps->err, ps->err_size, "column %zu: ", (size_t)(at - ps->beg) + 1);
    if (n < 0 || (size_t)n >= ps->err_size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + n, ps->err_size - (size_t)n, fmt, ap);
    va_end(ap);
}

static void skip_ws(struct parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

/* Length of the UTF-8 sequence at s (at most n bytes available), or 0 when
 * it is not valid UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF). */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

bool json_utf8_valid(const char *s, size_t len, size_t *bad_offset) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t l = utf8_seq(u + i, len - i);
        if (!l) {
            if (bad_offset) *bad_offset = i;
            return false;
        }
        i += l;
    }
    return true;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hex4(const unsigned char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    *out = v;
    return 0;
}

/* Parse a string at ps->p (which is '"'). The unescaped text is never longer
 * than the escaped one (\uXXXX is 6 bytes for at most 3, a surrogate pair 12
 * for 4), so one allocation of the raw length suffices. */
static int parse_string(struct parser *ps, char **out, size_t *out_len) {
    const unsigned char *start = ps->p++;
    const unsigned char *q = ps->p;
    while (q < ps->end && *q != '"') q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
    if (q >= ps->end) {
        fail(ps, start, "unterminated string");
        return -1;
    }
    char *buf = malloc((size_t)(q - ps->p) + 1);
    if (!buf) {
        fail(ps, start, "out of memory");
        return -1;
    }
    size_t n = 0;
    while (*ps->p != '"') {
        const unsigned char *at = ps->p;
        unsigned c = *at;
        if (c < 0x20) {
            fail(ps, at, "control character 0x%02x in a string (write it as an escape)", c);
            goto bad;
        }
        if (c != '\\') {
            size_t l = utf8_seq(at, (size_t)(ps->end - at));
            if (!l) {
                fail(ps, at, "invalid UTF-8 byte 0x%02x in a string", c);
                goto bad;
            }
            memcpy(buf + n, at, l);
            n += l;
            ps->p += l;
            continue;
        }
        unsigned e = at[1]; /* the scan above guarantees at[1] exists and precedes the closing quote */
        ps->p += 2;
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (ps->end - ps->p < 4 || hex4(ps->p, &cp)) {
                fail(ps, at, "\\u must be followed by 4 hex digits");
                goto bad;
            }
            ps->p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                fail(ps, at, "lone low surrogate \\u%04X", (unsigned)cp);
                goto bad;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' || hex4(ps->p + 2, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF) {
                    fail(ps, at, "high surrogate \\u%04X not followed by a low surrogate", (unsigned)cp);
                    goto bad;
                }
                ps->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            n += put_utf8(buf + n, cp);
            break;
        }
        default:
            fail(ps, at, "invalid escape '\\%c'", (e >= 0x20 && e < 0x7f) ? (int)e : '?');
            goto bad;
        }
    }
    ps->p++; /* the closing quote */
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return 0;
bad:
    free(buf);
    return -1;
}

static int parse_number(struct parser *ps, double *out) {
    const unsigned char *s = ps->p, *q = s;
    if (q < ps->end && *q == '-') q++;
    if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
        fail(ps, s, "invalid number");
        return -1;
    }
    if (*q == '0') {
        q++;
        if (q < ps->end && *q >= '0' && *q <= '9') {
            fail(ps, s, "number with a leading zero");
            return -1;
        }
    } else {
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < ps->end && *q == '.') {
        q++;
        if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
            fail(ps, q, "expected a digit after '.'");
            return -1;
        }
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < ps->end && (*q == '+' || *q == '-')) q++;
        if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
            fail(ps, q, "expected a digit in the exponent");
            return -1;
        }
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    /* strtod needs a terminated copy: the text is not NUL-terminated. */
    size_t n = (size_t)(q - s);
    char small[64], *tmp = n < sizeof small ? small : malloc(n + 1);
    if (!tmp) {
        fail(ps, s, "out of memory");
        return -1;
    }
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    errno = 0;
    double v = strtod(tmp, NULL);
    int range = errno == ERANGE && isinf(v);
    if (tmp != small) free(tmp);
    if (range) {
        fail(ps, s, "number out of range");
        return -1;
    }
    *out = v;
    ps->p = q;
    return 0;
}

static int parse_value(struct parser *ps, struct json_value *v, int depth);

static int parse_array(struct parser *ps, struct json_value *v, int depth) {
    const unsigned char *open = ps->p++;
    size_t cap = 0;
    v->type = JSON_ARRAY;
    v->u.arr.items = NULL;
    v->u.arr.n = 0;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        return 0;
    }
    for (;;) {
        if (v->u.arr.n == cap) {
            size_t nc = cap ? cap * 2 : 4;
            struct json_value *ni = realloc(v->u.arr.items, nc * sizeof *ni);
            if (!ni) {
                fail(ps, open, "out of memory");
                return -1;
            }
            v->u.arr.items = ni;
            cap = nc;
        }
        struct json_value *item = &v->u.arr.items[v->u.arr.n];
        /* Counted before it is parsed: on failure the item still owns what
         * was parsed of it, and the caller's json_free must see it. */
        v->u.arr.n++;
        if (parse_value(ps, item, depth + 1)) return -1;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            return 0;
        }
        fail(ps, ps->p, ps->p < ps->end ? "expected ',' or ']' in an array" : "unterminated array");
        return -1;
    }
}

static int parse_object(struct parser *ps, struct json_value *v, int depth) {
    const unsigned char *open = ps->p++;
    size_t cap = 0;
    v->type = JSON_OBJECT;
    v->u.obj.members = NULL;
    v->u.obj.n = 0;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return 0;
    }
    for (;;) {
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != '"') {
            fail(ps, ps->p, ps->p < ps->end ? "expected a string key in an object" : "unterminated object");
            return -1;
        }
        const unsigned char *key_at = ps->p;
        char *key;
        size_t key_len;
        if (parse_string(ps, &key, &key_len)) return -1;
        if (strlen(key) != key_len) {
            free(key);
            fail(ps, key_at, "object key holds a NUL character");
            return -1;
        }
        for (size_t i = 0; i < v->u.obj.n; i++) {
            if (!strcmp(v->u.obj.members[i].key, key)) {
                fail(ps, key_at, "duplicate key \"%.40s\"", key);
                free(key);
                return -1;
            }
        }
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') {
            free(key);
            fail(ps, ps->p, "expected ':' after an object key");
            return -1;
        }
        ps->p++;
        if (v->u.obj.n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            struct json_member *nm = realloc(v->u.obj.members, nc * sizeof *nm);
            if (!nm) {
                free(key);
                fail(ps, open, "out of memory");
                return -1;
            }
            v->u.obj.members = nm;
            cap = nc;
        }
        struct json_member *m = &v->u.obj.members[v->u.obj.n];
        m->key = key;
        if (parse_value(ps, &m->val, depth + 1)) {
            /* m->val owns whatever was parsed of it; count the member so the
             * caller frees it. */
            v->u.obj.n++;
            return -1;
        }
        v->u.obj.n++;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == '}') {
            ps->p++;
            return 0;
        }
        fail(ps, ps->p, ps->p < ps->end ? "expected ',' or '}' in an object" : "unterminated object");
        return -1;
    }
}

static bool match_lit(struct parser *ps, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n) != 0) return false;
    ps->p += n;
    return true;
}

/* On failure v still owns what was parsed into it, so the caller's
 * json_free releases it: every container is valid (n counts only filled
 * items) at every moment. */
static int parse_value(struct parser *ps, struct json_value *v, int depth) {
    v->type = JSON_NULL;
    skip_ws(ps);
    if (depth > JSON_MAX_DEPTH) {
        fail(ps, ps->p, "nested deeper than %d levels", JSON_MAX_DEPTH);
        return -1;
    }
    if (ps->p >= ps->end) {
        fail(ps, ps->p, "unexpected end of input, expected a value");
        return -1;
    }
    unsigned c = *ps->p;
    switch (c) {
    case '{': return parse_object(ps, v, depth);
    case '[': return parse_array(ps, v, depth);
    case '"':
        if (parse_string(ps, &v->u.str.s, &v->u.str.len)) return -1;
        v->type = JSON_STRING;
        return 0;
    case 't':
    case 'f':
    case 'n':
        if (match_lit(ps, "true") || match_lit(ps, "false")) {
            v->type = JSON_BOOL;
            v->u.b = c == 't';
            return 0;
        }
        if (match_lit(ps, "null")) return 0;
        break;
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            v->type = JSON_NUMBER;
            return parse_number(ps, &v->u.num);
        }
    }
    if (c >= 0x20 && c < 0x7f)
        fail(ps, ps->p, "unexpected character '%c', expected a value", (int)c);
    else
        fail(ps, ps->p, "unexpected byte 0x%02x, expected a value", c);
    return -1;
}

int json_parse(const char *text, size_t len, struct json_value *out, char *err, size_t err_size) {
    struct parser ps = {(const unsigned char *)text, (const unsigned char *)text, (const unsigned char *)text + len,
                        err, err_size, false};
    if (err && err_size) err[0] = '\0';
    out->type = JSON_NULL;
    if (!text) {
        ps.beg = ps.p = ps.end = (const unsigned char *)"";
        fail(&ps, ps.p, "no input");
        return -1;
    }
    if (parse_value(&ps, out, 1)) {
        json_free(out);
        return -1;
    }
    skip_ws(&ps);
    if (ps.p != ps.end) {
        fail(&ps, ps.p, "unexpected text after the value");
        json_free(out);
        return -1;
    }
    return 0;
}

void json_free(struct json_value *v) {
    if (!v) return;
    switch (v->type) {
    case JSON_STRING: free(v->u.str.s); break;
    case JSON_ARRAY:
        for (size_t i = 0; i < v->u.arr.n; i++) json_free(&v->u.arr.items[i]);
        free(v->u.arr.items);
        break;
    case JSON_OBJECT:
        for (size_t i = 0; i < v->u.obj.n; i++) {
            free(v->u.obj.members[i].key);
            json_free(&v->u.obj.members[i].val);
        }
        free(v->u.obj.members);
        break;
    default: break;
    }
    v->type = JSON_NULL;
}

const struct json_value *json_get(const struct json_value *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < obj->u.obj.n; i++)
        if (!strcmp(obj->u.obj.members[i].key, key)) return &obj->u.obj.members[i].val;
    return NULL;
}

const char *json_type_name(enum json_type t) {
    static const char *names[] = {"null", "boolean", "number", "string", "array", "object"};
    return (unsigned)t < 6 ? names[t] : "?";
}

void json_write_string(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
            else fputc(c, f);
        }
    }
    fputc('"', f);
}
