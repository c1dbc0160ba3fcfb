/*
 * graphs/packed.h - weights repacked at prepare time, and the matrix product
 * in sdnpu's own summation order (the default "fast" kernels).
 *
 * Why: the kernels of graphs/quant.h follow ggml's vec_dot order so that
 * sdnpu's logits equal llama.cpp's bit for bit. That order converts eight
 * int32 lane sums to float per 32-value block and output, which caps a
 * multi-row pass far below the int8 peak of the machine. Lossless
 * speculative decoding needs batch invariance, not ggml's order: any order
 * fixed per output, the same at every row count, row index and graph.
 *
 * The order here (the same in the scalar and SIMD kernels, bit for bit;
 * tests/test_packed.c checks it):
 *   - q4_0, q5_0, q8_0: per 32-value block b an exact int32 sum
 *     S_b = sum u_k x_k - off * sum x_k (u the stored unsigned value, off 8,
 *     16 or 128), then acc = fmaf((float)S_b, dw_b * dx_b, acc), block after
 *     block from acc = 0.
 *   - q4_K, q5_K: per 256-value super-block, over its eight sub-blocks in
 *     order from T = 0, T = fmaf((float)S_j, (float)sc_j, T) (S_j the exact
 *     int32 sum; the product is exact, |S_j sc_j| < 2^24), and the exact
 *     int32 M = sum_j m_j bsum_j; then acc = fmaf(T, d * dx, acc);
 *     acc = fmaf(-(float)M, dmin * dx, acc). A float step where an integer
 *     multiply stood: vpmulld is two operations and its add a third, the
 *     conversion and the fused multiply-add two (6% at 8 rows).
 *   - q6_K: the same T over sixteen sub-blocks of 16 with
 *     S_j = sum u x - 32 bsum_j, then acc = fmaf(T, d * dx, acc).
 *   - f32, f16, bf16: four accumulators, element k's product fused into
 *     acc[k % 4] in element order; the result (acc0 + acc1) + (acc2 + acc3).
 *     The activations stay f32 (not rounded to the weight's precision).
 * Activations of the quantized types are quantized per row (int8, scale
 * 127 / amax per block, ties to even), so a row's bytes never depend on the
 * batch. q4_1, q5_1 and any other type keep the ggml-order kernels.
 *
 * Layout: outputs in groups of SD_PK_COLS = 16, one int32 lane per output.
 * Within a group and block, four consecutive values of one output form a
 * dword and the sixteen outputs' dwords form one 64-byte vector, so a
 * single vpdpbusd with a broadcast activation dword serves sixteen outputs.
 * A graph's private copy of the weights is the place for this layout, as
 * an accelerator graph's prepared weights are.
 */
#ifndef SD_PACKED_H
#define SD_PACKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "graphs/quant.h"

#define SD_PK_COLS 16

/* Whether weights of type t have packed kernels. */
bool sd_packed_supported(enum sd_type t);

/* Bytes of the packed copy of an [n_out][n_in] matrix of type t (n_out
 * rounded up to whole groups; each group 64-byte aligned relative to the
 * start). 0 if t is not supported or n_in is not a whole number of blocks. */
size_t sd_packed_bytes(enum sd_type t, int64_t n_out, int64_t n_in);

/* Repack n_out GGUF rows (row o at src + o * src_row_bytes) into dst
 * (sd_packed_bytes, 64-byte aligned). Missing outputs of the last group are
 * zero. */
void sd_pack_weights(enum sd_type t, const void *src, size_t src_row_bytes, int64_t n_out, int64_t n_in, void *dst);
/* Groups [g0, g1) only (group g holds outputs 16g .. 16g + 15): threads may
 * pack disjoint ranges of one matrix at once. */
void sd_pack_groups(enum sd_type t, const void *src, size_t src_row_bytes, int64_t n_out, int64_t n_in, void *dst,
                    int64_t g0, int64_t g1);

/* The packed copy of outputs rows[0..n) of a packed matrix (n_in values
 * each), into dst (sd_packed_bytes(t, n, n_in)): what sd_pack_weights
 * gives for those GGUF rows, bit for bit, without them. A calibration
 * head's subset gathers from the shared packed copy so. */
void sd_pack_gather(enum sd_type t, const void *packed, int64_t n_in, const int32_t *rows, int64_t n, void *dst);

/* Bytes of one activation row of n_in values prepared for weights of type t
 * (a multiple of 64), and the preparation itself. Activation classes: the
 * 32-value formats share one, the K formats another, the float types read
 * f32 rows. */
size_t sd_packed_act_row_bytes(enum sd_type t, int64_t n_in);
void sd_packed_quantize_act(enum sd_type t, const float *x, void *dst, int64_t n_in);
/* Whether weights of types a and b read the same prepared activations. */
bool sd_packed_act_same(enum sd_type a, enum sd_type b);

/* How q5_0's and q5_K's fifth bits are laid out (packed.c). Masks: eight
 * 64-bit masks a 32-value chunk, one a step, which the AVX-512 kernels
 * take as k-masks at one operation a step. Sliced: the chunk's 64 bytes
 * hold in bit s of byte 4c + e the fifth bit of value e of step s of
 * output c, which AVX2 turns into a step's bytes with a shift and a mask
 * where a mask took a broadcast, a shuffle, an and, a compare and a mask
 * (the 0.5B's 2-8-row passes 7-10% faster on a Zen 3).
 * Sliced where the CPU runs the AVX2 kernels and not the AVX-512 ones,
 * fixed for the process (sd_quant_set_avx512 and sd_quant_set_impl do not
 * move it), so weights packed in one layout never meet kernels of the
 * other: the AVX2 and scalar kernels read both, the AVX-512 ones masks
 * only (on sliced weights sd_packed_matmul takes the AVX2 kernels). */
enum sd_pk_bits { SD_PK_BITS_MASKS, SD_PK_BITS_SLICED };
enum sd_pk_bits sd_packed_bits(void);
/* Tests: pack and run in layout b from now on (weights packed before stay
 * in theirs). Returns the layout before. Not thread-safe. */
enum sd_pk_bits sd_packed_set_bits(enum sd_pk_bits b);
/* The packed layout's version, the weight cache's check that a file was
 * packed as these kernels read (it differs between the bit layouts). */
uint32_t sd_packed_layout_version(void);

/* y[r * y_stride + o - out_begin] = dot(packed output o, activation row r)
 * for r < n_rows and o in [out_begin, out_end); activation row r at
 * xq + r * xq_row_bytes. y holds the range alone, so a caller may take a
 * range into a small buffer (the head's pieces, graphs/forward.h).
 * Groups that straddle the range are computed whole and stored in part, so
 * threads may take any disjoint ranges. Thread-safe. */
void sd_packed_matmul(enum sd_type t, const void *wp, int64_t n_out, int64_t n_in, const void *xq,
                      size_t xq_row_bytes, int64_t n_rows, float *y, size_t y_stride, int64_t out_begin,
                      int64_t out_end);

/* The implementation in use follows sd_quant_get_impl(): SD_IMPL_SCALAR runs
 * the scalar reference below, SD_IMPL_AVX2 the AVX-512 VNNI kernels where
 * the CPU has them (sd_quant_avx512_active()), else the AVX2 kernels; and
 * passes of SD_AMX_MIN_ROWS rows or more on AMX's tiles where
 * sd_packed_amx_active() (the same bits: "AMX" below). */

/* Whether passes of many rows run on AMX's tiles where the CPU has AMX and
 * the kernel grants it (on by default, unless the environment says
 * SDNPU_AMX=0 when first asked; tests and benchmarks turn it off to
 * compare). Returns whether it is now active: false without AMX or without
 * the AVX-512 kernels. Not thread-safe, as sd_quant_set_impl. */
bool sd_packed_set_amx(bool on);
/* On, granted (sd_amx_probe), and the AVX-512 kernels active. */
bool sd_packed_amx_active(void);
/* Row chunks of passes that ran on the tiles since the process began (the
 * tests' witness that a path ran). */
uint64_t sd_packed_amx_passes(void);

/* ------------------------------------------------------------------------
 * Internal to graphs/packed*.c.
 * ---------------------------------------------------------------------- */

/* Offsets within a K-quant super-block record (layout in packed.c): the
 * q5_K masks, the scales, the q4_K/q5_K mins, d (then dmin), and the
 * record's size. */
#define SD_PK_K_HM 2048
#define SD_PK_K_SC(t) ((t) == SD_TYPE_Q5_K ? 2560 : (t) == SD_TYPE_Q6_K ? 3072 : 2048)
#define SD_PK_K_M(t) (SD_PK_K_SC(t) + 128)
#define SD_PK_K_D(t) ((t) == SD_TYPE_Q6_K ? 3328 : SD_PK_K_SC(t) + 256)
#define SD_PK_K_REC(t) ((t) == SD_TYPE_Q4_K ? 2368 : (t) == SD_TYPE_Q5_K ? 2880 : 3392)
/* A 32-value block record's bytes (q4_0, q5_0, q8_0: the step vectors,
 * and q5_0's masks), and the offset its stored unsigned values carry. */
#define SD_PK_Q0_REC(t) ((t) == SD_TYPE_Q4_0 ? 256 : (t) == SD_TYPE_Q5_0 ? 320 : 512)
#define SD_PK_Q0_OFF(t) ((t) == SD_TYPE_Q4_0 ? 8 : (t) == SD_TYPE_Q5_0 ? 16 : 128)
/* A 32-value activation row of n values: n int8 values, nb = n / 32 float
 * scales, nb int32 sums, then for each offset (8, 16, 128: q4_0, q5_0,
 * q8_0) the nb products -off * sum, so that a kernel starts a block's sum
 * from a broadcast load (no integer work a row and block). The byte offset
 * of type t's products: */
#define SD_PK_Q0_CORR(t, n) \
    ((size_t)(n) + 4 * (size_t)((n) / 32) * ((t) == SD_TYPE_Q4_0 ? 2 : (t) == SD_TYPE_Q5_0 ? 3 : 4))

/* A K-class activation row of n values: n int8 values, n / 256 float
 * scales, then n / 16 int32 products -32 x (sum of 16 values), q6_K's
 * offset, so that its kernels start a 16-value sum from a broadcast load
 * (no integer work a row and half sub-block), then the low and high parts
 * of each 32-value sum (blo, bhi: n / 32 bytes each). Byte offsets: */
#define SD_PK_K_CORR(n) ((size_t)(n) + 4 * (size_t)((n) / 256))
#define SD_PK_K_LO(n) (SD_PK_K_CORR(n) + 4 * (size_t)((n) / 16))
#define SD_PK_K_HI(n) (SD_PK_K_LO(n) + (size_t)((n) / 32))

/* GF(2) affine maps of each byte for GFNI's vgf2p8affineqb (the
 * packed_*_gfni.c kernels; the matrix's byte 7 - i picks the bits of result
 * bit i): the low nibble, and the high nibble shifted down. */
#define SD_PK_GF_LO 0x0102040800000000LL
#define SD_PK_GF_HI 0x1020408000000000LL

/* Unaligned little-endian reads of the packed and activation rows. */
static inline int32_t sd_pk_i32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline float sd_pk_f32(const void *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* The weights stream from memory once per pass, so each kernel asks for
 * the bytes it is about to read SD_PK_PF_FAR ahead into L2 and, where
 * near, SD_PK_PF_NEAR ahead into L1 too. Near pays where a kernel spends
 * long on each byte (unpacking nibbles and high bits), and costs where it
 * is bound by the bandwidth (q8_0). A K-quant record (2-3 KB) is asked for
 * a part per sub-block, not at once. The distances were chosen by
 * measurement: 48 KB ahead is too far, 4 KB too near for L1 (the figures
 * are in docs/benchmarks.md, "Figures from code comments"). */
#ifndef SD_PK_PF_FAR /* -D to measure another distance */
#define SD_PK_PF_FAR 32768
#endif
#ifndef SD_PK_PF_NEAR
#define SD_PK_PF_NEAR 2048
#endif
/* Always inlined: GCC 12 otherwise judges a small helper whose only effect
 * is a prefetch to have none, and drops its calls. */
#if defined(__GNUC__)
#define SD_PK_INLINE static inline __attribute__((always_inline))
#else
#define SD_PK_INLINE static inline
#endif
SD_PK_INLINE void sd_pk_prefetch(const uint8_t *p, size_t n, bool near) {
    for (size_t l = 0; l < n; l += 64) {
        __builtin_prefetch(p + SD_PK_PF_FAR + l, 0, 2);
        if (near) __builtin_prefetch(p + SD_PK_PF_NEAR + l, 0, 3);
    }
}
/* Part j of k of a record of n bytes, in whole lines. */
SD_PK_INLINE void sd_pk_prefetch_part(const uint8_t *rec, size_t n, int j, int k, bool near) {
    const size_t lines = (n + 63) / 64, a = lines * (size_t)j / (size_t)k, b = lines * (size_t)(j + 1) / (size_t)k;
    sd_pk_prefetch(rec + 64 * a, 64 * (b - a), near);
}

/* One group's bytes, and the bytes of its per-block records (see packed.c). */
size_t sd_packed_group_bytes(enum sd_type t, int64_t n_in);
/* The SIMD group kernels: rows [0, n_rows) of one group into acc
 * [n_rows][16]. False if the type has no kernel there. */
/* gfni: the kernels of graphs/packed_avx512_gfni.c (sd_quant_gfni_active). */
bool sd_packed_group_avx512(enum sd_type t, bool gfni, const uint8_t *g, int64_t n_in, const uint8_t *xq,
                            size_t xs, int64_t n_rows, float *acc);
/* quant_span (graphs/packed.c) on AVX-512 for nbk a multiple of 16: the
 * same bytes, sum and scale. */
float sd_packed_quant_span_avx512(const float *x, int nbk, int8_t *q, int32_t *sum);
/* ... and on AVX2 for nbk a multiple of 8. */
float sd_packed_quant_span_avx2(const float *x, int nbk, int8_t *q, int32_t *sum);
/* The K class's c32 (-32 times each sum of 16) from its n int8 values (n a
 * multiple of 64) on AVX-512: the scalar loop's values. */
void sd_packed_sums16_avx512(const int8_t *q, int64_t n, int32_t *c32);
/* An AVX-512 integer kernel: rows [0, nr) of one group into acc [nr][16]. */
typedef void (*sd_pk_group_fn)(const uint8_t *g, int64_t n_in, const uint8_t *xq, size_t xs, int64_t nr,
                               float *acc);
/* The GFNI copy of type t's kernel, its many-row one where wide; NULL where
 * t is not an integer type or the build has no AVX-512 kernels. */
sd_pk_group_fn sd_packed_kernel_gfni(enum sd_type t, bool wide);
/* vnni: the integer kernels sum on AVX-VNNI (sd_quant_avxvnni_active);
 * gfni with it: and unpack with GFNI (graphs/packed_avx2_gfni.c). */
bool sd_packed_group_avx2(enum sd_type t, bool vnni, bool gfni, const uint8_t *g, int64_t n_in,
                          const uint8_t *xq, size_t xs, int64_t n_rows, float *acc);
/* The AVX-VNNI kernels' GFNI copy (an integer type t, else false). */
bool sd_packed_int_group_avx2_gfni(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq,
                                   size_t xs, int64_t n_rows, float *acc);

/* ------------------------------------------------------------------------
 * AMX (Intel's tile unit, Sapphire Rapids on; graphs/packed_amx.c).
 *
 * The packed layout is a tile layout already. The eight 64-byte step
 * vectors of a 32-value block, as the VNNI kernels unpack them (each
 * value an unsigned byte; vector s holds every output's dword of values
 * 4s..4s+3), are the eight rows of a B tile of K = 32 and N = 16 outputs;
 * up to sixteen prepared activation rows, a block's 32 bytes each at their
 * row stride, are an A tile; tdpbsud (A signed, B unsigned) gives each
 * (row, output) its exact block sum, which the float step then takes as
 * the VNNI kernels do: the same bits at every row count. One prepared
 * copy serves both. The K formats fit the same way a sub-block (32 values;
 * q6_K's halves, 16 values, K = 16) at a time: one C tile per sub-block,
 * its integer scale applied in float as to the VNNI sums (a tile product
 * across sub-blocks would need the scales folded into the weights, which
 * the VNNI kernels' order does not do), and the mins' term one more tile
 * of K = 8 (the eight sub-blocks' mins against the rows' sub-block sums).
 * The kernels that run it (sd_packed_group_amx) take the 32-value types'
 * B tiles signed (tdpbssd: no offset term) and the mins by vpdpbusd, and
 * leave q6_K to the VNNI kernels (K = 16 halves the tile's work per store).
 * ---------------------------------------------------------------------- */
enum sd_amx { SD_AMX_ABSENT, SD_AMX_REFUSED, SD_AMX_READY };
/* AMX-INT8 in the CPU and enabled by the OS, and tile data granted to this
 * process (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): without it
 * the first tile instruction is SIGILL); probed once. _as(true) probes as
 * if the request were refused (tests). */
enum sd_amx sd_amx_probe(void);
enum sd_amx sd_amx_probe_as(bool refuse);
/* Tests: from now on the probe reports a grant as refused (on) or as it
 * was (off); returns what it reports now. Not thread-safe. */
enum sd_amx sd_amx_simulate_refusal(bool on);
const char *sd_amx_desc(enum sd_amx a);
/* tdpbsud in scalar form: C[m][n] += sum_k A[m * lda + k] * B[64 (k / 4) +
 * 4 n + k % 4] for m < M, k < K (K a multiple of 4, B's rows 64 bytes). */
void sd_amx_dpbsud_ref(int32_t C[16][16], const int8_t *A, size_t lda, int M, const uint8_t *B, int K);
/* sd_packed_group_avx512's result for q4_0, q5_0, q8_0, q4_K, q5_K and
 * q6_K by the tile program, emulated: sixteen rows a pass; per 32-value
 * block or K sub-block (q6_K: half sub-block, 16 values, its own scale) the
 * B tile from the AVX-512 unpack and C from sd_amx_dpbsud_ref; a K
 * record's mins a tile of K = 8 over the rows' sub-block sums. False for
 * other types or without AVX-512. */
bool sd_packed_group_amx_emul(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq, size_t xs,
                              int64_t n_rows, float *acc);
/* The tile kernels (graphs/packed_amx.c), sd_packed_group_avx512's bits.
 * Rows at or above which a pass takes them: a block's sums leave the tile
 * unit through a store of C every 32 values (the order's float step is per
 * block), which costs about what the VNNI kernels' products cost, so the
 * tiles win only where many rows share each B tile: 1.1-1.3 times the VNNI
 * kernels' speed at 32 and 64 rows, level at 16, 1.3-2.2 times slower at
 * 4 and 8 (one thread, Xeon with AMX; docs/benchmarks.md, "Stop 96"). */
#define SD_AMX_MIN_ROWS 32
/* Whether a pass of n_rows rows of weights of type t runs on the tiles
 * (sd_packed_amx_active, n_rows >= SD_AMX_MIN_ROWS, t one of the six
 * integer types); if so, this thread's tiles are configured for them, and
 * sd_packed_group_amx computes groups until sd_packed_amx_end releases the
 * tiles. */
bool sd_packed_amx_begin(enum sd_type t, int64_t n_rows);
void sd_packed_group_amx(enum sd_type t, const uint8_t *g, int64_t n_in, const uint8_t *xq, size_t xs,
                         int64_t n_rows, float *acc);
void sd_packed_amx_end(void);
/* Blocks [b0, b1) of a group of an integer type t unpacked as the AVX-512
 * kernels unpack them, into u (64-byte aligned): 512 bytes a 32-value block
 * (its eight step vectors), 4096 a K super-block (its eight sub-blocks' in
 * order). gfni: by graphs/packed_avx512_gfni.c's copy (sd_packed_unpack_gfni),
 * where sd_quant_gfni_active(). */
void sd_packed_unpack_avx512(enum sd_type t, bool gfni, const uint8_t *g, int64_t b0, int64_t b1, uint8_t *u);
void sd_packed_unpack_gfni(enum sd_type t, const uint8_t *g, int64_t b0, int64_t b1, uint8_t *u);

#endif /* SD_PACKED_H */
