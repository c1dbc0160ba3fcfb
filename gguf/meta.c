/*
 * gguf/meta.c - the metadata of a parsed GGUF file: the keys, the typed
 * getters (integers range-checked across types, so a u64 key may be read
 * as a u32 when its value fits), arrays and their strings, and each value
 * rendered as text for `sdnpu info`.
 *
 * Values stay in the file's bytes; gguf.c recorded where each one starts
 * and checked its size, so reading one here needs no bounds check.
 */
#include "gguf/gguf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/internal.h"

/* ------------------------------------------------------------ integers */

/* The value of an integer key as sign + magnitude (gguf/internal.h). */
bool sd_gguf_kv_int(const struct sd_gguf *g, const struct gguf_kv *kv, bool *neg, uint64_t *mag,
                    int64_t *sval) {
    const uint8_t *p = g->base + kv->val_off;
    int64_t s;
    uint64_t u;
    switch (kv->type) {
    case SD_GGUF_UINT8: u = p[0]; goto unsigned_value;
    case SD_GGUF_UINT16: u = le16(p); goto unsigned_value;
    case SD_GGUF_UINT32: u = le32(p); goto unsigned_value;
    case SD_GGUF_UINT64: u = le64(p); goto unsigned_value;
    case SD_GGUF_INT8: s = (int8_t)p[0]; break;
    case SD_GGUF_INT16: s = (int16_t)le16(p); break;
    case SD_GGUF_INT32: s = (int32_t)le32(p); break;
    case SD_GGUF_INT64: s = (int64_t)le64(p); break;
    default: return false;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    *sval = s;
    return true;

unsigned_value:
    *neg = false;
    *mag = u;
    *sval = (int64_t)u; /* only meaningful when u <= INT64_MAX; callers range-check first */
    return true;
}
/* ------------------------------------------------------------ metadata */

int64_t sd_gguf_n_kv(const struct sd_gguf *g) { return g ? g->n_kv : 0; }

const char *sd_gguf_key_name(const struct sd_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

enum sd_gguf_type sd_gguf_key_type(const struct sd_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv ? g->kv[i].type : SD_GGUF_TYPE_COUNT;
}

/* Look a key up for a getter: NOT_FOUND if absent, FORMAT if its type is not
 * one of the two accepted (pass the same type twice for one). */
static int lookup(const struct sd_gguf *g, const char *key, enum sd_gguf_type want, enum sd_gguf_type alt,
                  const char *want_name, const struct gguf_kv **kv, struct sd_err *err) {
    if (!g || !key) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "gguf getter: NULL handle or key");
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return sd_err_set(err, SDNPU_ERR_NOT_FOUND, "key '%s' not found", key);
    *kv = &g->kv[i];
    if ((*kv)->type != want && (*kv)->type != alt) {
        return sd_err_set(err, SDNPU_ERR_FORMAT, "key '%s' has type %s, expected %s", key,
                          sd_gguf_type_name((*kv)->type), want_name);
    }
    return SDNPU_OK;
}

static int get_int(const struct sd_gguf *g, const char *key, const char *want, bool *neg, uint64_t *mag,
                   int64_t *sval, struct sd_err *err) {
    if (!g || !key) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "gguf getter: NULL handle or key");
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return sd_err_set(err, SDNPU_ERR_NOT_FOUND, "key '%s' not found", key);
    if (!sd_gguf_kv_int(g, &g->kv[i], neg, mag, sval)) {
        return sd_err_set(err, SDNPU_ERR_FORMAT, "key '%s' has type %s, expected %s", key,
                          sd_gguf_type_name(g->kv[i].type), want);
    }
    return SDNPU_OK;
}

static int range_err(const struct sd_gguf *g, const char *key, bool neg, uint64_t mag, const char *want,
                     struct sd_err *err) {
    int64_t i = sd_gguf_find_key(g, key);
    return sd_err_set(err, SDNPU_ERR_FORMAT, "key '%s' = %s%" PRIu64 " (%s) does not fit in %s", key, neg ? "-" : "",
                      mag, sd_gguf_type_name(g->kv[i].type), want);
}

int sd_gguf_get_u32(const struct sd_gguf *g, const char *key, uint32_t *v, struct sd_err *err) {
    bool neg;
    uint64_t mag;
    int64_t s;
    int rc = get_int(g, key, "uint32", &neg, &mag, &s, err);
    if (rc) return rc;
    if (neg || mag > UINT32_MAX) return range_err(g, key, neg, mag, "uint32", err);
    *v = (uint32_t)mag;
    return SDNPU_OK;
}

int sd_gguf_get_i32(const struct sd_gguf *g, const char *key, int32_t *v, struct sd_err *err) {
    bool neg;
    uint64_t mag;
    int64_t s;
    int rc = get_int(g, key, "int32", &neg, &mag, &s, err);
    if (rc) return rc;
    if (neg ? mag > (uint64_t)INT32_MAX + 1 : mag > INT32_MAX) return range_err(g, key, neg, mag, "int32", err);
    *v = (int32_t)s;
    return SDNPU_OK;
}

int sd_gguf_get_u64(const struct sd_gguf *g, const char *key, uint64_t *v, struct sd_err *err) {
    bool neg;
    uint64_t mag;
    int64_t s;
    int rc = get_int(g, key, "uint64", &neg, &mag, &s, err);
    if (rc) return rc;
    if (neg) return range_err(g, key, neg, mag, "uint64", err);
    *v = mag;
    return SDNPU_OK;
}

int sd_gguf_get_i64(const struct sd_gguf *g, const char *key, int64_t *v, struct sd_err *err) {
    bool neg;
    uint64_t mag;
    int64_t s;
    int rc = get_int(g, key, "int64", &neg, &mag, &s, err);
    if (rc) return rc;
    if (!neg && mag > INT64_MAX) return range_err(g, key, neg, mag, "int64", err);
    *v = s;
    return SDNPU_OK;
}

int sd_gguf_get_f32(const struct sd_gguf *g, const char *key, float *v, struct sd_err *err) {
    const struct gguf_kv *kv;
    int rc = lookup(g, key, SD_GGUF_FLOAT32, SD_GGUF_FLOAT64, "float32", &kv, err);
    if (rc) return rc;
    if (kv->type == SD_GGUF_FLOAT32) {
        uint32_t bits = le32(g->base + kv->val_off);
        memcpy(v, &bits, 4);
    } else {
        uint64_t bits = le64(g->base + kv->val_off);
        double d;
        memcpy(&d, &bits, 8);
        *v = (float)d;
    }
    return SDNPU_OK;
}

int sd_gguf_get_bool(const struct sd_gguf *g, const char *key, bool *v, struct sd_err *err) {
    const struct gguf_kv *kv;
    int rc = lookup(g, key, SD_GGUF_BOOL, SD_GGUF_BOOL, "bool", &kv, err);
    if (rc) return rc;
    *v = g->base[kv->val_off] != 0;
    return SDNPU_OK;
}

int sd_gguf_get_str(const struct sd_gguf *g, const char *key, const char **s, size_t *len, struct sd_err *err) {
    const struct gguf_kv *kv;
    int rc = lookup(g, key, SD_GGUF_STRING, SD_GGUF_STRING, "string", &kv, err);
    if (rc) return rc;
    *s = (const char *)(g->base + kv->val_off);
    *len = kv->val_size;
    return SDNPU_OK;
}

int sd_gguf_get_arr(const struct sd_gguf *g, const char *key, enum sd_gguf_type *elem_type, uint64_t *n,
                    const void **data, struct sd_err *err) {
    const struct gguf_kv *kv;
    int rc = lookup(g, key, SD_GGUF_ARRAY, SD_GGUF_ARRAY, "array", &kv, err);
    if (rc) return rc;
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n;
    if (data) *data = g->base + kv->val_off;
    return SDNPU_OK;
}

int sd_gguf_arr_str_at(const struct sd_gguf *g, int64_t key_idx, uint64_t i, const char **s, size_t *len) {
    if (!g || key_idx < 0 || key_idx >= g->n_kv) return SDNPU_ERR_INVALID_ARG;
    const struct gguf_kv *kv = &g->kv[key_idx];
    if (kv->type != SD_GGUF_ARRAY || kv->elem_type != SD_GGUF_STRING) return SDNPU_ERR_FORMAT;
    if (i >= kv->n) return SDNPU_ERR_INVALID_ARG;
    size_t off = (size_t)kv->str_off[i];
    *s = (const char *)(g->base + off);
    *len = (size_t)le64(g->base + off - 8); /* the length prefix sits right before the bytes */
    return SDNPU_OK;
}

int sd_gguf_get_arr_str(const struct sd_gguf *g, const char *key, uint64_t i, const char **s, size_t *len,
                        struct sd_err *err) {
    const struct gguf_kv *kv;
    int rc = lookup(g, key, SD_GGUF_ARRAY, SD_GGUF_ARRAY, "array of string", &kv, err);
    if (rc) return rc;
    if (kv->elem_type != SD_GGUF_STRING) {
        return sd_err_set(err, SDNPU_ERR_FORMAT, "key '%s' is an array of %s, expected array of string", key,
                          sd_gguf_type_name(kv->elem_type));
    }
    if (i >= kv->n) {
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "key '%s': index %" PRIu64 " out of range (%" PRIu64 " strings)",
                          key, i, kv->n);
    }
    return sd_gguf_arr_str_at(g, sd_gguf_find_key(g, key), i, s, len);
}

/* ------------------------------------------------------------ rendering */

/* A bounded text builder: it always keeps room for "..." so a value that
 * does not fit can say so. */
struct sbuf {
    char *p;
    size_t cap, len;
    bool trunc;
};

static void sb_put(struct sbuf *b, const char *s, size_t n) {
    if (b->trunc) return;
    size_t room = b->cap > 4 ? b->cap - 4 : 0; /* keep "..." and the NUL */
    if (n > room - SD_MIN(room, b->len)) {
        b->trunc = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void sb_printf(struct sbuf *b, const char *fmt, ...) SD_PRINTF(2, 3);
static void sb_printf(struct sbuf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) sb_put(b, tmp, SD_MIN((size_t)n, sizeof tmp - 1));
}

/* The shortest decimal that reads back as the same float. */
static void sb_float(struct sbuf *b, double v, bool is_f32) {
    char tmp[40];
    if (v > -1e15 && v < 1e15 && v == (double)(int64_t)v) { /* range first: the cast of NaN or 1e300 is UB */
        /* Whole numbers in plain digits: rope.freq_base reads 1000000, not 1e+06. */
        snprintf(tmp, sizeof tmp, "%.0f", v);
        sb_put(b, tmp, strlen(tmp));
        return;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (is_f32 ? strtof(tmp, NULL) == (float)v : strtod(tmp, NULL) == v) break;
        if (v != v) break; /* NaN never compares equal */
    }
    sb_put(b, tmp, strlen(tmp));
}

/* Strings are shown as text with control bytes escaped, so a chat template
 * stays on one line. */
static void sb_escaped(struct sbuf *b, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n && !b->trunc; i++) {
        uint8_t c = s[i];
        if (c == '\n') sb_put(b, "\\n", 2);
        else if (c == '\t') sb_put(b, "\\t", 2);
        else if (c == '\r') sb_put(b, "\\r", 2);
        else if (c == '\\') sb_put(b, "\\\\", 2);
        else if (c < 0x20 || c == 0x7f) sb_printf(b, "\\x%02x", c);
        else if (c < 0x80) sb_put(b, (const char *)&c, 1);
        else {
            /* Keep a multi-byte UTF-8 sequence whole, so truncation never
             * leaves half a character before the "...". */
            size_t j = i + 1;
            while (j < n && j < i + 4 && (s[j] & 0xc0) == 0x80) j++;
            sb_put(b, (const char *)s + i, j - i);
            i = j - 1;
        }
    }
}

static void sb_scalar(struct sbuf *b, enum sd_gguf_type t, const uint8_t *p) {
    switch (t) {
    case SD_GGUF_UINT8: sb_printf(b, "%u", p[0]); break;
    case SD_GGUF_INT8: sb_printf(b, "%d", (int8_t)p[0]); break;
    case SD_GGUF_UINT16: sb_printf(b, "%u", le16(p)); break;
    case SD_GGUF_INT16: sb_printf(b, "%d", (int16_t)le16(p)); break;
    case SD_GGUF_UINT32: sb_printf(b, "%" PRIu32, le32(p)); break;
    case SD_GGUF_INT32: sb_printf(b, "%" PRId32, (int32_t)le32(p)); break;
    case SD_GGUF_UINT64: sb_printf(b, "%" PRIu64, le64(p)); break;
    case SD_GGUF_INT64: sb_printf(b, "%" PRId64, (int64_t)le64(p)); break;
    case SD_GGUF_BOOL: sb_printf(b, "%s", p[0] ? "true" : "false"); break;
    case SD_GGUF_FLOAT32: {
        uint32_t bits = le32(p);
        float f;
        memcpy(&f, &bits, 4);
        sb_float(b, f, true);
        break;
    }
    case SD_GGUF_FLOAT64: {
        uint64_t bits = le64(p);
        double d;
        memcpy(&d, &bits, 8);
        sb_float(b, d, false);
        break;
    }
    default: sb_put(b, "?", 1); break;
    }
}

void sd_gguf_value_str(const struct sd_gguf *g, int64_t key_idx, char *buf, size_t cap) {
    if (!buf || cap == 0) return;
    buf[0] = '\0';
    struct sbuf b = {buf, cap, 0, false};
    if (!g || key_idx < 0 || key_idx >= g->n_kv) {
        sb_put(&b, "?", 1);
    } else {
        const struct gguf_kv *kv = &g->kv[key_idx];
        const uint8_t *p = g->base + kv->val_off;
        enum { SHOWN = 8 }; /* numeric arrays longer than this are summarized */
        if (kv->type == SD_GGUF_STRING) {
            sb_escaped(&b, p, kv->val_size);
        } else if (kv->type != SD_GGUF_ARRAY) {
            sb_scalar(&b, kv->type, p);
        } else if (kv->elem_type == SD_GGUF_STRING || kv->elem_type == SD_GGUF_ARRAY) {
            sb_printf(&b, "[%" PRIu64 " x %s]", kv->n, sd_gguf_type_name(kv->elem_type));
        } else {
            size_t esz = sd_gguf_scalar_size[kv->elem_type];
            sb_put(&b, "[", 1);
            if (kv->n > SHOWN) sb_printf(&b, "%" PRIu64 " x %s: ", kv->n, sd_gguf_type_name(kv->elem_type));
            for (uint64_t i = 0; i < SD_MIN(kv->n, (uint64_t)SHOWN); i++) {
                if (i) sb_put(&b, ", ", 2);
                sb_scalar(&b, kv->elem_type, p + i * esz);
            }
            sb_put(&b, kv->n > SHOWN ? ", ...]" : "]", kv->n > SHOWN ? 6 : 1);
        }
    }
    if (b.trunc) {
        size_t n = SD_MIN(cap - 1, (size_t)3);
        memcpy(buf + b.len, "...", n);
        b.len += n;
    }
    buf[b.len] = '\0';
}
