/* graphs/quant_quantize.c - the scalar reference's quantization: ggml's
 * reference quantizers (quantize_row_*_ref) for every weight and
 * activation type, and the activation quantizer of Q8_0/Q8_1 as ggml's x86
 * CPU backend runs it. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"
#include "quant_ref.h"

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
    for (int j = 0; j < n; j++)
        amax = SD_MAX(amax, fabsf(x[j]));
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
        for (int j = 0; j < SD_QK; j++)
            b->qs[j] = (int8_t)SD_MAX(-128, SD_MIN(127, roundf_i(x[j] * id)));
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
                for (int l = 0; l < 16; l++)
                    sum += b.qs[16 * j + l];
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
        for (int i = 0; i < n; ++i)
            L[i] = 0;
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
        for (int l = 0; l < 32; ++l)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] =
            make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
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

/* q4_K with nstep + 1 scales tried a sub-block (the reference: 20). */
static void quant_q4_K_steps(const float *x, void *dst, int64_t n, int nstep) {
    struct sd_block_q4_K *b = dst;
    uint8_t L[SD_QK_K];
    for (int64_t i = 0; i < n / SD_QK_K; i++, b++, x += SD_QK_K) {
        uint16_t d, dmin;
        quant_k_scales(x, 15, -1.f, nstep, b->scales, &d, &dmin, L);
        b->d = d;
        b->dmin = dmin;
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; ++l)
                b->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + l + 32] << 4));
        }
    }
}

static void quant_q4_K(const float *x, void *dst, int64_t n) { quant_q4_K_steps(x, dst, n, 20); }

void sd_quantize_q4_K_coarse(const float *src, void *dst, int64_t n) { quant_q4_K_steps(src, dst, n, 0); }

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
        for (int i = 0; i < n; ++i)
            L[i] = 0;
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
                b->qh[32 * h + l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                              ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}
const sd_quant_fn sd_ref_quant[SD_TYPE_COUNT] = {
    [SD_TYPE_F32] = quant_f32,   [SD_TYPE_F16] = quant_f16,   [SD_TYPE_BF16] = quant_bf16,
    [SD_TYPE_Q4_0] = quant_q4_0, [SD_TYPE_Q4_1] = quant_q4_1, [SD_TYPE_Q5_0] = quant_q5_0,
    [SD_TYPE_Q5_1] = quant_q5_1, [SD_TYPE_Q8_0] = quant_q8_0, [SD_TYPE_Q8_1] = quant_q8_1,
    [SD_TYPE_Q4_K] = quant_q4_K, [SD_TYPE_Q5_K] = quant_q5_K, [SD_TYPE_Q6_K] = quant_q6_K,
    [SD_TYPE_Q8_K] = quant_q8_K,
};

/* Without a library call a value (a prefill writes a key row a token,
 * layer and K/V head): the clamp by comparisons, the rounding by adding
 * and taking away 1.5 * 2^23. */
float sd_quantize_levels(const float *x, int32_t n, int32_t levels, int16_t *q) {
    float scale;
    if (sd_quant_get_impl() == SD_IMPL_AVX2 && sd_quantize_levels_avx2(x, n, levels, q, &scale)) return scale;
    float amax = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        amax = a > amax ? a : amax; /* a NaN never wins, as fmaxf's */
    }
    const float L = (float)levels, inv = amax > 0.0f ? L / amax : 0.0f;
    for (int32_t i = 0; i < n; i++) {
        float r = x[i] * inv;
        r = !(r >= -L) ? -L : r > L ? L : r; /* NaN: -L, as fmaxf(NaN, -L) */
        q[i] = (int16_t)(int32_t)((r + 12582912.0f) - 12582912.0f);
    }
    return amax / L;
}
