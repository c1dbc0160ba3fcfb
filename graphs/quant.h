/*
 * graphs/quant.h - tensor element types: sizes, dequantization, activation
 * quantization and dot products, as laid out in the GGUF specification
 * (the same numbering as ggml_type).
 *
 * A weight row of type T is multiplied with an activation row that was first
 * quantized to T's vec_dot_type (Q8_0 for the 32-element formats, Q8_1 for
 * Q4_1/Q5_1, Q8_K for the K-quants, F32 for the float types), as the
 * reference CPU engines do. Each dot product reduces in one fixed order, so a
 * row's result never depends on which batch it sits in.
 *
 * Two implementations: a portable scalar reference and AVX2/FMA, picked at
 * run time (sd_quant_set_impl lets tests force either).
 */
#ifndef SD_QUANT_H
#define SD_QUANT_H

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

typedef void (*sd_dequant_fn)(const void *src, float *dst, int64_t n);
typedef void (*sd_quant_fn)(const float *src, void *dst, int64_t n);
typedef float (*sd_dot_fn)(int64_t n, const void *w, const void *xq);

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
/* Quantize floats to type. Implemented for every type that is some type's
 * vec_dot_type (F32, F16, BF16, Q8_0, Q8_1, Q8_K) and for the weight types
 * used by tests (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) - reference
 * quality, not importance-weighted. Returns false if not implemented. */
bool sd_quantize_row(enum sd_type type, const float *src, void *dst, int64_t n);
/* Dot product of a weight row of wtype with an activation row xq already in
 * sd_type_get(wtype)->vec_dot_type. */
float sd_vec_dot(enum sd_type wtype, int64_t n, const void *w, const void *xq);

enum sd_quant_impl { SD_IMPL_AUTO = 0, SD_IMPL_SCALAR = 1, SD_IMPL_AVX2 = 2 };
/* Choose the implementation (for tests and benchmarks). Returns the one now
 * in use: asking for AVX2 on a CPU without it gives SCALAR. Not thread-safe;
 * call before compute starts. */
enum sd_quant_impl sd_quant_set_impl(enum sd_quant_impl impl);
enum sd_quant_impl sd_quant_get_impl(void);

/* Half and bfloat16 conversion. */
float sd_fp16_to_fp32(uint16_t h);
uint16_t sd_fp32_to_fp16(float f);
float sd_bf16_to_fp32(uint16_t h);
uint16_t sd_fp32_to_bf16(float f);

#endif /* SD_QUANT_H */
