/* tests/test_quant.c - element types: dequantization against gguf-py's
 * vectors, quantizers against gguf-py / ggml's reference, hand-worked
 * blocks, dot products (scalar vs AVX2 vs AVX-512 vs a double-precision
 * reference),
 * half/bfloat16 conversion against the F16C instruction, and the batch
 * invariance of sd_matmul's tiles. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "graphs/matmul.h"
#include "graphs/quant.h"
#include "util_common.h"

#ifndef SD_TEST_DATA
#define SD_TEST_DATA "tests/data"
#endif

/* ------------------------------------------------------------- helpers */

/* Implementations under test: the scalar reference, AVX2 alone, and AVX2
 * with the AVX-512 batch kernels (which take tiles of two or more
 * activation rows). */
enum timpl { T_SCALAR, T_AVX2, T_AVX512 };

static int impl_list(enum timpl out[3]) {
    int n = 0;
    out[n++] = T_SCALAR;
    if (sd_quant_avx2_supported()) out[n++] = T_AVX2;
    if (sd_quant_avx512_supported()) out[n++] = T_AVX512;
    return n;
}

static void use_impl(enum timpl t) {
    sd_quant_set_impl(t == T_SCALAR ? SD_IMPL_SCALAR : SD_IMPL_AVX2);
    sd_quant_set_avx512(t == T_AVX512);
}

static const char *impl_name(enum timpl i) { return i == T_AVX512 ? "avx512" : i == T_AVX2 ? "avx2" : "scalar"; }

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static size_t row_bytes(enum sd_type t, int64_t n) {
    size_t b = 0;
    assert_true(sd_row_size(t, n, &b));
    return b;
}

static void put_half(uint8_t *p, float f) {
    uint16_t h = sd_fp32_to_fp16(f);
    memcpy(p, &h, 2);
}

/* Weight types with kernels, in the order the tests walk them. */
static const enum sd_type k_wtypes[] = {SD_TYPE_F32,  SD_TYPE_F16,  SD_TYPE_BF16, SD_TYPE_Q4_0,
                                        SD_TYPE_Q4_1, SD_TYPE_Q5_0, SD_TYPE_Q5_1, SD_TYPE_Q8_0,
                                        SD_TYPE_Q4_K, SD_TYPE_Q5_K, SD_TYPE_Q6_K};

/* Random floats with a per-32 magnitude between 1e-3 and 1e2, as weights and
 * activations are: quantizers see both tiny and large blocks. */
static void rand_floats(float *x, int64_t n, uint64_t *st) {
    float scale = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0) scale = powf(10.0f, 5.0f * (sdt_rand_float(st) + 1.0f) / 2.0f - 3.0f);
        x[i] = sdt_rand_float(st) * scale;
    }
}

/* Random bytes for a row of a weight type, with every half-precision scale
 * field set to a sane value, so all bit patterns of the quants are seen. */
static void rand_raw_row(enum sd_type t, uint8_t *row, int64_t n, uint64_t *st) {
    const struct sd_type_traits *tr = sd_type_get(t);
    const size_t bytes = row_bytes(t, n);
    for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)sdt_rand_u64(st);
    const int64_t nb = n / tr->blck_size;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = row + (size_t)b * tr->type_size;
        const float d = sdt_rand_float(st) * 0.01f;
        switch (t) {
        case SD_TYPE_F32: {
            float f = sdt_rand_float(st);
            memcpy(p, &f, 4);
            break;
        }
        case SD_TYPE_F16: put_half(p, sdt_rand_float(st) * 4.0f); break;
        case SD_TYPE_BF16: {
            uint16_t h = sd_fp32_to_bf16(sdt_rand_float(st) * 4.0f);
            memcpy(p, &h, 2);
            break;
        }
        case SD_TYPE_Q4_0: case SD_TYPE_Q5_0: case SD_TYPE_Q8_0: put_half(p, d); break;
        case SD_TYPE_Q4_1: case SD_TYPE_Q5_1: put_half(p, d); put_half(p + 2, sdt_rand_float(st)); break;
        case SD_TYPE_Q4_K: case SD_TYPE_Q5_K: put_half(p, d * 0.1f); put_half(p + 2, d * 0.1f); break;
        case SD_TYPE_Q6_K: put_half(p + 208, d * 0.1f); break;
        default: fail_msg("no raw rows for %s", sd_type_name(t));
        }
    }
}

/* n_out weight rows: even rows quantized from floats by our reference
 * quantizer, odd rows raw random bytes. Caller frees. */
static uint8_t *make_weights(enum sd_type t, int64_t n_out, int64_t n_in, uint64_t seed, size_t *rb) {
    *rb = row_bytes(t, n_in);
    uint8_t *w = malloc(*rb * (size_t)n_out);
    float *f = malloc(sizeof(float) * (size_t)n_in);
    assert_non_null(w);
    assert_non_null(f);
    uint64_t st = seed;
    for (int64_t o = 0; o < n_out; o++) {
        if (o % 2 == 0) {
            rand_floats(f, n_in, &st);
            assert_true(sd_quantize_row(t, f, w + (size_t)o * *rb, n_in));
        } else {
            rand_raw_row(t, w + (size_t)o * *rb, n_in, &st);
        }
    }
    free(f);
    return w;
}

/* n_rows activation rows quantized to wtype's vec_dot_type, always with the
 * scalar quantizer so both implementations see the same bytes. */
static uint8_t *make_acts(enum sd_type wt, int64_t n_rows, int64_t n_in, uint64_t seed, size_t *rb) {
    const enum sd_type vt = sd_type_get(wt)->vec_dot_type;
    *rb = row_bytes(vt, n_in);
    uint8_t *x = malloc(*rb * (size_t)n_rows + 1);
    float *f = malloc(sizeof(float) * (size_t)(n_in * n_rows));
    assert_non_null(x);
    assert_non_null(f);
    uint64_t st = seed;
    rand_floats(f, n_in * n_rows, &st);
    enum sd_quant_impl prev = sd_quant_get_impl();
    sd_quant_set_impl(SD_IMPL_SCALAR);
    assert_true(sd_quantize_rows(vt, f, n_rows, n_in, x));
    sd_quant_set_impl(prev);
    free(f);
    return x;
}

/* -------------------------------------------------- gguf-py test vectors */

struct vec_rec {
    uint32_t kind, type, n, n_bytes, source;
    const uint8_t *bytes;
    const uint8_t *floats; /* n little-endian floats, possibly unaligned */
};

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
    if (buf && fread(buf, 1, (size_t)len, fp) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    *size = (size_t)len;
    return buf;
}

static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void test_gguf_vectors(void **state) {
    (void)state;
    size_t size = 0;
    uint8_t *buf = read_file(SD_TEST_DATA "/quant_vectors.bin", &size);
    if (!buf) fail_msg("cannot read %s (run tests/gen_quant_vectors.py)", SD_TEST_DATA "/quant_vectors.bin");
    assert_true(size >= 12);
    assert_memory_equal(buf, "SDQV", 4);
    assert_int_equal(rd32(buf + 4), 1);
    const uint32_t n_rec = rd32(buf + 8);
    size_t off = 12;
    int n_dequant = 0, n_quant = 0;
    enum timpl impls[3];
    const int n_impl = impl_list(impls);
    for (uint32_t i = 0; i < n_rec; i++) {
        assert_true(off + 20 <= size);
        struct vec_rec r = {rd32(buf + off), rd32(buf + off + 4), rd32(buf + off + 8), rd32(buf + off + 12),
                            rd32(buf + off + 16), NULL, NULL};
        off += 20;
        assert_true(off + r.n_bytes + 4ull * r.n <= size);
        r.bytes = buf + off;
        r.floats = buf + off + r.n_bytes;
        off += r.n_bytes + 4ull * r.n;
        assert_int_equal(row_bytes(r.type, r.n), r.n_bytes);
        if (r.kind == 1) {
            /* Dequantization: exact, bit for bit (NaN payloads included).
             * Every format's arithmetic is the same float operations in the
             * same order as gguf-py's numpy code, so no ulp slack is needed. */
            float *out = malloc(4ull * r.n);
            sd_dequantize_row(r.type, r.bytes, out, r.n);
            for (uint32_t k = 0; k < r.n; k++) {
                const uint32_t want = rd32(r.floats + 4 * k);
                if (f2u(out[k]) != want) {
                    fail_msg("dequant %s record %u element %u: got %08x (%g), gguf-py %08x", sd_type_name(r.type), i,
                             k, f2u(out[k]), (double)out[k], want);
                }
            }
            free(out);
            n_dequant++;
        } else {
            assert_int_equal(r.kind, 2);
            float *in = malloc(4ull * r.n);
            uint8_t *out = malloc(r.n_bytes);
            memcpy(in, r.floats, 4ull * r.n);
            for (int m = 0; m < n_impl; m++) {
                use_impl(impls[m]);
                memset(out, 0xAB, r.n_bytes);
                assert_true(sd_quantize_row(r.type, in, out, r.n));
                for (uint32_t k = 0; k < r.n_bytes; k++) {
                    if (out[k] != r.bytes[k]) {
                        fail_msg("quant %s (%s) record %u byte %u: got %02x, %s %02x", sd_type_name(r.type),
                                 impl_name(impls[m]), i, k, out[k], r.source ? "numpy port" : "gguf-py", r.bytes[k]);
                    }
                }
            }
            sdt_use_auto();
            free(in);
            free(out);
            n_quant++;
        }
    }
    assert_int_equal(off, size);
    assert_true(n_dequant >= 14);
    assert_true(n_quant >= 9);
    free(buf);
}

/* ------------------------------------------------- hand-worked blocks */

static void check_dequant(enum sd_type t, const uint8_t *block, const float *want, int n) {
    float got[256];
    sd_dequantize_row(t, block, got, n);
    for (int k = 0; k < n; k++) {
        if (got[k] != want[k]) fail_msg("%s element %d: got %g, want %g", sd_type_name(t), k, (double)got[k], (double)want[k]);
    }
}

static void test_hand_q4_0_q8_0_q4_1(void **state) {
    (void)state;
    /* q4_0, d = 0.5 (half 0x3800), qs[j] = j | (15 - j) << 4:
     * element j = 0.5 * (j - 8), element 16 + j = 0.5 * (7 - j). */
    uint8_t b[18] = {0x00, 0x38};
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    const float want_q4_0[32] = {-4.0f, -3.5f, -3.0f, -2.5f, -2.0f, -1.5f, -1.0f, -0.5f, 0.0f,  0.5f,  1.0f,
                                 1.5f,  2.0f,  2.5f,  3.0f,  3.5f,  3.5f,  3.0f,  2.5f,  2.0f,  1.5f,  1.0f,
                                 0.5f,  0.0f,  -0.5f, -1.0f, -1.5f, -2.0f, -2.5f, -3.0f, -3.5f, -4.0f};
    check_dequant(SD_TYPE_Q4_0, b, want_q4_0, 32);

    /* q4_1, d = 0.25 (0x3400), m = -1 (0xBC00), every qs byte 0x5A:
     * low nibble 10 -> 0.25 * 10 - 1 = 1.5, high nibble 5 -> 0.25. */
    uint8_t b1[20] = {0x00, 0x34, 0x00, 0xBC};
    memset(b1 + 4, 0x5A, 16);
    float want_q4_1[32];
    for (int j = 0; j < 16; j++) {
        want_q4_1[j] = 1.5f;
        want_q4_1[j + 16] = 0.25f;
    }
    check_dequant(SD_TYPE_Q4_1, b1, want_q4_1, 32);

    /* q8_0, d = 2 (0x4000), qs[j] = j - 16: element j = 2 * (j - 16). */
    uint8_t b8[34] = {0x00, 0x40};
    float want_q8_0[32];
    for (int j = 0; j < 32; j++) {
        b8[2 + j] = (uint8_t)(int8_t)(j - 16);
        want_q8_0[j] = 2.0f * (float)(j - 16);
    }
    check_dequant(SD_TYPE_Q8_0, b8, want_q8_0, 32);

    /* Dot of a q8_0 row with d = 0.5, all q = 1 against that block:
     * 0.5 * 2 * sum(j - 16 for j < 32) = 1 * (-16) = -16. */
    uint8_t w8[34] = {0x00, 0x38};
    memset(w8 + 2, 1, 32);
    enum timpl impls[3];
    for (int m = 0, n = impl_list(impls); m < n; m++) {
        use_impl(impls[m]);
        assert_true(sd_vec_dot(SD_TYPE_Q8_0, 32, w8, b8) == -16.0f);
        /* q4_0 block above against it: sum (j-8)(j-16) + (7-j)(j) for j < 16,
         * times 0.5 * 2: sum_j (j^2 - 24j + 128) + (7j - j^2) = sum(128 - 17j)
         * = 16 * 128 - 17 * 120 = 8. */
        assert_true(sd_vec_dot(SD_TYPE_Q4_0, 32, b, b8) == 8.0f);
    }
    sdt_use_auto();
}

static void test_hand_q5(void **state) {
    (void)state;
    /* q5_0, d = -0.25 (0xB400), qh = 0x80000001 (fifth bit of elements 0 and
     * 31), qs[0] = 0xF3, other qs 0:
     *   element 0:  3 | 16 = 19 -> (19 - 16) * -0.25 = -0.75
     *   element 16: 15        -> (15 - 16) * -0.25 = 0.25
     *   element 31: 0 | 16    -> 0 * -0.25 = -0 (== 0)
     *   all others: 0         -> -16 * -0.25 = 4 */
    uint8_t b[22] = {0x00, 0xB4, 0x01, 0x00, 0x00, 0x80, 0xF3};
    float want[32];
    for (int j = 0; j < 32; j++) want[j] = 4.0f;
    want[0] = -0.75f;
    want[16] = 0.25f;
    want[31] = 0.0f;
    check_dequant(SD_TYPE_Q5_0, b, want, 32);

    /* q5_1, d = 1 (0x3C00), m = 0.5 (0x3800), qh = 0x0000FFFF, qs = 0x21:
     * elements 0..15: (1 | 16) * 1 + 0.5 = 17.5; elements 16..31: 2 + 0.5. */
    uint8_t b1[24] = {0x00, 0x3C, 0x00, 0x38, 0xFF, 0xFF, 0x00, 0x00};
    memset(b1 + 8, 0x21, 16);
    for (int j = 0; j < 16; j++) {
        want[j] = 17.5f;
        want[j + 16] = 2.5f;
    }
    check_dequant(SD_TYPE_Q5_1, b1, want, 32);
}

/* The 12 scale bytes of a q4_K/q5_K block holding
 *   sc = {1, 2, 3, 4, 17, 33, 50, 63}, m = {0, 5, 10, 63, 16, 20, 40, 7}.
 * Bytes 0-3: sc[j] | (sc[j+4] >> 4) << 6; bytes 4-7: m[j] | (m[j+4] >> 4) << 6;
 * bytes 8-11: (sc[j+4] & 15) | (m[j+4] & 15) << 4. */
static const uint8_t k_hand_scales[12] = {
    0x41, 0x82, 0xC3, 0xC4, /* 1|1<<6, 2|2<<6, 3|3<<6, 4|3<<6 */
    0x40, 0x45, 0x8A, 0x3F, /* 0|1<<6, 5|1<<6, 10|2<<6, 63|0<<6 */
    0x01, 0x41, 0x82, 0x7F, /* 1|0<<4, 1|4<<4, 2|8<<4, 15|7<<4 */
};

static void test_hand_k(void **state) {
    (void)state;
    float want[256];

    /* q4_K, d = 1 (0x3C00), dmin = 0.5 (0x3800), every qs byte 0x3C: the
     * even sub-blocks (low nibbles) hold q = 12, the odd ones q = 3.
     * x = d * sc * q - dmin * m per sub-block of 32:
     *   12, 6 - 2.5 = 3.5, 36 - 5 = 31, 12 - 31.5 = -19.5,
     *   204 - 8 = 196, 99 - 10 = 89, 600 - 20 = 580, 189 - 3.5 = 185.5 */
    uint8_t q4[144] = {0x00, 0x3C, 0x00, 0x38};
    memcpy(q4 + 4, k_hand_scales, 12);
    memset(q4 + 16, 0x3C, 128);
    const float sub4[8] = {12.0f, 3.5f, 31.0f, -19.5f, 196.0f, 89.0f, 580.0f, 185.5f};
    for (int k = 0; k < 256; k++) want[k] = sub4[k / 32];
    check_dequant(SD_TYPE_Q4_K, q4, want, 256);

    /* q5_K, d = 0.25 (0x3400), dmin = 1 (0x3C00), qh bytes 0xAA (bits 1, 3,
     * 5, 7: the odd sub-blocks get +16), qs 0x3C: even q = 12, odd q = 19.
     *   3, 9.5 - 5 = 4.5, 9 - 10 = -1, 19 - 63 = -44,
     *   51 - 16 = 35, 156.75 - 20 = 136.75, 150 - 40 = 110, 299.25 - 7 = 292.25 */
    uint8_t q5[176] = {0x00, 0x34, 0x00, 0x3C};
    memcpy(q5 + 4, k_hand_scales, 12);
    memset(q5 + 16, 0xAA, 32);
    memset(q5 + 48, 0x3C, 128);
    const float sub5[8] = {3.0f, 4.5f, -1.0f, -44.0f, 35.0f, 136.75f, 110.0f, 292.25f};
    for (int k = 0; k < 256; k++) want[k] = sub5[k / 32];
    check_dequant(SD_TYPE_Q5_K, q5, want, 256);

    /* q6_K, d = 0.5 (0x3800 at byte 208), scales[j] = j - 8, ql bytes 0x21,
     * qh bytes 0xE4 (two-bit fields 0, 1, 2, 3). In each half of 128 the
     * four runs of 32 are: low nibble 1 | 0 << 4 = 1 -> q - 32 = -31;
     * 1 | 1 << 4 = 17 -> -15; high nibble 2 | 2 << 4 = 34 -> 2; 2 | 3 << 4
     * = 50 -> 18. x = 0.5 * scales[k / 16] * (q - 32). */
    uint8_t q6[210];
    memset(q6, 0x21, 128);
    memset(q6 + 128, 0xE4, 64);
    for (int j = 0; j < 16; j++) q6[192 + j] = (uint8_t)(int8_t)(j - 8);
    q6[208] = 0x00;
    q6[209] = 0x38;
    const int run[4] = {-31, -15, 2, 18};
    for (int k = 0; k < 256; k++) want[k] = 0.5f * (float)(k / 16 - 8) * (float)run[(k % 128) / 32];
    /* Spot values, worked by hand: element 0 = 0.5 * -8 * -31 = 124,
     * 40 = 0.5 * -6 * -15 = 45, 70 = 0.5 * -4 * 2 = -4, 100 = 0.5 * -2 * 18
     * = -18, 162 = 0.5 * 2 * -15 = -15, 255 = 0.5 * 7 * 18 = 63. */
    assert_true(want[0] == 124.0f && want[40] == 45.0f && want[70] == -4.0f && want[100] == -18.0f &&
                want[162] == -15.0f && want[255] == 63.0f);
    check_dequant(SD_TYPE_Q6_K, q6, want, 256);

    /* q4_K dot with a q8_K row of d = 0.5, all q = 1 (bsums 16):
     * S = sum_j sc_j * 32 * q_j = (1 + 3 + 17 + 50) * 384 + (2 + 4 + 33 + 63) * 96
     *   = 27264 + 9792 = 37056; M = 32 * sum(m) = 32 * 161 = 5152;
     * result = 1 * 0.5 * 37056 - 0.5 * 0.5 * 5152 = 18528 - 1288 = 17240
     * (= 0.5 * the sum of the dequantized block, 0.5 * 32 * 1077.5). */
    uint8_t x8[292];
    const float dx = 0.5f;
    memcpy(x8, &dx, 4);
    memset(x8 + 4, 1, 256);
    for (int j = 0; j < 16; j++) {
        const int16_t s16 = 16;
        memcpy(x8 + 260 + 2 * j, &s16, 2);
    }
    enum timpl impls[3];
    for (int m = 0, n = impl_list(impls); m < n; m++) {
        use_impl(impls[m]);
        assert_true(sd_vec_dot(SD_TYPE_Q4_K, 256, q4, x8) == 17240.0f);
        /* q6_K against it: 0.5 * 0.5 * sum_k scales * (q - 32), with sum per
         * half of scale * run: sum_j (j - 8) over the 16 sub-blocks in pairs
         * sharing a run value... equals 0.25 * 16 * sum_{j} (j-8) * run[(j%8)/2]
         * = 4 * [(-8-7)(-31) + (-6-5)(-15) + (-4-3)(2) + (-2-1)(18)
         *        + (0+1)(-31) + (2+3)(-15) + (4+5)(2) + (6+7)(18)]
         * = 4 * [465 + 165 - 14 - 54 - 31 - 75 + 18 + 234] = 4 * 708 = 2832. */
        assert_true(sd_vec_dot(SD_TYPE_Q6_K, 256, q6, x8) == 2832.0f);
    }
    sdt_use_auto();
}

/* ---------------------------------------------------- fp16 / bfloat16 */

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_X86 1
__attribute__((target("f16c"))) static uint16_t hw_f2h(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
__attribute__((target("f16c"))) static float hw_h2f(uint16_t h) { return _cvtsh_ss(h); }
static bool have_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#else
#define HAVE_X86 0
#endif

static void test_fp16_edges(void **state) {
    (void)state;
    /* Hand-checked conversions. */
    assert_int_equal(sd_fp32_to_fp16(0.0f), 0x0000);
    assert_int_equal(sd_fp32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(sd_fp32_to_fp16(1.0f), 0x3C00);
    assert_int_equal(sd_fp32_to_fp16(-2.0f), 0xC000);
    assert_int_equal(sd_fp32_to_fp16(65504.0f), 0x7BFF);        /* largest half */
    assert_int_equal(sd_fp32_to_fp16(65519.99f), 0x7BFF);       /* below the midpoint to inf */
    assert_int_equal(sd_fp32_to_fp16(65520.0f), 0x7C00);        /* tie rounds to even: inf */
    assert_int_equal(sd_fp32_to_fp16(INFINITY), 0x7C00);
    assert_int_equal(sd_fp32_to_fp16(-INFINITY), 0xFC00);
    assert_int_equal(sd_fp32_to_fp16(0x1p-24f), 0x0001);        /* smallest subnormal */
    assert_int_equal(sd_fp32_to_fp16(0x1p-25f), 0x0000);        /* tie to even: 0 */
    assert_int_equal(sd_fp32_to_fp16(0x1.000002p-25f), 0x0001); /* just above the tie */
    assert_int_equal(sd_fp32_to_fp16(0x3p-25f), 0x0002);        /* 1.5 ulp: tie to even 2 */
    assert_int_equal(sd_fp32_to_fp16(0x1p-14f), 0x0400);        /* smallest normal */
    assert_int_equal(sd_fp32_to_fp16(0x1.ffcp-15f), 0x0400);    /* subnormal rounding up into normal */
    assert_int_equal(sd_fp32_to_fp16(1.0f + 0x1p-11f), 0x3C00); /* tie, even stays */
    assert_int_equal(sd_fp32_to_fp16(1.0f + 0x3p-11f), 0x3C02); /* tie, odd rounds up */
    uint16_t hn = sd_fp32_to_fp16(NAN);
    assert_true((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF) != 0);
    assert_true(sd_fp16_to_fp32(0x0001) == 0x1p-24f);
    assert_true(sd_fp16_to_fp32(0x03FF) == 0x1.ff8p-15f);
    assert_true(sd_fp16_to_fp32(0xFBFF) == -65504.0f);
    assert_true(isinf(sd_fp16_to_fp32(0x7C00)));
    assert_true(isnan(sd_fp16_to_fp32(0x7E00)));

    /* Every half survives the round trip (NaNs come back quiet). */
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t back = sd_fp32_to_fp16(sd_fp16_to_fp32((uint16_t)h));
        uint16_t want = (uint16_t)h;
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) want |= 0x200;
        if (back != want) fail_msg("half %04x round trip gave %04x", h, back);
    }

    /* bfloat16: round to nearest even on the dropped 16 bits, NaN stays a
     * quiet NaN, infinities stay. */
    assert_int_equal(sd_fp32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(sd_fp32_to_bf16(0x1.01p0f), 0x3F80);   /* 0x3F808000: tie, even stays */
    assert_int_equal(sd_fp32_to_bf16(0x1.03p0f), 0x3F82);   /* 0x3F818000: tie, odd rounds up */
    assert_int_equal(sd_fp32_to_bf16(0x1.0101p0f), 0x3F81); /* above the tie */
    assert_int_equal(sd_fp32_to_bf16(INFINITY), 0x7F80);
    assert_int_equal(sd_fp32_to_bf16(-INFINITY), 0xFF80);
    assert_true((sd_fp32_to_bf16(NAN) & 0x7FC0) == 0x7FC0);
    assert_true(sd_bf16_to_fp32(0x3F80) == 1.0f);
    assert_true(sd_bf16_to_fp32(0x0001) == 0x1p-133f);
}

static void test_fp16_vs_f16c(void **state) {
    (void)state;
#if HAVE_X86
    if (!have_f16c()) {
        print_message("no F16C on this CPU: hardware comparison skipped\n");
        return;
    }
    for (uint32_t h = 0; h < 65536; h++) {
        /* Half to float is exact in both, except that F16C quiets a
         * signalling NaN (sets the top payload bit) where the software
         * conversion, like numpy and gguf-py, keeps the payload as is. */
        uint32_t a = f2u(sd_fp16_to_fp32((uint16_t)h));
        const uint32_t b = f2u(hw_h2f((uint16_t)h));
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) a |= 0x00400000u;
        if (a != b) fail_msg("half %04x: soft %08x, F16C %08x", h, a, b);
    }
    /* Float to half: a stride through every bit pattern (NaNs and
     * infinities included), then around every half's rounding boundaries. */
    uint64_t n = 0;
    for (uint64_t u = 0; u < 0x100000000ull; u += 997) {
        float f;
        uint32_t b32 = (uint32_t)u;
        memcpy(&f, &b32, 4);
        const uint16_t s = sd_fp32_to_fp16(f), hw = hw_f2h(f);
        if (s != hw) fail_msg("float %08x: soft %04x, F16C %04x", b32, s, hw);
        n++;
    }
    for (uint32_t h = 0; h < 0x7C00; h++) {
        /* The midpoint between half h and h + 1 and its neighbours. */
        const float lo = sd_fp16_to_fp32((uint16_t)h), hi = sd_fp16_to_fp32((uint16_t)(h + 1));
        const float mid = (float)(((double)lo + (double)hi) / 2);
        for (int d = -2; d <= 2; d++) {
            uint32_t b32 = f2u(mid) + (uint32_t)d;
            for (int sign = 0; sign < 2; sign++) {
                float f;
                uint32_t bb = b32 | (sign ? 0x80000000u : 0);
                memcpy(&f, &bb, 4);
                const uint16_t s = sd_fp32_to_fp16(f), hw = hw_f2h(f);
                if (s != hw) fail_msg("float %08x: soft %04x, F16C %04x", bb, s, hw);
                n++;
            }
        }
    }
    assert_true(n > 4000000);
#else
    print_message("not x86: hardware comparison skipped\n");
#endif
}

/* ------------------------------------------------------- quantizers */

static void test_quantizer_impls_agree(void **state) {
    (void)state;
    if (!sd_quant_avx2_supported()) {
        print_message("no AVX2: nothing to compare\n");
        return;
    }
    const enum sd_type types[] = {SD_TYPE_Q8_0, SD_TYPE_Q8_1, SD_TYPE_Q8_K};
    const int64_t n = 4096;
    float *x = malloc(sizeof(float) * n);
    uint8_t *a = malloc(8192), *b = malloc(8192);
    uint64_t st = 42;
    for (int rep = 0; rep < 200; rep++) {
        rand_floats(x, n, &st);
        if (rep % 5 == 1) {
            /* Integral and half-integral values after scaling: ties for the
             * rounding modes, zero blocks, repeated magnitudes. */
            for (int64_t i = 0; i < n; i++) x[i] = (float)((int)(sdt_rand_u64(&st) % 255) - 127) * 0.5f;
            for (int64_t i = 256; i < 512; i++) x[i] = 0.0f;
        }
        for (size_t t = 0; t < SD_ARRAY_LEN(types); t++) {
            const size_t rb = row_bytes(types[t], n);
            sd_quant_set_impl(SD_IMPL_SCALAR);
            assert_true(sd_quantize_row(types[t], x, a, n));
            sd_quant_set_impl(SD_IMPL_AVX2);
            assert_true(sd_quantize_row(types[t], x, b, n));
            if (memcmp(a, b, rb) != 0) fail_msg("%s: scalar and AVX2 quantizers differ (rep %d)", sd_type_name(types[t]), rep);
        }
    }
    sdt_use_auto();
    free(x);
    free(a);
    free(b);
}

/* sd_quantize_levels as documented (graphs/quant.h), computed here with
 * nearbyintf: the largest magnitude ignoring NaN, levels / amax, the
 * product rounded to nearest even and clamped, NaN to -levels. */
static float levels_ref(const float *x, int32_t n, int32_t levels, int16_t *q) {
    float amax = 0.0f;
    for (int32_t i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    const float L = (float)levels, inv = amax > 0.0f ? L / amax : 0.0f;
    for (int32_t i = 0; i < n; i++) {
        const float r = x[i] * inv;
        q[i] = (int16_t)(isnan(r) ? -levels : r > L ? levels : r < -L ? -levels : (int32_t)nearbyintf(r));
    }
    return amax / L;
}

/* Every implementation's integer levels (the fast attention's keys and
 * queries) equal the documented ones on random rows, rows with NaN and
 * infinities, a row of zeros and exact ties, at the lengths heads have and
 * one that is not a multiple of 8. */
static void test_quantize_levels(void **state) {
    (void)state;
    enum timpl impls[3];
    const int ni = impl_list(impls);
    uint64_t st = 77;
    static const int32_t lens[] = {8, 64, 72, 128, 256, 60};
    static const int32_t levels[] = {8191, 127, 32767, 40000};
    float x[256];
    int16_t want[256], got[256];
    for (int c = 0; c < 7 * 6 * 4; c++) {
        const int32_t n = lens[c / 7 % 6], lv = levels[c / 42], kind = c % 7;
        rand_floats(x, n, &st);
        if (kind == 1) x[n / 3] = NAN;
        if (kind == 2) x[n - 1] = -INFINITY;
        if (kind == 3) memset(x, 0, sizeof x);
        if (kind == 4) /* amax 2 * levels: every x[i] * inv is exactly x[i] / 2 */
            for (int32_t i = 0; i < n; i++)
                x[i] = i == 0 ? 2.0f * (float)lv : (float)(int)(sdt_rand_u64(&st) % 64) - 31.0f;
        if (kind == 5) x[0] = -0.0f;
        if (kind == 6) x[n / 2] = NAN, x[n / 4] = INFINITY;
        const float ws = lv > INT16_MAX ? 0.0f : levels_ref(x, n, lv, want);
        for (int k = 0; k < ni; k++) {
            use_impl(impls[k]);
            memset(got, 0x55, sizeof got);
            const float gs = sd_quantize_levels(x, n, lv, got);
            if (lv > INT16_MAX) continue; /* outside int16: only that it runs */
            if (f2u(gs) != f2u(ws) || memcmp(got, want, (size_t)n * sizeof *got))
                fail_msg("%s: levels of %d values (case %d, %d levels) differ from the documented ones",
                         impl_name(impls[k]), n, kind, lv);
        }
    }
    sdt_use_auto();
}

/* Reference-quantizer round trips: the error relative to the row's RMS
 * stays within what each format's bits allow (bounds a few times above the
 * measured values, to catch a broken quantizer, not to grade one). */
static void test_quantize_roundtrip(void **state) {
    (void)state;
    struct { enum sd_type t; double max_rel_rmse; } cases[] = {
        {SD_TYPE_Q4_0, 0.12}, {SD_TYPE_Q4_1, 0.10}, {SD_TYPE_Q5_0, 0.06}, {SD_TYPE_Q5_1, 0.05},
        {SD_TYPE_Q8_0, 0.01}, {SD_TYPE_Q8_1, 0.01}, {SD_TYPE_Q4_K, 0.10}, {SD_TYPE_Q5_K, 0.05},
        {SD_TYPE_Q6_K, 0.03}, {SD_TYPE_Q8_K, 0.01}, {SD_TYPE_F16, 0.001}, {SD_TYPE_BF16, 0.005},
    };
    const int64_t n = 2048;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    uint8_t *q = malloc(16384);
    uint64_t st = 7;
    for (int64_t i = 0; i < n; i++) x[i] = sdt_rand_float(&st) + 0.3f * sdt_rand_float(&st);
    for (size_t c = 0; c < SD_ARRAY_LEN(cases); c++) {
        assert_true(sd_quantize_row(cases[c].t, x, q, n));
        sd_dequantize_row(cases[c].t, q, y, n);
        double e2 = 0, x2 = 0;
        for (int64_t i = 0; i < n; i++) {
            e2 += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            x2 += (double)x[i] * x[i];
        }
        const double rel = sqrt(e2 / x2);
        if (rel > cases[c].max_rel_rmse) fail_msg("%s: relative rmse %g", sd_type_name(cases[c].t), rel);
    }
    /* Types without a quantizer say so. */
    assert_false(sd_quantize_row(SD_TYPE_Q2_K, x, q, 256));
    assert_false(sd_quantize_row(SD_TYPE_Q4_0, x, q, 31));
    free(x);
    free(y);
    free(q);
}

/* --------------------------------------------------------- dot products */

/* q4_1/q5_1 against q8_1 use, as ggml does, the activation block's stored
 * s = half(d * sum(q)) for the min term: m * s instead of m * sum(d * q).
 * The reference takes the same term, so the half rounding of s is not
 * counted as an error: this returns sum_b m_b * (s_b - d_b * sum(q_b)). */
static double q8_1_min_correction(enum sd_type t, const uint8_t *w, const uint8_t *x, int64_t n) {
    const size_t wbs = t == SD_TYPE_Q4_1 ? 20 : 24;
    double c = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        uint16_t mh, dh, sh;
        memcpy(&mh, w + (size_t)b * wbs + 2, 2);
        memcpy(&dh, x + (size_t)b * 36, 2);
        memcpy(&sh, x + (size_t)b * 36 + 2, 2);
        double sum = 0;
        for (int k = 0; k < 32; k++) sum += (double)sd_fp16_to_fp32(dh) * (int8_t)x[(size_t)b * 36 + 4 + k];
        c += (double)sd_fp16_to_fp32(mh) * ((double)sd_fp16_to_fp32(sh) - sum);
    }
    return c;
}

/* For each weight type and row length: (1) scalar and AVX2 agree bit for
 * bit, and in any case within 1e-5 of sum|w*x|; (2) the dot equals the
 * double-precision dot of the dequantized rows within 1e-6 of sum|w*x| (the
 * float work is a few roundings per block plus the fold; measured worst cases
 * are about 1.5e-7, printed below). */
static void test_vec_dot(void **state) {
    (void)state;
    enum timpl impls[3];
    const int n_impl = impl_list(impls);
    double worst[SD_TYPE_COUNT] = {0};
    for (size_t ti = 0; ti < SD_ARRAY_LEN(k_wtypes); ti++) {
        const enum sd_type t = k_wtypes[ti];
        const struct sd_type_traits *tr = sd_type_get(t);
        const int64_t lens_q[] = {32, 64, 224, 256, 640, 800, 2048, 2304};
        const int64_t lens_k[] = {256, 512, 768, 2048, 2304, 4096};
        const int64_t lens_f[] = {1, 7, 31, 32, 33, 77, 640, 1000};
        const int64_t *lens = tr->blck_size == 256 ? lens_k : tr->blck_size == 32 ? lens_q : lens_f;
        const size_t n_lens = tr->blck_size == 256 ? SD_ARRAY_LEN(lens_k)
                              : tr->blck_size == 32 ? SD_ARRAY_LEN(lens_q) : SD_ARRAY_LEN(lens_f);
        const double tol = 1e-6;
        for (size_t li = 0; li < n_lens; li++) {
            const int64_t n = lens[li];
            const int rows = 6;
            size_t wrb, xrb;
            uint8_t *w = make_weights(t, rows, n, 1000 + (uint64_t)n * 31 + ti, &wrb);
            uint8_t *x = make_acts(t, rows, n, 2000 + (uint64_t)n * 17 + ti, &xrb);
            float *wd = malloc(sizeof(float) * n), *xd = malloc(sizeof(float) * n);
            for (int r = 0; r < rows; r++) {
                sd_dequantize_row(t, w + r * wrb, wd, n);
                sd_dequantize_row(tr->vec_dot_type, x + r * xrb, xd, n);
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < n; k++) {
                    ref += (double)wd[k] * xd[k];
                    mag += fabs((double)wd[k] * xd[k]);
                }
                if (tr->vec_dot_type == SD_TYPE_Q8_1) ref += q8_1_min_correction(t, w + r * wrb, x + r * xrb, n);
                float got[3];
                for (int m = 0; m < n_impl; m++) {
                    use_impl(impls[m]);
                    got[m] = sd_vec_dot(t, n, w + r * wrb, x + r * xrb);
                    const double err = fabs((double)got[m] - ref) / (mag > 0 ? mag : 1);
                    if (err > worst[t]) worst[t] = err;
                    if (err > tol) {
                        fail_msg("%s n=%lld row %d (%s): dot %.9g, double reference %.9g, rel err %g", sd_type_name(t),
                                 (long long)n, r, impl_name(impls[m]), (double)got[m], ref, err);
                    }
                }
                for (int m = 1; m < n_impl; m++) {
                    if (fabs((double)got[0] - got[m]) > 1e-5 * mag) fail_msg("%s: scalar %.9g vs %s %.9g", sd_type_name(t), (double)got[0], impl_name(impls[m]), (double)got[m]);
                    if (f2u(got[0]) != f2u(got[m])) {
                        fail_msg("%s n=%lld row %d: scalar %.9g (%08x) and %s %.9g (%08x) differ", sd_type_name(t),
                                 (long long)n, r, (double)got[0], f2u(got[0]), impl_name(impls[m]), (double)got[m], f2u(got[m]));
                    }
                }
            }
            free(w);
            free(x);
            free(wd);
            free(xd);
        }
    }
    sdt_use_auto();
    for (size_t ti = 0; ti < SD_ARRAY_LEN(k_wtypes); ti++) {
        print_message("  %-5s worst |dot - double ref| / sum|w*x| = %.2e\n", sd_type_name(k_wtypes[ti]), worst[k_wtypes[ti]]);
    }
}

/* Extreme activations: every q8 value at +-127 and weights at their extremes
 * (q8_0 weights at -128) must not saturate any int16 step of the AVX2
 * kernels: both implementations equal the exact integer result. */
static void test_vec_dot_extremes(void **state) {
    (void)state;
    enum timpl impls[3];
    const int n_impl = impl_list(impls);
    for (size_t ti = 3; ti < SD_ARRAY_LEN(k_wtypes); ti++) {
        const enum sd_type t = k_wtypes[ti];
        const struct sd_type_traits *tr = sd_type_get(t);
        const int64_t n = 512;
        const size_t wrb = row_bytes(t, n), xrb = row_bytes(tr->vec_dot_type, n);
        uint8_t *w = malloc(wrb), *x = malloc(xrb);
        float *wd = malloc(sizeof(float) * n), *xf = malloc(sizeof(float) * n), *xd = malloc(sizeof(float) * n);
        for (int pat = 0; pat < 4; pat++) {
            /* Weights: all bits set or cleared in the quants, scales 1. */
            memset(w, pat & 1 ? 0xFF : 0x00, wrb);
            if (t == SD_TYPE_Q8_0 && (pat & 1)) {
                for (size_t b = 0; b < wrb; b += 34) memset(w + b + 2, 0x80, 32); /* -128 */
            }
            for (int64_t b = 0; b < n / tr->blck_size; b++) {
                uint8_t *p = w + (size_t)b * tr->type_size;
                if (t == SD_TYPE_Q6_K) {
                    put_half(p + 208, 1.0f);
                    memset(p + 192, pat & 1 ? 0x80 : 0x7F, 16); /* scales -128 or 127 */
                } else {
                    put_half(p, 1.0f);
                    if (t == SD_TYPE_Q4_1 || t == SD_TYPE_Q5_1 || t == SD_TYPE_Q4_K || t == SD_TYPE_Q5_K) put_half(p + 2, 1.0f);
                }
            }
            for (int64_t k = 0; k < n; k++) xf[k] = (pat & 2) ? ((k & 1) ? -1.0f : 1.0f) : -1.0f;
            sd_quant_set_impl(SD_IMPL_SCALAR);
            assert_true(sd_quantize_row(tr->vec_dot_type, xf, x, n));
            sd_dequantize_row(t, w, wd, n);
            sd_dequantize_row(tr->vec_dot_type, x, xd, n);
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < n; k++) {
                ref += (double)wd[k] * xd[k];
                mag += fabs((double)wd[k] * xd[k]);
            }
            for (int m = 0; m < n_impl; m++) {
                use_impl(impls[m]);
                const float got = sd_vec_dot(t, n, w, x);
                if (fabs(got - ref) > 1e-4 * (mag > 0 ? mag : 1)) {
                    fail_msg("%s pattern %d (%s): %.9g vs %.9g", sd_type_name(t), pat, impl_name(impls[m]), (double)got, ref);
                }
                /* The same row eight times (stride 0) as a tile, which the
                 * AVX-512 kernels take. */
                float eight[8];
                sd_vec_dot_tile(t, n, w, 0, 1, x, 0, 8, eight, 1);
                for (int r = 0; r < 8; r++) {
                    if (f2u(eight[r]) != f2u(got)) {
                        fail_msg("%s pattern %d (%s): tile row %d %.9g vs dot %.9g", sd_type_name(t), pat,
                                 impl_name(impls[m]), r, (double)eight[r], (double)got);
                    }
                }
            }
        }
        free(w);
        free(x);
        free(wd);
        free(xf);
        free(xd);
    }
    sdt_use_auto();
}

/* bf16 dots follow vdpbf16ps over each whole 64 elements: lane i of a 32
 * takes element 2i + 1 before 2i, denormal inputs count as zero and denormal
 * results are flushed, in every implementation. (Past the last multiple of
 * 64 the products are added in double, as ggml's tail: not checked here.) */
static void test_bf16_dpbf16_semantics(void **state) {
    (void)state;
    enum timpl impls[3];
    const int n_impl = impl_list(impls);
    const int64_t n = 192;
    float wf[192], x[192];
    uint8_t w[384];
    struct {
        const char *what;
        float w0, x0, w1, x1, w64, x64, w65, x65, rest_w, rest_x, want;
    } cases[] = {
        /* Lane 0 sees 2^24, 1, then in the next 64 -2^24, 1: 1 only if the
         * odd element goes first (2^24 + 1 rounds back to 2^24). */
        {"odd element first", 1.0f, 1.0f, 4096.0f, 4096.0f, 1.0f, 1.0f, -4096.0f, 4096.0f, 0.0f, 0.0f, 1.0f},
        /* Denormal weights read as zero. */
        {"denormal input", 1e-39f, 1.0f, 1e-39f, 1.0f, 1e-39f, 1.0f, 1e-39f, 1.0f, 1e-39f, 1.0f, 0.0f},
        /* Each product 2^-140 is a denormal result, flushed at every step. */
        {"denormal result", 0x1p-70f, 0x1p-70f, 0x1p-70f, 0x1p-70f, 0x1p-70f, 0x1p-70f, 0x1p-70f, 0x1p-70f, 0x1p-70f,
         0x1p-70f, 0.0f},
    };
    for (size_t c = 0; c < SD_ARRAY_LEN(cases); c++) {
        for (int k = 0; k < n; k++) {
            wf[k] = cases[c].rest_w;
            x[k] = cases[c].rest_x;
        }
        wf[0] = cases[c].w0, x[0] = cases[c].x0, wf[1] = cases[c].w1, x[1] = cases[c].x1;
        wf[64] = cases[c].w64, x[64] = cases[c].x64, wf[65] = cases[c].w65, x[65] = cases[c].x65;
        for (int k = 0; k < n; k++) {
            const uint16_t h = sd_fp32_to_bf16(wf[k]);
            memcpy(w + 2 * k, &h, 2);
        }
        for (int m = 0; m < n_impl; m++) {
            use_impl(impls[m]);
            const int64_t lens[] = {128, 192}; /* two and three whole 64s */
            for (size_t li = 0; li < SD_ARRAY_LEN(lens); li++) {
                const float got = sd_vec_dot(SD_TYPE_BF16, lens[li], w, x);
                if (f2u(got) != f2u(cases[c].want)) {
                    fail_msg("bf16 %s, n=%lld (%s): %a, want %a", cases[c].what, (long long)lens[li],
                             impl_name(impls[m]), (double)got, (double)cases[c].want);
                }
            }
        }
    }
    sdt_use_auto();
}

/* ------------------------------------------------------------- matmul */

/* Each y[r][o] of sd_matmul is == the single-row sd_vec_dot of the same
 * implementation, for every type, n_rows in {1,2,3,5,8,17,32} and odd output
 * ranges; entries outside the range stay untouched. */
static void test_matmul_tiles_bit_identical(void **state) {
    (void)state;
    enum timpl impls[3];
    const int n_impl = impl_list(impls);
    const int64_t row_counts[] = {1, 2, 3, 5, 8, 17, 32};
    const int64_t n_out = 45;
    const int64_t ranges[][2] = {{0, 45}, {3, 40}, {7, 8}, {13, 30}, {44, 45}};
    for (size_t ti = 0; ti < SD_ARRAY_LEN(k_wtypes); ti++) {
        const enum sd_type t = k_wtypes[ti];
        const int64_t n_in = sd_type_get(t)->blck_size == 256 ? 768 : sd_type_get(t)->blck_size == 32 ? 320 : 83;
        size_t wrb, xrb;
        uint8_t *w = make_weights(t, n_out, n_in, 77 + ti, &wrb);
        uint8_t *x = make_acts(t, 32, n_in, 99 + ti, &xrb);
        float *y = malloc(sizeof(float) * 32 * n_out);
        for (int m = 0; m < n_impl; m++) {
            use_impl(impls[m]);
            for (size_t rc = 0; rc < SD_ARRAY_LEN(row_counts); rc++) {
                const int64_t nr = row_counts[rc];
                for (size_t ri = 0; ri < SD_ARRAY_LEN(ranges); ri++) {
                    const int64_t ob = ranges[ri][0], oe = ranges[ri][1];
                    for (int64_t i = 0; i < 32 * n_out; i++) y[i] = -12345.0f;
                    sd_matmul(t, w, wrb, n_out, n_in, x, xrb, nr, y, ob, oe);
                    for (int64_t r = 0; r < nr; r++) {
                        for (int64_t o = 0; o < n_out; o++) {
                            const float got = y[r * n_out + o];
                            if (o < ob || o >= oe) {
                                if (got != -12345.0f) fail_msg("%s: y[%lld][%lld] outside range written", sd_type_name(t), (long long)r, (long long)o);
                                continue;
                            }
                            const float want = sd_vec_dot(t, n_in, w + o * wrb, x + r * xrb);
                            if (f2u(got) != f2u(want)) {
                                fail_msg("%s (%s) n_rows=%lld range [%lld,%lld): y[%lld][%lld] = %.9g, vec_dot %.9g",
                                         sd_type_name(t), impl_name(impls[m]), (long long)nr, (long long)ob,
                                         (long long)oe, (long long)r, (long long)o, (double)got, (double)want);
                            }
                        }
                    }
                }
            }
        }
        free(w);
        free(x);
        free(y);
    }
    sdt_use_auto();
}

/* The AVX-512 batch kernels against the scalar reference, bit for bit, on
 * the shapes that exercise their blocking: row lengths with block counts
 * that are not multiples of eight (accumulator lanes) and up to the longest
 * they take (4096) and beyond (the AVX2 fallback), weight rows not a
 * multiple of the 4-row tile, activation rows not a multiple of the 8-row
 * group, and more activation rows than one pass of packed activations
 * holds (rows 150 at length 640, 25 at 4096). Row counts below the kernels'
 * threshold (2 for all, 3..4 for q4_0/q5_0/q8_0, 3..5 for the K formats)
 * check the hand-over to the AVX2 tiles. */
static void test_avx512_batch_bit_identical(void **state) {
    (void)state;
    if (!sd_quant_avx512_supported()) {
        print_message("no AVX-512 VNNI: nothing to compare\n");
        return;
    }
    const enum sd_type types[] = {SD_TYPE_Q4_0, SD_TYPE_Q4_1, SD_TYPE_Q5_0, SD_TYPE_Q5_1, SD_TYPE_Q8_0,
                                  SD_TYPE_Q4_K, SD_TYPE_Q5_K, SD_TYPE_Q6_K, SD_TYPE_F16};
    const int64_t lens_q[] = {32, 96, 288, 640, 4096, 4128};
    const int64_t lens_k[] = {256, 768, 2048, 4096, 4352};
    const int64_t lens_f[] = {64};
    const int64_t row_counts[] = {2, 3, 4, 5, 8, 9, 13, 16, 25, 150};
    const int64_t n_out = 11;
    for (size_t ti = 0; ti < SD_ARRAY_LEN(types); ti++) {
        const enum sd_type t = types[ti];
        const int64_t bs = sd_type_get(t)->blck_size;
        const int64_t *lens = bs == 256 ? lens_k : bs == 32 ? lens_q : lens_f;
        const size_t n_lens = bs == 256 ? SD_ARRAY_LEN(lens_k) : bs == 32 ? SD_ARRAY_LEN(lens_q) : SD_ARRAY_LEN(lens_f);
        for (size_t li = 0; li < n_lens; li++) {
            const int64_t n_in = lens[li];
            /* Long rows with few activation rows only, to keep the scalar
             * reference quick. */
            const int64_t max_rows = n_in == 640 || n_in == 96 ? 150 : 25;
            size_t wrb, xrb;
            uint8_t *w = make_weights(t, n_out, n_in, 500 + ti * 7 + (uint64_t)n_in, &wrb);
            uint8_t *x = make_acts(t, max_rows, n_in, 600 + ti * 5 + (uint64_t)n_in, &xrb);
            float *want = malloc(sizeof(float) * (size_t)(max_rows * n_out));
            float *y = malloc(sizeof(float) * (size_t)(max_rows * n_out));
            assert_non_null(want);
            assert_non_null(y);
            use_impl(T_SCALAR);
            for (int64_t r = 0; r < max_rows; r++) {
                for (int64_t o = 0; o < n_out; o++) want[r * n_out + o] = sd_vec_dot(t, n_in, w + o * wrb, x + r * xrb);
            }
            use_impl(T_AVX512);
            for (size_t rc = 0; rc < SD_ARRAY_LEN(row_counts); rc++) {
                const int64_t nr = row_counts[rc];
                if (nr > max_rows) continue;
                const int64_t ranges[][2] = {{0, n_out}, {1, 10}, {5, 6}};
                for (size_t ri = 0; ri < SD_ARRAY_LEN(ranges); ri++) {
                    const int64_t ob = ranges[ri][0], oe = ranges[ri][1];
                    for (int64_t i = 0; i < nr * n_out; i++) y[i] = -12345.0f;
                    sd_matmul(t, w, wrb, n_out, n_in, x, xrb, nr, y, ob, oe);
                    for (int64_t r = 0; r < nr; r++) {
                        for (int64_t o = 0; o < n_out; o++) {
                            const float got = y[r * n_out + o];
                            if (o < ob || o >= oe) {
                                if (got != -12345.0f) fail_msg("%s: y[%lld][%lld] outside range written", sd_type_name(t), (long long)r, (long long)o);
                                continue;
                            }
                            if (f2u(got) != f2u(want[r * n_out + o])) {
                                fail_msg("%s n_in=%lld n_rows=%lld range [%lld,%lld): y[%lld][%lld] = %.9g (%08x), scalar %.9g (%08x)",
                                         sd_type_name(t), (long long)n_in, (long long)nr, (long long)ob, (long long)oe,
                                         (long long)r, (long long)o, (double)got, f2u(got),
                                         (double)want[r * n_out + o], f2u(want[r * n_out + o]));
                            }
                        }
                    }
                }
            }
            /* A tile with strides of its own: rows 2..8 against weight rows
             * 3..10, written with a y stride of 20. */
            float yt[7 * 20];
            sd_vec_dot_tile(t, n_in, w + 3 * wrb, wrb, 8, x + 2 * xrb, xrb, 7, yt, 20);
            for (int r = 0; r < 7; r++) {
                for (int i = 0; i < 8; i++) {
                    if (f2u(yt[r * 20 + i]) != f2u(want[(r + 2) * n_out + 3 + i])) {
                        fail_msg("%s n_in=%lld: tile y[%d][%d] differs from scalar", sd_type_name(t), (long long)n_in, r, i);
                    }
                }
            }
            free(w);
            free(x);
            free(want);
            free(y);
        }
    }
    sdt_use_auto();
}

/* sd_quantize_rows + sd_matmul against a double-precision float matmul of
 * the original floats: the quantization error of q8_0 activations and q8_0
 * weights is below 2% of sum|w*x| per output. */
static void test_matmul_end_to_end(void **state) {
    (void)state;
    const int64_t n_in = 256, n_out = 24, n_rows = 5;
    float *wf = malloc(sizeof(float) * n_in * n_out), *xf = malloc(sizeof(float) * n_in * n_rows);
    uint64_t st = 5;
    for (int64_t i = 0; i < n_in * n_out; i++) wf[i] = sdt_rand_float(&st);
    for (int64_t i = 0; i < n_in * n_rows; i++) xf[i] = sdt_rand_float(&st);
    const size_t wrb = row_bytes(SD_TYPE_Q8_0, n_in), xrb = row_bytes(SD_TYPE_Q8_0, n_in);
    uint8_t *w = malloc(wrb * n_out), *x = malloc(xrb * n_rows);
    assert_true(sd_quantize_rows(SD_TYPE_Q8_0, wf, n_out, n_in, w));
    assert_true(sd_quantize_rows(SD_TYPE_Q8_0, xf, n_rows, n_in, x));
    assert_false(sd_quantize_rows(SD_TYPE_Q8_0, xf, n_rows, 100, x));
    float y[5 * 24];
    sd_matmul(SD_TYPE_Q8_0, w, wrb, n_out, n_in, x, xrb, n_rows, y, 0, n_out);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t o = 0; o < n_out; o++) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < n_in; k++) {
                ref += (double)wf[o * n_in + k] * xf[r * n_in + k];
                mag += fabs((double)wf[o * n_in + k] * xf[r * n_in + k]);
            }
            assert_true(fabs(y[r * n_out + o] - ref) < 0.02 * mag);
        }
    }
    free(wf);
    free(xf);
    free(w);
    free(x);
}

static void test_traits(void **state) {
    (void)state;
    size_t b;
    assert_true(sd_row_size(SD_TYPE_Q4_K, 512, &b) && b == 288);
    assert_true(sd_row_size(SD_TYPE_Q8_1, 64, &b) && b == 72);
    assert_false(sd_row_size(SD_TYPE_Q6_K, 640, &b));
    assert_null(sd_type_get(4));
    assert_string_equal(sd_type_name(SD_TYPE_Q5_0), "q5_0");
    assert_int_equal(sd_type_get(SD_TYPE_Q5_0)->vec_dot_type, SD_TYPE_Q8_0);
    assert_int_equal(sd_type_get(SD_TYPE_Q5_1)->vec_dot_type, SD_TYPE_Q8_1);
    assert_int_equal(sd_type_get(SD_TYPE_Q6_K)->vec_dot_type, SD_TYPE_Q8_K);
    assert_int_equal(sd_type_get(SD_TYPE_BF16)->vec_dot_type, SD_TYPE_F32);
    /* Asking for AVX2 gives it only where the CPU has it. */
    const enum sd_quant_impl got = sd_quant_set_impl(SD_IMPL_AVX2);
    assert_int_equal(got, sd_quant_avx2_supported() ? SD_IMPL_AVX2 : SD_IMPL_SCALAR);
    assert_int_equal(sd_quant_set_impl(SD_IMPL_SCALAR), SD_IMPL_SCALAR);
    sdt_use_auto();
    print_message("  implementation in use: %s\n", sd_quant_avx512_active() ? "avx512" : sd_quant_get_impl() == SD_IMPL_AVX2 ? "avx2" : "scalar");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traits),
        cmocka_unit_test(test_gguf_vectors),
        cmocka_unit_test(test_hand_q4_0_q8_0_q4_1),
        cmocka_unit_test(test_hand_q5),
        cmocka_unit_test(test_hand_k),
        cmocka_unit_test(test_fp16_edges),
        cmocka_unit_test(test_fp16_vs_f16c),
        cmocka_unit_test(test_quantizer_impls_agree),
        cmocka_unit_test(test_quantize_roundtrip),
        cmocka_unit_test(test_quantize_levels),
        cmocka_unit_test(test_vec_dot),
        cmocka_unit_test(test_vec_dot_extremes),
        cmocka_unit_test(test_bf16_dpbf16_semantics),
        cmocka_unit_test(test_matmul_tiles_bit_identical),
        cmocka_unit_test(test_avx512_batch_bit_identical),
        cmocka_unit_test(test_matmul_end_to_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
