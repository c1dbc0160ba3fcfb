/* tests/util_gguf_writer.c - build GGUF files in memory, for tests. */
#include "util_gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs/quant.h"

#define SDT_GW_MAX_DIMS 8

/* ------------------------------------------------------------ bytes */

void sdt_buf_put(struct sdt_buf *b, const void *p, size_t n) {
    if (b->oom || n == 0) return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        uint8_t *d = realloc(b->data, cap);
        if (!d) {
            b->oom = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    if (p) memcpy(b->data + b->len, p, n);
    else memset(b->data + b->len, 0, n);
    b->len += n;
}

static void put_le(struct sdt_buf *b, uint64_t v, int n) {
    uint8_t tmp[8];
    for (int i = 0; i < n; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    sdt_buf_put(b, tmp, (size_t)n);
}

void sdt_buf_u8(struct sdt_buf *b, uint8_t v) { put_le(b, v, 1); }
void sdt_buf_u16(struct sdt_buf *b, uint16_t v) { put_le(b, v, 2); }
void sdt_buf_u32(struct sdt_buf *b, uint32_t v) { put_le(b, v, 4); }
void sdt_buf_u64(struct sdt_buf *b, uint64_t v) { put_le(b, v, 8); }

void sdt_buf_f32(struct sdt_buf *b, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    put_le(b, bits, 4);
}

void sdt_buf_f64(struct sdt_buf *b, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    put_le(b, bits, 8);
}

void sdt_buf_strn(struct sdt_buf *b, const char *s, size_t n) {
    sdt_buf_u64(b, n);
    sdt_buf_put(b, s, n);
}

void sdt_buf_str(struct sdt_buf *b, const char *s) { sdt_buf_strn(b, s, strlen(s)); }

/* Bytes per scalar element type; 0 for string and array. */
static size_t scalar_size(enum sd_gguf_type t) {
    switch (t) {
    case SD_GGUF_UINT8: case SD_GGUF_INT8: case SD_GGUF_BOOL: return 1;
    case SD_GGUF_UINT16: case SD_GGUF_INT16: return 2;
    case SD_GGUF_UINT32: case SD_GGUF_INT32: case SD_GGUF_FLOAT32: return 4;
    case SD_GGUF_UINT64: case SD_GGUF_INT64: case SD_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Host-order scalars to little-endian: read each element as bytes of its
 * own width, so this works on either byte order. */
static void put_scalars(struct sdt_buf *b, enum sd_gguf_type elem, const void *elems, size_t n) {
    size_t sz = scalar_size(elem);
    const uint8_t *p = elems;
    for (size_t i = 0; i < n; i++, p += sz) {
        uint64_t v = 0;
        switch (sz) {
        case 1: v = p[0]; break;
        case 2: { uint16_t x; memcpy(&x, p, 2); v = x; break; }
        case 4: { uint32_t x; memcpy(&x, p, 4); v = x; break; }
        case 8: { uint64_t x; memcpy(&x, p, 8); v = x; break; }
        default: return;
        }
        put_le(b, v, (int)sz);
    }
}

void sdt_buf_arr(struct sdt_buf *b, enum sd_gguf_type elem, const void *elems, size_t n) {
    sdt_buf_u32(b, (uint32_t)elem);
    sdt_buf_u64(b, n);
    put_scalars(b, elem, elems, n);
}

void sdt_buf_str_arr(struct sdt_buf *b, const char *const *strs, size_t n) {
    sdt_buf_u32(b, SD_GGUF_STRING);
    sdt_buf_u64(b, n);
    for (size_t i = 0; i < n; i++) sdt_buf_str(b, strs[i]);
}

void sdt_buf_arr_of_arr(struct sdt_buf *b, size_t n) {
    sdt_buf_u32(b, SD_GGUF_ARRAY);
    sdt_buf_u64(b, n);
}

void sdt_buf_free(struct sdt_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

void sdt_patch_u32(void *bytes, size_t off, uint32_t v) {
    uint8_t *p = (uint8_t *)bytes + off;
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void sdt_patch_u64(void *bytes, size_t off, uint64_t v) {
    uint8_t *p = (uint8_t *)bytes + off;
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ------------------------------------------------------------ writer */

struct gw_kv {
    size_t entry; /* offsets inside kvs: start of the entry, of its type, of its value */
    size_t type;
    size_t value;
};

struct gw_tensor {
    char *name; /* [name_len], not NUL-terminated */
    size_t name_len;
    uint32_t n_dims;
    int64_t ne[SDT_GW_MAX_DIMS];
    int type;
    uint8_t *data; /* [nbytes] */
    size_t nbytes;
};

struct gw_tensor_layout {
    size_t info, ndims, ne, type, offset, data;
};

struct sdt_gguf_writer {
    uint32_t version;
    size_t alignment;
    bool oom;

    struct sdt_buf kvs; /* the serialized key/values, back to back */
    struct gw_kv *kv;   /* [n_kv] */
    size_t n_kv, kv_cap;

    struct gw_tensor *t; /* [n_t] */
    size_t n_t, t_cap;

    /* The last layout. */
    struct sdt_buf out;
    bool laid_out;
    size_t kv_base;                 /* file offset of kvs */
    struct gw_tensor_layout *tl;    /* [n_t] */
    size_t data_start;
};

struct sdt_gguf_writer *sdt_gw_new(void) {
    struct sdt_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->version = 3;
    w->alignment = 32;
    return w;
}

void sdt_gw_free(struct sdt_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    free(w->kv);
    free(w->tl);
    sdt_buf_free(&w->kvs);
    sdt_buf_free(&w->out);
    free(w);
}

void sdt_gw_set_version(struct sdt_gguf_writer *w, uint32_t version) {
    if (w) w->version = version;
}

size_t sdt_gw_n_kv(const struct sdt_gguf_writer *w) { return w ? w->n_kv : 0; }
size_t sdt_gw_n_tensors(const struct sdt_gguf_writer *w) { return w ? w->n_t : 0; }

void sdt_gw_kv_rawn(struct sdt_gguf_writer *w, const char *key, size_t key_len, uint32_t type, const void *value,
                    size_t len) {
    if (!w || w->oom) return;
    if (w->n_kv == w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap * 2 : 16;
        struct gw_kv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) {
            w->oom = true;
            return;
        }
        w->kv = kv;
        w->kv_cap = cap;
    }
    struct gw_kv *e = &w->kv[w->n_kv++];
    e->entry = w->kvs.len;
    sdt_buf_strn(&w->kvs, key, key_len);
    e->type = w->kvs.len;
    sdt_buf_u32(&w->kvs, type);
    e->value = w->kvs.len;
    sdt_buf_put(&w->kvs, value, len);
    if (w->kvs.oom) w->oom = true;
    w->laid_out = false;
}

void sdt_gw_kv_raw(struct sdt_gguf_writer *w, const char *key, uint32_t type, const void *value, size_t len) {
    sdt_gw_kv_rawn(w, key, strlen(key), type, value, len);
}

/* A scalar through a scratch buffer, so every typed call shares one path. */
static void kv_scalar(struct sdt_gguf_writer *w, const char *key, enum sd_gguf_type t, uint64_t bits) {
    uint8_t tmp[8];
    size_t n = scalar_size(t);
    for (size_t i = 0; i < n; i++) tmp[i] = (uint8_t)(bits >> (8 * i));
    sdt_gw_kv_raw(w, key, t, tmp, n);
}

void sdt_gw_kv_u8(struct sdt_gguf_writer *w, const char *key, uint8_t v) { kv_scalar(w, key, SD_GGUF_UINT8, v); }
void sdt_gw_kv_i8(struct sdt_gguf_writer *w, const char *key, int8_t v) {
    kv_scalar(w, key, SD_GGUF_INT8, (uint8_t)v);
}
void sdt_gw_kv_u16(struct sdt_gguf_writer *w, const char *key, uint16_t v) { kv_scalar(w, key, SD_GGUF_UINT16, v); }
void sdt_gw_kv_i16(struct sdt_gguf_writer *w, const char *key, int16_t v) {
    kv_scalar(w, key, SD_GGUF_INT16, (uint16_t)v);
}
void sdt_gw_kv_u32(struct sdt_gguf_writer *w, const char *key, uint32_t v) { kv_scalar(w, key, SD_GGUF_UINT32, v); }
void sdt_gw_kv_i32(struct sdt_gguf_writer *w, const char *key, int32_t v) {
    kv_scalar(w, key, SD_GGUF_INT32, (uint32_t)v);
}
void sdt_gw_kv_u64(struct sdt_gguf_writer *w, const char *key, uint64_t v) { kv_scalar(w, key, SD_GGUF_UINT64, v); }
void sdt_gw_kv_i64(struct sdt_gguf_writer *w, const char *key, int64_t v) {
    kv_scalar(w, key, SD_GGUF_INT64, (uint64_t)v);
}
void sdt_gw_kv_f32(struct sdt_gguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    kv_scalar(w, key, SD_GGUF_FLOAT32, bits);
}
void sdt_gw_kv_f64(struct sdt_gguf_writer *w, const char *key, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    kv_scalar(w, key, SD_GGUF_FLOAT64, bits);
}
void sdt_gw_kv_bool(struct sdt_gguf_writer *w, const char *key, bool v) { kv_scalar(w, key, SD_GGUF_BOOL, v ? 1 : 0); }

void sdt_gw_kv_strn(struct sdt_gguf_writer *w, const char *key, const char *s, size_t len) {
    struct sdt_buf v = {0};
    sdt_buf_strn(&v, s, len);
    if (v.oom && w) w->oom = true;
    sdt_gw_kv_raw(w, key, SD_GGUF_STRING, v.data, v.len);
    sdt_buf_free(&v);
}

void sdt_gw_kv_str(struct sdt_gguf_writer *w, const char *key, const char *s) { sdt_gw_kv_strn(w, key, s, strlen(s)); }

void sdt_gw_kv_arr(struct sdt_gguf_writer *w, const char *key, enum sd_gguf_type elem_type, const void *data,
                   size_t n) {
    struct sdt_buf v = {0};
    sdt_buf_arr(&v, elem_type, data, n);
    if (v.oom && w) w->oom = true;
    sdt_gw_kv_raw(w, key, SD_GGUF_ARRAY, v.data, v.len);
    sdt_buf_free(&v);
}

void sdt_gw_kv_str_arr(struct sdt_gguf_writer *w, const char *key, const char *const *strs, size_t n) {
    struct sdt_buf v = {0};
    sdt_buf_str_arr(&v, strs, n);
    if (v.oom && w) w->oom = true;
    sdt_gw_kv_raw(w, key, SD_GGUF_ARRAY, v.data, v.len);
    sdt_buf_free(&v);
}

void sdt_gw_set_alignment(struct sdt_gguf_writer *w, uint32_t alignment) {
    if (!w) return;
    w->alignment = alignment ? alignment : 1; /* 0 would divide by zero in the layout */
    sdt_gw_kv_u32(w, "general.alignment", alignment);
}

void sdt_gw_tensorn(struct sdt_gguf_writer *w, const char *name, size_t name_len, uint32_t n_dims, const int64_t *ne,
                    int type, const void *data, size_t nbytes) {
    if (!w || w->oom) return;
    if (w->n_t == w->t_cap) {
        size_t cap = w->t_cap ? w->t_cap * 2 : 16;
        struct gw_tensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) {
            w->oom = true;
            return;
        }
        w->t = t;
        w->t_cap = cap;
    }
    struct gw_tensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = malloc(name_len ? name_len : 1);
    t->data = malloc(nbytes ? nbytes : 1);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        w->oom = true;
        return;
    }
    memcpy(t->name, name, name_len);
    t->name_len = name_len;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims && d < SDT_GW_MAX_DIMS; d++) t->ne[d] = ne[d];
    t->type = type;
    if (data) memcpy(t->data, data, nbytes);
    else memset(t->data, 0, nbytes);
    t->nbytes = nbytes;
    w->n_t++;
    w->laid_out = false;
}

void sdt_gw_tensor(struct sdt_gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne, int type,
                   const void *data, size_t nbytes) {
    sdt_gw_tensorn(w, name, strlen(name), n_dims, ne, type, data, nbytes);
}

bool sdt_gw_tensor_f32(struct sdt_gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne, int type,
                       const float *values) {
    size_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) n *= (size_t)ne[d];
    size_t esz = type == SD_TYPE_F32 ? 4 : (type == SD_TYPE_F16 || type == SD_TYPE_BF16) ? 2 : 0;
    if (!esz) return false;
    uint8_t *buf = malloc(n > 0 ? n * esz : 1);
    if (!buf) {
        if (w) w->oom = true; /* reported by sdt_gw_bytes, like every other failure */
        return true;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        if (type == SD_TYPE_F32) memcpy(&bits, &values[i], 4);
        else if (type == SD_TYPE_F16) bits = sd_fp32_to_fp16(values[i]);
        else bits = sd_fp32_to_bf16(values[i]);
        for (size_t k = 0; k < esz; k++) buf[i * esz + k] = (uint8_t)(bits >> (8 * k));
    }
    sdt_gw_tensor(w, name, n_dims, ne, type, buf, n * esz);
    free(buf);
    return true;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

uint8_t *sdt_gw_bytes(struct sdt_gguf_writer *w, size_t *size) {
    if (!w || w->oom) return NULL;
    if (w->laid_out) { /* unchanged since the last layout: keep any patches made to it */
        *size = w->out.len;
        return w->out.data;
    }
    struct gw_tensor_layout *tl = realloc(w->tl, (w->n_t ? w->n_t : 1) * sizeof *tl);
    if (!tl) {
        w->oom = true;
        return NULL;
    }
    w->tl = tl;
    struct sdt_buf *o = &w->out;
    o->len = 0;

    sdt_buf_put(o, "GGUF", 4);
    sdt_buf_u32(o, w->version);
    sdt_buf_u64(o, w->n_t);
    sdt_buf_u64(o, w->n_kv);
    w->kv_base = o->len;
    sdt_buf_put(o, w->kvs.data, w->kvs.len);

    /* Tensor data goes back to back, each piece starting on the alignment,
     * as ggml and the gguf Python package lay it out. */
    size_t data_off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        struct gw_tensor *t = &w->t[i];
        tl[i].info = o->len;
        sdt_buf_strn(o, t->name, t->name_len);
        tl[i].ndims = o->len;
        sdt_buf_u32(o, t->n_dims);
        tl[i].ne = o->len;
        for (uint32_t d = 0; d < t->n_dims && d < SDT_GW_MAX_DIMS; d++) sdt_buf_u64(o, (uint64_t)t->ne[d]);
        tl[i].type = o->len;
        sdt_buf_u32(o, (uint32_t)t->type);
        tl[i].offset = o->len;
        sdt_buf_u64(o, data_off);
        tl[i].data = data_off; /* relative for now */
        data_off = align_up(data_off + t->nbytes, w->alignment);
    }
    w->data_start = align_up(o->len, w->alignment);
    sdt_buf_put(o, NULL, w->data_start - o->len);
    for (size_t i = 0; i < w->n_t; i++) {
        tl[i].data += w->data_start;
        sdt_buf_put(o, NULL, tl[i].data - o->len); /* padding before this tensor */
        sdt_buf_put(o, w->t[i].data, w->t[i].nbytes);
    }
    if (w->n_t > 0) sdt_buf_put(o, NULL, align_up(o->len, w->alignment) - o->len);
    if (o->oom) {
        w->oom = true;
        return NULL;
    }
    w->laid_out = true;
    *size = o->len;
    return o->data;
}

int sdt_gw_write(struct sdt_gguf_writer *w, const char *path) {
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    if (!bytes) return -1;
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = fwrite(bytes, 1, size, f);
    int rc = fclose(f);
    return n == size && rc == 0 ? 0 : -1;
}

size_t sdt_gw_offset(const struct sdt_gguf_writer *w, enum sdt_gw_field f, size_t i) {
    if (!w || !w->laid_out) return SIZE_MAX;
    switch (f) {
    case SDT_GW_MAGIC: return 0;
    case SDT_GW_VERSION: return 4;
    case SDT_GW_N_TENSORS: return 8;
    case SDT_GW_N_KV: return 16;
    case SDT_GW_KV: return i < w->n_kv ? w->kv_base + w->kv[i].entry : SIZE_MAX;
    case SDT_GW_KV_TYPE: return i < w->n_kv ? w->kv_base + w->kv[i].type : SIZE_MAX;
    case SDT_GW_KV_VALUE: return i < w->n_kv ? w->kv_base + w->kv[i].value : SIZE_MAX;
    case SDT_GW_TENSOR: return i < w->n_t ? w->tl[i].info : SIZE_MAX;
    case SDT_GW_TENSOR_NDIMS: return i < w->n_t ? w->tl[i].ndims : SIZE_MAX;
    case SDT_GW_TENSOR_NE: return i < w->n_t ? w->tl[i].ne : SIZE_MAX;
    case SDT_GW_TENSOR_TYPE: return i < w->n_t ? w->tl[i].type : SIZE_MAX;
    case SDT_GW_TENSOR_OFFSET: return i < w->n_t ? w->tl[i].offset : SIZE_MAX;
    case SDT_GW_TENSOR_DATA: return i < w->n_t ? w->tl[i].data : SIZE_MAX;
    case SDT_GW_DATA_START: return w->data_start;
    case SDT_GW_END: return w->out.len;
    }
    return SIZE_MAX;
}
