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
 *
 * This file opens and parses; meta.c reads the key/values it indexed.
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

#include "gguf/internal.h"

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

/* Bytes per scalar value; 0 for the variable-size types (gguf/internal.h). */
const uint8_t sd_gguf_scalar_size[SD_GGUF_TYPE_COUNT] = {
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
    return sd_gguf_scalar_size[t];
}

const char *sd_gguf_type_name(enum sd_gguf_type t) {
    static const char *const names[SD_GGUF_TYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)t < SD_GGUF_TYPE_COUNT ? names[t] : "?";
}
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
        rc = rd_take(r, n * sd_gguf_scalar_size[elem], "nested array elements", &off); /* n was bounded by rd_count */
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
        rc = rd_take(r, sd_gguf_scalar_size[kv->type], "value", &kv->val_off);
        kv->val_size = sd_gguf_scalar_size[kv->type];
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
        rc = rd_take(r, kv->n * sd_gguf_scalar_size[kv->elem_type], "array elements", &off);
        if (!rc && kv->elem_type == SD_GGUF_BOOL) rc = check_bools(r, off, kv->n);
        if (rc) return rc;
    }
    kv->val_size = r->pos - kv->val_off;
    return SDNPU_OK;
}

/* ------------------------------------------------------------ parse
 *
 * One forward pass in the file's own order: the header, the key/values, the
 * alignment they may set (tensor offsets are checked against it), the
 * tensor infos, and last the data section, which every tensor must lie in.
 * Each step returns at its first error; what it allocated before is owned by
 * g, which destroy() frees. */

/* The magic and the version: only little-endian version 2 and 3 files are
 * read, and the message says what else the file looks like. */
static int parse_magic_version(struct sd_gguf *g, struct rd *r) {
    struct sd_err *err = r->err;
    if (g->size == 0)
        return sd_err_set(err, SDNPU_ERR_FORMAT, "file is empty (0 bytes); a GGUF header needs %d",
                          GGUF_HEADER_SIZE);
    if (g->size < 4) {
        return sd_err_set(err, SDNPU_ERR_FORMAT,
                          "header: truncated: file is %zu bytes, a GGUF header needs %d", g->size,
                          GGUF_HEADER_SIZE);
    }
    if (memcmp(g->base, "GGUF", 4) != 0) {
        const uint8_t *m = g->base;
        return sd_err_set(
            err, SDNPU_ERR_FORMAT,
            "header: bad magic %02x %02x %02x %02x, expected 47 47 55 46 (\"GGUF\"): not a GGUF file", m[0],
            m[1], m[2], m[3]);
    }
    r->pos = 4;
    int rc = rd_u32(r, "version", &g->version);
    if (rc) return rc;
    if (g->version == 1) {
        return sd_err_set(
            err, SDNPU_ERR_UNSUPPORTED,
            "header: GGUF version 1 is not supported (v1 used 32-bit counts); re-convert the model "
            "with a current llama.cpp to get version 3");
    }
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffffu) == 0 && (g->version >> 16) != 0) {
            return sd_err_set(err, SDNPU_ERR_UNSUPPORTED,
                              "header: version field 0x%08" PRIx32
                              " looks like a big-endian GGUF file, which is not supported",
                              g->version);
        }
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED,
                          "header: GGUF version %" PRIu32 " is not supported (only 2 and 3)", g->version);
    }
    return SDNPU_OK;
}

/* The header: magic, version and the two counts, each bounded by the bytes
 * after the header so that no allocation is sized by a number the file
 * cannot back. */
static int parse_header(struct sd_gguf *g, struct rd *r, uint64_t *n_tensors, uint64_t *n_kv) {
    snprintf(r->ctx, sizeof r->ctx, "header");
    int rc = parse_magic_version(g, r);
    if (!rc) rc = rd_u64(r, "n_tensors", n_tensors);
    if (!rc) rc = rd_u64(r, "n_kv", n_kv);
    if (rc) return rc;
    uint64_t left = g->size - r->pos;
    if (*n_kv > left / GGUF_MIN_KV_SIZE) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT,
                          "header: n_kv %" PRIu64 " cannot fit in the %" PRIu64
                          " bytes after the header (each key/value takes at least %d)",
                          *n_kv, left, GGUF_MIN_KV_SIZE);
    }
    if (*n_tensors > left / GGUF_MIN_TENSOR_INFO_SIZE) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT,
                          "header: n_tensors %" PRIu64 " cannot fit in the %" PRIu64
                          " bytes after the header (each tensor info takes at least %d)",
                          *n_tensors, left, GGUF_MIN_TENSOR_INFO_SIZE);
    }
    return SDNPU_OK;
}

/* Key/value i: its name (unique), its type and its value. */
static int parse_kv(struct sd_gguf *g, struct rd *r, uint64_t i) {
    struct gguf_kv *kv = &g->kv[i];
    snprintf(r->ctx, sizeof r->ctx, "key/value %" PRIu64, i);
    int rc = rd_name(r, "key name", &kv->key);
    if (rc) return rc;
    g->n_kv = (int64_t)i + 1; /* the key is owned by g now, whatever happens next */
    snprintf(r->ctx, sizeof r->ctx, "key '%.100s'", kv->key);
    size_t slot = hash_slot(g->kv_hash, g->kv_hash_cap, kv->key, kv_name_of, g);
    if (g->kv_hash[slot] >= 0) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT,
                          "duplicate key '%.100s' (key/values %" PRId64 " and %" PRIu64 ")", kv->key,
                          g->kv_hash[slot], i);
    }
    g->kv_hash[slot] = (int64_t)i;
    if ((rc = rd_elem_type(r, "value type", &kv->type))) return rc;
    return parse_value(r, kv);
}

static int parse_kvs(struct sd_gguf *g, struct rd *r, uint64_t n_kv) {
    g->kv = sd_calloc((size_t)n_kv, sizeof *g->kv);
    g->kv_hash = hash_new((int64_t)n_kv, &g->kv_hash_cap);
    if (!g->kv || !g->kv_hash)
        return sd_err_set(r->err, SDNPU_ERR_OOM, "out of memory for %" PRIu64 " key/values", n_kv);
    int rc = SDNPU_OK;
    for (uint64_t i = 0; i < n_kv && !rc; i++)
        rc = parse_kv(g, r, i);
    return rc;
}

/* general.alignment, needed before the tensor infos to check their offsets:
 * a nonzero 32-bit power of two, GGUF_DEFAULT_ALIGNMENT when absent. */
static int parse_alignment(struct sd_gguf *g, struct sd_err *err) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = sd_gguf_find_key(g, "general.alignment");
    if (ai < 0) return SDNPU_OK;
    bool neg;
    uint64_t a;
    int64_t s;
    if (!sd_gguf_kv_int(g, &g->kv[ai], &neg, &a, &s)) {
        return sd_err_set(err, SDNPU_ERR_FORMAT, "key 'general.alignment' has type %s, expected uint32",
                          sd_gguf_type_name(g->kv[ai].type));
    }
    if (neg || !is_pow2(a) || a > UINT32_MAX) {
        return sd_err_set(err, SDNPU_ERR_FORMAT,
                          "key 'general.alignment' = %s%" PRIu64 " is not a nonzero power of two (32-bit)",
                          neg ? "-" : "", a);
    }
    g->alignment = (size_t)a;
    return SDNPU_OK;
}

/* A tensor's n_dims and dimensions; *nelem is their product, checked to fit
 * int64 as ggml counts elements. */
static int parse_dims(struct rd *r, struct sd_gguf_tensor *t, uint64_t *nelem) {
    int rc = rd_u32(r, "n_dims", &t->n_dims);
    if (rc) return rc;
    if (t->n_dims == 0 || t->n_dims > SD_GGUF_MAX_DIMS) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT, "%s: n_dims = %" PRIu32 ", must be 1..%d", r->ctx,
                          t->n_dims, SD_GGUF_MAX_DIMS);
    }
    *nelem = 1;
    for (uint32_t d = 0; d < SD_GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && (rc = rd_u64(r, "dimension", &ne))) return rc;
        /* The spec stores dims as u64, ggml as int64: anything past
         * INT64_MAX reads as negative and is refused with zero. */
        if ((int64_t)ne <= 0) {
            return sd_err_set(r->err, SDNPU_ERR_FORMAT, "%s: ne[%" PRIu32 "] = %" PRId64 ", must be positive",
                              r->ctx, d, (int64_t)ne);
        }
        t->ne[d] = (int64_t)ne;
        if (sd_mul_ovf(*nelem, ne, nelem) || *nelem > INT64_MAX) {
            return sd_err_set(r->err, SDNPU_ERR_FORMAT,
                              "%s: element count %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64
                              " overflows int64",
                              r->ctx, t->ne[0], d >= 1 ? t->ne[1] : 1, d >= 2 ? t->ne[2] : 1,
                              d >= 3 ? t->ne[3] : (int64_t)1);
        }
    }
    return SDNPU_OK;
}

/* A tensor's element type, which must be one we know, whose blocks must
 * tile its rows, and the byte size of its nelem elements. */
static int parse_type_size(struct rd *r, struct sd_gguf_tensor *t, uint64_t nelem) {
    uint32_t type;
    int rc = rd_u32(r, "type", &type);
    if (rc) return rc;
    const struct sd_type_traits *tt = sd_type_get((int)SD_MIN(type, (uint32_t)INT32_MAX));
    if (!tt)
        return sd_err_set(r->err, SDNPU_ERR_UNSUPPORTED, "%s: unknown tensor type id %" PRIu32, r->ctx, type);
    t->type = (enum sd_type)type;
    if (t->ne[0] % tt->blck_size != 0) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT,
                          "%s: ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64, r->ctx,
                          t->ne[0], tt->name, tt->blck_size);
    }
    uint64_t nbytes;
    if (sd_mul_ovf(nelem / (uint64_t)tt->blck_size, tt->type_size, &nbytes) || nbytes > SIZE_MAX) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT, "%s: byte size of %" PRIu64 " %s elements overflows",
                          r->ctx, nelem, tt->name);
    }
    t->nbytes = (size_t)nbytes;
    return SDNPU_OK;
}

/* Tensor info i: its name (unique), shape, type and aligned data offset. */
static int parse_tensor_info(struct sd_gguf *g, struct rd *r, uint64_t i) {
    struct sd_gguf_tensor *t = &g->tensors[i];
    char *name = NULL;
    snprintf(r->ctx, sizeof r->ctx, "tensor %" PRIu64, i);
    int rc = rd_name(r, "tensor name", &name);
    if (rc) return rc;
    t->name = name;
    g->n_tensors = (int64_t)i + 1;
    snprintf(r->ctx, sizeof r->ctx, "tensor %" PRIu64 " '%.100s'", i, name);
    size_t slot = hash_slot(g->t_hash, g->t_hash_cap, name, t_name_of, g);
    if (g->t_hash[slot] >= 0) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT,
                          "duplicate tensor name '%.100s' (tensors %" PRId64 " and %" PRIu64 ")", name,
                          g->t_hash[slot], i);
    }
    g->t_hash[slot] = (int64_t)i;
    uint64_t nelem = 1;
    if ((rc = parse_dims(r, t, &nelem)) || (rc = parse_type_size(r, t, nelem))) return rc;
    if ((rc = rd_u64(r, "offset", &t->offset))) return rc;
    if (t->offset % g->alignment != 0) {
        return sd_err_set(r->err, SDNPU_ERR_FORMAT,
                          "%s: data offset %" PRIu64 " is not a multiple of the alignment %zu", r->ctx,
                          t->offset, g->alignment);
    }
    return SDNPU_OK;
}

static int parse_tensor_infos(struct sd_gguf *g, struct rd *r, uint64_t n_tensors) {
    g->tensors = sd_calloc((size_t)n_tensors, sizeof *g->tensors);
    g->t_hash = hash_new((int64_t)n_tensors, &g->t_hash_cap);
    if (!g->tensors || !g->t_hash) {
        return sd_err_set(r->err, SDNPU_ERR_OOM, "out of memory for %" PRIu64 " tensor infos", n_tensors);
    }
    int rc = SDNPU_OK;
    for (uint64_t i = 0; i < n_tensors && !rc; i++)
        rc = parse_tensor_info(g, r, i);
    return rc;
}

/* The data section starts at the first aligned offset after the tensor
 * infos (end); every tensor's bytes must lie inside the file. */
static int place_data(struct sd_gguf *g, size_t end, struct sd_err *err) {
    uint64_t ds;
    if (sd_add_ovf(end, g->alignment - 1, &ds)) {
        return sd_err_set(err, SDNPU_ERR_FORMAT, "data section start overflows (alignment %zu)",
                          g->alignment);
    }
    ds -= ds % g->alignment;
    g->data_start = ds > g->size ? g->size : (size_t)ds;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct sd_gguf_tensor *t = &g->tensors[i];
        uint64_t begin, end_t;
        if (sd_add_ovf(ds, t->offset, &begin) || sd_add_ovf(begin, t->nbytes, &end_t)) {
            return sd_err_set(err, SDNPU_ERR_FORMAT,
                              "tensor '%.100s': data offset %" PRIu64 " + size %zu overflows", t->name,
                              t->offset, t->nbytes);
        }
        if (end_t > g->size) {
            return sd_err_set(err, SDNPU_ERR_FORMAT,
                              "tensor '%.100s': data [%" PRIu64 ", %" PRIu64 ") extends beyond file end %zu",
                              t->name, begin, end_t, g->size);
        }
        t->data = g->base + begin;
    }
    return SDNPU_OK;
}

static int parse(struct sd_gguf *g, struct sd_err *err) {
    struct rd r = {.p = g->base, .size = g->size, .pos = 0, .err = err};
    uint64_t n_tensors, n_kv;
    int rc = parse_header(g, &r, &n_tensors, &n_kv);
    if (!rc) rc = parse_kvs(g, &r, n_kv);
    if (!rc) rc = parse_alignment(g, err);
    if (!rc) rc = parse_tensor_infos(g, &r, n_tensors);
    if (!rc) rc = place_data(g, r.pos, err);
    return rc;
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

/* The file's bytes as a private read-only mapping (sd_gguf_is_mapped). */
static int map_file(struct sd_gguf *g, int fd, const char *path, struct sd_err *err) {
    void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return errno_msg(err, SDNPU_ERR_IO, path, "mmap failed");
    g->map = m;
    g->base = m;
    return SDNPU_OK;
}

/* Into a heap copy, 64-byte aligned, so tensor data is as aligned as the
 * file asks (up to 64) just as it is in a page-aligned mapping. */
static int read_file(struct sd_gguf *g, int fd, const char *path, struct sd_err *err) {
    g->heap = sd_aligned_alloc(g->size);
    if (!g->heap)
        return sd_err_set(err, SDNPU_ERR_OOM, "'%s': out of memory reading %zu bytes", path, g->size);
    g->base = g->heap;
    size_t got = 0;
    while (got < g->size) {
        ssize_t n = read(fd, (uint8_t *)g->heap + got, SD_MIN(g->size - got, (size_t)1 << 30));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno_msg(err, SDNPU_ERR_IO, path, "read failed");
        if (n == 0) {
            return sd_err_set(err, SDNPU_ERR_IO, "'%s': file shrank while reading (%zu of %zu bytes)", path,
                              got, g->size);
        }
        got += (size_t)n;
    }
    return SDNPU_OK;
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
    /* mmap cannot map zero bytes; the parser reports the empty file. */
    if (g->size > 0) {
        rc = use_mmap ? map_file(g, fd, path, err) : read_file(g, fd, path, err);
        if (rc) goto fail_g;
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

/* ------------------------------------------------------------ look-ups by name */

int64_t sd_gguf_find_key(const struct sd_gguf *g, const char *key) {
    if (!g || !key || !g->kv_hash) return -1;
    return g->kv_hash[hash_slot(g->kv_hash, g->kv_hash_cap, key, kv_name_of, g)];
}


int64_t sd_gguf_n_tensors(const struct sd_gguf *g) { return g ? g->n_tensors : 0; }

const struct sd_gguf_tensor *sd_gguf_tensor(const struct sd_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct sd_gguf_tensor *sd_gguf_find_tensor(const struct sd_gguf *g, const char *name) {
    if (!g || !name || !g->t_hash) return NULL;
    int64_t i = g->t_hash[hash_slot(g->t_hash, g->t_hash_cap, name, t_name_of, g)];
    return i >= 0 ? &g->tensors[i] : NULL;
}
