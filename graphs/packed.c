/* graphs/packed.c - packing, activation preparation, the scalar reference
 * kernels of graphs/packed.h and the run-time choice of implementation.
 *
 * Group layout (SD_PK_COLS = 16 outputs; every region 64-byte aligned):
 *
 *   q4_0, q5_0, q8_0: nb = n_in / 32 block records of V bytes, then
 *   nb x 16 fp16 scales d[b][c]. A record holds, for the eight "steps"
 *   s = 0..7 of a block (values 4s..4s+3), the byte of output c, value e at
 *   index 4c + e of a 64-byte vector:
 *     - 4-bit values (q4_0, and the low nibbles of q5_0): four vectors, the
 *       low nibble of vector i is step i, the high nibble step i + 4;
 *     - q5_0 adds its fifth bits, 64 bytes in one of two layouts
 *       (sd_packed_bits, chosen by the CPU): eight 64-bit masks (bit 4c + e
 *       of mask s: bit 4 of the value), or sliced (bit s of byte 4c + e);
 *     - q8_0: eight vectors of u = q + 128.
 *   V = 256, 320 and 512.
 *
 *   q4_K, q5_K, q6_K: one record per 256-value super-block: eight chunks of
 *   32 values as above (2048 bytes of nibbles), then
 *     - q5_K: eight chunks' fifth bits, as q5_0's (512 bytes);
 *     - q6_K: the two high bits, 128 bytes a chunk: byte 4c + e of vector a
 *       (0, 1) holds in bits 2t..2t+1 those of step 4a + t;
 *     - q4_K, q5_K: sc[j][c] (8 x 16 bytes), m as two vectors with byte
 *       4c + t of vector a = m of sub-block 4a + t (128 bytes), d[16] and
 *       dmin[16] fp16;
 *     - q6_K: sc[j][c] int8 (16 x 16), d[16] fp16, 32 bytes of padding.
 *
 *   f32, f16, bf16: n_in x 16 values, element-major (value k of output c
 *   at 16k + c).
 *
 * Activation rows: the 32-value class holds qs[n] int8, d[n/32] float and
 * s[n/32] int32 (the block's sum of qs); the K class qs[n], d[n/256] float,
 * c32[n/16] int32 (-32 times each sum of 16: q6_K's offset, ready to
 * broadcast), and each 32-sum split into a low signed byte and a high part
 * (blo[n/32], bhi[n/32]: sum = 256 bhi + blo), which lets one vpdpbusd
 * multiply it with the u8 mins; the float class f32[n].
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "packed.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "base/base.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PK_STREAM 1 /* movntps: SSE, in every x86-64 */
#endif

enum family { FAM_NONE, FAM_Q0, FAM_K, FAM_F };

static enum family family_of(enum sd_type t) {
    switch (t) {
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q5_0:
    case SD_TYPE_Q8_0: return FAM_Q0;
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q5_K:
    case SD_TYPE_Q6_K: return FAM_K;
    case SD_TYPE_F32:
    case SD_TYPE_F16:
    case SD_TYPE_BF16: return FAM_F;
    default: return FAM_NONE;
    }
}

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Bytes of one block record (Q0: the vectors only; K: the whole record). */
static size_t record_bytes(enum sd_type t) {
    switch (t) {
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q5_0:
    case SD_TYPE_Q8_0: return SD_PK_Q0_REC(t);
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q5_K:
    case SD_TYPE_Q6_K: return SD_PK_K_REC(t);
    default: return 0;
    }
}

/* The fifth bits' layout (packed.h): decided once from the CPU, unless a
 * test set it. */
static atomic_int g_bits = -1;

enum sd_pk_bits sd_packed_bits(void) {
    int b = atomic_load_explicit(&g_bits, memory_order_relaxed);
    if (b < 0) {
        b = sd_quant_avx2_supported() && !sd_quant_avx512_supported() ? SD_PK_BITS_SLICED : SD_PK_BITS_MASKS;
        atomic_store_explicit(&g_bits, b, memory_order_relaxed);
    }
    return (enum sd_pk_bits)b;
}

enum sd_pk_bits sd_packed_set_bits(enum sd_pk_bits b) {
    const enum sd_pk_bits was = sd_packed_bits();
    atomic_store_explicit(&g_bits, (int)b, memory_order_relaxed);
    return was;
}

/* 1016 was the only layout before the sliced bits, and stays the masks'. */
uint32_t sd_packed_layout_version(void) {
    return (sd_packed_bits() == SD_PK_BITS_SLICED ? 2000u : 1000u) + SD_PK_COLS;
}

bool sd_kernels_parse(const char *name, enum sd_kernels *out) {
    if (!name || !strcmp(name, "fast")) {
        *out = SD_KERNELS_FAST;
    } else if (!strcmp(name, "ggml")) {
        *out = SD_KERNELS_GGML;
    } else {
        return false;
    }
    return true;
}

const char *sd_kernels_name(enum sd_kernels k) { return k == SD_KERNELS_GGML ? "ggml" : "fast"; }

bool sd_packed_supported(enum sd_type t) { return family_of(t) != FAM_NONE; }

static int64_t block_of(enum sd_type t) { return family_of(t) == FAM_Q0 ? SD_QK : family_of(t) == FAM_K ? SD_QK_K : 1; }

static size_t elem_bytes(enum sd_type t) { return t == SD_TYPE_F32 ? 4 : 2; }

size_t sd_packed_group_bytes(enum sd_type t, int64_t n_in) {
    const enum family f = family_of(t);
    if (f == FAM_NONE || n_in <= 0 || n_in % block_of(t)) return 0;
    const size_t nb = (size_t)(n_in / block_of(t));
    if (f == FAM_Q0) return round64(nb * record_bytes(t) + nb * 32);
    if (f == FAM_K) return nb * record_bytes(t);
    return round64((size_t)n_in * SD_PK_COLS * elem_bytes(t));
}

size_t sd_packed_bytes(enum sd_type t, int64_t n_out, int64_t n_in) {
    if (n_out <= 0) return 0;
    return (size_t)((n_out + SD_PK_COLS - 1) / SD_PK_COLS) * sd_packed_group_bytes(t, n_in);
}

/* ------------------------------------------------------------ packing */

/* Packing works a dword (four values of one output) at a time: that is the
 * unit of the layout, and byte-wise loops made preparing a graph (which a
 * static runtime pays for every graph it switches to) several times slower. */

static uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* Bit 0 of each of the four bytes of x, as four bits. */
static uint32_t bytebits(uint32_t x) {
    x &= 0x01010101u;
    return (x | x >> 7 | x >> 14 | x >> 21) & 0xFu;
}

static void or_mask(uint8_t *p, uint64_t bits) {
    uint64_t m;
    memcpy(&m, p, 8);
    m |= bits;
    memcpy(p, &m, 8);
}

/* Nibble vectors of 32 values v (each < 256, low four bits used) of output c. */
static void put_nibbles(uint8_t *dst, int c, const uint8_t *v) {
    for (int i = 0; i < 4; i++)
        st32(dst + 64 * i + 4 * c, (ld32(v + 4 * i) & 0x0F0F0F0Fu) | (ld32(v + 16 + 4 * i) & 0x0F0F0F0Fu) << 4);
}

/* The fifth bits of values 4s..4s+3 of output c (bit e: value 4s + e's)
 * into a chunk's 64 bytes, as the layout in use lays them out. */
static void put_bits(uint8_t *dst, int c, int s, uint32_t bits4, bool sliced) {
    if (!sliced) {
        or_mask(dst + 8 * s, (uint64_t)bits4 << (4 * c));
        return;
    }
    for (int e = 0; e < 4; e++)
        dst[4 * c + e] |= (uint8_t)(((bits4 >> e) & 1) << s);
}

/* The fifth bits of 32 values v of output c. */
static void put_fifth_bits(uint8_t *dst, int c, const uint8_t *v) {
    const bool sliced = sd_packed_bits() == SD_PK_BITS_SLICED;
    for (int s = 0; s < 8; s++)
        put_bits(dst, c, s, bytebits(ld32(v + 4 * s) >> 4), sliced);
}

/* q6_K's two high bits of 32 values v of output c. */
static void put_high2(uint8_t *dst, int c, const uint8_t *v) {
    for (int a = 0; a < 2; a++) {
        uint32_t x = 0;
        for (int t = 0; t < 4; t++) x |= ((ld32(v + 16 * a + 4 * t) >> 4) & 0x03030303u) << (2 * t);
        st32(dst + 64 * a + 4 * c, x);
    }
}

/* Block b of output c of a 32-value type into its record and scale. */
static void pack_q0_block(enum sd_type t, const uint8_t *row, int64_t b, int c, uint8_t *rec, uint16_t *d) {
    const size_t bs = t == SD_TYPE_Q4_0 ? 18 : t == SD_TYPE_Q5_0 ? 22 : 34;
    const uint8_t *p = row + (size_t)b * bs;
    memcpy(d, p, 2);
    if (t == SD_TYPE_Q8_0) {
        /* u = q + 128 */
        for (int s = 0; s < 8; s++) st32(rec + 64 * s + 4 * c, ld32(p + 2 + 4 * s) ^ 0x80808080u);
        return;
    }
    /* qs[j] holds values j (low nibble) and j + 16 (high): byte 4i + e of
     * qs is exactly byte 4c + e of nibble vector i. */
    const uint8_t *qs = p + (t == SD_TYPE_Q5_0 ? 6 : 2);
    for (int i = 0; i < 4; i++) st32(rec + 64 * i + 4 * c, ld32(qs + 4 * i));
    if (t == SD_TYPE_Q5_0) {
        const uint32_t qh = ld32(p + 2); /* bit j: fifth bit of value j */
        const bool sliced = sd_packed_bits() == SD_PK_BITS_SLICED;
        for (int s = 0; s < 8; s++)
            put_bits(rec + 256, c, s, (qh >> (4 * s)) & 0xFu, sliced);
    }
}

static void pack_q0_group(enum sd_type t, const uint8_t *const rows[SD_PK_COLS], int64_t nb, uint8_t *g) {
    const size_t V = record_bytes(t);
    uint16_t *d = (uint16_t *)(g + (size_t)nb * V);
    for (int c = 0; c < SD_PK_COLS; c++)
        if (rows[c])
            for (int64_t b = 0; b < nb; b++) pack_q0_block(t, rows[c], b, c, g + (size_t)b * V, &d[b * SD_PK_COLS + c]);
}

/* Super-block b of output c of a K type into its record. */
static void pack_k_block(enum sd_type t, const uint8_t *row, int64_t b, int c, uint8_t *rec) {
    uint16_t *d = (uint16_t *)(rec + SD_PK_K_D(t));
    uint8_t v[SD_QK_K]; /* the stored values in order */
    if (t == SD_TYPE_Q6_K) {
        const struct sd_block_q6_K *p = (const struct sd_block_q6_K *)(row + (size_t)b * sizeof *p);
        sd_unpack_q6_K(p, (int8_t *)v);
        for (int j = 0; j < 16; j++) rec[SD_PK_K_SC(t) + 16 * j + c] = (uint8_t)p->scales[j];
        memcpy(&d[c], (const uint8_t *)p + offsetof(struct sd_block_q6_K, d), 2);
        for (int j = 0; j < 8; j++) {
            put_nibbles(rec + 256 * j, c, v + 32 * j);
            put_high2(rec + 2048 + 128 * j, c, v + 32 * j);
        }
        return;
    }
    const bool q5 = t == SD_TYPE_Q5_K;
    const uint8_t *p = row + (size_t)b * (q5 ? sizeof(struct sd_block_q5_K) : sizeof(struct sd_block_q4_K));
    const uint8_t *qh = p + 16, *qs = p + (q5 ? 48 : 16);
    memcpy(&d[c], p, 2);
    memcpy(&d[16 + c], p + 2, 2);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        sd_scale_min_k4(j, p + 4, &sc, &m);
        rec[SD_PK_K_SC(t) + 16 * j + c] = (uint8_t)sc;
        rec[SD_PK_K_M(t) + 64 * (j / 4) + 4 * c + j % 4] = (uint8_t)m;
        /* Sub-block j: the low (j even) or high nibbles of qs[32 (j / 2) ..]. */
        const int sh = 4 * (j % 2);
        for (int l = 0; l < 32; l += 4) {
            uint32_t x = (ld32(qs + 32 * (j / 2) + l) >> sh) & 0x0F0F0F0Fu;
            if (q5) x |= ((ld32(qh + l) >> j) & 0x01010101u) << 4;
            st32(v + l, x);
        }
        put_nibbles(rec + 256 * j, c, v);
        if (q5) put_fifth_bits(rec + 2048 + 64 * j, c, v);
    }
}

static void pack_k_group(enum sd_type t, const uint8_t *const rows[SD_PK_COLS], int64_t nb, uint8_t *g) {
    for (int c = 0; c < SD_PK_COLS; c++)
        if (rows[c])
            for (int64_t b = 0; b < nb; b++) pack_k_block(t, rows[c], b, c, g + (size_t)b * record_bytes(t));
}

static void pack_f_group(enum sd_type t, const uint8_t *const rows[SD_PK_COLS], int64_t n_in, uint8_t *g) {
    const size_t es = elem_bytes(t);
    for (int c = 0; c < SD_PK_COLS; c++)
        if (rows[c])
            for (int64_t k = 0; k < n_in; k++)
                memcpy(g + ((size_t)k * SD_PK_COLS + (size_t)c) * es, rows[c] + (size_t)k * es, es);
}

void sd_pack_weights(enum sd_type t, const void *src, size_t src_row_bytes, int64_t n_out, int64_t n_in, void *dst) {
    sd_pack_groups(t, src, src_row_bytes, n_out, n_in, dst, 0, (n_out + SD_PK_COLS - 1) / SD_PK_COLS);
}

void sd_pack_groups(enum sd_type t, const void *src, size_t src_row_bytes, int64_t n_out, int64_t n_in, void *dst,
                    int64_t g0, int64_t g1) {
    const size_t gb = sd_packed_group_bytes(t, n_in);
    assert(gb > 0);
    for (int64_t g = g0; g < g1 && g * SD_PK_COLS < n_out; g++) {
        const uint8_t *rows[SD_PK_COLS];
        for (int c = 0; c < SD_PK_COLS; c++) {
            const int64_t o = g * SD_PK_COLS + c;
            rows[c] = o < n_out ? (const uint8_t *)src + (size_t)o * src_row_bytes : NULL;
        }
        uint8_t *gp = (uint8_t *)dst + (size_t)g * gb;
        memset(gp, 0, gb);
        const int64_t nb = n_in / block_of(t);
        switch (family_of(t)) {
        case FAM_Q0: pack_q0_group(t, rows, nb, gp); break;
        case FAM_K: pack_k_group(t, rows, nb, gp); break;
        default: pack_f_group(t, rows, n_in, gp); break;
        }
    }
}

/* ------------------------------------------------------------ gathering */

/* A group is a run of regions, each made of rows of 16 lanes of w bits:
 * output c's part of a row is bits [c w, (c + 1) w) (w = 4: a nibble of a
 * 64-bit mask; 8: an 8-bit scale; 16: an fp16; 32: a dword of a 64-byte
 * vector). Lane-wise copies of those regions move one output between
 * groups without unpacking it. */
struct region {
    size_t bytes;
    int w;
};

/* An output's bits of the fifth bits' region: a nibble of each mask, or
 * (sliced) a dword of each 64 bytes. */
static int bits_w(void) { return sd_packed_bits() == SD_PK_BITS_SLICED ? 32 : 4; }

/* The regions of one block record (Q0) or super-block record (K). */
static int record_regions(enum sd_type t, struct region *r) {
    switch (t) {
    case SD_TYPE_Q4_0: r[0] = (struct region){256, 32}; return 1;
    case SD_TYPE_Q5_0:
        r[0] = (struct region){256, 32};
        r[1] = (struct region){64, bits_w()};
        return 2;
    case SD_TYPE_Q8_0: r[0] = (struct region){512, 32}; return 1;
    case SD_TYPE_Q4_K:
        r[0] = (struct region){2048, 32}, r[1] = (struct region){128, 8}, r[2] = (struct region){128, 32};
        r[3] = (struct region){64, 16};
        return 4;
    case SD_TYPE_Q5_K:
        r[0] = (struct region){2048, 32}, r[1] = (struct region){512, bits_w()},
        r[2] = (struct region){128, 8};
        r[3] = (struct region){128, 32}, r[4] = (struct region){64, 16};
        return 5;
    case SD_TYPE_Q6_K:
        r[0] = (struct region){2048, 32}, r[1] = (struct region){1024, 32}, r[2] = (struct region){256, 8};
        r[3] = (struct region){32, 16};
        return 4; /* then 32 bytes of padding */
    default: return 0;
    }
}

/* Lane ls of a region of src into lane ld of the same region of dst. */
static void lane_copy(uint8_t *dst, const uint8_t *src, const struct region *r, int ld, int ls) {
    const size_t row = (size_t)r->w * 2; /* 16 lanes of w bits */
    for (size_t o = 0; o < r->bytes; o += row) {
        if (r->w >= 8) {
            const size_t lb = (size_t)r->w / 8;
            memcpy(dst + o + (size_t)ld * lb, src + o + (size_t)ls * lb, lb);
        } else {
            const uint8_t v = (uint8_t)((src[o + (size_t)ls / 2] >> (4 * (ls % 2))) & 0xF);
            uint8_t *d = &dst[o + (size_t)ld / 2];
            *d = (uint8_t)((*d & ~(0xF << (4 * (ld % 2)))) | (v << (4 * (ld % 2))));
        }
    }
}

/* Output ls of the packed group src into output ld of the group dst. */
static void gather_output(enum sd_type t, int64_t n_in, uint8_t *dst, int ld, const uint8_t *src, int ls) {
    const int64_t nb = n_in / block_of(t);
    struct region r[5];
    const int n = record_regions(t, r);
    switch (family_of(t)) {
    case FAM_Q0: {
        for (int64_t b = 0; b < nb; b++) {
            const size_t at = (size_t)b * record_bytes(t);
            for (int i = 0, off = 0; i < n; off += (int)r[i].bytes, i++)
                lane_copy(dst + at + (size_t)off, src + at + (size_t)off, &r[i], ld, ls);
        }
        const struct region scales = {(size_t)nb * 32, 16};
        const size_t at = (size_t)nb * record_bytes(t);
        lane_copy(dst + at, src + at, &scales, ld, ls);
        break;
    }
    case FAM_K:
        for (int64_t b = 0; b < nb; b++) {
            size_t at = (size_t)b * record_bytes(t);
            for (int i = 0; i < n; at += r[i].bytes, i++) lane_copy(dst + at, src + at, &r[i], ld, ls);
        }
        break;
    default: {
        const struct region all = {(size_t)n_in * SD_PK_COLS * elem_bytes(t), 8 * (int)elem_bytes(t)};
        lane_copy(dst, src, &all, ld, ls);
        break;
    }
    }
}

void sd_pack_gather(enum sd_type t, const void *packed, int64_t n_in, const int32_t *rows, int64_t n, void *dst) {
    const size_t gb = sd_packed_group_bytes(t, n_in);
    assert(gb > 0);
    memset(dst, 0, sd_packed_bytes(t, n, n_in));
    for (int64_t j = 0; j < n; j++) {
        const int64_t r = rows[j];
        gather_output(t, n_in, (uint8_t *)dst + (size_t)(j / SD_PK_COLS) * gb, (int)(j % SD_PK_COLS),
                      (const uint8_t *)packed + (size_t)(r / SD_PK_COLS) * gb, (int)(r % SD_PK_COLS));
    }
}

/* ------------------------------------------------------------ activations */

size_t sd_packed_act_row_bytes(enum sd_type t, int64_t n) {
    switch (family_of(t)) {
    case FAM_Q0: return round64((size_t)n + 20 * (size_t)(n / SD_QK)); /* SD_PK_Q0_CORR */
    case FAM_K: return round64(SD_PK_K_HI(n) + (size_t)(n / 32));
    case FAM_F: return round64(4 * (size_t)n);
    default: return 0;
    }
}

bool sd_packed_act_same(enum sd_type a, enum sd_type b) { return family_of(a) == family_of(b); }

/* int8 values of nbk values with one scale: 127 / amax, ties to even (NaN
 * gives 0). Returns d and the values' sum. Written without libm calls
 * (fmaxf, nearbyintf are calls on baseline x86-64): adding and subtracting
 * 1.5 * 2^23 rounds |v| < 2^22 to the nearest integer, ties to even, in the
 * default rounding mode, exactly as nearbyintf does. */
static float quant_span(const float *x, int nbk, int8_t *q, int32_t *sum, bool simd, bool avx512) {
    if (avx512 && nbk % 16 == 0) return sd_packed_quant_span_avx512(x, nbk, q, sum);
    if (simd && nbk % 8 == 0) return sd_packed_quant_span_avx2(x, nbk, q, sum);
    float amax = 0.0f;
    for (int j = 0; j < nbk; j++) {
        const float a = fabsf(x[j]);
        amax = a > amax ? a : amax; /* NaN never wins */
    }
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    const float magic = 0x1.8p23f;
    int32_t s = 0;
    for (int j = 0; j < nbk; j++) {
        const float v = x[j] * id; /* |v| <= 127 (1 + 2^-23), or NaN */
        const float r = v == v ? (v + magic) - magic : 0.0f;
        q[j] = (int8_t)(r > 127.f ? 127.f : r < -127.f ? -127.f : r);
        s += q[j];
    }
    *sum = s;
    return amax / 127.f;
}

void sd_packed_quantize_act(enum sd_type t, const float *x, void *dst, int64_t n) {
    /* The implementation is chosen once a row, not once a block. */
    const bool simd = sd_quant_get_impl() == SD_IMPL_AVX2, avx512 = simd && sd_quant_avx512_active();
    uint8_t *o = dst;
    int8_t *qs = (int8_t *)o;
    switch (family_of(t)) {
    case FAM_Q0: {
        const int64_t nb = n / SD_QK;
        float *d = (float *)(o + n);
        int32_t *s = (int32_t *)(d + nb);
        int32_t *corr = s + nb; /* -8, -16 and -128 times the sums */
        for (int64_t b = 0; b < nb; b++) {
            d[b] = quant_span(x + SD_QK * b, SD_QK, qs + SD_QK * b, &s[b], simd, avx512);
            corr[b] = -8 * s[b], corr[nb + b] = -16 * s[b], corr[2 * nb + b] = -128 * s[b];
        }
        break;
    }
    case FAM_K: {
        const int64_t nsb = n / SD_QK_K;
        float *d = (float *)(o + n);
        int32_t *c32 = (int32_t *)(o + SD_PK_K_CORR(n));
        int8_t *blo = (int8_t *)(o + SD_PK_K_LO(n)), *bhi = (int8_t *)(o + SD_PK_K_HI(n));
        for (int64_t b = 0; b < nsb; b++) {
            int32_t unused;
            d[b] = quant_span(x + SD_QK_K * b, SD_QK_K, qs + SD_QK_K * b, &unused, simd, avx512);
        }
        if (avx512) {
            sd_packed_sums16_avx512(qs, n, c32);
        } else {
            for (int64_t j = 0; j < n / 16; j++) {
                int32_t s = 0;
                for (int e = 0; e < 16; e++) s += qs[16 * j + e];
                c32[j] = -32 * s;
            }
        }
        for (int64_t j = 0; j < n / 32; j++) {
            const int32_t s = (c32[2 * j] + c32[2 * j + 1]) / -32;
            blo[j] = (int8_t)(uint8_t)(s & 0xFF);
            bhi[j] = (int8_t)((s - blo[j]) / 256);
        }
        break;
    }
    case FAM_F: memcpy(o, x, (size_t)n * 4); break;
    default: assert(!"sd_packed_quantize_act: unsupported type");
    }
}

/* ------------------------------------------------------ scalar reference */

/* The byte of output c, value e of a step, within a 64-byte vector. */
static size_t lane(int c, int e) { return (size_t)(4 * c + e); }

/* Value e of step s of output c in a chunk (see the layout above). */
static int nib_at(const uint8_t *chunk, int c, int s, int e) {
    const uint8_t v = chunk[64 * (s & 3) + lane(c, e)];
    return s < 4 ? v & 15 : v >> 4;
}

/* The fifth bit of value e of step s of output c, in either layout. */
static int bit4_at(const uint8_t *bits, int c, int s, int e) {
    if (sd_packed_bits() == SD_PK_BITS_SLICED) return (bits[lane(c, e)] >> s) & 1;
    uint64_t m;
    memcpy(&m, bits + 8 * s, 8);
    return (int)((m >> lane(c, e)) & 1);
}

static float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return sd_fp16_to_fp32(h);
}


/* The stored value e of step s of output c in a chunk; extra is the chunk's
 * masks (q5_0, q5_K) or high bits (q6_K). */
static int value_at(enum sd_type t, const uint8_t *chunk, const uint8_t *extra, int c, int s, int e) {
    if (t == SD_TYPE_Q8_0) return chunk[64 * s + lane(c, e)];
    int u = nib_at(chunk, c, s, e);
    if (t == SD_TYPE_Q5_0 || t == SD_TYPE_Q5_K) u |= bit4_at(extra, c, s, e) << 4;
    if (t == SD_TYPE_Q6_K) u |= ((extra[64 * (s / 4) + lane(c, e)] >> (2 * (s % 4))) & 3) << 4;
    return u;
}

/* Exact integer dot of steps [s0, s1) of output c with x (x[4s + e]). */
static int32_t steps_dot(enum sd_type t, const uint8_t *chunk, const uint8_t *extra, int c, int s0, int s1,
                         const int8_t *x) {
    int32_t acc = 0;
    for (int s = s0; s < s1; s++)
        for (int e = 0; e < 4; e++) acc += value_at(t, chunk, extra, c, s, e) * x[4 * s + e];
    return acc;
}

static void q0_group_scalar(enum sd_type t, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs,
                            int64_t n_rows, float *acc) {
    const int64_t nb = n / SD_QK;
    const size_t V = record_bytes(t);
    const int32_t off = SD_PK_Q0_OFF(t);
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *x = xq + (size_t)r * xs;
        for (int c = 0; c < SD_PK_COLS; c++) {
            float a = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *rec = g + (size_t)b * V;
                const int32_t S = steps_dot(t, rec, rec + 256, c, 0, 8, (const int8_t *)x + 32 * b) -
                                  off * sd_pk_i32(x + n + 4 * nb + 4 * b);
                const float dw = h2f(g + (size_t)nb * V + 2 * (size_t)(b * SD_PK_COLS + c));
                a = fmaf((float)S, dw * sd_pk_f32(x + n + 4 * b), a);
            }
            acc[r * SD_PK_COLS + c] = a;
        }
    }
}

/* The K class's per-row side tables (see the layout above). */
struct krow {
    const int8_t *qs;
    const float *d;    /* [n / 256] */
    const int32_t *c32; /* [n / 16] */
    const int8_t *blo, *bhi; /* [n / 32] */
};

static struct krow krow_of(const uint8_t *x, int64_t n) {
    struct krow k;
    k.qs = (const int8_t *)x;
    k.d = (const float *)(x + n);
    k.c32 = (const int32_t *)(x + SD_PK_K_CORR(n));
    k.blo = (const int8_t *)(x + SD_PK_K_LO(n));
    k.bhi = (const int8_t *)(x + SD_PK_K_HI(n));
    return k;
}

static void k_group_scalar(enum sd_type t, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int64_t n_rows,
                           float *acc) {
    const int64_t nsb = n / SD_QK_K;
    for (int64_t r = 0; r < n_rows; r++) {
        const struct krow x = krow_of(xq + (size_t)r * xs, n);
        for (int c = 0; c < SD_PK_COLS; c++) {
            float a = 0.0f;
            for (int64_t b = 0; b < nsb; b++) {
                const uint8_t *rec = g + (size_t)b * record_bytes(t);
                const int8_t *xb = x.qs + SD_QK_K * b;
                const float dw = h2f(rec + SD_PK_K_D(t) + 2 * c), dx = x.d[b];
                float T = 0.0f;
                if (t == SD_TYPE_Q6_K) {
                    for (int j = 0; j < 16; j++) {
                        const uint8_t *chunk = rec + 256 * (j / 2);
                        const int s0 = 4 * (j % 2);
                        const int32_t D = steps_dot(t, chunk, rec + 2048 + 128 * (j / 2), c, s0, s0 + 4,
                                                    xb + 32 * (j / 2)) +
                                          x.c32[16 * b + j];
                        T = fmaf((float)D, (float)(int8_t)rec[SD_PK_K_SC(t) + 16 * j + c], T);
                    }
                    a = fmaf(T, dw * dx, a);
                    continue;
                }
                int32_t M = 0;
                for (int j = 0; j < 8; j++) {
                    const int32_t S = steps_dot(t, rec + 256 * j, rec + SD_PK_K_HM + 64 * j, c, 0, 8, xb + 32 * j);
                    T = fmaf((float)S, (float)rec[SD_PK_K_SC(t) + 16 * j + c], T);
                    const int32_t m = rec[SD_PK_K_M(t) + 64 * (j / 4) + lane(c, j % 4)];
                    M += m * x.blo[8 * b + j] + 256 * m * x.bhi[8 * b + j];
                }
                a = fmaf(T, dw * dx, a);
                a = fmaf(-(float)M, h2f(rec + SD_PK_K_D(t) + 32 + 2 * c) * dx, a);
            }
            acc[r * SD_PK_COLS + c] = a;
        }
    }
}

static float wval(enum sd_type t, const uint8_t *p) {
    if (t == SD_TYPE_F32) return sd_pk_f32(p);
    uint16_t h;
    memcpy(&h, p, 2);
    return t == SD_TYPE_F16 ? sd_fp16_to_fp32(h) : sd_bf16_to_fp32(h);
}

static void f_group_scalar(enum sd_type t, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int64_t n_rows,
                           float *acc) {
    const size_t es = elem_bytes(t);
    for (int64_t r = 0; r < n_rows; r++) {
        const float *x = (const float *)(xq + (size_t)r * xs);
        for (int c = 0; c < SD_PK_COLS; c++) {
            float a[4] = {0, 0, 0, 0};
            for (int64_t k = 0; k < n; k++)
                a[k % 4] = fmaf(wval(t, g + ((size_t)k * SD_PK_COLS + (size_t)c) * es), x[k], a[k % 4]);
            acc[r * SD_PK_COLS + c] = (a[0] + a[1]) + (a[2] + a[3]);
        }
    }
}

static void group_scalar(enum sd_type t, const uint8_t *g, int64_t n, const uint8_t *xq, size_t xs, int64_t n_rows,
                         float *acc) {
    switch (family_of(t)) {
    case FAM_Q0: q0_group_scalar(t, g, n, xq, xs, n_rows, acc); break;
    case FAM_K: k_group_scalar(t, g, n, xq, xs, n_rows, acc); break;
    default: f_group_scalar(t, g, n, xq, xs, n_rows, acc); break;
    }
}

/* ------------------------------------------------------------ dispatch */

/* Rows per pass over a group: their activations stay in L2 while the
 * group's weights pass once. */
#define ROW_CHUNK 64

#ifdef PK_STREAM
/* Whether a group's whole rows go to y with streaming stores: a full chunk
 * of rows (a prefill's), each row's 16 outputs one aligned cache line. A
 * prefill chunk's outputs do not stay in L2 (256 rows of the 0.5B's 4,864
 * gate outputs are 5 MB), and an ordinary store reads each line before it
 * writes it: the copy below took 4.6% of the 0.5B's prefill of 3,804
 * tokens. Streamed, that prefill ran 4-6% faster on the 1.5B in four of
 * five alternated rounds and 5% on the 0.5B over eight (faster in 10 of
 * 13), though what reads the outputs next finds them in memory rather
 * than in L3 (Zen 4 EPYC, stop 85). Fewer rows (decoding, a verification)
 * keep theirs in cache for the next step. */
static bool stream_rows(const float *y, size_t y_stride, int64_t nr) {
    return nr == ROW_CHUNK && (uintptr_t)y % 64 == 0 && y_stride % SD_PK_COLS == 0;
}
#endif

/* acc [nr][16] of group g -> y [nr][y_stride] (column out_begin at
 * y[0]), columns [out_begin, out_end) only; returns whether it streamed
 * them (stream_rows: the caller fences). A whole group is copied with a
 * constant size, which the compiler inlines: a library call per row and
 * group cost the 262,144-wide head 131,072 calls a pass at 8 rows. */
static bool store_group(float *y, size_t y_stride, const float *acc, int64_t nr, int64_t g, int64_t out_begin,
                        int64_t out_end) {
    const int64_t c0 = SD_MAX(out_begin, g * SD_PK_COLS), c1 = SD_MIN(out_end, (g + 1) * SD_PK_COLS);
    const size_t at = (size_t)(c0 - out_begin);
#ifdef PK_STREAM
    if (c1 - c0 == SD_PK_COLS && stream_rows(y + at, y_stride, nr)) {
        for (int64_t r = 0; r < nr; r++)
            for (int i = 0; i < SD_PK_COLS; i += 4)
                _mm_stream_ps(y + (size_t)r * y_stride + at + i, _mm_load_ps(acc + r * SD_PK_COLS + i));
        return true;
    }
#endif
    if (c1 - c0 == SD_PK_COLS) {
        for (int64_t r = 0; r < nr; r++)
            memcpy(y + (size_t)r * y_stride + at, acc + r * SD_PK_COLS, SD_PK_COLS * sizeof(float));
        return false;
    }
    for (int64_t r = 0; r < nr; r++)
        memcpy(y + (size_t)r * y_stride + at, acc + r * SD_PK_COLS + (c0 - g * SD_PK_COLS),
               (size_t)(c1 - c0) * sizeof(float));
    return false;
}

void sd_packed_matmul(enum sd_type t, const void *wp, int64_t n_out, int64_t n_in, const void *xq,
                      size_t xq_row_bytes, int64_t n_rows, float *y, size_t y_stride, int64_t out_begin,
                      int64_t out_end) {
    assert(sd_packed_supported(t) && out_begin >= 0 && out_end <= n_out);
    const size_t gb = sd_packed_group_bytes(t, n_in);
    const enum sd_quant_impl impl = sd_quant_get_impl();
    /* The AVX-512 kernels read q5's fifth bits as masks only (packed.h). */
    const bool q5 = t == SD_TYPE_Q5_0 || t == SD_TYPE_Q5_K;
    const bool avx512 =
        impl == SD_IMPL_AVX2 && sd_quant_avx512_active() && !(q5 && sd_packed_bits() == SD_PK_BITS_SLICED);
    const bool vnni = sd_quant_avxvnni_active(); /* implies AVX2 without AVX-512 */
    const bool gfni = sd_quant_gfni_active();    /* with AVX-512 or AVX-VNNI */
    _Alignas(64) float acc[ROW_CHUNK * SD_PK_COLS];
    bool streamed = false;
    for (int64_t r0 = 0; r0 < n_rows; r0 += ROW_CHUNK) {
        const int64_t nr = SD_MIN(ROW_CHUNK, n_rows - r0);
        const uint8_t *x = (const uint8_t *)xq + (size_t)r0 * xq_row_bytes;
        const bool tiles = avx512 && sd_packed_amx_begin(t, nr);
        for (int64_t g = out_begin / SD_PK_COLS; g * SD_PK_COLS < out_end; g++) {
            const uint8_t *gp = (const uint8_t *)wp + (size_t)g * gb;
            bool done = tiles;
            if (tiles)
                sd_packed_group_amx(t, gp, n_in, x, xq_row_bytes, nr, acc);
            else if (impl == SD_IMPL_AVX2)
                done = avx512 ? sd_packed_group_avx512(t, gfni, gp, n_in, x, xq_row_bytes, nr, acc)
                              : sd_packed_group_avx2(t, vnni, gfni, gp, n_in, x, xq_row_bytes, nr, acc);
            if (!done) group_scalar(t, gp, n_in, x, xq_row_bytes, nr, acc);
            streamed |= store_group(y + (size_t)r0 * y_stride, y_stride, acc, nr, g, out_begin, out_end);
        }
        if (tiles) sd_packed_amx_end();
    }
#ifdef PK_STREAM
    /* Streaming stores are weakly ordered: this thread's outputs are in
     * memory before the pool's barrier tells another thread to read them. */
    if (streamed) _mm_sfence();
#else
    (void)streamed;
#endif
}
