/*
 * gguf/gguf.h - a GGUF (v2, v3) reader over an untrusted file.
 *
 * The file is memory-mapped (or read into memory) and parsed once. Every
 * offset, count and size is checked with overflow-safe arithmetic before it
 * is used; anything wrong is a status code and a message naming the key or
 * tensor and the numbers. After a successful open, all look-ups are
 * read-only and thread-safe.
 */
#ifndef SD_GGUF_H
#define SD_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "graphs/types.h"

enum sd_gguf_type {
    SD_GGUF_UINT8 = 0,
    SD_GGUF_INT8 = 1,
    SD_GGUF_UINT16 = 2,
    SD_GGUF_INT16 = 3,
    SD_GGUF_UINT32 = 4,
    SD_GGUF_INT32 = 5,
    SD_GGUF_FLOAT32 = 6,
    SD_GGUF_BOOL = 7,
    SD_GGUF_STRING = 8,
    SD_GGUF_ARRAY = 9,
    SD_GGUF_UINT64 = 10,
    SD_GGUF_INT64 = 11,
    SD_GGUF_FLOAT64 = 12,
    SD_GGUF_TYPE_COUNT
};

struct sd_gguf;

#define SD_GGUF_MAX_DIMS 4

struct sd_gguf_tensor {
    const char *name;        /* NUL-terminated copy */
    uint32_t n_dims;
    int64_t ne[SD_GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    enum sd_type type;
    uint64_t offset;         /* relative to the data section */
    size_t nbytes;
    const void *data;        /* points into the mapping; checked to lie inside the file */
};

/* Open a file. use_mmap=false reads it into heap memory instead (64-byte
 * aligned). On failure *out is NULL, nothing is leaked, and err names what
 * was wrong: SDNPU_ERR_NOT_FOUND (no such file), SDNPU_ERR_IO (open, stat,
 * mmap or read failed), SDNPU_ERR_FORMAT (malformed: truncated, bad magic,
 * impossible count, bad alignment, bad tensor info, tensor data past the
 * end...), SDNPU_ERR_UNSUPPORTED (version other than 2/3, big-endian file,
 * unknown tensor type id), SDNPU_ERR_OOM. Messages from a file are prefixed
 * with its path. */
int sd_gguf_open(const char *path, bool use_mmap, struct sd_gguf **out, struct sd_err *err);
/* Parse a caller-owned buffer (tests, fuzzing). The buffer must outlive the handle. */
int sd_gguf_open_buffer(const void *data, size_t size, struct sd_gguf **out, struct sd_err *err);
void sd_gguf_close(struct sd_gguf *g);

uint32_t sd_gguf_version(const struct sd_gguf *g);
size_t sd_gguf_alignment(const struct sd_gguf *g);
size_t sd_gguf_file_size(const struct sd_gguf *g);
/* File offset of the data section (tensor offsets are relative to it). */
size_t sd_gguf_data_offset(const struct sd_gguf *g);
/* The whole file's bytes [sd_gguf_file_size]. */
const void *sd_gguf_bytes(const struct sd_gguf *g);
/* Whether those bytes are a private read-only mapping of the file (not a
 * heap copy or a caller's buffer). */
bool sd_gguf_is_mapped(const struct sd_gguf *g);

/* ---- metadata */
int64_t sd_gguf_n_kv(const struct sd_gguf *g);
int64_t sd_gguf_find_key(const struct sd_gguf *g, const char *key); /* -1 if absent */
const char *sd_gguf_key_name(const struct sd_gguf *g, int64_t i);
enum sd_gguf_type sd_gguf_key_type(const struct sd_gguf *g, int64_t i);

/* Typed getters. Missing key: SDNPU_ERR_NOT_FOUND. Wrong type: SDNPU_ERR_FORMAT
 * naming the key, the type found and the type wanted. Integer getters accept
 * any integer type whose value fits the requested one. */
int sd_gguf_get_u32(const struct sd_gguf *g, const char *key, uint32_t *v, struct sd_err *err);
int sd_gguf_get_i32(const struct sd_gguf *g, const char *key, int32_t *v, struct sd_err *err);
int sd_gguf_get_u64(const struct sd_gguf *g, const char *key, uint64_t *v, struct sd_err *err);
int sd_gguf_get_i64(const struct sd_gguf *g, const char *key, int64_t *v, struct sd_err *err);
int sd_gguf_get_f32(const struct sd_gguf *g, const char *key, float *v, struct sd_err *err);
int sd_gguf_get_bool(const struct sd_gguf *g, const char *key, bool *v, struct sd_err *err);
/* The string is not NUL-terminated in the file: use (*s, *len). */
int sd_gguf_get_str(const struct sd_gguf *g, const char *key, const char **s, size_t *len, struct sd_err *err);

/* Arrays. Element type and count; for arrays of fixed-size scalars *data
 * points at the packed little-endian elements in the file. */
int sd_gguf_get_arr(const struct sd_gguf *g, const char *key, enum sd_gguf_type *elem_type, uint64_t *n,
                    const void **data, struct sd_err *err);
/* Element i of an array of strings (O(1): offsets are indexed at open).
 * Not an array of strings: FORMAT; i out of range: INVALID_ARG. */
int sd_gguf_get_arr_str(const struct sd_gguf *g, const char *key, uint64_t i, const char **s, size_t *len,
                        struct sd_err *err);
/* Same, by key index, for hot loops (vocabulary loading); no message:
 * INVALID_ARG for a bad key_idx or i, FORMAT if not an array of strings. */
int sd_gguf_arr_str_at(const struct sd_gguf *g, int64_t key_idx, uint64_t i, const char **s, size_t *len);

/* Render a value as text for `sdnpu info`: scalars as numbers (floats in
 * their shortest exact form), strings with control bytes escaped, arrays of
 * strings/arrays as "[262144 x string]", numeric arrays as "[1, 2, 3]" or,
 * past 8 elements, "[1000 x int32: 1, 2, 3, 4, 5, 6, 7, 8, ...]". Too long for
 * cap: cut at a character boundary and ended with "...". */
void sd_gguf_value_str(const struct sd_gguf *g, int64_t key_idx, char *buf, size_t cap);

/* ---- tensors */
int64_t sd_gguf_n_tensors(const struct sd_gguf *g);
const struct sd_gguf_tensor *sd_gguf_tensor(const struct sd_gguf *g, int64_t i);
const struct sd_gguf_tensor *sd_gguf_find_tensor(const struct sd_gguf *g, const char *name); /* NULL if absent */

const char *sd_gguf_type_name(enum sd_gguf_type t);

#endif /* SD_GGUF_H */
