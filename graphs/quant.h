/*
 * graphs/quant.h - tensor element types: sizes, dequantization, activation
 * quantization and dot products, as laid out in the GGUF specification
 * (the same numbering as ggml_type).
 *
 * A weight row of type T is multiplied with an activation row that was first
 * quantized to T's vec_dot_type (Q8_0 for the 32-element formats, Q8_1 for
 * Q4_1/Q5_1, Q8_K for the K-quants, F32 for the float types), as the
 * reference CPU engines do. Each dot product reduces in one fixed order, so a
 * row's result never depends on which batch it sits in: that of ggml's x86
 * CPU backend computing a batch (see "Tiles and reduction order" below).
 *
 * Two implementations: a portable scalar reference and AVX2/FMA, picked at
 * run time (sd_quant_set_impl lets tests force either); on CPUs with
 * AVX-512 VNNI the AVX2 implementation hands tiles of several activation
 * rows to AVX-512 kernels (sd_quant_set_avx512 turns that off).
 */
#ifndef SD_QUANT_H
#define SD_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graphs/types.h"

typedef void (*sd_dequant_fn)(const void *src, float *dst, int64_t n);
typedef void (*sd_quant_fn)(const float *src, void *dst, int64_t n);
typedef float (*sd_dot_fn)(int64_t n, const void *w, const void *xq);

/* Quantize floats to type. Implemented for every type that is some type's
 * vec_dot_type (F32, F16, BF16, Q8_0, Q8_1, Q8_K) and for the weight types
 * used by tests (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) - reference
 * quality, not importance-weighted. Returns false if not implemented. */
bool sd_quantize_row(enum sd_type type, const float *src, void *dst, int64_t n);
/* q4_K from the first fit of each sub-block's scale and minimum, without
 * the reference's search over 20 more (n a multiple of 256): five times
 * faster, a few percent more error. For a copy whose error is measured
 * after it is made (graphs/cert.h's margins), where the reference made a
 * 1.5B's first start 15 s longer. */
void sd_quantize_q4_K_coarse(const float *src, void *dst, int64_t n);
/* Symmetric integer levels of n values: q[i] = round(x[i] * levels / amax)
 * to nearest even (amax the largest magnitude; a NaN takes -levels), in
 * [-levels, levels]; returns the scale amax / levels (0 for a row of
 * zeros). levels < 2^22. The fast order's integer keys and queries
 * (graphs/kv.h, graphs/cpu/attention.h). */
float sd_quantize_levels(const float *x, int32_t n, int32_t levels, int16_t *q);
/* Quantize an activation row to a vec_dot type, as ggml's CPU backend does
 * on x86 (the engine that the conformance tests compare against): for Q8_0
 * and Q8_1 that is not the reference rounding of sd_quantize_row (see
 * quant_quantize.c); other types as sd_quantize_row. The forward pass uses this. */
bool sd_quantize_act_row(enum sd_type type, const float *src, void *dst, int64_t n);
/* Dot product of a weight row of wtype with an activation row xq already in
 * sd_type_get(wtype)->vec_dot_type. */
float sd_vec_dot(enum sd_type wtype, int64_t n, const void *w, const void *xq);
/* Whether the SIMD tiles of wtype give the scalar kernel's bits. */
bool sd_vec_dot_simd_ok(enum sd_type wtype);

enum sd_quant_impl { SD_IMPL_AUTO = 0, SD_IMPL_SCALAR = 1, SD_IMPL_AVX2 = 2 };
/* Choose the implementation (for tests and benchmarks). Returns the one now
 * in use: asking for AVX2 on a CPU without it gives SCALAR. Not thread-safe;
 * call before compute starts. */
enum sd_quant_impl sd_quant_set_impl(enum sd_quant_impl impl);
enum sd_quant_impl sd_quant_get_impl(void);
/* Within SD_IMPL_AVX2, whether tiles of several activation rows use the
 * AVX-512 VNNI kernels (on by default where the CPU has them; tests and
 * benchmarks turn them off to compare). Returns whether they are now on:
 * false on a CPU without them. Not thread-safe, as sd_quant_set_impl. */
bool sd_quant_set_avx512(bool on);
/* True if the implementation is AVX2 and the AVX-512 kernels are on. */
bool sd_quant_avx512_active(void);
/* Within SD_IMPL_AVX2 without AVX-512, whether the packed kernels
 * (graphs/packed.h) sum their bytes with AVX-VNNI's 256-bit vpdpbusd (Intel
 * from Alder Lake and Sapphire Rapids on, AMD from Zen 5) where vpmaddubsw
 * and vpmaddwd took three operations; the sums are exact either way, so
 * the bits are the same. On by default where the CPU has it; returns
 * whether it is now on. Not thread-safe, as sd_quant_set_impl. */
bool sd_quant_set_avxvnni(bool on);
/* True if the implementation is AVX2, AVX-512 is off and AVX-VNNI on. */
bool sd_quant_avxvnni_active(void);
/* Within the AVX-512 or the AVX-VNNI kernels, whether the packed kernels
 * unpack nibbles and fifth bits with GFNI's vgf2p8affineqb (Intel from Ice
 * Lake and Alder Lake on, AMD from Zen 4; not Skylake-SP, Cascade Lake or
 * Zen 3); the values are the same bytes either way. On by default where
 * the CPU has it; returns whether it is now on. Not thread-safe, as
 * sd_quant_set_impl. */
bool sd_quant_set_gfni(bool on);
/* True if the AVX-512 or the AVX-VNNI kernels are active and GFNI on. */
bool sd_quant_gfni_active(void);

/* Half and bfloat16 conversion. */
float sd_fp16_to_fp32(uint16_t h);
uint16_t sd_fp32_to_fp16(float f);
float sd_bf16_to_fp32(uint16_t h);
uint16_t sd_fp32_to_bf16(float f);

/* ------------------------------------------------------------------------
 * Block layouts, byte for byte those of ggml/GGUF. Fields are packed and
 * rows may start at any address, so kernels read them with memcpy or
 * unaligned loads; these structs document the layout and fix the sizes.
 * Half-precision fields (d, m, s, dmin) are IEEE binary16 bit patterns.
 * ---------------------------------------------------------------------- */

#define SD_QK 32     /* elements per block of the 32-element formats */
#define SD_QK_K 256  /* elements per super-block of the K formats */

#if defined(__GNUC__)
#define SD_PACKED __attribute__((packed))
#else
#define SD_PACKED
#endif

/* x = d * (q - 8); element j < 16 is the low nibble of qs[j], element j + 16
 * the high nibble. */
struct SD_PACKED sd_block_q4_0 { uint16_t d; uint8_t qs[SD_QK / 2]; };
/* x = d * q + m, nibbles as in q4_0. */
struct SD_PACKED sd_block_q4_1 { uint16_t d, m; uint8_t qs[SD_QK / 2]; };
/* x = d * (q - 16); the fifth bit of element j is bit j of the little-endian
 * 32-bit qh. */
struct SD_PACKED sd_block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[SD_QK / 2]; };
/* x = d * q + m, bits as in q5_0. */
struct SD_PACKED sd_block_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[SD_QK / 2]; };
/* x = d * q. */
struct SD_PACKED sd_block_q8_0 { uint16_t d; int8_t qs[SD_QK]; };
/* x = d * q; s = d * sum(q) (with d before rounding to half), used by the
 * q4_1/q5_1 dot products for the min term. */
struct SD_PACKED sd_block_q8_1 { uint16_t d, s; int8_t qs[SD_QK]; };
/* Eight sub-blocks of 32: x = d * sc[j] * q - dmin * m[j], with 6-bit sc/m
 * packed in scales[12]; qs[32*c + l] holds element 64*c + l (low nibble) and
 * 64*c + 32 + l (high nibble). */
struct SD_PACKED sd_block_q4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[SD_QK_K / 2]; };
/* As q4_K with a fifth bit: bit 2c of qh[l] for element 64*c + l, bit 2c+1
 * for element 64*c + 32 + l. */
struct SD_PACKED sd_block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[SD_QK_K / 8];
    uint8_t qs[SD_QK_K / 2];
};
/* Sixteen sub-blocks of 16: x = d * scales[j] * (q - 32), q 6-bit: four low
 * bits in ql, two high bits in qh (see dequantize_q6_K in quant_dequant.c). */
struct SD_PACKED sd_block_q6_K {
    uint8_t ql[SD_QK_K / 2];
    uint8_t qh[SD_QK_K / 4];
    int8_t scales[SD_QK_K / 16];
    uint16_t d;
};
/* x = d * q (d in float); bsums[j] = sum of qs[16j .. 16j+15]. */
struct SD_PACKED sd_block_q8_K { float d; int8_t qs[SD_QK_K]; int16_t bsums[SD_QK_K / 16]; };

/* ------------------------------------------------------------------------
 * Tiles and reduction order
 *
 * sd_vec_dot_tile computes nw x nx dot products at once:
 *     y[r * y_stride + i] = dot(weight row i, activation row r)
 * for i < nw, r < nx, where weight row i starts at w + i * w_stride bytes and
 * activation row r at xq + r * x_stride bytes. Every value is bit-identical
 * to sd_vec_dot on the same two rows with the same implementation: a tile
 * only shares the unpacking of weights and activations between outputs, the
 * arithmetic per output is the same. nw and nx may be any positive count.
 *
 * The fixed order (the same in the scalar, AVX2 and AVX-512 kernels, so
 * they agree bit for bit on finite inputs; tests check it):
 *   - q4_0, q5_0, q8_0 (ggml's order): per block b eight exact int32 lane
 *     sums, lane t of the products of elements 4t..4t+3; lane t's float
 *     accumulator becomes fma(dw_b * dx_b, (float)lane sum, accumulator),
 *     one rounding, block after block.
 *   - q4_1, q5_1: per block b an exact int32 sum S_b of the integer
 *     products; its contribution c_b = (dw_b * dx_b) * (float)S_b +
 *     mw_b * sx_b is added to lane b % 8 of eight float accumulators.
 *   - K formats: per super-block exact int32 sums S (scales applied) and M
 *     (mins times bsums); c_b = (dw * dx) * (float)S - (dmin * dx) * (float)M
 *     (no M term for q6_K), added to lane b % 8.
 *   - f32/f16/bf16: element k's product w_k * x_k is added to lane k % 32;
 *     the 32 lanes fold to 8 as lane[j] = (l[j] + l[j+8]) + (l[j+16] + l[j+24]).
 *   - The eight lanes fold as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
 * No other multiply-add is fused. Activation blocks must hold qs in [-127, 127], as
 * sd_quantize_row makes them (the AVX2 kernels use maddubs, as ggml does).
 * A weight type without kernels (can_compute false) is a programmer error:
 * asserted, and NaN results in builds without asserts.
 * ---------------------------------------------------------------------- */
void sd_vec_dot_tile(enum sd_type wtype, int64_t n, const void *w, size_t w_stride, int nw,
                     const void *xq, size_t x_stride, int nx, float *y, size_t y_stride);

/* ------------------------------------------------------------------------
 * Internal to graphs/quant*.c: the AVX2/FMA/F16C kernels in quant_avx2.c.
 * Everything else calls the dispatching functions above.
 * ---------------------------------------------------------------------- */

/* True if the AVX2 kernels were compiled in and this CPU (and OS) runs them. */
bool sd_quant_avx2_supported(void);
/* ... and this CPU has AVX-VNNI (CPUID leaf 7, sub-leaf 1, EAX bit 4). */
bool sd_quant_avxvnni_supported(void);
/* ... and this CPU has GFNI (CPUID leaf 7, ECX bit 8). */
bool sd_quant_gfni_supported(void);
/* False if the type has no AVX2 kernel (the caller then uses the scalar one). */
bool sd_vec_dot_tile_avx2(enum sd_type wtype, int64_t n, const void *w, size_t w_stride, int nw,
                          const void *xq, size_t x_stride, int nx, float *y, size_t y_stride);
bool sd_quantize_row_avx2(enum sd_type type, const float *src, void *dst, int64_t n);
bool sd_quantize_act_row_avx2(enum sd_type type, const float *src, void *dst, int64_t n);
/* sd_quantize_levels on AVX2 into *scale; false where n is not a multiple
 * of 8 or levels exceeds INT16_MAX (the scalar loops then). */
bool sd_quantize_levels_avx2(const float *x, int32_t n, int32_t levels, int16_t *q, float *scale);

/* The 6-bit scale and min of sub-block j (0..7) of a q4_K/q5_K block. */
void sd_scale_min_k4(int j, const uint8_t *scales, int *sc, int *m);
/* The 6-bit values (0..63) of a q6_K block in element order. */
void sd_unpack_q6_K(const struct sd_block_q6_K *b, int8_t q[SD_QK_K]);

/* The AVX-512 VNNI batch kernels in quant_avx512.c, a refinement inside
 * SD_IMPL_AVX2 (so sd_quant_get_impl() still says AVX2): they take tiles of
 * two or more activation rows, with results bit-identical to the AVX2 and
 * scalar ones. True if they were compiled in and this CPU (and OS) runs
 * them. */
bool sd_quant_avx512_supported(void);
/* nw weight rows x nx activation rows as sd_vec_dot_tile; false (nothing
 * written) if the type has no kernel here, n is longer than this path takes
 * (4096) or nx is below the row count where it starts to pay (5 for q4_0,
 * q5_0 and q8_0, 3 for q4_1 and q5_1, 6 for the K formats): the caller then
 * uses the AVX2 tiles. */
bool sd_vec_dot_tile_avx512(enum sd_type wtype, int64_t n, const void *w, size_t w_stride, int64_t nw,
                            const void *xq, size_t x_stride, int64_t nx, float *y, size_t y_stride);

#endif /* SD_QUANT_H */
