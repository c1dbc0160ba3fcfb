/*
 * graphs/types.h - what the rest of sdnpu needs to know about the graphs'
 * number formats: tensor element types (the GGUF numbering, which is
 * ggml_type's), their block sizes, converting a row to floats, and the two
 * summation orders a CPU graph may use. The kernels themselves are private
 * to graphs/ (graphs/quant.h, graphs/packed.h).
 */
#ifndef SD_GRAPHS_TYPES_H
#define SD_GRAPHS_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sd_type {
    SD_TYPE_F32 = 0,
    SD_TYPE_F16 = 1,
    SD_TYPE_Q4_0 = 2,
    SD_TYPE_Q4_1 = 3,
    SD_TYPE_Q5_0 = 6,
    SD_TYPE_Q5_1 = 7,
    SD_TYPE_Q8_0 = 8,
    SD_TYPE_Q8_1 = 9,
    SD_TYPE_Q2_K = 10,
    SD_TYPE_Q3_K = 11,
    SD_TYPE_Q4_K = 12,
    SD_TYPE_Q5_K = 13,
    SD_TYPE_Q6_K = 14,
    SD_TYPE_Q8_K = 15,
    SD_TYPE_BF16 = 30,
    SD_TYPE_COUNT = 40 /* one past the largest id (MXFP4 = 39) a GGUF file may carry */
};

struct sd_type_traits {
    const char *name;         /* "q4_K" */
    int64_t blck_size;        /* elements per block */
    size_t type_size;         /* bytes per block */
    enum sd_type vec_dot_type; /* the type activations are quantized to */
    bool can_compute;         /* dequant + vec_dot implemented */
};

/* Traits of a type, or NULL for an id that is not a known type. Known types
 * without kernels (e.g. Q2_K) have can_compute false: the GGUF reader can
 * size them, the model loader refuses them. */
const struct sd_type_traits *sd_type_get(int type);
const char *sd_type_name(int type); /* "?" for unknown */

/* Bytes for n elements of type; false if n is not a whole number of blocks,
 * the type is unknown, or the size overflows. */
bool sd_row_size(int type, int64_t n, size_t *out);

/* n must be a multiple of the block size. */
void sd_dequantize_row(enum sd_type type, const void *src, float *dst, int64_t n);

/* Which summation order a backend's graphs use. */
enum sd_kernels {
    SD_KERNELS_FAST = 0, /* packed weights, graphs/packed.h's order (default) */
    SD_KERNELS_GGML = 1  /* GGUF rows, ggml's vec_dot order (bit-identical to llama.cpp) */
};

/* "fast" or "ggml" (NULL means fast); false for any other name. */
bool sd_kernels_parse(const char *name, enum sd_kernels *out);
const char *sd_kernels_name(enum sd_kernels k);

#endif /* SD_GRAPHS_TYPES_H */
