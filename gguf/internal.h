/*
 * gguf/internal.h - what the reader (gguf.c) and the metadata accessors
 * (meta.c) share: the parsed file's structs, which point into the file's
 * bytes, and how those bytes read as little-endian numbers. Private to the
 * files of gguf/.
 */
#ifndef SD_GGUF_INTERNAL_H
#define SD_GGUF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

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

/* Bytes per scalar value; 0 for the variable-size types. In gguf.c. */
extern const uint8_t sd_gguf_scalar_size[SD_GGUF_TYPE_COUNT];

static inline uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (uint16_t)p[1] << 8); }
static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* The value of an integer key as sign + magnitude, so any integer type can
 * be range-checked against any other. false if the key is not an integer.
 * In meta.c; the reader checks general.alignment with it. */
bool sd_gguf_kv_int(const struct sd_gguf *g, const struct gguf_kv *kv, bool *neg, uint64_t *mag,
                    int64_t *sval);

#endif /* SD_GGUF_INTERNAL_H */
