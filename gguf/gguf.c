/*
 * gguf/gguf.c - the GGUF reader.
 *
 * File layout (GGUF v2 and v3; everything little-endian):
 *
 *     "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *     n_kv      x { string key | u32 value_type | value }
 *     n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 offset }
 *     zero padding up to a multiple of general.alignment (default 32)
 *     data section: tensor i occupies [data_start + offset_i, + nbytes_i)
 *
 * where a string is a u64 byte length followed by the bytes (no NUL), and an
 * array value is u32 element_type | u64 count | count elements (an element
 * may itself be an array, which repeats the same shape).
 *
 * The whole file is in memory (mapped or read) and parsed in one forward
 * pass by a cursor that checks every length against the bytes left before it
 * moves. Counts are checked against the bytes left too (count * smallest
 * element size), so no allocation is ever sized by a number the file cannot
 * back. Keys and tensor names are copied to NUL-terminated strings; values
 * and tensor data stay in the file's memory and are pointed at.
 *
 * Version 3 differs from version 2 only in allowing big-endian files, which
 * are recognized by their byte-swapped version field and refused.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32
/* Arrays of arrays are legal GGUF; no real file nests deeper than two. The
 * limit keeps a hostile file from driving the recursion off the stack. */
#define GGUF_MAX_NESTING 8
#define GGUF_HEADER_SIZE 24
/* Smallest possible encodings, used to bound counts by the bytes left:
 * a key/value is a 1-byte key (8+1), a type (4) and a 1-byte value;
 * a tensor info is a 1-byte name (8+1), n_dims (4), one dim (8), type (4), offset (8). */
#define GGUF_MIN_KV_SIZE 14
#define GGUF_MIN_TENSOR_INFO_SIZE 33

struct gguf_kv {
    char *key;                  /* NUL-terminated copy */
    enum sd_gguf_type type;
    enum sd_gguf_type elem_type; /* arrays only */
    uint64_t n;                  /* arrays: element count; strings: byte length */
    size_t val_off;              /* file offset of the scalar, the string's bytes, or the first array element */
    size_t val_size;             /* bytes from val_off that the value occupies */
    uint64_t *str_off;           /* [n] arrays of strings: file offset of each string's bytes */
};

struct sd_gguf {
    const uint8_t *base; /* [size] the whole file */
    size_t size;
    void *map;           /* the mapping when mmap'd (base == map) */
    void *heap;          /* the heap copy when read (base == heap) */

    uint32_t version;
    size_t alignment;
    size_t data_start;   /* file offset of the data section */

    int64_t n_kv;
    struct gguf_kv *kv;  /* [n_kv] */
    int64_t n_tensors;
    struct sd_gguf_tensor *tensors; /* [n_tensors] */

    /* Open-addressing hash tables (linear probing) from name to index, so
     * look-ups are O(1) and duplicates are found in linear time even in a
     * file that claims millions of tensors. -1 marks an empty slot. */
    int64_t *kv_hash;    /* [kv_hash_cap] */
    size_t kv_hash_cap;
    int64_t *t_hash;     /* [t_hash_cap] */
    size_t t_hash_cap;
};

/* Bytes per scalar value; 0 for the variable-size types. */
static const uint8_t k_scalar_size[SD_GGUF_TYPE_COUNT] = {
    [SD_GGUF_UINT8] = 1,  [SD_GGUF_INT8] = 1,    [SD_GGUF_UINT16] = 2, [SD_GGUF_INT16] = 2,
    [SD_GGUF_UINT32] = 4, [SD_GGUF_INT32] = 4,   [SD_GGUF_FLOAT32] = 4, [SD_GGUF_BOOL] = 1,
    [SD_GGUF_STRING] = 0, [SD_GGUF_ARRAY] = 0,   [SD_GGUF_UINT64] = 8, [SD_GGUF_INT64] = 8,
    [SD_GGUF_FLOAT64] = 8,
};

/* Smallest encoding of one element: a string is at least its u64 length, a
 * nested array at least its u32 type and u64 count. */
static uint64_t min_elem_size(enum sd_gguf_type t) {
    if (t == SD_GGUF_STRING) return 8;
    if (t == SD_GGUF_ARRAY) return 12;
    return k_scalar_size[t];
}

const char *sd_gguf_type_name(enum sd_gguf_type t) {
    static const char *const names[SD_GGUF_TYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)t < SD_GGUF_TYPE_COUNT ? names[t] : "?";
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (uint16_t)p[1] << 8); }
static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* ------------------------------------------------------------ cursor */

struct rd {
    const uint8_t *p;  /* [size] */
    size_t size;
    size_t pos;
    struct sd_err *err;
    char ctx[160];     /* what is being parsed, for messages: "header", "key 'general.name'" */
};

static bool is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

/* Take n bytes at the cursor, or fail naming what was wanted. n is a u64
 * because it often comes straight from the file (a string length of 2^63). */
static int rd_take(struct rd *r, uint64_t n, const char *what, size_t *off) {
    size_t left = r->size - r->pos;
    *off = r->pos; /* defined on failure too, which keeps the compiler's flow analysis simple */
    if (n > left) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT,
                          "%s: truncated: %s needs %" PRIu64 " bytes at offset %zu but the file ends at %zu",
                          r->ctx, what, n, r->pos, r->size);
    }
    r->pos += (size_t)n;
    return SDNPU_OK;
}

static int rd_u32(struct rd *r, const char *what, uint32_t *v) {
    size_t off;
    int rc = rd_take(r, 4, what, &off);
    if (rc == SDNPU_OK) *v = le32(r->p + off);
    return rc;
}

static int rd_u64(struct rd *r, const char *what, uint64_t *v) {
    size_t off;
    int rc = rd_take(r, 8, what, &off);
    if (rc == SDNPU_OK) *v = le64(r->p + off);
    return rc;
}

/* A GGUF string: *off is the file offset of its bytes. */
static int rd_str(struct rd *r, const char *what, size_t *off, uint64_t *len) {
    int rc = rd_u64(r, what, len);
    if (rc) return rc;
    return rd_take(r, *len, what, off);
}

/* Keys and tensor names become C strings, so they must be non-empty and free
 * of NUL bytes (a name with a NUL would silently compare equal to its prefix). */
static int rd_name(struct rd *r, const char *what, char **out) {
    size_t off;
    uint64_t len;
    int rc = rd_str(r, what, &off, &len);
    if (rc) return rc;
    if (len == 0) return sd_err_set(r->err, SDNPU_ERR_FORMAT, "%s: empty %s at offset %zu", r->ctx, what, off);
    const void *nul = memchr(r->p + off, 0, (size_t)len);
    if (nul) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT, "%s: %s '%.*s' contains a NUL byte at position %zu", r->ctx, what,
                          (int)SD_MIN(len, 64), (const char *)(r->p + off),
                          (size_t)((const uint8_t *)nul - (r->p + off)));
    }
    *out = sd_strndup((const char *)(r->p + off), (size_t)len);
    if (!*out) return sd_err_set(r->err, SDNPU_ERR_OOM, "%s: out of memory copying a %" PRIu64 "-byte name", r->ctx, len);
    return SDNPU_OK;
}

/* ------------------------------------------------------------ hashing */

static uint64_t hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static int64_t *hash_new(int64_t n, size_t *cap) {
    size_t c = 16;
    while (c < (uint64_t)n * 2) c *= 2; /* n is bounded by the file size, so this cannot overflow */
    int64_t *h = sd_malloc(c * sizeof *h);
    if (h) memset(h, 0xff, c * sizeof *h); /* all -1 */
    *cap = c;
    return h;
}

/* Index of the slot holding name, or of the empty slot where it would go. */
static size_t hash_slot(const int64_t *h, size_t cap, const char *name, const char *(*name_of)(const void *, int64_t),
                        const void *ctx) {
    size_t i = (size_t)hash_str(name) & (cap - 1);
    while (h[i] >= 0 && strcmp(name_of(ctx, h[i]), name) != 0) i = (i + 1) & (cap - 1);
    return i;
}

static const char *kv_name_of(const void *g, int64_t i) { return ((const struct sd_gguf *)g)->kv[i].key; }
static const char *t_name_of(const void *g, int64_t i) { return ((const struct sd_gguf *)g)->tensors[i].name; }

/* ------------------------------------------------------------ values */

/* Bool values must be 0 or 1: anything else means the parser is out of step
 * with the writer, and accepting it would hide that. */
static int check_bools(struct rd *r, size_t off, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        uint8_t b = r->p[off + i];
        if (b > 1) {
            return sd_err_set(r->err, SDNPU_ERR_FORMAT, "%s: bool element %" PRIu64 " has value %u at offset %zu (must be 0 or 1)",
                              r->ctx, i, b, off + (size_t)i);
        }
    }
    return SDNPU_OK;
}

static int rd_elem_type(struct rd *r, const char *what, enum sd_gguf_type *t) {
    uint32_t v;
    int rc = rd_u32(r, what, &v);
    if (rc) return rc;
    if (v >= SD_GGUF_TYPE_COUNT) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT, "%s: unknown %s %" PRIu32 " at offset %zu (valid: 0..%d)", r->ctx, what,
                          v, r->pos - 4, SD_GGUF_TYPE_COUNT - 1);
    }
    *t = (enum sd_gguf_type)v;
    return SDNPU_OK;
}

/* An array's count, checked against the bytes left before anything is
 * allocated or looped over: count * (smallest element) must fit. */
static int rd_count(struct rd *r, enum sd_gguf_type elem, int depth, uint64_t *n) {
    int rc = rd_u64(r, "array count", n);
    if (rc) return rc;
    uint64_t min = min_elem_size(elem);
    uint64_t left = r->size - r->pos;
    if (*n > left / min) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT,
                          "%s: array%s of %" PRIu64 " %s elements at offset %zu needs at least %" PRIu64
                          " bytes per element but only %" PRIu64 " bytes are left in the file",
                          r->ctx, depth > 0 ? " (nested)" : "", *n, sd_gguf_type_name(elem), r->pos - 8, min, left);
    }
    return SDNPU_OK;
}

/* Validate and step over one array body (element type, count, elements)
 * that sits inside another array. */
static int skip_array(struct rd *r, int depth) {
    if (depth > GGUF_MAX_NESTING) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT, "%s: arrays nested deeper than %d levels at offset %zu", r->ctx,
                          GGUF_MAX_NESTING, r->pos);
    }
    enum sd_gguf_type elem;
    uint64_t n;
    size_t off;
    int rc = rd_elem_type(r, "nested array element type", &elem);
    if (!rc) rc = rd_count(r, elem, depth, &n);
    if (rc) return rc;
    if (elem == SD_GGUF_STRING) {
        for (uint64_t i = 0; i < n && !rc; i++) {
            uint64_t len;
            rc = rd_str(r, "nested array string", &off, &len);
        }
    } else if (elem == SD_GGUF_ARRAY) {
        for (uint64_t i = 0; i < n && !rc; i++) rc = skip_array(r, depth + 1);
    } else {
        rc = rd_take(r, n * k_scalar_size[elem], "nested array elements", &off); /* n was bounded by rd_count */
        if (!rc && elem == SD_GGUF_BOOL) rc = check_bools(r, off, n);
    }
    return rc;
}

static int parse_value(struct rd *r, struct gguf_kv *kv) {
    int rc;
    if (kv->type == SD_GGUF_STRING) {
        rc = rd_str(r, "string value", &kv->val_off, &kv->n);
        if (!rc) kv->val_size = (size_t)kv->n;
        return rc;
    }
    if (kv->type != SD_GGUF_ARRAY) {
        rc = rd_take(r, k_scalar_size[kv->type], "value", &kv->val_off);
        kv->val_size = k_scalar_size[kv->type];
        if (!rc && kv->type == SD_GGUF_BOOL) rc = check_bools(r, kv->val_off, 1);
        return rc;
    }

    rc = rd_elem_type(r, "array element type", &kv->elem_type);
    if (!rc) rc = rd_count(r, kv->elem_type, 0, &kv->n);
    if (rc) return rc;
    kv->val_off = r->pos;
    if (kv->elem_type == SD_GGUF_STRING) {
        /* Index every string now so element i is one load away: the
         * vocabulary (262144 strings) is read by index in a hot loop. */
        if (kv->n > 0) {
            kv->str_off = sd_malloc((size_t)kv->n * sizeof *kv->str_off); /* n <= left / 8: no overflow */
            if (!kv->str_off) {
                return sd_err_set(r->err, SDNPU_ERR_OOM, "%s: out of memory indexing %" PRIu64 " strings", r->ctx,
                                  kv->n);
            }
        }
        for (uint64_t i = 0; i < kv->n; i++) {
            size_t off;
            uint64_t len;
            if ((rc = rd_str(r, "array string", &off, &len))) return rc;
            kv->str_off[i] = off;
        }
    } else if (kv->elem_type == SD_GGUF_ARRAY) {
        for (uint64_t i = 0; i < kv->n; i++) {
            if ((rc = skip_array(r, 1))) return rc;
        }
    } else {
        size_t off;
        rc = rd_take(r, kv->n * k_scalar_size[kv->elem_type], "array elements", &off);
        if (!rc && kv->elem_type == SD_GGUF_BOOL) rc = check_bools(r, off, kv->n);
        if (rc) return rc;
    }
    kv->val_size = r->pos - kv->val_off;
    return SDNPU_OK;
}

/* ------------------------------------------------------------ integers */

/* The value of an integer key as sign + magnitude, so any integer type can
 * be range-checked against any other. false if the key is not an integer. */
static bool kv_int(const struct sd_gguf *g, const struct gguf_kv *kv, bool *neg, uint64_t *mag, int64_t *sval) {
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

/* ------------------------------------------------------------ parse */

static int parse(struct sd_gguf *g, struct sd_err *err) {
    struct rd r = {.p = g->base, .size = g->size, .pos = 0, .err = err};
    int rc;
    snprintf(r.ctx, sizeof r.ctx, "header");

    if (g->size == 0) return sd_err_set(err, SDNPU_ERR_FORMAT, "file is empty (0 bytes); a GGUF header needs %d",
                                        GGUF_HEADER_SIZE);
    if (g->size < 4) {
        return sd_err_set(err, SDNPU_ERR_FORMAT, "header: truncated: file is %zu bytes, a GGUF header needs %d",
                          g->size, GGUF_HEADER_SIZE);
    }
    if (memcmp(g->base, "GGUF", 4) != 0) {
        const uint8_t *m = g->base;
        return sd_err_set(err, SDNPU_ERR_FORMAT,
                          "header: bad magic %02x %02x %02x %02x, expected 47 47 55 46 (\"GGUF\"): not a GGUF file",
                          m[0], m[1], m[2], m[3]);
    }
    r.pos = 4;
    if ((rc = rd_u32(&r, "version", &g->version))) return rc;
    if (g->version == 1) {
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED,
                          "header: GGUF version 1 is not supported (v1 used 32-bit counts); re-convert the model "
                          "with a current llama.cpp to get version 3");
    }
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffffu) == 0 && (g->version >> 16) != 0) {
            return sd_err_set(err, SDNPU_ERR_UNSUPPORTED,
                              "header: version field 0x%08" PRIx32 " looks like a big-endian GGUF file, which is not "
                              "supported",
                              g->version);
        }
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "header: GGUF version %" PRIu32 " is not supported (only 2 and 3)",
                          g->version);
    }
    uint64_t n_tensors, n_kv;
    if ((rc = rd_u64(&r, "n_tensors", &n_tensors))) return rc;
    if ((rc = rd_u64(&r, "n_kv", &n_kv))) return rc;
    uint64_t left = g->size - r.pos;
    if (n_kv > left / GGUF_MIN_KV_SIZE) {
        return sd_err_set(err, SDNPU_ERR_FORMAT,
                          "header: n_kv %" PRIu64 " cannot fit in the %" PRIu64 " bytes after the header (each "
                          "key/value takes at least %d)",
                          n_kv, left, GGUF_MIN_KV_SIZE);
    }
    if (n_tensors > left / GGUF_MIN_TENSOR_INFO_SIZE) {
        return sd_err_set(err, SDNPU_ERR_FORMAT,
                          "header: n_tensors %" PRIu64 " cannot fit in the %" PRIu64 " bytes after the header (each "
                          "tensor info takes at least %d)",
                          n_tensors, left, GGUF_MIN_TENSOR_INFO_SIZE);
    }

    /* ---- key/values */
    g->kv = sd_calloc((size_t)n_kv, sizeof *g->kv);
    g->kv_hash = hash_new((int64_t)n_kv, &g->kv_hash_cap);
    if (!g->kv || !g->kv_hash) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for %" PRIu64 " key/values", n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        struct gguf_kv *kv = &g->kv[i];
        snprintf(r.ctx, sizeof r.ctx, "key/value %" PRIu64, i);
        if ((rc = rd_name(&r, "key name", &kv->key))) return rc;
        g->n_kv = (int64_t)i + 1; /* the key is owned by g now, whatever happens next */
        snprintf(r.ctx, sizeof r.ctx, "key '%.100s'", kv->key);
        size_t slot = hash_slot(g->kv_hash, g->kv_hash_cap, kv->key, kv_name_of, g);
        if (g->kv_hash[slot] >= 0) {
            return sd_err_set(err, SDNPU_ERR_FORMAT, "duplicate key '%.100s' (key/values %" PRId64 " and %" PRIu64 ")",
                              kv->key, g->kv_hash[slot], i);
        }
        g->kv_hash[slot] = (int64_t)i;
        if ((rc = rd_elem_type(&r, "value type", &kv->type))) return rc;
        if ((rc = parse_value(&r, kv))) return rc;
    }

    /* ---- alignment (needed to check tensor offsets) */
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = sd_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        bool neg;
        uint64_t a;
        int64_t s;
        if (!kv_int(g, &g->kv[ai], &neg, &a, &s)) {
            return sd_err_set(err, SDNPU_ERR_FORMAT, "key 'general.alignment' has type %s, expected uint32",
                              sd_gguf_type_name(g->kv[ai].type));
        }
        if (neg || !is_pow2(a) || a > UINT32_MAX) {
            return sd_err_set(err, SDNPU_ERR_FORMAT,
                              "key 'general.alignment' = %s%" PRIu64 " is not a nonzero power of two (32-bit)",
                              neg ? "-" : "", a);
        }
        g->alignment = (size_t)a;
    }

    /* ---- tensor infos */
    g->tensors = sd_calloc((size_t)n_tensors, sizeof *g->tensors);
    g->t_hash = hash_new((int64_t)n_tensors, &g->t_hash_cap);
    if (!g->tensors || !g->t_hash) {
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for %" PRIu64 " tensor infos", n_tensors);
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        struct sd_gguf_tensor *t = &g->tensors[i];
        char *name = NULL;
        snprintf(r.ctx, sizeof r.ctx, "tensor %" PRIu64, i);
        if ((rc = rd_name(&r, "tensor name", &name))) return rc;
        t->name = name;
        g->n_tensors = (int64_t)i + 1;
        snprintf(r.ctx, sizeof r.ctx, "tensor %" PRIu64 " '%.100s'", i, name);
        size_t slot = hash_slot(g->t_hash, g->t_hash_cap, name, t_name_of, g);
        if (g->t_hash[slot] >= 0) {
            return sd_err_set(err, SDNPU_ERR_FORMAT, "duplicate tensor name '%.100s' (tensors %" PRId64 " and %" PRIu64 ")",
                              name, g->t_hash[slot], i);
        }
        g->t_hash[slot] = (int64_t)i;

        if ((rc = rd_u32(&r, "n_dims", &t->n_dims))) return rc;
        if (t->n_dims == 0 || t->n_dims > SD_GGUF_MAX_DIMS) {
            return sd_err_set(err, SDNPU_ERR_FORMAT, "%s: n_dims = %" PRIu32 ", must be 1..%d", r.ctx, t->n_dims,
                              SD_GGUF_MAX_DIMS);
        }
        uint64_t nelem = 1;
        for (uint32_t d = 0; d < SD_GGUF_MAX_DIMS; d++) {
            uint64_t ne = 1;
            if (d < t->n_dims && (rc = rd_u64(&r, "dimension", &ne))) return rc;
            /* The spec stores dims as u64, ggml as int64: anything past
             * INT64_MAX reads as negative and is refused with zero. */
            if ((int64_t)ne <= 0) {
                return sd_err_set(err, SDNPU_ERR_FORMAT, "%s: ne[%" PRIu32 "] = %" PRId64 ", must be positive", r.ctx,
                                  d, (int64_t)ne);
            }
            t->ne[d] = (int64_t)ne;
            if (sd_mul_ovf(nelem, ne, &nelem) || nelem > INT64_MAX) {
                return sd_err_set(err, SDNPU_ERR_FORMAT,
                                  "%s: element count %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64
                                  " overflows int64",
                                  r.ctx, t->ne[0], d >= 1 ? t->ne[1] : 1, d >= 2 ? t->ne[2] : 1,
                                  d >= 3 ? t->ne[3] : (int64_t)1);
            }
        }
        uint32_t type;
        if ((rc = rd_u32(&r, "type", &type))) return rc;
        const struct sd_type_traits *tt = sd_type_get((int)SD_MIN(type, (uint32_t)INT32_MAX));
        if (!tt) {
            return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "%s: unknown tensor type id %" PRIu32, r.ctx, type);
        }
        t->type = (enum sd_type)type;
        if (t->ne[0] % tt->blck_size != 0) {
            return sd_err_set(err, SDNPU_ERR_FORMAT,
                              "%s: ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64, r.ctx, t->ne[0],
                              tt->name, tt->blck_size);
        }
        uint64_t nbytes;
        if (sd_mul_ovf(nelem / (uint64_t)tt->blck_size, tt->type_size, &nbytes) || nbytes > SIZE_MAX) {
            return sd_err_set(err, SDNPU_ERR_FORMAT, "%s: byte size of %" PRIu64 " %s elements overflows", r.ctx, nelem,
                              tt->name);
        }
        t->nbytes = (size_t)nbytes;
        if ((rc = rd_u64(&r, "offset", &t->offset))) return rc;
        if (t->offset % g->alignment != 0) {
            return sd_err_set(err, SDNPU_ERR_FORMAT, "%s: data offset %" PRIu64 " is not a multiple of the alignment %zu",
                              r.ctx, t->offset, g->alignment);
        }
    }

    /* ---- data section */
    uint64_t ds;
    if (sd_add_ovf(r.pos, g->alignment - 1, &ds)) {
        return sd_err_set(err, SDNPU_ERR_FORMAT, "data section start overflows (alignment %zu)", g->alignment);
    }
    ds -= ds % g->alignment;
    g->data_start = ds > g->size ? g->size : (size_t)ds;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct sd_gguf_tensor *t = &g->tensors[i];
        uint64_t begin, end;
        if (sd_add_ovf(ds, t->offset, &begin) || sd_add_ovf(begin, t->nbytes, &end)) {
            return sd_err_set(err, SDNPU_ERR_FORMAT,
                              "tensor '%.100s': data offset %" PRIu64 " + size %zu overflows", t->name, t->offset,
                              t->nbytes);
        }
        if (end > g->size) {
            return sd_err_set(err, SDNPU_ERR_FORMAT,
                              "tensor '%.100s': data [%" PRIu64 ", %" PRIu64 ") extends beyond file end %zu", t->name,
                              begin, end, g->size);
        }
        t->data = g->base + begin;
    }
    return SDNPU_OK;
}

/* ------------------------------------------------------------ open/close */

static void destroy(struct sd_gguf *g) {
    if (!g) return;
    if (g->kv) {
        for (int64_t i = 0; i < g->n_kv; i++) {
            sd_free(g->kv[i].key);
            sd_free(g->kv[i].str_off);
        }
        sd_free(g->kv);
    }
    if (g->tensors) {
        for (int64_t i = 0; i < g->n_tensors; i++) sd_free((void *)g->tensors[i].name);
        sd_free(g->tensors);
    }
    sd_free(g->kv_hash);
    sd_free(g->t_hash);
    if (g->map) munmap(g->map, g->size);
    sd_aligned_free(g->heap);
    sd_free(g);
}

void sd_gguf_close(struct sd_gguf *g) { destroy(g); }

static int finish_open(struct sd_gguf *g, struct sd_gguf **out, struct sd_err *err) {
    int rc = parse(g, err);
    if (rc) {
        destroy(g);
        return rc;
    }
    *out = g;
    return SDNPU_OK;
}

int sd_gguf_open_buffer(const void *data, size_t size, struct sd_gguf **out, struct sd_err *err) {
    if (!out) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "sd_gguf_open_buffer: out is NULL");
    *out = NULL;
    if (!data && size > 0) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "sd_gguf_open_buffer: data is NULL");
    struct sd_gguf *g = sd_calloc(1, sizeof *g);
    if (!g) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a GGUF handle");
    g->base = data;
    g->size = size;
    return finish_open(g, out, err);
}

static int errno_msg(struct sd_err *err, int status, const char *path, const char *what) {
    char buf[128];
    int e = errno;
    if (strerror_r(e, buf, sizeof buf) != 0) snprintf(buf, sizeof buf, "errno %d", e);
    return sd_err_set(err, status, "'%s': %s: %s", path, what, buf);
}

int sd_gguf_open(const char *path, bool use_mmap, struct sd_gguf **out, struct sd_err *err) {
    if (!out) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "sd_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "sd_gguf_open: path is NULL");

    int rc;
    struct sd_gguf *g = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno_msg(err, errno == ENOENT ? SDNPU_ERR_NOT_FOUND : SDNPU_ERR_IO, path, "cannot open");
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = errno_msg(err, SDNPU_ERR_IO, path, "cannot stat");
        goto fail_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = sd_err_set(err, SDNPU_ERR_IO, "'%s': not a regular file", path);
        goto fail_fd;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        rc = sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "'%s': file of %lld bytes is larger than the address space", path,
                        (long long)st.st_size);
        goto fail_fd;
    }
    g = sd_calloc(1, sizeof *g);
    if (!g) {
        rc = sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a GGUF handle");
        goto fail_fd;
    }
    g->size = (size_t)st.st_size;
    if (g->size == 0) {
        /* mmap cannot map zero bytes; the parser reports the empty file. */
    } else if (use_mmap) {
        void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = errno_msg(err, SDNPU_ERR_IO, path, "mmap failed");
            goto fail_g;
        }
        g->map = m;
        g->base = m;
    } else {
        /* 64-byte aligned, so tensor data is as aligned as the file asks
         * (up to 64) just as it is in a page-aligned mapping. */
        g->heap = sd_aligned_alloc(g->size);
        if (!g->heap) {
            rc = sd_err_set(err, SDNPU_ERR_OOM, "'%s': out of memory reading %zu bytes", path, g->size);
            goto fail_g;
        }
        g->base = g->heap;
        size_t got = 0;
        while (got < g->size) {
            ssize_t n = read(fd, (uint8_t *)g->heap + got, SD_MIN(g->size - got, (size_t)1 << 30));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                rc = errno_msg(err, SDNPU_ERR_IO, path, "read failed");
                goto fail_g;
            }
            if (n == 0) {
                rc = sd_err_set(err, SDNPU_ERR_IO, "'%s': file shrank while reading (%zu of %zu bytes)", path, got,
                                g->size);
                goto fail_g;
            }
            got += (size_t)n;
        }
    }
    close(fd);
    rc = finish_open(g, out, err); /* frees g on failure */
    if (rc) sd_err_prefix(err, "'%s'", path);
    return rc;

fail_g:
    destroy(g);
fail_fd:
    close(fd);
    return rc;
}

uint32_t sd_gguf_version(const struct sd_gguf *g) { return g ? g->version : 0; }
size_t sd_gguf_alignment(const struct sd_gguf *g) { return g ? g->alignment : 0; }
size_t sd_gguf_file_size(const struct sd_gguf *g) { return g ? g->size : 0; }
size_t sd_gguf_data_offset(const struct sd_gguf *g) { return g ? g->data_start : 0; }
const void *sd_gguf_bytes(const struct sd_gguf *g) { return g ? g->base : NULL; }
bool sd_gguf_is_mapped(const struct sd_gguf *g) { return g && g->map; }

/* ------------------------------------------------------------ metadata */

int64_t sd_gguf_n_kv(const struct sd_gguf *g) { return g ? g->n_kv : 0; }

int64_t sd_gguf_find_key(const struct sd_gguf *g, const char *key) {
    if (!g || !key || !g->kv_hash) return -1;
    return g->kv_hash[hash_slot(g->kv_hash, g->kv_hash_cap, key, kv_name_of, g)];
}

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
    if (!kv_int(g, &g->kv[i], neg, mag, sval)) {
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
            size_t esz = k_scalar_size[kv->elem_type];
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

/* ------------------------------------------------------------ tensors */

int64_t sd_gguf_n_tensors(const struct sd_gguf *g) { return g ? g->n_tensors : 0; }

const struct sd_gguf_tensor *sd_gguf_tensor(const struct sd_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct sd_gguf_tensor *sd_gguf_find_tensor(const struct sd_gguf *g, const char *name) {
    if (!g || !name || !g->t_hash) return NULL;
    int64_t i = g->t_hash[hash_slot(g->t_hash, g->t_hash_cap, name, t_name_of, g)];
    return i >= 0 ? &g->tensors[i] : NULL;
}
