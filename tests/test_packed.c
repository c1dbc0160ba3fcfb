/* tests/test_packed.c - the packed ("fast") kernels of graphs/packed.h:
 *   - every output equals, bit for bit, the order that packed.h documents,
 *     computed here from the GGUF blocks themselves (an independent
 *     reading of the format, not of the packed layout);
 *   - the scalar and SIMD implementations give the same bits;
 *   - batch invariance: a row's outputs do not depend on the row count, its
 *     index, its neighbours or how the output range is split;
 *   - the results are the dot products they stand for (within the
 *     activation quantization's error of a double-precision reference);
 *   - the activation preparation: values, sums and the split 32-sums;
 *   - q5's fifth bits in both layouts (masks, sliced), against the GGUF
 *     bits, and in every kernel that reads them;
 *   - the AMX tile program in scalar form (the packed layout as B tiles,
 *     activation rows as A tiles) gives the same bits, and the probe's
 *     fallback when tile data is refused;
 *   - where AMX is granted, the tile kernels give the VNNI kernels' bits,
 *     and the fallback when it is refused (simulated).
 */
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
#include "graphs/packed.h"
#include "graphs/quant.h"
#include "util_common.h"

static const enum sd_type k_types[] = {SD_TYPE_Q4_0, SD_TYPE_Q5_0, SD_TYPE_Q8_0, SD_TYPE_Q4_K, SD_TYPE_Q5_K,
                                       SD_TYPE_Q6_K, SD_TYPE_F32,  SD_TYPE_F16,  SD_TYPE_BF16};

static bool is_k(enum sd_type t) { return t == SD_TYPE_Q4_K || t == SD_TYPE_Q5_K || t == SD_TYPE_Q6_K; }
static bool is_f(enum sd_type t) { return t == SD_TYPE_F32 || t == SD_TYPE_F16 || t == SD_TYPE_BF16; }

static size_t row_bytes(enum sd_type t, int64_t n) {
    size_t b = 0;
    assert_true(sd_row_size(t, n, &b));
    return b;
}

static float half(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return sd_fp16_to_fp32(h);
}

/* Random floats with a per-32 magnitude between 1e-3 and 1e2. */
static void rand_floats(float *x, int64_t n, uint64_t *st) {
    float scale = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0) scale = powf(10.0f, 5.0f * (sdt_rand_float(st) + 1.0f) / 2.0f - 3.0f);
        x[i] = sdt_rand_float(st) * scale;
    }
}

/* The bytes [lo, hi) of a block of type t that hold its quants (every
 * stored value, q5's fifth bits and q6_K's high bits included); the rest
 * are its scales. */
static void quant_bytes(enum sd_type t, size_t *lo, size_t *hi) {
    *lo = t == SD_TYPE_Q6_K ? 0 : is_k(t) ? 16 : 2;
    *hi = t == SD_TYPE_Q6_K ? 192 : sd_type_get(t)->type_size;
}

/* n_out rows quantized from random floats; every fourth row is raw random
 * quants with sane scales, so all bit patterns (q8_0's -128 too) occur. */
static uint8_t *make_weights(enum sd_type t, int64_t n_out, int64_t n_in, uint64_t seed, float *deq) {
    const size_t rb = row_bytes(t, n_in);
    uint8_t *w = malloc(rb * (size_t)n_out);
    float *f = malloc(sizeof(float) * (size_t)n_in);
    assert_non_null(w);
    assert_non_null(f);
    uint64_t st = seed;
    for (int64_t o = 0; o < n_out; o++) {
        uint8_t *row = w + (size_t)o * rb;
        rand_floats(f, n_in, &st);
        assert_true(sd_quantize_row(t, f, row, n_in));
        if (o % 4 == 3 && !is_f(t)) {
            const struct sd_type_traits *tr = sd_type_get(t);
            for (int64_t b = 0; b < n_in / tr->blck_size; b++) {
                uint8_t *p = row + (size_t)b * tr->type_size;
                /* Randomize the quants, keep the scales the quantizer chose. */
                size_t lo, hi;
                quant_bytes(t, &lo, &hi);
                for (size_t i = lo; i < hi; i++) p[i] = (uint8_t)sdt_rand_u64(&st);
            }
        }
        sd_dequantize_row(t, row, deq + (size_t)o * (size_t)n_in, n_in);
    }
    free(f);
    return w;
}

/* ------------------------------------------ the documented order, from GGUF */

struct act {
    const int8_t *qs;
    const float *d;
    const int32_t *s;      /* 32-value class */
    const int32_t *c32;    /* K class */
    const int8_t *blo, *bhi;
};

static struct act act_of(enum sd_type t, const uint8_t *x, int64_t n) {
    struct act a = {.qs = (const int8_t *)x, .d = (const float *)(x + n)};
    if (is_k(t)) {
        a.c32 = (const int32_t *)(a.d + n / 256);
        a.blo = (const int8_t *)(a.c32 + n / 16);
        a.bhi = a.blo + n / 32;
    } else {
        a.s = (const int32_t *)(a.d + n / 32);
    }
    return a;
}

static float ref_q0(enum sd_type t, const uint8_t *w, const struct act *x, int64_t n) {
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        int32_t S = 0;
        float dw;
        if (t == SD_TYPE_Q8_0) {
            const struct sd_block_q8_0 *blk = (const void *)(w + (size_t)b * sizeof *blk);
            dw = half((const uint8_t *)blk);
            for (int k = 0; k < 32; k++) S += blk->qs[k] * x->qs[32 * b + k];
        } else {
            const bool q5 = t == SD_TYPE_Q5_0;
            const uint8_t *p = w + (size_t)b * (q5 ? 22 : 18);
            dw = half(p);
            uint32_t qh = 0;
            if (q5) memcpy(&qh, p + 2, 4);
            const uint8_t *qs = p + (q5 ? 6 : 2);
            for (int k = 0; k < 32; k++) {
                int q = k < 16 ? qs[k] & 15 : qs[k - 16] >> 4;
                if (q5) q |= ((qh >> k) & 1) << 4;
                S += (q - (q5 ? 16 : 8)) * x->qs[32 * b + k];
            }
        }
        acc = fmaf((float)S, dw * x->d[b], acc);
    }
    return acc;
}

static float ref_k(enum sd_type t, const uint8_t *w, const struct act *x, int64_t n) {
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 256; b++) {
        const int8_t *xb = x->qs + 256 * b;
        float T = 0.0f;
        int32_t M = 0;
        if (t == SD_TYPE_Q6_K) {
            const struct sd_block_q6_K *blk = (const void *)(w + (size_t)b * sizeof *blk);
            int8_t q[256];
            sd_unpack_q6_K(blk, q);
            for (int j = 0; j < 16; j++) {
                int32_t D = 0, bs = 0;
                for (int k = 0; k < 16; k++) D += (q[16 * j + k] - 32) * xb[16 * j + k], bs += xb[16 * j + k];
                assert_int_equal(-32 * bs, x->c32[16 * b + j]);
                T = fmaf((float)D, (float)blk->scales[j], T);
            }
            acc = fmaf(T, half((const uint8_t *)&blk->d) * x->d[b], acc);
            continue;
        }
        const bool q5 = t == SD_TYPE_Q5_K;
        const uint8_t *p = w + (size_t)b * (q5 ? sizeof(struct sd_block_q5_K) : sizeof(struct sd_block_q4_K));
        const uint8_t *qh = p + 16, *qs = p + (q5 ? 48 : 16);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            sd_scale_min_k4(j, p + 4, &sc, &m);
            int32_t S = 0, bsum = 0;
            for (int l = 0; l < 32; l++) {
                const uint8_t byte = qs[32 * (j / 2) + l];
                int q = j % 2 ? byte >> 4 : byte & 15;
                if (q5) q |= ((qh[l] >> j) & 1) << 4;
                S += q * xb[32 * j + l];
                bsum += xb[32 * j + l];
            }
            assert_int_equal(bsum, 256 * x->bhi[8 * b + j] + x->blo[8 * b + j]);
            T = fmaf((float)S, (float)sc, T);
            M += m * bsum;
        }
        acc = fmaf(T, half(p) * x->d[b], acc);
        acc = fmaf(-(float)M, half(p + 2) * x->d[b], acc);
    }
    return acc;
}

static float ref_f(enum sd_type t, const uint8_t *w, const float *x, int64_t n) {
    float a[4] = {0, 0, 0, 0};
    for (int64_t k = 0; k < n; k++) {
        float wk;
        if (t == SD_TYPE_F32) {
            memcpy(&wk, w + 4 * k, 4);
        } else {
            uint16_t h;
            memcpy(&h, w + 2 * k, 2);
            wk = t == SD_TYPE_F16 ? sd_fp16_to_fp32(h) : sd_bf16_to_fp32(h);
        }
        a[k % 4] = fmaf(wk, x[k], a[k % 4]);
    }
    return (a[0] + a[1]) + (a[2] + a[3]);
}

static float ref_dot(enum sd_type t, const uint8_t *wrow, const uint8_t *xrow, int64_t n) {
    if (is_f(t)) return ref_f(t, wrow, (const float *)xrow, n);
    const struct act a = act_of(t, xrow, n);
    return is_k(t) ? ref_k(t, wrow, &a, n) : ref_q0(t, wrow, &a, n);
}

/* ------------------------------------------------------------- helpers */

struct mat {
    enum sd_type t;
    int64_t n_out, n_in, n_rows;
    uint8_t *w, *wp, *xq;
    float *deq, *xf;
    size_t xrb;
};

static struct mat make_mat(enum sd_type t, int64_t n_out, int64_t n_in, int64_t n_rows, uint64_t seed) {
    struct mat m = {.t = t, .n_out = n_out, .n_in = n_in, .n_rows = n_rows};
    m.deq = malloc(sizeof(float) * (size_t)(n_out * n_in));
    m.w = make_weights(t, n_out, n_in, seed, m.deq);
    const size_t pb = sd_packed_bytes(t, n_out, n_in);
    assert_true(pb > 0);
    m.wp = sd_aligned_alloc(pb);
    sd_pack_weights(t, m.w, row_bytes(t, n_in), n_out, n_in, m.wp);
    m.xrb = sd_packed_act_row_bytes(t, n_in);
    assert_int_equal(m.xrb % 64, 0);
    m.xq = sd_aligned_alloc(m.xrb * (size_t)n_rows);
    m.xf = malloc(sizeof(float) * (size_t)(n_rows * n_in));
    uint64_t st = seed ^ 0x5bd1e995;
    rand_floats(m.xf, n_rows * n_in, &st);
    for (int64_t r = 0; r < n_rows; r++)
        sd_packed_quantize_act(t, m.xf + r * n_in, m.xq + (size_t)r * m.xrb, n_in);
    return m;
}

static void free_mat(struct mat *m) {
    free(m->w);
    free(m->deq);
    free(m->xf);
    sd_aligned_free(m->wp);
    sd_aligned_free(m->xq);
}

static float *run(const struct mat *m, const uint8_t *xq, int64_t n_rows, int64_t ob, int64_t oe) {
    float *y = calloc((size_t)(n_rows * m->n_out), sizeof(float));
    sd_packed_matmul(m->t, m->wp, m->n_out, m->n_in, xq, m->xrb, n_rows, y + ob, (size_t)m->n_out, ob, oe);
    return y;
}

/* --------------------------------------------------------------- tests */

/* The check of check_documented in the layout m is packed in now (b). */
static void check_documented_now(const struct mat *m, int b) {
    const size_t wrb = row_bytes(m->t, m->n_in);
    for (int i = SDT_SCALAR; i <= SDT_AVX512_GFNI; i++) {
        if (!sdt_use_impl((enum sdt_impl)i)) continue;
        float *y = run(m, m->xq, m->n_rows, 0, m->n_out);
        for (int64_t r = 0; r < m->n_rows; r++)
            for (int64_t o = 0; o < m->n_out; o++) {
                const float want = ref_dot(m->t, m->w + (size_t)o * wrb, m->xq + (size_t)r * m->xrb, m->n_in);
                const float got = y[r * m->n_out + o];
                if (memcmp(&want, &got, 4))
                    fail_msg("%s impl %d bits %d n_in %lld: row %lld out %lld: %.9g, documented order %.9g",
                             sd_type_name(m->t), i, b, (long long)m->n_in, (long long)r, (long long)o, got,
                             want);
            }
        free(y);
    }
    sdt_use_auto();
}

/* Packs m again in q5's fifth-bit layout b (graphs/packed.h). */
static void repack(struct mat *m, enum sd_pk_bits b) {
    sd_packed_set_bits(b);
    sd_pack_weights(m->t, m->w, row_bytes(m->t, m->n_in), m->n_out, m->n_in, m->wp);
}

/* fn(arg, b) with q5's fifth bits in each layout b, then the process's
 * layout again. */
static void in_both_layouts(void (*fn)(void *arg, enum sd_pk_bits b), void *arg) {
    const enum sd_pk_bits here = sd_packed_bits();
    for (int b = SD_PK_BITS_MASKS; b <= SD_PK_BITS_SLICED; b++) {
        sd_packed_set_bits((enum sd_pk_bits)b);
        fn(arg, (enum sd_pk_bits)b);
    }
    sd_packed_set_bits(here);
}

static void repack_and_check(void *m, enum sd_pk_bits b) {
    repack(m, b);
    check_documented_now(m, (int)b);
}

/* Every implementation available here gives, on every output of m, the
 * bits of the documented order computed from m's GGUF rows, with q5's
 * fifth bits in either layout (on AVX-512 sliced bits take the AVX2
 * kernels; m is packed in the process's layout again at the end). */
static void check_documented(struct mat *m) {
    in_both_layouts(repack_and_check, m);
    repack(m, sd_packed_bits());
}

/* Every implementation gives the documented order's bits on every output. */
static void test_documented_order(void **state) {
    (void)state;
    /* 7 rows take a pass of 4 and one of 3 on AVX-512. The last: 21 rows
     * take the many-row kernels (rows in 8 + 8 + 4 + 1), over 72 blocks or
     * 9 super-blocks: three windows of unpacked weights. */
    const int64_t shapes[][3] = {{37, 512, 5}, {16, 256, 1}, {70, 768, 9}, {48, 512, 7}, {20, 2304, 21}};
    for (size_t ti = 0; ti < SD_ARRAY_LEN(k_types); ti++) {
        for (size_t si = 0; si < SD_ARRAY_LEN(shapes); si++) {
            const enum sd_type t = k_types[ti];
            struct mat m = make_mat(t, shapes[si][0], shapes[si][1], shapes[si][2], 1000 + 31 * ti + si);
            check_documented(&m);
            free_mat(&m);
        }
    }
}

/* The largest sums the kernels can meet: every stored value at its
 * maximum (q8_0's at -128) against activations all +127 or all -127, where
 * the AVX2 kernels' 16-bit partial sums come closest to overflowing (a
 * group of steps one longer than packed_avx2_kernels.h allows wraps here
 * and fails). Every implementation gives the documented order's bits. */
static void test_extreme_sums(void **state) {
    (void)state;
    for (size_t ti = 0; ti < SD_ARRAY_LEN(k_types); ti++) {
        const enum sd_type t = k_types[ti];
        if (is_f(t)) continue;
        struct mat m = make_mat(t, 32, 512, 9, 77 + ti);
        const struct sd_type_traits *tr = sd_type_get(t);
        const size_t wrb = row_bytes(t, m.n_in);
        size_t lo, hi;
        quant_bytes(t, &lo, &hi);
        for (int64_t o = 0; o < m.n_out; o++)
            for (int64_t b = 0; b < m.n_in / tr->blck_size; b++)
                memset(m.w + (size_t)o * wrb + (size_t)b * tr->type_size + lo,
                       t == SD_TYPE_Q8_0 ? 0x80 : 0xFF, hi - lo);
        sd_pack_weights(t, m.w, wrb, m.n_out, m.n_in, m.wp);
        for (int64_t r = 0; r < m.n_rows; r++) {
            for (int64_t k = 0; k < m.n_in; k++)
                m.xf[r * m.n_in + k] = r % 2 ? -1.0f : 1.0f;
            sd_packed_quantize_act(t, m.xf + r * m.n_in, m.xq + (size_t)r * m.xrb, m.n_in);
            assert_int_equal(((const int8_t *)(m.xq + (size_t)r * m.xrb))[5], r % 2 ? -127 : 127);
        }
        check_documented(&m);
        free_mat(&m);
    }
}

/* A prefill's chunk of 64 rows into an aligned output whose rows are whole
 * groups goes out by streaming stores (graphs/packed.c, stream_rows): every
 * row's outputs are still each its own one-row product's, in the rows of
 * the full chunk and of the short one after it, and a range starting
 * inside a group (not aligned: ordinary stores) agrees. */
static void test_streamed_rows(void **state) {
    (void)state;
    for (size_t ti = 0; ti < SD_ARRAY_LEN(k_types); ti++) {
        const enum sd_type t = k_types[ti];
        struct mat m = make_mat(t, 48, 512, 70, 31 + ti);
        const size_t bytes = sizeof(float) * (size_t)(m.n_rows * m.n_out);
        float *all = sd_aligned_alloc(bytes), *cut = sd_aligned_alloc(bytes);
        memset(all, 0, bytes), memset(cut, 0, bytes);
        sd_packed_matmul(t, m.wp, m.n_out, m.n_in, m.xq, m.xrb, m.n_rows, all, (size_t)m.n_out, 0, m.n_out);
        for (int64_t r = 0; r < m.n_rows; r++) {
            float *one = run(&m, m.xq + (size_t)r * m.xrb, 1, 0, m.n_out);
            if (memcmp(one, all + r * m.n_out, sizeof(float) * (size_t)m.n_out))
                fail_msg("%s: row %lld of 70 differs from its one-row product", sd_type_name(t),
                         (long long)r);
            free(one);
        }
        sd_packed_matmul(t, m.wp, m.n_out, m.n_in, m.xq, m.xrb, m.n_rows, cut, (size_t)m.n_out, 0, 5);
        sd_packed_matmul(t, m.wp, m.n_out, m.n_in, m.xq, m.xrb, m.n_rows, cut + 5, (size_t)m.n_out, 5,
                         m.n_out);
        assert_memory_equal(cut, all, bytes);
        sd_aligned_free(all), sd_aligned_free(cut);
        free_mat(&m);
    }
}

/* A row's outputs are the same alone, at another index among other rows,
 * and whatever output range a thread takes. */
static void test_batch_invariance(void **state) {
    (void)state;
    for (size_t ti = 0; ti < SD_ARRAY_LEN(k_types); ti++) {
        const enum sd_type t = k_types[ti];
        struct mat m = make_mat(t, 53, 512, 70, 77 + ti); /* 70 rows: two row chunks */
        float *all = run(&m, m.xq, m.n_rows, 0, m.n_out);
        for (int64_t r = 0; r < m.n_rows; r += 13) {
            float *one = run(&m, m.xq + (size_t)r * m.xrb, 1, 0, m.n_out);
            assert_memory_equal(one, all + r * m.n_out, sizeof(float) * (size_t)m.n_out);
            free(one);
        }
        /* Ranges that cut groups: [0, 5), [5, 21), [21, 53). */
        float *split = calloc((size_t)(m.n_rows * m.n_out), sizeof(float));
        const int64_t cuts[] = {0, 5, 21, 53};
        for (int c = 0; c < 3; c++)
            sd_packed_matmul(t, m.wp, m.n_out, m.n_in, m.xq, m.xrb, m.n_rows, split + cuts[c], (size_t)m.n_out,
                             cuts[c], cuts[c + 1]);
        assert_memory_equal(split, all, sizeof(float) * (size_t)(m.n_rows * m.n_out));
        free(split);
        free(all);
        free_mat(&m);
    }
}

/* The value of activation k of a prepared row, as the kernels see it. */
static double act_value(enum sd_type t, const uint8_t *xrow, int64_t n, int64_t k) {
    if (is_f(t)) return ((const float *)xrow)[k];
    const struct act a = act_of(t, xrow, n);
    return (double)a.qs[k] * a.d[k / (is_k(t) ? 256 : 32)];
}

/* The results are the dot products they stand for: within float rounding
 * of double precision over the dequantized weights and the prepared
 * activations (which catches a wrong sign or scale that a bit-for-bit
 * comparison with a reading of the same formula would share). */
static void test_close_to_exact(void **state) {
    (void)state;
    for (size_t ti = 0; ti < SD_ARRAY_LEN(k_types); ti++) {
        const enum sd_type t = k_types[ti];
        struct mat m = make_mat(t, 32, 1024, 3, 500 + ti);
        float *y = run(&m, m.xq, m.n_rows, 0, m.n_out);
        for (int64_t r = 0; r < m.n_rows; r++)
            for (int64_t o = 0; o < m.n_out; o++) {
                double exact = 0, mag = 0;
                for (int64_t k = 0; k < m.n_in; k++) {
                    const double p = (double)m.deq[o * m.n_in + k] * act_value(t, m.xq + (size_t)r * m.xrb, m.n_in, k);
                    exact += p;
                    mag += fabs(p);
                }
                const double tol = 1e-4 * mag + 1e-6;
                if (fabs(y[r * m.n_out + o] - exact) > tol)
                    fail_msg("%s row %lld out %lld: %.6g vs exact %.6g (tolerance %.3g)", sd_type_name(t),
                             (long long)r, (long long)o, y[r * m.n_out + o], exact, tol);
            }
        free(y);
        free_mat(&m);
    }
}

/* Activation rows: values within half a step, sums exact, NaN as 0. */
static void test_activations(void **state) {
    (void)state;
    const enum sd_type ts[] = {SD_TYPE_Q8_0, SD_TYPE_Q4_K};
    for (size_t ti = 0; ti < 2; ti++) {
        const enum sd_type t = ts[ti];
        const int64_t n = 512, bs = is_k(t) ? 256 : 32;
        float x[512];
        uint64_t st = 9 + ti;
        rand_floats(x, n, &st);
        x[7] = NAN;
        for (int i = 64; i < 96; i++) x[i] = 0.0f; /* an all-zero block */
        uint8_t *q = sd_aligned_alloc(sd_packed_act_row_bytes(t, n));
        sd_packed_quantize_act(t, x, q, n);
        const struct act a = act_of(t, q, n);
        for (int64_t b = 0; b < n / bs; b++) {
            float amax = 0;
            for (int64_t k = 0; k < bs; k++)
                if (x[b * bs + k] == x[b * bs + k]) amax = fmaxf(amax, fabsf(x[b * bs + k]));
            assert_true(a.d[b] == amax / 127.f);
            int32_t sum = 0;
            for (int64_t k = 0; k < bs; k++) {
                const float v = x[b * bs + k];
                const int q8 = a.qs[b * bs + k];
                if (v != v || amax == 0) {
                    assert_int_equal(q8, 0);
                } else {
                    assert_true(fabsf(v / a.d[b] - (float)q8) <= 0.5001f);
                }
                sum += q8;
            }
            if (!is_k(t)) assert_int_equal(sum, a.s[b]);
        }
        if (is_k(t))
            for (int64_t j = 0; j < n / 32; j++) {
                int32_t s = 0;
                for (int k = 0; k < 32; k++) s += a.qs[32 * j + k];
                assert_int_equal(-32 * s, a.c32[2 * j] + a.c32[2 * j + 1]);
                assert_int_equal(s, 256 * a.bhi[j] + a.blo[j]);
            }
        sd_aligned_free(q);
    }
}

/* Ties round to even, as nearbyintf does: a block whose largest value is
 * 127 has scale 1, so its values are the rounded inputs. */
static void test_activation_ties(void **state) {
    (void)state;
    float x[32] = {127.f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 126.5f, -126.5f, 1.5f, -1.5f, 0.49999997f, 64.5f};
    for (int i = 12; i < 32; i++) x[i] = (float)(i - 20) * 0.75f;
    uint8_t *q = sd_aligned_alloc(sd_packed_act_row_bytes(SD_TYPE_Q8_0, 32));
    sd_packed_quantize_act(SD_TYPE_Q8_0, x, q, 32);
    const struct act a = act_of(SD_TYPE_Q8_0, q, 32);
    assert_true(a.d[0] == 1.0f);
    for (int i = 0; i < 32; i++) assert_int_equal(a.qs[i], (int)nearbyintf(x[i]));
    sd_aligned_free(q);
}

/* Every implementation prepares the same bytes (NaN, infinities, zero
 * blocks and ties included). */
static void test_activation_impls(void **state) {
    (void)state;
    const enum sd_type ts[] = {SD_TYPE_Q8_0, SD_TYPE_Q4_K};
    for (size_t ti = 0; ti < 2; ti++) {
        const int64_t n = 1024;
        float x[1024];
        uint64_t st = 77 + ti;
        rand_floats(x, n, &st);
        x[3] = NAN, x[40] = INFINITY, x[300] = -INFINITY, x[600] = 2.5f;
        for (int i = 64; i < 96; i++) x[i] = 0.0f;
        const size_t rb = sd_packed_act_row_bytes(ts[ti], n);
        uint8_t *ref = sd_aligned_alloc(rb), *got = sd_aligned_alloc(rb);
        memset(ref, 0, rb);
        assert_true(sdt_use_impl(SDT_SCALAR));
        sd_packed_quantize_act(ts[ti], x, ref, n);
        for (int i = SDT_AVX2; i <= SDT_AVX512_GFNI; i++) {
            if (!sdt_use_impl((enum sdt_impl)i)) continue;
            memset(got, 0, rb);
            sd_packed_quantize_act(ts[ti], x, got, n);
            assert_memory_equal(got, ref, rb);
        }
        sdt_use_auto();
        sd_aligned_free(ref);
        sd_aligned_free(got);
    }
}

/* Packing in group ranges (as the backend's threads do) gives the bytes of
 * packing the whole matrix, in either fifth-bit layout. */
static void test_pack_ranges_now(void *arg, enum sd_pk_bits b) {
    (void)arg, (void)b;
    for (size_t ti = 0; ti < SD_ARRAY_LEN(k_types); ti++) {
        const enum sd_type t = k_types[ti];
        struct mat m = make_mat(t, 53, 512, 1, 900 + ti); /* 4 groups, the last one partial */
        const size_t pb = sd_packed_bytes(t, m.n_out, m.n_in);
        uint8_t *parts = sd_aligned_alloc(pb);
        memset(parts, 0xA5, pb);
        const int64_t cuts[] = {0, 1, 3, 4};
        for (int c = 0; c < 3; c++)
            sd_pack_groups(t, m.w, row_bytes(t, m.n_in), m.n_out, m.n_in, parts, cuts[c], cuts[c + 1]);
        assert_memory_equal(parts, m.wp, pb);
        sd_aligned_free(parts);
        free_mat(&m);
    }
}

static void test_pack_ranges(void **state) {
    (void)state;
    in_both_layouts(test_pack_ranges_now, NULL);
}

/* Gathering outputs from a packed copy (a calibration head's subset) gives
 * the bytes that packing those GGUF rows gives: every type, outputs from
 * every lane, in any order, repeated, from a partial last group; in either
 * fifth-bit layout. */
static void test_pack_gather_now(void *arg, enum sd_pk_bits b) {
    (void)arg, (void)b;
    const int32_t rows[] = {52, 0, 17, 16, 15, 31, 1, 48, 33, 7, 7, 50, 2, 3, 4, 5, 6, 8, 9, 10, 11};
    const int64_t n = (int64_t)SD_ARRAY_LEN(rows);
    for (size_t ti = 0; ti < SD_ARRAY_LEN(k_types); ti++) {
        const enum sd_type t = k_types[ti];
        struct mat m = make_mat(t, 53, 512, 1, 700 + ti);
        const size_t rb = row_bytes(t, m.n_in), pb = sd_packed_bytes(t, n, m.n_in);
        uint8_t *sub = malloc((size_t)n * rb), *want = sd_aligned_alloc(pb), *got = sd_aligned_alloc(pb);
        for (int64_t j = 0; j < n; j++) memcpy(sub + (size_t)j * rb, m.w + (size_t)rows[j] * rb, rb);
        sd_pack_weights(t, sub, rb, n, m.n_in, want);
        memset(got, 0xA5, pb);
        sd_pack_gather(t, m.wp, m.n_in, rows, n, got);
        if (memcmp(got, want, pb)) fail_msg("%s: gathered outputs differ from packing their rows", sd_type_name(t));
        free(sub);
        sd_aligned_free(want);
        sd_aligned_free(got);
        free_mat(&m);
    }
}

static void test_pack_gather(void **state) {
    (void)state;
    in_both_layouts(test_pack_gather_now, NULL);
}

/* q5_0's fifth bits where packed.h says each layout puts them, read from
 * the GGUF blocks (qh bit j: value j's): in masks, bit 4c + e of mask s;
 * sliced, bit s of byte 4c + e. The process's layout is sliced exactly
 * where the AVX2 kernels run without the AVX-512 ones, and the two carry
 * different layout versions (masks keeping the one caches had before). */
static void test_bits_layout(void **state) {
    (void)state;
    const enum sd_pk_bits here = sd_packed_bits();
    assert_int_equal(here == SD_PK_BITS_SLICED, sd_quant_avx2_supported() && !sd_quant_avx512_supported());
    struct mat m = make_mat(SD_TYPE_Q5_0, 16, 32, 1, 4242);
    int ones = 0;
    for (int b = SD_PK_BITS_MASKS; b <= SD_PK_BITS_SLICED; b++) {
        repack(&m, (enum sd_pk_bits)b);
        assert_int_equal(sd_packed_layout_version(), b == SD_PK_BITS_MASKS ? 1016 : 2016);
        const uint8_t *bits = m.wp + 256;
        for (int c = 0; c < 16; c++) {
            uint32_t qh;
            memcpy(&qh, m.w + (size_t)c * 22 + 2, 4);
            for (int s = 0; s < 8; s++)
                for (int e = 0; e < 4; e++) {
                    const int want = (int)((qh >> (4 * s + e)) & 1);
                    uint64_t mask;
                    memcpy(&mask, bits + 8 * s, 8);
                    const int got =
                        b == SD_PK_BITS_MASKS ? (int)((mask >> (4 * c + e)) & 1) : (bits[4 * c + e] >> s) & 1;
                    if (got != want)
                        fail_msg("bits %d: output %d value %d: %d, GGUF %d", b, c, 4 * s + e, got, want);
                    ones += want;
                }
        }
    }
    assert_true(ones > 200 && ones < 824); /* 2 x 512 random bits: neither all 0 nor all 1 */
    repack(&m, here);
    free_mat(&m);
}

/* The tile program, emulated, on every 32-value type and every K type:
 * its results are the AVX-512 kernels' (and so the documented order's) bit
 * for bit, at row counts below, at and past one A tile of sixteen rows
 * (the K types at the 1.5B's 1,536 inputs: six super-blocks; the wide
 * kernels from 16 rows read their weights unpacked in windows). Needs
 * AVX-512 (the B tiles are the AVX-512 unpack's vectors); skipped without
 * it. */
static void test_amx_layout(void **state) {
    (void)state;
    if (!sdt_use_impl(SDT_AVX512)) {
        sdt_use_auto();
        printf("test_amx_layout: no AVX-512 here; the tile layout is checked where the CPU has it\n");
        skip();
    }
    const enum sd_type types[] = {SD_TYPE_Q4_0, SD_TYPE_Q5_0, SD_TYPE_Q8_0,
                                  SD_TYPE_Q4_K, SD_TYPE_Q5_K, SD_TYPE_Q6_K};
    const int64_t rows[] = {1, 4, 7, 16, 23};
    for (size_t ti = 0; ti < SD_ARRAY_LEN(types); ti++) {
        const bool k = types[ti] >= SD_TYPE_Q4_K;
        struct mat m = make_mat(types[ti], 16, k ? 1536 : 896, 23, 500 + ti);
        for (size_t ri = 0; ri < SD_ARRAY_LEN(rows); ri++) {
            _Alignas(64) float want[23 * 16], got[23 * 16];
            assert_true(sd_packed_group_avx512(types[ti], sd_quant_gfni_active(), m.wp, m.n_in, m.xq, m.xrb,
                                               rows[ri], want));
            assert_true(sd_packed_group_amx_emul(types[ti], m.wp, m.n_in, m.xq, m.xrb, rows[ri], got));
            assert_memory_equal(got, want, sizeof(float) * 16 * (size_t)rows[ri]);
        }
        free_mat(&m);
    }
    /* Types without an integer tile program are refused, not guessed. */
    float acc[16];
    assert_false(sd_packed_group_amx_emul(SD_TYPE_F16, NULL, 256, NULL, 0, 1, acc));
    assert_false(sd_packed_group_amx_emul(SD_TYPE_Q4_1, NULL, 256, NULL, 0, 1, acc));
    sdt_use_auto();
}

/* The probe: a refused request never reads as granted, and where the CPU
 * has AMX it reads as refused; the description names each state. */
static void test_amx_probe(void **state) {
    (void)state;
    const enum sd_amx real = sd_amx_probe(), refused = sd_amx_probe_as(true);
    assert_true(refused == SD_AMX_ABSENT || refused == SD_AMX_REFUSED);
    assert_int_equal(refused, real == SD_AMX_ABSENT ? SD_AMX_ABSENT : SD_AMX_REFUSED);
    assert_int_equal(sd_amx_probe(), real); /* probed once */
    assert_non_null(strstr(sd_amx_desc(SD_AMX_REFUSED), "refused"));
    assert_non_null(strstr(sd_amx_desc(SD_AMX_ABSENT), "no AMX"));
    assert_non_null(strstr(sd_amx_desc(SD_AMX_READY), "granted"));
    if (real == SD_AMX_ABSENT) printf("test_amx_probe: this CPU shows no AMX; the refusal is simulated only\n");
}

/* The tile kernels: where AMX is granted, passes of SD_AMX_MIN_ROWS rows
 * and more run on the tiles (the pass count moves; q6_K's stay on VNNI)
 * and give the VNNI kernels' bits on every integer type, at the instruct models' input
 * widths (896, 1,536, 4,864, 8,960), at row counts around one tile (16)
 * and one row chunk (64), and on output ranges that cut groups. Tiles
 * off, or the grant refused (simulated), the VNNI kernels run and give the
 * same bits. Skipped, and says so, where the CPU has no AMX. */
static void test_amx_kernels(void **state) {
    (void)state;
    if (!sd_packed_amx_active()) {
        printf("test_amx_kernels: AMX tiles not active here (%s); the layout is checked by test_amx_layout\n",
               sd_amx_desc(sd_amx_probe()));
        skip();
    }
    const enum sd_type types[] = {SD_TYPE_Q4_0, SD_TYPE_Q5_0, SD_TYPE_Q8_0,
                                  SD_TYPE_Q4_K, SD_TYPE_Q5_K, SD_TYPE_Q6_K};
    const int64_t rows[] = {3, 4, 5, 8, 15, 16, 17, 32, 33, 64, 70};
    for (size_t ti = 0; ti < SD_ARRAY_LEN(types); ti++) {
        const enum sd_type t = types[ti];
        const int64_t widths[2] = {is_k(t) ? 1536 : 896, is_k(t) ? 8960 : 4864};
        for (int wi = 0; wi < 2; wi++) {
            struct mat m = make_mat(t, 37, widths[wi], 70, 3100 + 7 * ti + (uint64_t)wi);
            for (size_t ri = 0; ri < SD_ARRAY_LEN(rows); ri++) {
                const int64_t nr = rows[ri], ob = ri % 2 ? 5 : 0, oe = ri % 3 ? m.n_out : 21;
                const uint64_t p0 = sd_packed_amx_passes();
                float *tiles = run(&m, m.xq, nr, ob, oe);
                const uint64_t p1 = sd_packed_amx_passes();
                if ((p1 > p0) != (nr >= SD_AMX_MIN_ROWS && t != SD_TYPE_Q6_K))
                    fail_msg("%s, %lld rows: %llu tile passes", sd_type_name(t), (long long)nr,
                             (unsigned long long)(p1 - p0));
                assert_false(sd_packed_set_amx(false));
                float *vnni = run(&m, m.xq, nr, ob, oe);
                assert_true(sd_packed_set_amx(true));
                assert_int_equal(sd_amx_simulate_refusal(true), SD_AMX_REFUSED);
                assert_false(sd_packed_amx_active());
                float *refused = run(&m, m.xq, nr, ob, oe);
                assert_int_equal(sd_amx_simulate_refusal(false), SD_AMX_READY);
                assert_int_equal(sd_packed_amx_passes(), p1);
                const size_t bytes = sizeof(float) * (size_t)(nr * m.n_out);
                if (memcmp(tiles, vnni, bytes) || memcmp(refused, vnni, bytes))
                    fail_msg("%s, %lld inputs, %lld rows: the tiles' outputs differ from the VNNI kernels'",
                             sd_type_name(t), (long long)m.n_in, (long long)nr);
                free(tiles), free(vnni), free(refused);
            }
            free_mat(&m);
        }
    }
}

static void test_names_and_sizes(void **state) {
    (void)state;
    enum sd_kernels k;
    assert_true(sd_kernels_parse(NULL, &k) && k == SD_KERNELS_FAST);
    assert_true(sd_kernels_parse("ggml", &k) && k == SD_KERNELS_GGML);
    assert_false(sd_kernels_parse("fastest", &k));
    assert_string_equal(sd_kernels_name(SD_KERNELS_FAST), "fast");
    assert_false(sd_packed_supported(SD_TYPE_Q4_1));
    assert_int_equal(sd_packed_bytes(SD_TYPE_Q4_K, 16, 100), 0); /* not whole blocks */
    /* The packed copy is no larger than the GGUF rows but for the group
     * padding and the K formats' unpacked scales (under 3%). */
    for (size_t ti = 0; ti < SD_ARRAY_LEN(k_types); ti++) {
        const size_t pb = sd_packed_bytes(k_types[ti], 1024, 2048), gb = 1024 * row_bytes(k_types[ti], 2048);
        assert_true(pb >= gb && pb <= gb + gb / 32);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_documented_order), cmocka_unit_test(test_extreme_sums),
        cmocka_unit_test(test_batch_invariance), cmocka_unit_test(test_streamed_rows),
        cmocka_unit_test(test_close_to_exact),   cmocka_unit_test(test_activations),
        cmocka_unit_test(test_activation_ties),  cmocka_unit_test(test_activation_impls),
        cmocka_unit_test(test_pack_ranges),      cmocka_unit_test(test_pack_gather),
        cmocka_unit_test(test_bits_layout),      cmocka_unit_test(test_names_and_sizes),
        cmocka_unit_test(test_amx_layout),       cmocka_unit_test(test_amx_probe),
        cmocka_unit_test(test_amx_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
