/*
 * tests/util_gguf_writer.h - build GGUF files in memory, for tests.
 *
 * The writer collects key/values and tensors in the order they are added and
 * lays out a complete GGUF file (header, key/values, tensor infos, padding,
 * data) when the bytes are asked for. It writes exactly what it is told,
 * including things a valid file must not contain (n_dims 5, type 99, an
 * empty key), so the same API builds good models and malformed inputs:
 *
 *     struct sdt_gguf_writer *w = sdt_gw_new();
 *     sdt_gw_kv_str(w, "general.architecture", "llama");
 *     sdt_gw_kv_u32(w, "llama.block_count", 2);
 *     int64_t ne[2] = {64, 32};                  // ne[0] is the row length
 *     sdt_gw_tensor(w, "token_embd.weight", 2, ne, SD_TYPE_F32, data, 64 * 32 * 4);
 *     size_t size;
 *     uint8_t *bytes = sdt_gw_bytes(w, &size);   // owned by w, mutable
 *     sdt_patch_u64(bytes, sdt_gw_offset(w, SDT_GW_N_KV, 0), 1ull << 60); // break it
 *     ...
 *     sdt_gw_free(w);
 *
 * Failures: the writer uses the C library's malloc (not the sdnpu allocator,
 * so failure-injection tests do not see it). If memory runs out, it records
 * that, ignores further calls, and sdt_gw_bytes returns NULL.
 * Scalars passed in host order are written little-endian.
 */
#ifndef SD_TEST_UTIL_GGUF_WRITER_H
#define SD_TEST_UTIL_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

/* ---- low-level byte building, for values the typed calls cannot express */

struct sdt_buf {
    uint8_t *data; /* [len], capacity cap */
    size_t len, cap;
    bool oom;
};

void sdt_buf_put(struct sdt_buf *b, const void *p, size_t n);
void sdt_buf_u8(struct sdt_buf *b, uint8_t v);
void sdt_buf_u16(struct sdt_buf *b, uint16_t v);
void sdt_buf_u32(struct sdt_buf *b, uint32_t v);
void sdt_buf_u64(struct sdt_buf *b, uint64_t v);
void sdt_buf_f32(struct sdt_buf *b, float v);
void sdt_buf_f64(struct sdt_buf *b, double v);
/* A GGUF string: u64 length, then the bytes. */
void sdt_buf_str(struct sdt_buf *b, const char *s);
void sdt_buf_strn(struct sdt_buf *b, const char *s, size_t n);
/* An array value body: u32 element type | u64 n | elements. elems holds n
 * host-order scalars of elem (uint8_t..double; bool as 1-byte values). */
void sdt_buf_arr(struct sdt_buf *b, enum sd_gguf_type elem, const void *elems, size_t n);
void sdt_buf_str_arr(struct sdt_buf *b, const char *const *strs, size_t n);
/* The array-of-arrays header: u32 SD_GGUF_ARRAY | u64 n; follow it with n
 * sdt_buf_arr / sdt_buf_str_arr / sdt_buf_arr_of_arr bodies. */
void sdt_buf_arr_of_arr(struct sdt_buf *b, size_t n);
void sdt_buf_free(struct sdt_buf *b);

/* Overwrite little-endian fields in a built file (see sdt_gw_offset). */
void sdt_patch_u32(void *bytes, size_t off, uint32_t v);
void sdt_patch_u64(void *bytes, size_t off, uint64_t v);

/* ---- the writer */

struct sdt_gguf_writer;

struct sdt_gguf_writer *sdt_gw_new(void); /* version 3, alignment 32, empty */
void sdt_gw_free(struct sdt_gguf_writer *w);

void sdt_gw_set_version(struct sdt_gguf_writer *w, uint32_t version);
/* Lay tensor data out on this alignment AND add the key general.alignment
 * (uint32) at this point in the key order. To write a wrong alignment key
 * without changing the layout, add it with sdt_gw_kv_u32 etc. instead. */
void sdt_gw_set_alignment(struct sdt_gguf_writer *w, uint32_t alignment);

void sdt_gw_kv_u8(struct sdt_gguf_writer *w, const char *key, uint8_t v);
void sdt_gw_kv_i8(struct sdt_gguf_writer *w, const char *key, int8_t v);
void sdt_gw_kv_u16(struct sdt_gguf_writer *w, const char *key, uint16_t v);
void sdt_gw_kv_i16(struct sdt_gguf_writer *w, const char *key, int16_t v);
void sdt_gw_kv_u32(struct sdt_gguf_writer *w, const char *key, uint32_t v);
void sdt_gw_kv_i32(struct sdt_gguf_writer *w, const char *key, int32_t v);
void sdt_gw_kv_u64(struct sdt_gguf_writer *w, const char *key, uint64_t v);
void sdt_gw_kv_i64(struct sdt_gguf_writer *w, const char *key, int64_t v);
void sdt_gw_kv_f32(struct sdt_gguf_writer *w, const char *key, float v);
void sdt_gw_kv_f64(struct sdt_gguf_writer *w, const char *key, double v);
void sdt_gw_kv_bool(struct sdt_gguf_writer *w, const char *key, bool v);
void sdt_gw_kv_str(struct sdt_gguf_writer *w, const char *key, const char *s);
void sdt_gw_kv_strn(struct sdt_gguf_writer *w, const char *key, const char *s, size_t len);
/* Array of n host-order scalars of elem_type (e.g. float[] for FLOAT32). */
void sdt_gw_kv_arr(struct sdt_gguf_writer *w, const char *key, enum sd_gguf_type elem_type, const void *data,
                   size_t n);
void sdt_gw_kv_str_arr(struct sdt_gguf_writer *w, const char *key, const char *const *strs, size_t n);
/* Any value as raw bytes after the u32 type; e.g. a nested array:
 *     struct sdt_buf v = {0};
 *     sdt_buf_arr_of_arr(&v, 2);
 *     sdt_buf_arr(&v, SD_GGUF_INT32, ints, 3);
 *     sdt_buf_str_arr(&v, strs, 2);
 *     sdt_gw_kv_raw(w, "test.nested", SD_GGUF_ARRAY, v.data, v.len);
 *     sdt_buf_free(&v);
 */
void sdt_gw_kv_raw(struct sdt_gguf_writer *w, const char *key, uint32_t type, const void *value, size_t len);
/* Same with a key of explicit length (empty, or with a NUL inside). */
void sdt_gw_kv_rawn(struct sdt_gguf_writer *w, const char *key, size_t key_len, uint32_t type, const void *value,
                    size_t len);

/* A tensor: ne[0..n_dims) (ne[0] contiguous), a ggml type id, and nbytes of
 * data copied from data (NULL: zeros). Nothing is checked: nbytes is what
 * the data section gets, whatever ne and type say. At most 8 dims are kept;
 * a larger n_dims is written as given with only 8 dims after it. */
void sdt_gw_tensor(struct sdt_gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne, int type,
                   const void *data, size_t nbytes);
void sdt_gw_tensorn(struct sdt_gguf_writer *w, const char *name, size_t name_len, uint32_t n_dims, const int64_t *ne,
                    int type, const void *data, size_t nbytes);
/* A float tensor stored as SD_TYPE_F32, F16 or BF16 (converted from values,
 * which holds the product of ne). Returns false for another type. */
bool sdt_gw_tensor_f32(struct sdt_gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne, int type,
                       const float *values);

/* Lay out the file. Returns a buffer owned by w and its size; NULL if memory
 * ran out. The buffer is writable, for patching: asking again without
 * adding anything returns the same (patched) bytes; adding a key or tensor
 * invalidates it and the next call lays the file out afresh. */
uint8_t *sdt_gw_bytes(struct sdt_gguf_writer *w, size_t *size);
/* Write the bytes sdt_gw_bytes gives to path. 0 on success, -1 on failure. */
int sdt_gw_write(struct sdt_gguf_writer *w, const char *path);

/* Where things landed in the last sdt_gw_bytes, for patching malformed
 * files. i is the key/value or tensor index (ignored for file-wide fields).
 * SIZE_MAX if i is out of range or the file was not laid out yet. */
enum sdt_gw_field {
    SDT_GW_MAGIC,         /* 4 bytes "GGUF" */
    SDT_GW_VERSION,       /* u32 */
    SDT_GW_N_TENSORS,     /* u64 */
    SDT_GW_N_KV,          /* u64 */
    SDT_GW_KV,            /* key/value i: its key length (u64), the start of the entry */
    SDT_GW_KV_TYPE,       /* key/value i: its value type (u32) */
    SDT_GW_KV_VALUE,      /* key/value i: the first byte of its value */
    SDT_GW_TENSOR,        /* tensor info i: its name length (u64), the start of the info */
    SDT_GW_TENSOR_NDIMS,  /* u32 */
    SDT_GW_TENSOR_NE,     /* ne[0] (u64); ne[d] is 8*d further */
    SDT_GW_TENSOR_TYPE,   /* u32 */
    SDT_GW_TENSOR_OFFSET, /* u64, relative to the data section */
    SDT_GW_TENSOR_DATA,   /* tensor i's data, as a file offset */
    SDT_GW_DATA_START,    /* the data section, as a file offset */
    SDT_GW_END            /* the file size */
};
size_t sdt_gw_offset(const struct sdt_gguf_writer *w, enum sdt_gw_field f, size_t i);

size_t sdt_gw_n_kv(const struct sdt_gguf_writer *w);
size_t sdt_gw_n_tensors(const struct sdt_gguf_writer *w);

#endif
