/* tests/test_attention.c - the fast-order attention of graphs/cpu/attention.h:
 * the scalar, AVX2 and AVX-512 paths give the same bits, and the scores are
 * the header's integer sums of quantized q and keys; the result is
 * softmax attention (against double precision); a key's contribution does
 * not depend on which cache slot holds it (only on its position order);
 * rows that share a run of keys give each row's own bits in a tile, and one
 * row's three steps split between threads give its bits too; p.V takes
 * its inputs in bf16 as the header says, on vdpbf16ps or not; and
 * sd_expf_sub gives sd_expf's bits on every path, as sd_silu_mul gives the
 * scalar SiLU's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graphs/cpu/attention.h"
#include "graphs/kv.h"
#include "graphs/quant.h"
#include "util_common.h"

enum { N_CTX = 1200, N_ALLOC = 1200 }; /* N_ALLOC: whole key blocks (graphs/kv.h) */

struct fixture {
    int32_t nh, hd, n;
    int16_t *k;      /* K's levels in key blocks, one K/V head (graphs/kv.h's integer keys) */
    float *ks;       /* [N_CTX] their scales */
    uint16_t *v;     /* [N_CTX][hd] bf16, as the fast order's cache holds V */
    float *q;        /* [nh][hd] */
    int32_t slots[N_CTX];
};

static void make(struct fixture *f, int32_t nh, int32_t hd, int32_t n, uint64_t seed) {
    f->nh = nh, f->hd = hd, f->n = n;
    f->k = calloc((size_t)N_ALLOC * (size_t)hd, sizeof(int16_t));
    f->ks = malloc(sizeof(float) * N_CTX);
    f->v = malloc(sizeof(uint16_t) * N_CTX * (size_t)hd);
    f->q = malloc(sizeof(float) * (size_t)(nh * hd));
    float *row = malloc(sizeof(float) * (size_t)hd);
    int16_t *lev = malloc(sizeof(int16_t) * (size_t)hd);
    uint64_t st = seed;
    for (int32_t s = 0; s < N_CTX; s++) {
        /* A few large channels, as the Qwen models' keys carry. */
        for (int32_t d = 0; d < hd; d++)
            row[d] = sdt_rand_float(&st) * (d % 13 == 5 ? 20.0f : 1.0f);
        f->ks[s] = sd_kv_quantize_key(row, hd, lev);
        sd_kv_keys_put(f->k, s, hd, lev);
    }
    free(row);
    free(lev);
    for (size_t i = 0; i < (size_t)N_CTX * (size_t)hd; i++)
        f->v[i] = sd_kv_fast_v(sdt_rand_float(&st) * 3.0f); /* V as the fast order writes it */
    for (int32_t i = 0; i < nh * hd; i++) f->q[i] = sdt_rand_float(&st) * 2.0f;
    /* Visible slots in position order, scattered over the cache. */
    for (int32_t i = 0; i < n; i++) f->slots[i] = (int32_t)((i * 7919) % N_CTX);
}

/* Level d of slot s. */
static int16_t key_level(const struct fixture *f, int32_t s, int32_t d) {
    return f->k[sd_kv_key_at(s, d, f->hd)];
}

/* The visible slots as the cache lays out a context: kind 0 scattered
 * (make's, gathered a key at a time), 1 consecutive from slot 0 (whole key
 * blocks, read where they lie), 2 consecutive from slot 5 (each block's
 * keys split between two of the cache's blocks) where they fit. */
enum { SLOT_KINDS = 3 };
static void slots_of_kind(struct fixture *f, int kind) {
    const int32_t from = kind == 2 && f->n + 5 <= N_CTX ? 5 : 0;
    for (int32_t i = 0; i < f->n; i++)
        f->slots[i] = kind == 0 ? (int32_t)((i * 7919) % N_CTX) : from + i;
}

static void unmake(struct fixture *f) {
    free(f->k);
    free(f->ks);
    free(f->v);
    free(f->q);
}

static float *run(const struct fixture *f, const int16_t *k, const float *ks, const uint16_t *v,
                  const int32_t *slots) {
    float *sc = malloc(sizeof(float) * (size_t)f->nh * (size_t)(f->n + 16));
    float *out = malloc(sizeof(float) * (size_t)(f->nh * f->hd));
    sd_attn_fast(f->q, f->nh, f->hd, k, ks, v, (size_t)f->hd, slots, f->n, 0.0625f, sc, out);
    free(sc);
    return out;
}

static void test_impls_agree_and_exact(void **state) {
    (void)state;
    const int32_t shapes[][3] = {{4, 256, 300}, {2, 64, 17}, {1, 16, 1},  {3, 128, 64}, {5, 24, 40},
                                 {7, 64, 200},  {6, 64, 33}, {5, 32, 50}, {2, 16, 9}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0] * SLOT_KINDS; t++) {
        const size_t s = t / SLOT_KINDS; /* every shape with each kind of slots */
        struct fixture f;
        make(&f, shapes[s][0], shapes[s][1], shapes[s][2], 11 + s);
        slots_of_kind(&f, (int)(t % SLOT_KINDS));
        float *ref = NULL;
        for (int i = 0; i < SDT_N_IMPLS; i++) {
            if (!sdt_use_impl(i)) continue;
            float *out = run(&f, f.k, f.ks, f.v, f.slots);
            if (!ref) {
                ref = out;
                continue;
            }
            assert_memory_equal(out, ref, sizeof(float) * (size_t)(f.nh * f.hd));
            free(out);
        }
        sdt_use_auto();
        /* Softmax attention in double precision. */
        for (int32_t h = 0; h < f.nh; h++) {
            double *w = malloc(sizeof(double) * (size_t)f.n), mx = -INFINITY, sum = 0;
            for (int32_t i = 0; i < f.n; i++) {
                double d = 0;
                for (int32_t e = 0; e < f.hd; e++)
                    d += (double)f.q[h * f.hd + e] * key_level(&f, f.slots[i], e) * f.ks[f.slots[i]];
                w[i] = d * 0.0625;
                mx = fmax(mx, w[i]);
            }
            for (int32_t i = 0; i < f.n; i++) sum += (w[i] = exp(w[i] - mx));
            for (int32_t e = 0; e < f.hd; e++) {
                double o = 0, mag = 0;
                for (int32_t i = 0; i < f.n; i++) {
                    const double tv = w[i] / sum * sd_bf16_to_fp32(f.v[(size_t)f.slots[i] * f.hd + e]);
                    o += tv;
                    mag += fabs(tv);
                }
                if (fabs(ref[h * f.hd + e] - o) > 5e-3 * mag + 1e-6) /* q of 12 bits, p and V in bf16 */
                    fail_msg("shape %zu head %d value %d: %.7g, exact %.7g", s, h, e, ref[h * f.hd + e], o);
            }
            free(w);
        }
        free(ref);
        unmake(&f);
    }
}

/* The scores as the header defines them, computed here from its words:
 * each head's q quantized to levels of at most min(2,047, (2^31 - 1) /
 * (8,191 head_dim)) with scale amax / levels, rounded to nearest even; the
 * exact integer sum of its levels and the key's; then (float)sum *
 * (key scale * (q scale * kscale)). Every path gives these bits, whatever
 * the split of the keys; q of zeros, a NaN and a tie of .5 included. */
static int16_t level_of(float x, float inv, float L) {
    const float r = isnan(x * inv) ? -L : fminf(fmaxf(x * inv, -L), L);
    return (int16_t)lrintf(r);
}

static void test_scores_integer(void **state) {
    (void)state;
    const int32_t shapes[][3] = {{7, 64, 201}, {4, 256, 300}, {6, 128, 77}, {1, 16, 1}, {2, 48, 40}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0] * SLOT_KINDS; t++) {
        const size_t s = t / SLOT_KINDS; /* every shape with each kind of slots */
        struct fixture f;
        make(&f, shapes[s][0], shapes[s][1], shapes[s][2], 120 + s);
        slots_of_kind(&f, (int)(t % SLOT_KINDS));
        const int32_t nh = f.nh, hd = f.hd, n = f.n;
        const size_t cap = ((size_t)n + 15) / 16 * 16;
        if (s == 1) memset(f.q + hd, 0, sizeof(float) * (size_t)hd); /* a head of zeros */
        if (s == 2) f.q[5] = NAN;
        if (s == 0) f.q[0] = 2047.0f, f.q[1] = 0.5f, f.q[2] = 1.5f, f.q[3] = -2.5f; /* ties: to even */
        const int64_t most = 2147483647LL / ((int64_t)hd * 8191);
        const float L = (float)(most < 2047 ? most : 2047); /* 1,024 at head_dim 256 */
        float *want = malloc(sizeof(float) * (size_t)nh * cap),
              *sc = malloc(sizeof(float) * (size_t)nh * cap);
        int16_t *lev = malloc(sizeof(int16_t) * (size_t)hd);
        for (int32_t h = 0; h < nh; h++) {
            const float *qh = f.q + (size_t)h * hd;
            float amax = 0.0f;
            for (int32_t d = 0; d < hd; d++)
                amax = fmaxf(amax, fabsf(qh[d]));
            const float inv = amax > 0.0f ? L / amax : 0.0f, qk = amax / L * 0.0625f;
            for (int32_t d = 0; d < hd; d++)
                lev[d] = level_of(qh[d], inv, L);
            for (int32_t i = 0; i < n; i++) {
                int64_t sum = 0;
                for (int32_t d = 0; d < hd; d++)
                    sum += (int64_t)lev[d] * key_level(&f, f.slots[i], d);
                want[(size_t)h * cap + i] = (float)sum * (f.ks[f.slots[i]] * qk);
            }
        }
        if (s == 0) {
            assert_int_equal(level_of(0.5f, 1.0f, L), 0);
            assert_int_equal(level_of(1.5f, 1.0f, L), 2);
            assert_int_equal(level_of(-2.5f, 1.0f, L), -2);
        }
        int ran = 0;
        for (int im = 0; im < SDT_N_IMPLS; im++) {
            if (!sdt_use_impl(im)) continue;
            ran++;
            memset(sc, 0xff, sizeof(float) * (size_t)nh * cap);
            sd_attn_fast_scores(f.q, nh, hd, f.k, f.ks, (size_t)hd, f.slots, n, 0, n / 2, 0.0625f, sc);
            sd_attn_fast_scores(f.q, nh, hd, f.k, f.ks, (size_t)hd, f.slots, n, n / 2, n, 0.0625f, sc);
            for (int32_t h = 0; h < nh; h++)
                if (memcmp(sc + (size_t)h * cap, want + (size_t)h * cap, sizeof(float) * (size_t)n))
                    fail_msg("shape %zu impl %d head %d: the scores are not the header's", s, im, h);
        }
        sdt_use_auto();
        if (ran < 2) fail_msg("shape %zu: only %d paths ran", s, ran);
        free(want), free(sc), free(lev);
        unmake(&f);
    }
}

static float to_bf16(float x) { return sd_bf16_to_fp32(sd_fp32_to_bf16(x)); }

/* The fast order's V values (sd_kv_fast_v): every fp16 value made the
 * bf16 value nearest it (ties to even) or, past fp16's range, the largest
 * bf16 that fp16 holds; each exact in fp16. And from any f32, the same as
 * rounding it to fp16 first by the scalar conversions (the function rounds
 * on the bits where it can): every exponent, each one's halfway cases and
 * those one step off. */
static uint16_t fast_v_reference(float x) {
    const float h = sd_fp16_to_fp32(sd_fp32_to_fp16(x)), y = to_bf16(h);
    return sd_fp32_to_bf16(isfinite(h) && fabsf(y) > 65504.0f ? copysignf(65280.0f, h) : y);
}

static void test_v_values(void **state) {
    (void)state;
    int changed = 0;
    for (uint32_t i = 0; i < 1u << 16; i++) { /* every fp16, NaNs and infinities too */
        const float x = sd_fp16_to_fp32((uint16_t)i), y = sd_bf16_to_fp32(sd_kv_fast_v(x));
        if (isnan(x)) {
            assert_true(isnan(y));
            continue;
        }
        const float b = to_bf16(x); /* the nearest bf16, ties to even, */
        assert_true(fabsf(b) > 65504.0f && isfinite(x) ? y == copysignf(65280.0f, x)
                                                       : b == y); /* or fp16's largest */
        assert_true(sd_fp16_to_fp32(sd_fp32_to_fp16(y)) == y);    /* exact in fp16 */
        changed += x != y;
    }
    if (changed < (1 << 16) / 4) fail_msg("only %d of 65,536 values rounded", changed);
    uint64_t st = 91;
    for (uint32_t e = 0; e < 256; e++)
        for (int k = 0; k < 400; k++) {
            uint32_t u = (e << 23) | (uint32_t)(sdt_rand_u64(&st) & 0x7FFFFFu) | (k & 1 ? 0x80000000u : 0);
            if (k % 4 >= 2) /* at or next to a tie of the fp16 or the bf16 rounding */
                u = (u & ~0x1FFFu) | (k % 8 < 4 ? 0x1000u : 0x0FFFu) | (k % 16 < 8 ? 0 : 0x10000u);
            float x;
            memcpy(&x, &u, 4);
            const uint16_t got = sd_kv_fast_v(x), want = fast_v_reference(x);
            if (isnan(x) ? !isnan(sd_bf16_to_fp32(got)) : got != want)
                fail_msg("%a (0x%08x): 0x%04x, want 0x%04x", (double)x, u, got, want);
        }
}

/* The header's reduce16. */
static float reduce16_ref(const float l[16]) {
    float t8[8], t4[4], t2[2];
    for (int j = 0; j < 8; j++)
        t8[j] = l[j] + l[j + 8];
    for (int j = 0; j < 4; j++)
        t4[j] = t8[j] + t8[j + 4];
    for (int j = 0; j < 2; j++)
        t2[j] = t4[j] + t4[j + 2];
    return t2[0] + t2[1];
}

/* Bitwise equal, a NaN equal to any NaN. */
static bool same(float a, float b) { return isnan(a) ? isnan(b) : !memcmp(&a, &b, sizeof a); }

/* The header's softmax of one head's n scores, from its words: e_i, their
 * sum in sixteen lanes and reduce16, p_i = e_i * (1 / sum) rounded to bf16
 * (to nearest even), zero below 2^-64; returns 1 / sum. */
static float softmax_ref(const float *sc, int32_t n, float *e, float *p) {
    float mx = sc[0], l[16] = {0};
    for (int32_t i = 1; i < n; i++)
        mx = sc[i] > mx ? sc[i] : mx;
    for (int32_t i = 0; i < n; i++)
        l[i % 16] += e[i] = sd_attn_expf(sc[i] - mx);
    const float inv = 1.0f / reduce16_ref(l);
    for (int32_t i = 0; i < n; i++) {
        const float x = e[i] * inv;
        p[i] = fabsf(x) < 0x1p-64f ? 0.0f : to_bf16(x);
    }
    return inv;
}

/* Whether sd_attn_fast_softmax gave head h the header's values: its p (or
 * its e, for a p.V that makes p itself: the same e for every key), zeros
 * to cap, and 1 / sum after the nh heads' scores. */
static bool softmax_is_ref(const float *got, int32_t nh, int32_t h, int32_t n, size_t cap, const float *e,
                           const float *p, float inv) {
    const float *g = got + (size_t)h * cap;
    bool as_p = true, as_e = true;
    for (int32_t i = 0; i < n; i++)
        as_p &= same(g[i], p[i]), as_e &= same(g[i], e[i]);
    bool zeros = true;
    for (size_t i = (size_t)n; i < cap; i++)
        zeros &= g[i] == 0.0f;
    return (as_p || as_e) && zeros && same(got[(size_t)nh * cap + (size_t)h], inv);
}

/* p.V in the header's bf16 order, from its words alone: the softmax's p
 * (softmax_ref, from the scores) and each output value fmaf over the keys
 * in pairs (i + 1, then i, for even i; a last key alone) of p and of V as
 * the fast order's cache holds it, on every path (one with q scaled up, so
 * that many p fall below 2^-64 and under the float minimum). */
static void test_pv_bf16_order(void **state) {
    (void)state;
    /* The last two: spans of keys whose p one row's passes share (attn_pv.c's PV_SPAN, 512), the
     * last one short and odd. */
    const int32_t shapes[][4] = {{7, 64, 201, 1}, {4, 256, 300, 1}, {1, 16, 1, 1},     {6, 64, 2, 1},
                                 {2, 32, 33, 1},  {7, 64, 150, 60}, {6, 128, 1100, 1}, {7, 64, 1037, 1}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0] * SLOT_KINDS; t++) {
        const size_t s = t / SLOT_KINDS; /* every shape with each kind of slots */
        struct fixture f;
        make(&f, shapes[s][0], shapes[s][1], shapes[s][2], 90 + s);
        slots_of_kind(&f, (int)(t % SLOT_KINDS));
        const int32_t nh = f.nh, hd = f.hd, n = f.n;
        const size_t cap = ((size_t)n + 15) / 16 * 16;
        for (int32_t i = 0; i < nh * hd; i++)
            f.q[i] *= (float)shapes[s][3];
        float *sc = malloc(sizeof(float) * (size_t)nh * (cap + 1)),
              *sc0 = malloc(sizeof(float) * (size_t)nh * cap),
              *out = malloc(sizeof(float) * (size_t)(nh * hd));
        float *want = malloc(sizeof(float) * (size_t)(nh * hd)), *e = malloc(sizeof(float) * (size_t)n),
              *p = malloc(sizeof(float) * (size_t)n);
        int ran = 0;
        for (int im = 0; im < SDT_N_IMPLS; im++) {
            if (!sdt_use_impl(im)) continue;
            ran++;
            sd_attn_fast_scores(f.q, nh, hd, f.k, f.ks, (size_t)hd, f.slots, n, 0, n, 0.0625f, sc);
            memcpy(sc0, sc, sizeof(float) * (size_t)nh * cap);
            sd_attn_fast_softmax(sc, nh, hd, n);
            int tiny = 0;
            for (int32_t h = 0; h < nh; h++) {
                const float inv = softmax_ref(sc0 + (size_t)h * cap, n, e, p);
                if (!softmax_is_ref(sc, nh, h, n, cap, e, p, inv))
                    fail_msg("shape %zu impl %d head %d: the softmax is not the header's", s, im, h);
                for (int32_t i = 0; i < n; i++)
                    tiny += p[i] == 0.0f;
                for (int32_t d = 0; d < hd; d++) {
                    float acc = 0.0f;
                    for (int32_t i = 0; i < n; i += 2) {
                        if (i + 1 < n)
                            acc = fmaf(p[i + 1], sd_bf16_to_fp32(f.v[(size_t)f.slots[i + 1] * hd + d]), acc);
                        acc = fmaf(p[i], sd_bf16_to_fp32(f.v[(size_t)f.slots[i] * hd + d]), acc);
                    }
                    want[h * hd + d] = acc;
                }
            }
            if (shapes[s][3] > 1 && tiny < n)
                fail_msg("shape %zu: only %d p of %d heads x %d keys are zero", s, tiny, nh, n);
            sd_attn_fast_pv(nh, hd, f.v, (size_t)hd, f.slots, n, sc, 0, hd, out);
            if (memcmp(want, out, sizeof(float) * (size_t)(nh * hd)))
                fail_msg("shape %zu impl %d: p.V differs", s, im);
        }
        sdt_use_auto();
        if (ran < 2) fail_msg("shape %zu: only %d paths ran", s, ran);
        free(sc), free(sc0), free(out), free(want), free(e), free(p);
        unmake(&f);
    }
    if (!sdt_use_impl(SDT_AVX512_BF16))
        print_message("p.V on vdpbf16ps: this CPU has no AVX512_BF16, not run\n");
    sdt_use_auto();
}

/* The same keys in other cache slots give the same bits: the order is by
 * position, never by slot. */
static void test_slot_independent(void **state) {
    (void)state;
    struct fixture f;
    make(&f, 4, 256, 100, 5);
    float *a = run(&f, f.k, f.ks, f.v, f.slots);
    int16_t *k2 = calloc((size_t)N_ALLOC * 256, 2), lev[256];
    uint16_t *v2 = calloc((size_t)N_CTX * 256, 2);
    float *ks2 = calloc(N_CTX, sizeof(float));
    int32_t slots2[N_CTX];
    for (int32_t i = 0; i < f.n; i++) {
        slots2[i] = N_CTX - 1 - i;
        sd_kv_keys_get(f.k, f.slots[i], 256, lev);
        sd_kv_keys_put(k2, slots2[i], 256, lev);
        memcpy(v2 + (size_t)slots2[i] * 256, f.v + (size_t)f.slots[i] * 256, 512);
        ks2[slots2[i]] = f.ks[f.slots[i]];
    }
    float *b = run(&f, k2, ks2, v2, slots2);
    assert_memory_equal(a, b, sizeof(float) * 4 * 256);
    free(a);
    free(b);
    free(k2);
    free(v2);
    free(ks2);
    unmake(&f);
}

/* A tile of rows over one cache, each row's keys a head of its own, the
 * shared run, then a tail of its own (a causal prefill chunk under a
 * sliding window, or a draft tree over the cache): each row's result is
 * sd_attn_fast's for that row alone, bit for bit, on every path, for one
 * to nine rows, (row, head) pair counts that fill tiles of sixteen and the
 * scores' groups of four or leave a part (the 0.5B's seven heads of eight
 * rows, 3.5 tiles; the 1.5B's six, three), every size of the AVX2
 * scores' last group of pairs (one to six: seven pairs leave one), and
 * more pairs than the scores take in one pass over the keys (64). */
static void test_rows_tile(void **state) {
    (void)state;
    const int32_t shapes[][3] = {{4, 256, 9}, {4, 256, 8}, {1, 64, 3}, {7, 32, 5},  {2, 48, 1}, {4, 16, 4},
                                 {8, 32, 9},  {7, 64, 8},  {6, 64, 8}, {14, 64, 5}, {1, 64, 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int32_t nh = shapes[s][0], hd = shapes[s][1], R = shapes[s][2], m = 150;
        struct fixture f;
        make(&f, nh, hd, 1, 40 + s);
        uint64_t st = 7 + s;
        /* V the fast order did not write (any bf16, down to 2^-60, below
         * what fp16 holds, where a sum may meet denormals): a path's bits
         * still do not depend on the batch. */
        for (size_t i = 0; i < (size_t)N_CTX * (size_t)hd; i++)
            f.v[i] = sd_fp32_to_bf16(ldexpf(sdt_rand_float(&st), -(int)(sdt_rand_u64(&st) % 61)));
        struct sd_attn_row rows[9];
        int32_t slots[9][N_CTX];
        float *q[9], *sc[9], *out[9];
        for (int32_t r = 0; r < R; r++) {
            const int32_t a = (int32_t)(sdt_rand_u64(&st) % 20), tail = (int32_t)(sdt_rand_u64(&st) % 40);
            /* Head keys from slots [200, 220), the run [0, m), the tail from [220, 300). */
            for (int32_t i = 0; i < a; i++) slots[r][i] = 200 + i;
            /* The run scattered, whole key blocks from slot 0, or from slot 3. */
            for (int32_t i = 0; i < m; i++)
                slots[r][a + i] = s % 3 == 0 ? (i * 37) % m : (s % 3 == 1 ? 0 : 3) + i;
            for (int32_t i = 0; i < tail; i++) slots[r][a + m + i] = 220 + (r * 11 + i * 3) % 80;
            q[r] = malloc(sizeof(float) * (size_t)(nh * hd));
            for (int32_t i = 0; i < nh * hd; i++) q[r][i] = sdt_rand_float(&st) * 2.0f;
            const int32_t n = a + m + tail;
            sc[r] = malloc(sizeof(float) * (size_t)nh * (size_t)(n + 16));
            out[r] = malloc(sizeof(float) * (size_t)(nh * hd));
            rows[r] = (struct sd_attn_row){q[r], slots[r], n, a, sc[r], out[r]};
        }
        for (int i = 0; i < SDT_N_IMPLS; i++) {
            if (!sdt_use_impl(i)) continue;
            sd_attn_fast_rows(rows, R, m, nh, hd, f.k, f.ks, f.v, (size_t)hd, 0.0625f);
            for (int32_t r = 0; r < R; r++) {
                float *want = malloc(sizeof(float) * (size_t)(nh * hd));
                float *ws = malloc(sizeof(float) * (size_t)nh * (size_t)(rows[r].n + 16));
                sd_attn_fast(q[r], nh, hd, f.k, f.ks, f.v, (size_t)hd, slots[r], rows[r].n, 0.0625f, ws,
                             want);
                if (memcmp(want, out[r], sizeof(float) * (size_t)(nh * hd)))
                    fail_msg("shape %zu impl %d row %d differs from its one-row attention", s, i, r);
                free(want);
                free(ws);
            }
        }
        sdt_use_auto();
        for (int32_t r = 0; r < R; r++) free(q[r]), free(sc[r]), free(out[r]);
        unmake(&f);
    }
}

/* One row in three steps shared by threads (scores of a split of the keys,
 * softmax, a split of the output values: 16 at a time, and in two halves
 * as two threads take them): sd_attn_fast's bits on every path, whatever
 * the split points. */
static void test_split_steps(void **state) {
    (void)state;
    const int32_t shapes[][3] = {{4, 256, 300}, {2, 64, 17}, {7, 32, 40}, {1, 16, 1}, {7, 64, 200}, {6, 64, 90}, {8, 128, 50}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0] * SLOT_KINDS; t++) {
        const size_t s = t / SLOT_KINDS; /* every shape with each kind of slots */
        struct fixture f;
        make(&f, shapes[s][0], shapes[s][1], shapes[s][2], 60 + s);
        slots_of_kind(&f, (int)(t % SLOT_KINDS));
        const int32_t nh = f.nh, hd = f.hd, n = f.n;
        for (int i = 0; i < SDT_N_IMPLS; i++) {
            if (!sdt_use_impl(i)) continue;
            float *want = run(&f, f.k, f.ks, f.v, f.slots);
            float *sc = malloc(sizeof(float) * (size_t)nh * (size_t)(n + 16));
            float *out = malloc(sizeof(float) * (size_t)(nh * hd));
            const int32_t cuts[] = {0, n / 3, n / 3 + 1, n};
            for (int c = 0; c < 3; c++)
                sd_attn_fast_scores(f.q, nh, hd, f.k, f.ks, (size_t)hd, f.slots, n, cuts[c], cuts[c + 1],
                                    0.0625f, sc);
            sd_attn_fast_softmax(sc, nh, hd, n);
            for (int32_t d0 = 0; d0 < hd; d0 += 16)
                sd_attn_fast_pv(nh, hd, f.v, (size_t)hd, f.slots, n, sc, d0, d0 + 16, out);
            if (memcmp(want, out, sizeof(float) * (size_t)(nh * hd))) fail_msg("shape %zu impl %d differs", s, i);
            const int32_t half = hd / 32 * 16;
            memset(out, 0, sizeof(float) * (size_t)(nh * hd));
            sd_attn_fast_pv(nh, hd, f.v, (size_t)hd, f.slots, n, sc, 0, half, out);
            sd_attn_fast_pv(nh, hd, f.v, (size_t)hd, f.slots, n, sc, half, hd, out);
            if (memcmp(want, out, sizeof(float) * (size_t)(nh * hd))) fail_msg("shape %zu impl %d differs in halves", s, i);
            free(want), free(sc), free(out);
        }
        sdt_use_auto();
        unmake(&f);
    }
}

static void test_expf_sub(void **state) {
    (void)state;
    float x[203], want[203], got[203];
    uint64_t st = 3;
    for (int i = 0; i < 203; i++) x[i] = sdt_rand_float(&st) * 120.0f;
    x[5] = -200.0f, x[6] = 200.0f, x[7] = NAN, x[8] = 0.0f;
    for (int i = 0; i < 203; i++) want[i] = sd_expf(x[i] - 1.5f);
    for (int impl = 0; impl < SDT_N_IMPLS; impl++) {
        if (!sdt_use_impl(impl)) continue;
        memcpy(got, x, sizeof x);
        sd_expf_sub(got, 203, 1.5f);
        assert_memory_equal(got, want, sizeof got);
        /* Short rows, their tails under masks: the special values last, and
         * nothing past n written. */
        for (int n = 1; n <= 40; n++) {
            float y[48], yw[48];
            for (int i = 0; i < 48; i++)
                y[i] = x[20 + i];
            for (int t = 0; t < 4 && t < n; t++)
                y[n - 1 - t] = x[5 + t];
            for (int i = 0; i < 48; i++)
                yw[i] = i < n ? sd_expf(y[i] - 1.5f) : y[i];
            sd_expf_sub(y, n, 1.5f);
            assert_memory_equal(y, yw, sizeof y);
        }
    }
    sdt_use_auto();
    assert_true(fabsf(sd_expf(1.0f) - 2.7182817f) < 1e-6f);
}

/* The softmax's exponential: within 3e-6 of exp (double precision)
 * down to -44, 0 below, a NaN a NaN; and the softmax gives the header's p
 * (or e) and 1 / sum on every path, bit for bit, and p.V of them the
 * header's p.V (rows of every length, their tails under masks, values
 * either side of -44 from the maximum, p either side of 2^-64, a NaN in a
 * row). */
static void test_softmax_exp(void **state) {
    (void)state;
    double worst = 0;
    uint64_t st = 17;
    for (int i = 0; i <= 440000; i++) {
        const float x =
            i < 440000 ? -44.0f * (float)i / 440000.0f : -44.0f * sdt_rand_float(&st) * sdt_rand_float(&st);
        const double e = exp((double)x), got = sd_attn_expf(x);
        worst = fmax(worst, fabs(got - e) / e);
    }
    if (worst > 3e-6) fail_msg("relative error %.3g", worst);
    assert_true(sd_attn_expf(-44.0f) > 0.0f);
    assert_true(sd_attn_expf(-44.00001f) == 0.0f && sd_attn_expf(-1e30f) == 0.0f &&
                sd_attn_expf(-INFINITY) == 0.0f);
    assert_true(isnan(sd_attn_expf(NAN)));
    enum { NH = 4, N = 203, CAP = 208, HD = 64 };
    float base[NH * CAP];
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < CAP; i++)
            base[h * CAP + i] = 50.0f - (float)(sdt_rand_u64(&st) % 60000) / 1000.0f; /* 0 to 60 below 50 */
    base[CAP + 5] = NAN; /* the second head: a NaN after its first score */
    /* The third: one score above the rest, so that the sum is 1 and the p
     * of e(-44) is kept (2^-63.5), those past -44 zero. The fourth: every
     * third score the maximum, so that the sum passes 2 from n = 4 on and
     * the p of e(-43.9) (2^-63.3) fall below 2^-64 and are zero. */
    for (int i = 0; i < CAP; i++) {
        base[2 * CAP + i] = i == 0 ? 50.0f : i % 3 ? 6.0f : nextafterf(6.0f, 0.0f);
        base[3 * CAP + i] = i % 3 == 0 ? 50.0f : i % 3 == 1 ? 6.1f : base[3 * CAP + i];
    }
    /* V (bf16) for p.V over slots 0..n-1. */
    uint16_t *v = malloc(sizeof(uint16_t) * (size_t)N * HD);
    int32_t slots[N];
    for (int32_t i = 0; i < N; i++)
        slots[i] = i;
    for (size_t i = 0; i < (size_t)N * HD; i++)
        v[i] = sd_kv_fast_v(sdt_rand_float(&st) * 3.0f);
    for (int32_t i = 0; i < N; i++) /* value 0: key 1's alone, so that its p shows however small */
        if (i != 1) v[(size_t)i * HD] = 0;
    for (int32_t n = 1; n <= N; n += n < 40 ? 1 : N - 40) {
        const size_t cap = ((size_t)n + 15) / 16 * 16;
        float e[NH][CAP], p[NH][CAP], inv[NH], got[NH * CAP + NH], want[NH * HD], out[NH * HD];
        for (int h = 0; h < NH; h++) {
            inv[h] = softmax_ref(base + h * CAP, n, e[h], p[h]);
            for (int32_t d = 0; d < HD; d++) { /* the header's p.V of these p */
                float acc = 0.0f;
                for (int32_t i = 0; i < n; i += 2) {
                    if (i + 1 < n) acc = fmaf(p[h][i + 1], sd_bf16_to_fp32(v[(size_t)(i + 1) * HD + d]), acc);
                    acc = fmaf(p[h][i], sd_bf16_to_fp32(v[(size_t)i * HD + d]), acc);
                }
                want[h * HD + d] = acc;
            }
        }
        if (n >= 6 && !(p[3][1] == 0.0f && e[3][1] > 0.0f))
            fail_msg("n %d: the fourth head's p[1] %a", n, (double)p[3][1]);
        int ran = 0;
        for (int impl = 0; impl < SDT_N_IMPLS; impl++) {
            if (!sdt_use_impl(impl)) continue;
            ran++;
            for (int h = 0; h < NH; h++)
                memcpy(got + (size_t)h * cap, base + h * CAP, sizeof(float) * (size_t)n);
            sd_attn_fast_softmax(got, NH, HD, n);
            for (int h = 0; h < NH; h++)
                if (!softmax_is_ref(got, NH, h, n, cap, e[h], p[h], inv[h]))
                    fail_msg("n %d impl %d head %d: not the header's softmax", n, impl, h);
            sd_attn_fast_pv(NH, HD, v, HD, slots, n, got, 0, HD, out);
            for (int i = 0; i < NH * HD; i++)
                if (!same(out[i], want[i]))
                    fail_msg("n %d impl %d: p.V [%d] %a, want %a", n, impl, i, (double)out[i],
                             (double)want[i]);
        }
        if (ran < 2) fail_msg("n %d: only %d paths ran", n, ran);
    }
    free(v);
    sdt_use_auto();
}

/* SiLU times up: every path gives x / (1 + sd_expf(-x)) * up bit for bit,
 * any length (the vector part and its tail), saturating inputs too. */
static void test_silu_mul(void **state) {
    (void)state;
    float x[203], up[203], want[203], got[203];
    uint64_t st = 5;
    for (int i = 0; i < 203; i++) x[i] = sdt_rand_float(&st) * 40.0f, up[i] = sdt_rand_float(&st) * 3.0f;
    x[5] = -200.0f, x[6] = 200.0f, x[8] = 0.0f, x[9] = -88.5f;
    for (int i = 0; i < 203; i++) want[i] = x[i] / (1.0f + sd_expf(-x[i])) * up[i];
    for (int impl = 0; impl < SDT_N_IMPLS; impl++) {
        if (!sdt_use_impl(impl)) continue;
        for (int n = 203; n >= 197; n -= 3) {
            memcpy(got, x, sizeof x);
            sd_silu_mul(got, up, n);
            assert_memory_equal(got, want, sizeof(float) * (size_t)n);
            assert_memory_equal(got + n, x + n, sizeof(float) * (size_t)(203 - n));
        }
    }
    sdt_use_auto();
}

/* The fast RMSNorm: same bits on every path, any length, in place too,
 * and within float rounding of double precision. */
static void test_rmsnorm_fast(void **state) {
    (void)state;
    const int64_t ns[] = {640, 256, 37, 16, 1};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        const int64_t n = ns[t];
        float x[640] = {0}, w[640] = {0}, ref[640], got[640];
        uint64_t st = 21 + t;
        for (int64_t i = 0; i < n; i++) x[i] = sdt_rand_float(&st) * 30.0f, w[i] = 1.0f + sdt_rand_float(&st);
        for (int impl = 0; impl < SDT_N_IMPLS; impl++) {
            if (!sdt_use_impl(impl)) continue;
            memcpy(got, x, sizeof x);
            sd_rmsnorm_fast(got, got, w, n, 1e-6f);
            if (impl == 0) {
                memcpy(ref, got, sizeof ref);
                double ss = 0;
                for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
                const double sc = 1.0 / sqrt(ss / (double)n + 1e-6);
                for (int64_t i = 0; i < n; i++) assert_true(fabs(got[i] - x[i] * sc * w[i]) <= 1e-5 * fabs(x[i] * sc * w[i]) + 1e-7);
            } else {
                assert_memory_equal(got, ref, sizeof(float) * (size_t)n);
            }
        }
        sdt_use_auto();
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_impls_agree_and_exact),
        cmocka_unit_test(test_scores_integer),
        cmocka_unit_test(test_v_values),
        cmocka_unit_test(test_pv_bf16_order),
        cmocka_unit_test(test_slot_independent),
        cmocka_unit_test(test_rows_tile),
        cmocka_unit_test(test_split_steps),
        cmocka_unit_test(test_expf_sub),
        cmocka_unit_test(test_softmax_exp),
        cmocka_unit_test(test_silu_mul),
        cmocka_unit_test(test_rmsnorm_fast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
