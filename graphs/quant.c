/* graphs/quant.c - the scalar reference for every element type:
 * dequantization, quantization (ggml's reference quantizers) and dot
 * products, plus the run-time choice between it and graphs/quant_avx2.c.
 *
 * The scalar dot products follow the reduction order that graphs/quant.h
 * documents (ggml's on x86), which the AVX2 and AVX-512 kernels keep too, so
 * the implementations agree bit for bit. The multiply-adds that ggml's
 * compiled code fuses are written as fmaf; nothing else may be contracted:
 * the build compiles ISO C (-std=c11), where GCC does not contract, and the
 * pragma below keeps it so under GNU modes too. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "base/base.h"
#include "quant.h"

_Static_assert(sizeof(struct sd_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(struct sd_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(struct sd_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(struct sd_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(struct sd_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(struct sd_block_q8_1) == 36, "q8_1 layout");
_Static_assert(sizeof(struct sd_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(struct sd_block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(struct sd_block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(struct sd_block_q8_K) == 292, "q8_K layout");

/* ------------------------------------------------------------ helpers */

static inline float h2f(uint16_t h) { return sd_fp16_to_fp32(h); }
static inline uint16_t f2h(float f) { return sd_fp32_to_fp16(f); }

/* ggml's nearest_int: round to nearest, ties to even, for |f| < 2^22. Out of
 * that range (which the quantizers below never reach on finite input) the
 * result is garbage, but defined. */
static inline int nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

/* (int)v for the float-to-integer conversions of the reference quantizers,
 * made total: NaN and far out-of-range values (only from non-finite input)
 * would be undefined behaviour in C. Finite in-range values convert as C. */
static inline int trunc_i(float v) {
    if (!(v == v)) return 0;
    if (v > 1e6f) return 1000000;
    if (v < -1e6f) return -1000000;
    return (int)v;
}
static inline int roundf_i(float v) { return trunc_i(roundf(v)); }

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The documented fold of eight lanes. */
static inline float reduce8(const float a[8]) {
    float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
    return (t0 + t2) + (t1 + t3);
}

/* 6-bit scale and min j of a q4_K/q5_K super-block. */
void sd_scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* ------------------------------------------------------ dequantization */

static void dequant_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

static void dequant_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = h2f(h);
    }
}

static void dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        const uint32_t bits = (uint32_t)h << 16; /* sd_bf16_to_fp32, inlined */
        memcpy(&dst[i], &bits, 4);
    }
}

static void dequant_q4_0(const void *src, float *dst, int64_t n) {
    const struct sd_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, dst += SD_QK) {
        const float d = h2f(b->d);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((b->qs[j] & 0xF) - 8) * d;
            dst[j + 16] = (float)((b->qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const void *src, float *dst, int64_t n) {
    const struct sd_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, dst += SD_QK) {
        const float d = h2f(b->d), m = h2f(b->m);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)(b->qs[j] & 0xF) * d + m;
            dst[j + 16] = (float)(b->qs[j] >> 4) * d + m;
        }
    }
}

static void dequant_q5_0(const void *src, float *dst, int64_t n) {
    const struct sd_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, dst += SD_QK) {
        const float d = h2f(b->d);
        const uint32_t qh = load_u32(b->qh);
        for (int j = 0; j < 16; j++) {
            int q0 = (b->qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int q1 = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = (float)(q0 - 16) * d;
            dst[j + 16] = (float)(q1 - 16) * d;
        }
    }
}

static void dequant_q5_1(const void *src, float *dst, int64_t n) {
    const struct sd_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, dst += SD_QK) {
        const float d = h2f(b->d), m = h2f(b->m);
        const uint32_t qh = load_u32(b->qh);
        for (int j = 0; j < 16; j++) {
            int q0 = (b->qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int q1 = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = (float)q0 * d + m;
            dst[j + 16] = (float)q1 * d + m;
        }
    }
}

static void dequant_q8_0(const void *src, float *dst, int64_t n) {
    const struct sd_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, dst += SD_QK) {
        const float d = h2f(b->d);
        for (int j = 0; j < SD_QK; j++) dst[j] = (float)b->qs[j] * d;
    }
}

static void dequant_q8_1(const void *src, float *dst, int64_t n) {
    const struct sd_block_q8_1 *b = src;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, dst += SD_QK) {
        const float d = h2f(b->d);
        for (int j = 0; j < SD_QK; j++) dst[j] = (float)b->qs[j] * d;
    }
}

static void dequant_q4_K(const void *src, float *dst, int64_t n) {
    const struct sd_block_q4_K *b = src;
    for (int64_t i = 0; i < n / SD_QK_K; i++, b++) {
        const float d = h2f(b->d), dmin = h2f(b->dmin);
        const uint8_t *q = b->qs;
        for (int c = 0; c < 4; c++, q += 32) {
            int sc, m;
            sd_scale_min_k4(2 * c, b->scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            sd_scale_min_k4(2 * c + 1, b->scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void dequant_q5_K(const void *src, float *dst, int64_t n) {
    const struct sd_block_q5_K *b = src;
    for (int64_t i = 0; i < n / SD_QK_K; i++, b++) {
        const float d = h2f(b->d), dmin = h2f(b->dmin);
        const uint8_t *ql = b->qs;
        for (int c = 0; c < 4; c++, ql += 32) {
            int sc, m;
            sd_scale_min_k4(2 * c, b->scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            sd_scale_min_k4(2 * c + 1, b->scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int q = (ql[l] & 0xF) | (((b->qh[l] >> (2 * c)) & 1) << 4);
                *dst++ = d1 * (float)q - m1;
            }
            for (int l = 0; l < 32; l++) {
                int q = (ql[l] >> 4) | (((b->qh[l] >> (2 * c + 1)) & 1) << 4);
                *dst++ = d2 * (float)q - m2;
            }
        }
    }
}

/* The 6-bit values (0..63) of a q6_K block in element order. Within each
 * half h of 128 elements, element 32t + l (t = 0..3, l < 32) takes the low
 * (t < 2) or high (t >= 2) nibble of ql[64h + 32(t & 1) + l] and bits
 * 2t..2t+1 of qh[32h + l]. */
void sd_unpack_q6_K(const struct sd_block_q6_K *b, int8_t q[SD_QK_K]) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        int8_t *o = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)((ql[l] & 0xF) | ((qh[l] & 3) << 4));
            o[l + 32] = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            o[l + 64] = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            o[l + 96] = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

static void dequant_q6_K(const void *src, float *dst, int64_t n) {
    const struct sd_block_q6_K *b = src;
    int8_t q[SD_QK_K];
    for (int64_t i = 0; i < n / SD_QK_K; i++, b++, dst += SD_QK_K) {
        const float d = h2f(b->d);
        sd_unpack_q6_K(b, q);
        for (int k = 0; k < SD_QK_K; k++) {
            /* (d * sc) * q, the order ggml's dequantize_row_q6_K uses. */
            dst[k] = d * (float)b->scales[k / 16] * (float)(q[k] - 32);
        }
    }
}

static void dequant_q8_K(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n / SD_QK_K; i++, p += sizeof(struct sd_block_q8_K), dst += SD_QK_K) {
        float d;
        memcpy(&d, p, 4);
        for (int k = 0; k < SD_QK_K; k++) dst[k] = d * (float)(int8_t)p[4 + k];
    }
}

/* -------------------------------------------------------- quantization */

static void quant_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

static void quant_f16(const float *src, void *dst, int64_t n) {
    uint8_t *o = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = f2h(src[i]);
        memcpy(o + 2 * i, &h, 2);
    }
}

static void quant_bf16(const float *src, void *dst, int64_t n) {
    uint8_t *o = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = sd_fp32_to_bf16(src[i]);
        memcpy(o + 2 * i, &h, 2);
    }
}

/* The value of largest magnitude, the first one if several tie (as ggml). */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void quant_q4_0(const float *x, void *dst, int64_t n) {
    struct sd_block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, x += SD_QK) {
        const float d = signed_absmax(x, SD_QK) / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f2h(d);
        for (int j = 0; j < 16; j++) {
            int q0 = SD_MIN(15, trunc_i(x[j] * id + 8.5f));
            int q1 = SD_MIN(15, trunc_i(x[j + 16] * id + 8.5f));
            b->qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

static void quant_q4_1(const float *x, void *dst, int64_t n) {
    struct sd_block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, x += SD_QK) {
        float mn, mx;
        min_max(x, SD_QK, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f2h(d);
        b->m = f2h(mn);
        for (int j = 0; j < 16; j++) {
            int q0 = SD_MIN(15, trunc_i((x[j] - mn) * id + 0.5f));
            int q1 = SD_MIN(15, trunc_i((x[j + 16] - mn) * id + 0.5f));
            b->qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quant_q5_0(const float *x, void *dst, int64_t n) {
    struct sd_block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, x += SD_QK) {
        const float d = signed_absmax(x, SD_QK) / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f2h(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = SD_MIN(31, trunc_i(x[j] * id + 16.5f));
            int q1 = SD_MIN(31, trunc_i(x[j + 16] * id + 16.5f));
            b->qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)((q0 >> 4) & 1) << j;
            qh |= (uint32_t)((q1 >> 4) & 1) << (j + 16);
        }
        memcpy(b->qh, &qh, 4);
    }
}

static void quant_q5_1(const float *x, void *dst, int64_t n) {
    struct sd_block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, x += SD_QK) {
        float mn, mx;
        min_max(x, SD_QK, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f2h(d);
        b->m = f2h(mn);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            /* ggml has no clamp here ((x - min) * id <= 31 for finite x); the
             * mask keeps the bit packing in range for any input. */
            int q0 = trunc_i((x[j] - mn) * id + 0.5f) & 31;
            int q1 = trunc_i((x[j + 16] - mn) * id + 0.5f) & 31;
            b->qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)((q0 >> 4) & 1) << j;
            qh |= (uint32_t)((q1 >> 4) & 1) << (j + 16);
        }
        memcpy(b->qh, &qh, 4);
    }
}

static float absmax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = SD_MAX(amax, fabsf(x[j]));
    return amax;
}

/* ggml's quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d) (half away
 * from zero), with the multiplication by 1/d that ggml uses. */
static void quant_q8_0(const float *x, void *dst, int64_t n) {
    struct sd_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, x += SD_QK) {
        const float d = absmax(x, SD_QK) / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f2h(d);
        for (int j = 0; j < SD_QK; j++) b->qs[j] = (int8_t)SD_MAX(-128, SD_MIN(127, roundf_i(x[j] * id)));
    }
}

/* ggml's quantize_row_q8_1_ref: as q8_0, plus s = half(sum(q) * d). */
static void quant_q8_1(const float *x, void *dst, int64_t n) {
    struct sd_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, x += SD_QK) {
        const float d = absmax(x, SD_QK) / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f2h(d);
        int sum = 0;
        for (int j = 0; j < SD_QK; j++) {
            b->qs[j] = (int8_t)SD_MAX(-128, SD_MIN(127, roundf_i(x[j] * id)));
            sum += b->qs[j];
        }
        b->s = f2h((float)sum * d);
    }
}

/* Activation quantizers for Q8_0 / Q8_1 as ggml's CPU backend runs them on
 * x86 (quantize_row_q8_0/q8_1 in ggml-cpu/arch/x86/quants.c), which is not
 * its _ref quantizer: id = 127 / amax rather than 1 / (amax / 127), and
 * round to nearest with ties to even rather than roundf. Activations are
 * quantized before every matmul, so these two details decide most of the
 * difference between two engines' logits. */
static void quant_q8_01_act(const float *x, void *dst, int64_t n, bool q8_1) {
    uint8_t *o = dst;
    const size_t bs = q8_1 ? sizeof(struct sd_block_q8_1) : sizeof(struct sd_block_q8_0);
    for (int64_t i = 0; i < n / SD_QK; i++, x += SD_QK, o += bs) {
        const float amax = absmax(x, SD_QK);
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        int8_t *qs = (int8_t *)(o + (q8_1 ? 4 : 2));
        int sum = 0;
        for (int j = 0; j < SD_QK; j++) {
            float v = x[j] * id;
            qs[j] = (int8_t)SD_MAX(-128, SD_MIN(127, v == v ? nearest_int(v) : 0));
            sum += qs[j];
        }
        const uint16_t dh = f2h(d);
        memcpy(o, &dh, 2);
        if (q8_1) {
            const uint16_t sh = f2h((float)sum * d);
            memcpy(o + 2, &sh, 2);
        }
    }
}

bool sd_quantize_act_row(enum sd_type type, const float *src, void *dst, int64_t n) {
    if ((type != SD_TYPE_Q8_0 && type != SD_TYPE_Q8_1) || n < 0 || n % SD_QK != 0)
        return sd_quantize_row(type, src, dst, n);
    if (sd_quant_get_impl() == SD_IMPL_AVX2 && sd_quantize_act_row_avx2(type, src, dst, n)) return true;
    quant_q8_01_act(src, dst, n, type == SD_TYPE_Q8_1);
    return true;
}

/* ggml's quantize_row_q8_K_ref: scale from the signed value of largest
 * magnitude, iscale = -127 / max, q = nearest_int(iscale * x) (ties to even),
 * d = 1 / iscale, bsums per 16. An all-zero block gets d = 0, q = 0 and (unlike
 * ggml, which leaves them unwritten) bsums = 0. */
static void quant_q8_K(const float *x, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n / SD_QK_K; i++, p += sizeof(struct sd_block_q8_K), x += SD_QK_K) {
        struct sd_block_q8_K b;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < SD_QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&b, 0, sizeof(b));
        } else {
            const float iscale = -127.f / max;
            for (int j = 0; j < SD_QK_K; j++) {
                int v = nearest_int(iscale * x[j]);
                b.qs[j] = (int8_t)SD_MAX(-128, SD_MIN(127, v));
            }
            for (int j = 0; j < SD_QK_K / 16; j++) {
                int sum = 0;
                for (int l = 0; l < 16; l++) sum += b.qs[16 * j + l];
                b.bsums[j] = (int16_t)sum;
            }
            b.d = 1 / iscale;
        }
        memcpy(p, &b, sizeof(b));
    }
}

/* ggml's make_qkx2_quants: an asymmetric fit (scale, min) of n values to
 * 0..nmax, searching nstep + 1 scales around nmax / (max - min) for the
 * smallest weighted squared error. Returns the scale; *the_min = -min. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)SD_MAX(0, SD_MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = SD_MAX(0, SD_MIN(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* The shared first half of the q4_K/q5_K reference quantizers: per sub-block
 * scale and min, then the 6-bit packed scales, d, dmin and the levels L. */
static void quant_k_scales(const float *x, int nmax, float rmin, int nstep, uint8_t scales_out[12],
                           uint16_t *d_out, uint16_t *dmin_out, uint8_t L[SD_QK_K]) {
    uint8_t Laux[32];
    float weights[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales_out, 0, 12);
    for (int j = 0; j < 8; ++j) {
        /* ggml stores nearest_int into a uint8_t before MIN(63, .). */
        uint8_t ls = (uint8_t)SD_MIN(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        uint8_t lm = (uint8_t)SD_MIN(63, (uint8_t)nearest_int(inv_min * mins[j]));
        if (j < 4) {
            scales_out[j] = ls;
            scales_out[j + 4] = lm;
        } else {
            scales_out[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales_out[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = f2h(max_scale / 63.f);
    *dmin_out = f2h(max_min / 63.f);
    for (int j = 0; j < 8; ++j) {
        int sc, m;
        sd_scale_min_k4(j, scales_out, &sc, &m);
        const float d = h2f(*d_out) * sc;
        if (d == 0.0f) continue;
        const float dm = h2f(*dmin_out) * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)SD_MAX(0, SD_MIN(nmax, l));
        }
    }
}

static void quant_q4_K(const float *x, void *dst, int64_t n) {
    struct sd_block_q4_K *b = dst;
    uint8_t L[SD_QK_K];
    for (int64_t i = 0; i < n / SD_QK_K; i++, b++, x += SD_QK_K) {
        uint16_t d, dmin;
        quant_k_scales(x, 15, -1.f, 20, b->scales, &d, &dmin, L);
        b->d = d;
        b->dmin = dmin;
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; ++l) b->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + l + 32] << 4));
        }
    }
}

static void quant_q5_K(const float *x, void *dst, int64_t n) {
    struct sd_block_q5_K *b = dst;
    uint8_t L[SD_QK_K];
    for (int64_t i = 0; i < n / SD_QK_K; i++, b++, x += SD_QK_K) {
        uint16_t d, dmin;
        quant_k_scales(x, 31, -0.5f, 15, b->scales, &d, &dmin, L);
        b->d = d;
        b->dmin = dmin;
        memset(b->qh, 0, sizeof(b->qh));
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; ++l) {
                int l1 = L[64 * c + l], l2 = L[64 * c + l + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    b->qh[l] |= (uint8_t)(1u << (2 * c));
                }
                if (l2 > 15) {
                    l2 -= 16;
                    b->qh[l] |= (uint8_t)(2u << (2 * c));
                }
                b->qs[32 * c + l] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

/* ggml's make_qx_quants with rmse_type 1 and no importance weights: a
 * symmetric fit of n values to -nmax..nmax-1 (stored as L + nmax), trying 19
 * scales for the best weighted (x^2) least-squares fit. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < 1e-15f) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = SD_MAX(-nmax, SD_MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = SD_MAX(-nmax, SD_MIN(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + SD_MAX(-nmax, SD_MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void quant_q6_K(const float *x, void *dst, int64_t n) {
    struct sd_block_q6_K *b = dst;
    int8_t L[SD_QK_K];
    float scales[SD_QK_K / 16];
    for (int64_t i = 0; i < n / SD_QK_K; i++, b++, x += SD_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < SD_QK_K / 16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) {
                max_abs_scale = fabsf(scale);
                max_scale = scale;
            }
        }
        if (max_abs_scale < 1e-15f) {
            memset(b, 0, sizeof(*b));
            continue;
        }
        const float iscale = -128.f / max_scale;
        b->d = f2h(1 / iscale);
        for (int ib = 0; ib < SD_QK_K / 16; ++ib) {
            b->scales[ib] = (int8_t)SD_MAX(-128, SD_MIN(127, nearest_int(iscale * scales[ib])));
        }
        for (int j = 0; j < SD_QK_K / 16; ++j) {
            const float d = h2f(b->d) * b->scales[j];
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(SD_MAX(-32, SD_MIN(31, l)) + 32);
            }
        }
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; ++l) {
                b->ql[64 * h + l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
                b->ql[64 * h + l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
                b->qh[32 * h + l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                              ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

/* ------------------------------------------------------- dot products */

/* The scalar loops below are written as simple fixed-length loops over
 * unpacked values so that the compiler can vectorize them (GCC does at -O2
 * with SSE2) without changing any result: each float lane is its own
 * accumulator and the integer sums are exact. */

/* _mm512_reduce_add_ps as GCC expands it: halves added lane-wise (16 to 8,
 * then reduce8's 8 to 1). */
static float reduce16(const float a[16]) {
    float t[8];
    for (int j = 0; j < 8; j++) t[j] = a[j] + a[j + 8];
    return reduce8(t);
}

/* ggml_vec_dot_f32/_f16's fold of its four 16-lane accumulators:
 * (0 + 2) + (1 + 3), then _mm512_reduce_add_ps's tree. */
static float fold64(const float a[64]) {
    float v[16];
    for (int l = 0; l < 16; l++) v[l] = (a[l] + a[l + 32]) + (a[l + 16] + a[l + 48]);
    return reduce16(v);
}

/* ggml_vec_dot_f32 as built for AVX-512: 64 lanes of fused multiply-adds
 * (element k in lane k % 64), fold64, then the elements past the last
 * multiple of 64 one by one, multiplied and added in float (not fused: the
 * compiler leaves that loop as it is). */
static float dot_f32(int64_t n, const void *vw, const void *vx) {
    const float *w = vw, *x = vx;
    float acc[64] = {0};
    int64_t k = 0;
    for (; k + 64 <= n; k += 64)
        for (int j = 0; j < 64; j++) acc[j] = fmaf(w[k + j], x[k + j], acc[j]);
    float s = fold64(acc);
    for (; k < n; k++) s += w[k] * x[k];
    return s;
}

/* ggml_vec_dot_f16 as built for AVX-512 (the activations already rounded
 * to fp16): as dot_f32, but the sum and the tail are kept in double. The
 * products of two fp16 values are exact in float. */
static float dot_f16(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw;
    const float *x = vx;
    float acc[64] = {0}, wf[64];
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) {
        dequant_f16(w + 2 * k, wf, 64);
        for (int j = 0; j < 64; j++) acc[j] = fmaf(wf[j], x[k + j], acc[j]);
    }
    double s = fold64(acc);
    dequant_f16(w + 2 * k, wf, n - k);
    for (int j = 0; j < n - k; j++) s += (double)(wf[j] * x[k + j]);
    return (float)s;
}

/* One step of vdpbf16ps in a lane: acc + a * b as one fused multiply-add
 * with denormal inputs read as zero and a denormal result flushed to zero
 * (the instruction ignores MXCSR; checked against the hardware). The
 * accumulator needs no such read: it only ever holds flushed results. */
static float sd_bf16_fma(float a, float b, float acc) {
    if (fabsf(a) < FLT_MIN) a = copysignf(0.0f, a);
    if (fabsf(b) < FLT_MIN) b = copysignf(0.0f, b);
    const float r = fmaf(a, b, acc);
    return fabsf(r) < FLT_MIN ? copysignf(0.0f, r) : r;
}

/* ggml_vec_dot_bf16 as built with AVX512_BF16 (activations rounded to
 * BF16): per 64 elements two vdpbf16ps accumulators of sixteen lanes, the
 * first over elements 0..31, the second over 32..63, lane i taking elements
 * 2i + 1 and then 2i of its 32, each as sd_bf16_fma; each accumulator
 * reduced as _mm512_reduce_add_ps and added in double; the elements past
 * the last multiple of 64 added one by one in double. */
static float dot_bf16(int64_t n, const void *vw, const void *vx) {
    const uint8_t *w = vw;
    const float *x = vx;
    float c[2][16] = {{0}}, wf[64];
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) {
        dequant_bf16(w + 2 * k, wf, 64);
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 16; i++) {
                const int e = 32 * h + 2 * i;
                c[h][i] = sd_bf16_fma(wf[e + 1], x[k + e + 1], c[h][i]);
                c[h][i] = sd_bf16_fma(wf[e], x[k + e], c[h][i]);
            }
    }
    double s = 0.0;
    s += (double)reduce16(c[0]);
    s += (double)reduce16(c[1]);
    dequant_bf16(w + 2 * k, wf, n - k);
    for (int j = 0; j < n - k; j++) s += (double)(wf[j] * x[k + j]);
    return (float)s;
}

/* The 32 quants of a q4/q5 block as int8, with the offset (8 or 16) removed
 * for the symmetric formats. */
static inline void unpack_q4(const uint8_t *qs, int off, int8_t q[32]) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((qs[j] & 0xF) - off);
        q[j + 16] = (int8_t)((qs[j] >> 4) - off);
    }
}

static inline void unpack_q5(const uint8_t *qs, const uint8_t *qhp, int off, int8_t q[32]) {
    const uint32_t qh = load_u32(qhp);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4)) - off);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - off);
    }
}

/* ggml's order for a 32-element block (vec_dot_q*_q8_0 and tinyBLAS on
 * x86): eight lanes, lane t holding the exact integer sum of products
 * 4t..4t+3, added to the lane's accumulator with one fused multiply-add by
 * d_w * d_x; the lanes are summed at the end as reduce8. */
static inline void q0_block(float acc[8], const int8_t *q, const int8_t *x, float d) {
    for (int t = 0; t < 8; t++) {
        const int32_t s = q[4 * t] * x[4 * t] + q[4 * t + 1] * x[4 * t + 1] + q[4 * t + 2] * x[4 * t + 2] +
                          q[4 * t + 3] * x[4 * t + 3];
        acc[t] = fmaf(d, (float)s, acc[t]);
    }
}

static float dot_q4_0(int64_t n, const void *vw, const void *vx) {
    const struct sd_block_q4_0 *w = vw;
    const struct sd_block_q8_0 *x = vx;
    float acc[8] = {0};
    int8_t q[32];
    for (int64_t b = 0; b < n / SD_QK; b++) {
        unpack_q4(w[b].qs, 8, q);
        q0_block(acc, q, x[b].qs, h2f(w[b].d) * h2f(x[b].d));
    }
    return reduce8(acc);
}

/* ggml_vec_dot_q4_1_q8_1 / q5_1_q8_1 on x86 (AVX2, VNNI): the weight part
 * as q0_block, the min part m_w * s_x summed on its own in block order with
 * one fused multiply-add each (the compiler contracts summs += m * s) and
 * added after the fold. */
static float dot_q4_1(int64_t n, const void *vw, const void *vx) {
    const struct sd_block_q4_1 *w = vw;
    const struct sd_block_q8_1 *x = vx;
    float acc[8] = {0}, summs = 0.0f;
    int8_t q[32];
    for (int64_t b = 0; b < n / SD_QK; b++) {
        unpack_q4(w[b].qs, 0, q);
        q0_block(acc, q, x[b].qs, h2f(w[b].d) * h2f(x[b].d));
        summs = fmaf(h2f(w[b].m), h2f(x[b].s), summs);
    }
    return reduce8(acc) + summs;
}

static float dot_q5_0(int64_t n, const void *vw, const void *vx) {
    const struct sd_block_q5_0 *w = vw;
    const struct sd_block_q8_0 *x = vx;
    float acc[8] = {0};
    int8_t q[32];
    for (int64_t b = 0; b < n / SD_QK; b++) {
        unpack_q5(w[b].qs, w[b].qh, 16, q);
        q0_block(acc, q, x[b].qs, h2f(w[b].d) * h2f(x[b].d));
    }
    return reduce8(acc);
}

static float dot_q5_1(int64_t n, const void *vw, const void *vx) {
    const struct sd_block_q5_1 *w = vw;
    const struct sd_block_q8_1 *x = vx;
    float acc[8] = {0}, summs = 0.0f;
    int8_t q[32];
    for (int64_t b = 0; b < n / SD_QK; b++) {
        unpack_q5(w[b].qs, w[b].qh, 0, q);
        q0_block(acc, q, x[b].qs, h2f(w[b].d) * h2f(x[b].d));
        summs = fmaf(h2f(w[b].m), h2f(x[b].s), summs);
    }
    return reduce8(acc) + summs;
}

static float dot_q8_0(int64_t n, const void *vw, const void *vx) {
    const struct sd_block_q8_0 *w = vw;
    const struct sd_block_q8_0 *x = vx;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / SD_QK; b++) {
        q0_block(acc, w[b].qs, x[b].qs, h2f(w[b].d) * h2f(x[b].d));
    }
    return reduce8(acc);
}

/* The q8_K activation block's d and the sum of bsums[2j] + bsums[2j+1] for
 * each of the eight 32-element sub-blocks. */
static inline float q8k_head(const uint8_t *xb, int32_t bsum32[8]) {
    float d;
    memcpy(&d, xb, 4);
    int16_t bs[16];
    memcpy(bs, xb + 4 + SD_QK_K, sizeof(bs));
    for (int j = 0; j < 8; j++) bsum32[j] = bs[2 * j] + bs[2 * j + 1];
    return d;
}

/* ggml's AVX2 vec_dot_q4_K_q8_K: per super-block eight integer lanes, lane
 * t collecting scale * the products of elements 4t..4t+3 of each 32-element
 * sub-block, added to eight float lanes with one fused multiply-add by
 * d_x * d_w; the mins (times the q8 sums of 32) go to four float lanes, lane
 * t taking sub-blocks 2t and 2t+1, with a fused multiply-add by
 * -d_x * dmin_w. The result is reduce8 of the first plus (0 + 2) + (1 + 3)
 * of the second. */
static float dot_q4_K(int64_t n, const void *vw, const void *vx) {
    const struct sd_block_q4_K *w = vw;
    const uint8_t *xb = vx;
    float acc[8] = {0}, accm[4] = {0};
    for (int64_t b = 0; b < n / SD_QK_K; b++, xb += sizeof(struct sd_block_q8_K)) {
        int32_t bsum32[8];
        const float dx = q8k_head(xb, bsum32);
        const int8_t *q8 = (const int8_t *)(xb + 4);
        int sc[8], m[8];
        for (int j = 0; j < 8; j++) sd_scale_min_k4(j, w[b].scales, &sc[j], &m[j]);
        const float d = dx * h2f(w[b].d), dmin = -dx * h2f(w[b].dmin);
        for (int t = 0; t < 4; t++)
            accm[t] = fmaf(dmin, (float)(m[2 * t] * bsum32[2 * t] + m[2 * t + 1] * bsum32[2 * t + 1]), accm[t]);
        int32_t lane[8] = {0};
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = w[b].qs + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            const int8_t *y = q8 + 32 * j;
            for (int t = 0; t < 8; t++) {
                int32_t p = 0;
                for (int e = 4 * t; e < 4 * t + 4; e++) p += ((q[e] >> shift) & 0xF) * y[e];
                lane[t] += sc[j] * p;
            }
        }
        for (int t = 0; t < 8; t++) acc[t] = fmaf(d, (float)lane[t], acc[t]);
    }
    return reduce8(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
}

/* ggml's AVX2 vec_dot_q5_K_q8_K: as dot_q4_K for the quants (eight
 * integer lanes per super-block, one fused multiply-add each by d_x * d_w),
 * but the mins (times the q8 sums of 32) are summed as one integer per
 * super-block and added to a single float with a fused multiply-add by
 * -d_x * dmin_w (the compiler fuses ggml's summs += dmin * M); the result
 * is reduce8 of the lanes plus that float. */
static float dot_q5_K(int64_t n, const void *vw, const void *vx) {
    const struct sd_block_q5_K *w = vw;
    const uint8_t *xb = vx;
    float acc[8] = {0}, summs = 0.0f;
    for (int64_t b = 0; b < n / SD_QK_K; b++, xb += sizeof(struct sd_block_q8_K)) {
        int32_t bsum32[8];
        const float dx = q8k_head(xb, bsum32);
        const int8_t *q8 = (const int8_t *)(xb + 4);
        const float d = dx * h2f(w[b].d), dmin = -dx * h2f(w[b].dmin);
        int32_t lane[8] = {0}, M = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            sd_scale_min_k4(j, w[b].scales, &sc, &m);
            M += m * bsum32[j];
            const uint8_t *q = w[b].qs + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            const int8_t *y = q8 + 32 * j;
            for (int t = 0; t < 8; t++) {
                int32_t p = 0;
                for (int e = 4 * t; e < 4 * t + 4; e++)
                    p += (((q[e] >> shift) & 0xF) | (((w[b].qh[e] >> j) & 1) << 4)) * y[e];
                lane[t] += sc * p;
            }
        }
        summs = fmaf(dmin, (float)M, summs);
        for (int t = 0; t < 8; t++) acc[t] = fmaf(d, (float)lane[t], acc[t]);
    }
    return reduce8(acc) + summs;
}

/* ggml's AVX2 vec_dot_q6_K_q8_K: per super-block eight integer lanes; lane
 * t collects, from each 32-element run, the scaled products of elements
 * 4t..4t+3 (6-bit quants without their offset of 32), less 32 times the
 * scaled q8 sums of 16-groups 2t and 2t+1; then one fused multiply-add by
 * d_x * d_w per lane and super-block, and reduce8. */
static float dot_q6_K(int64_t n, const void *vw, const void *vx) {
    const struct sd_block_q6_K *w = vw;
    const uint8_t *xb = vx;
    float acc[8] = {0};
    int8_t q[SD_QK_K];
    for (int64_t b = 0; b < n / SD_QK_K; b++, xb += sizeof(struct sd_block_q8_K)) {
        float dx;
        memcpy(&dx, xb, 4);
        int16_t bs[16];
        memcpy(bs, xb + 4 + SD_QK_K, sizeof(bs));
        const int8_t *q8 = (const int8_t *)(xb + 4);
        const int8_t *sc = w[b].scales;
        sd_unpack_q6_K(&w[b], q);
        int32_t lane[8] = {0};
        for (int v = 0; v < 8; v++) {
            for (int t = 0; t < 8; t++) {
                const int e = 32 * v + 4 * t;
                const int32_t p = q[e] * q8[e] + q[e + 1] * q8[e + 1] + q[e + 2] * q8[e + 2] + q[e + 3] * q8[e + 3];
                lane[t] += sc[e / 16] * p;
            }
        }
        const float d = dx * h2f(w[b].d);
        for (int t = 0; t < 8; t++) {
            lane[t] -= 32 * (bs[2 * t] * sc[2 * t] + bs[2 * t + 1] * sc[2 * t + 1]);
            acc[t] = fmaf(d, (float)lane[t], acc[t]);
        }
    }
    return reduce8(acc);
}

/* ------------------------------------------------------------- tables */

struct kernels {
    sd_dequant_fn dequant;
    sd_quant_fn quant;
    sd_dot_fn dot;
};

static const struct kernels g_kernels[SD_TYPE_COUNT] = {
    [SD_TYPE_F32] = {dequant_f32, quant_f32, dot_f32},
    [SD_TYPE_F16] = {dequant_f16, quant_f16, dot_f16},
    [SD_TYPE_BF16] = {dequant_bf16, quant_bf16, dot_bf16},
    [SD_TYPE_Q4_0] = {dequant_q4_0, quant_q4_0, dot_q4_0},
    [SD_TYPE_Q4_1] = {dequant_q4_1, quant_q4_1, dot_q4_1},
    [SD_TYPE_Q5_0] = {dequant_q5_0, quant_q5_0, dot_q5_0},
    [SD_TYPE_Q5_1] = {dequant_q5_1, quant_q5_1, dot_q5_1},
    [SD_TYPE_Q8_0] = {dequant_q8_0, quant_q8_0, dot_q8_0},
    [SD_TYPE_Q8_1] = {dequant_q8_1, quant_q8_1, NULL},
    [SD_TYPE_Q4_K] = {dequant_q4_K, quant_q4_K, dot_q4_K},
    [SD_TYPE_Q5_K] = {dequant_q5_K, quant_q5_K, dot_q5_K},
    [SD_TYPE_Q6_K] = {dequant_q6_K, quant_q6_K, dot_q6_K},
    [SD_TYPE_Q8_K] = {dequant_q8_K, quant_q8_K, NULL},
};

static const struct kernels *kernels_of(int type) {
    if (type < 0 || type >= SD_TYPE_COUNT) return NULL;
    return &g_kernels[type];
}

/* -------------------------------------------------------- dispatching */

/* SD_IMPL_AUTO until first resolved; an atomic so that threads calling into
 * the kernels concurrently with the first resolution see a whole value. */
static atomic_int g_impl = SD_IMPL_AUTO;

static enum sd_quant_impl resolve(enum sd_quant_impl want) {
    if (want == SD_IMPL_SCALAR) return SD_IMPL_SCALAR;
    return sd_quant_avx2_supported() ? SD_IMPL_AVX2 : SD_IMPL_SCALAR;
}

enum sd_quant_impl sd_quant_set_impl(enum sd_quant_impl impl) {
    enum sd_quant_impl r = resolve(impl);
    atomic_store_explicit(&g_impl, (int)r, memory_order_relaxed);
    return r;
}

enum sd_quant_impl sd_quant_get_impl(void) {
    int v = atomic_load_explicit(&g_impl, memory_order_relaxed);
    if (v == SD_IMPL_AUTO) {
        v = (int)resolve(SD_IMPL_AUTO);
        atomic_store_explicit(&g_impl, v, memory_order_relaxed);
    }
    return (enum sd_quant_impl)v;
}

/* -1 until first resolved, then 0 or 1; an atomic for the reason above. */
static atomic_int g_avx512 = -1;

bool sd_quant_set_avx512(bool on) {
    const bool r = on && sd_quant_avx512_supported();
    atomic_store_explicit(&g_avx512, r ? 1 : 0, memory_order_relaxed);
    return r;
}

bool sd_quant_avx512_active(void) {
    if (sd_quant_get_impl() != SD_IMPL_AVX2) return false;
    int v = atomic_load_explicit(&g_avx512, memory_order_relaxed);
    if (v < 0) {
        v = sd_quant_avx512_supported() ? 1 : 0;
        atomic_store_explicit(&g_avx512, v, memory_order_relaxed);
    }
    return v == 1;
}

void sd_dequantize_row(enum sd_type type, const void *src, float *dst, int64_t n) {
    const struct kernels *k = kernels_of(type);
    const struct sd_type_traits *t = sd_type_get(type);
    assert(k && k->dequant && t && n % t->blck_size == 0);
    if (!k || !k->dequant || !t || n % t->blck_size != 0) return;
    k->dequant(src, dst, n);
}

bool sd_quantize_row(enum sd_type type, const float *src, void *dst, int64_t n) {
    const struct kernels *k = kernels_of(type);
    const struct sd_type_traits *t = sd_type_get(type);
    if (!k || !k->quant || !t || n < 0 || n % t->blck_size != 0) return false;
    if (sd_quant_get_impl() == SD_IMPL_AVX2 && sd_quantize_row_avx2(type, src, dst, n)) return true;
    k->quant(src, dst, n);
    return true;
}

float sd_vec_dot(enum sd_type wtype, int64_t n, const void *w, const void *xq) {
    float y = NAN;
    sd_vec_dot_tile(wtype, n, w, 0, 1, xq, 0, 1, &y, 0);
    return y;
}

/* The SIMD tiles of q4_1/q5_1 do not give the scalar kernels' bits (their
 * rewrite in ggml's vec_dot order was lost in a merge): the scalar kernels
 * take them. */
bool sd_vec_dot_simd_ok(enum sd_type wtype) {
    return wtype != SD_TYPE_Q4_1 && wtype != SD_TYPE_Q5_1;
}

void sd_vec_dot_tile(enum sd_type wtype, int64_t n, const void *w, size_t w_stride, int nw,
                     const void *xq, size_t x_stride, int nx, float *y, size_t y_stride) {
    const struct kernels *k = kernels_of(wtype);
    const struct sd_type_traits *t = sd_type_get(wtype);
    /* Programmer errors: the model loader only admits types with
     * can_compute, and row lengths that are whole blocks. */
    assert(k && k->dot && t && n >= 0 && n % t->blck_size == 0);
    if (!k || !k->dot || !t || n < 0 || n % t->blck_size != 0) {
        for (int r = 0; r < nx; r++) {
            for (int i = 0; i < nw; i++) y[(size_t)r * y_stride + (size_t)i] = NAN;
        }
        return;
    }
    const bool simd_ok = sd_vec_dot_simd_ok(wtype);
    /* One activation row gains nothing from the AVX-512 layout (it fills
     * one lane of eight); the AVX2 tiles take it. */
    if (simd_ok && nx >= 2 && sd_quant_avx512_active() &&
        sd_vec_dot_tile_avx512(wtype, n, w, w_stride, nw, xq, x_stride, nx, y, y_stride)) {
        return;
    }
    if (simd_ok && sd_quant_get_impl() == SD_IMPL_AVX2 &&
        sd_vec_dot_tile_avx2(wtype, n, w, w_stride, nw, xq, x_stride, nx, y, y_stride)) {
        return;
    }
    const uint8_t *wb = w, *xb = xq;
    for (int r = 0; r < nx; r++) {
        for (int i = 0; i < nw; i++) {
            y[(size_t)r * y_stride + (size_t)i] = k->dot(n, wb + (size_t)i * w_stride, xb + (size_t)r * x_stride);
        }
    }
}
