/* graphs/quant_dot.c - the scalar reference's dot products, one weight row
 * with one activation row already in the weight type's vec_dot_type.
 *
 * They follow the reduction order that graphs/quant.h documents (ggml's on
 * x86), which the AVX2 and AVX-512 kernels keep too, so the implementations
 * agree bit for bit. The multiply-adds that ggml's compiled code fuses are
 * written as fmaf; nothing else may be contracted: the build compiles ISO C
 * (-std=c11), where GCC does not contract, and the pragma below keeps it so
 * under GNU modes too. The dequantizers and quantizers of the reference
 * carry the same pragma, for the same reason. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"
#include "quant_ref.h"

/* The documented fold of eight lanes. */
static inline float reduce8(const float a[8]) {
    float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
    return (t0 + t2) + (t1 + t3);
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
    for (int j = 0; j < 8; j++)
        t[j] = a[j] + a[j + 8];
    return reduce8(t);
}

/* ggml_vec_dot_f32/_f16's fold of its four 16-lane accumulators:
 * (0 + 2) + (1 + 3), then _mm512_reduce_add_ps's tree. */
static float fold64(const float a[64]) {
    float v[16];
    for (int l = 0; l < 16; l++)
        v[l] = (a[l] + a[l + 32]) + (a[l + 16] + a[l + 48]);
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
        for (int j = 0; j < 64; j++)
            acc[j] = fmaf(w[k + j], x[k + j], acc[j]);
    float s = fold64(acc);
    for (; k < n; k++)
        s += w[k] * x[k];
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
        sd_ref_dequant[SD_TYPE_F16](w + 2 * k, wf, 64);
        for (int j = 0; j < 64; j++)
            acc[j] = fmaf(wf[j], x[k + j], acc[j]);
    }
    double s = fold64(acc);
    sd_ref_dequant[SD_TYPE_F16](w + 2 * k, wf, n - k);
    for (int j = 0; j < n - k; j++)
        s += (double)(wf[j] * x[k + j]);
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
        sd_ref_dequant[SD_TYPE_BF16](w + 2 * k, wf, 64);
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
    sd_ref_dequant[SD_TYPE_BF16](w + 2 * k, wf, n - k);
    for (int j = 0; j < n - k; j++)
        s += (double)(wf[j] * x[k + j]);
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
    for (int j = 0; j < 8; j++)
        bsum32[j] = bs[2 * j] + bs[2 * j + 1];
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
        for (int j = 0; j < 8; j++)
            sd_scale_min_k4(j, w[b].scales, &sc[j], &m[j]);
        const float d = dx * h2f(w[b].d), dmin = -dx * h2f(w[b].dmin);
        for (int t = 0; t < 4; t++)
            accm[t] =
                fmaf(dmin, (float)(m[2 * t] * bsum32[2 * t] + m[2 * t + 1] * bsum32[2 * t + 1]), accm[t]);
        int32_t lane[8] = {0};
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = w[b].qs + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            const int8_t *y = q8 + 32 * j;
            for (int t = 0; t < 8; t++) {
                int32_t p = 0;
                for (int e = 4 * t; e < 4 * t + 4; e++)
                    p += ((q[e] >> shift) & 0xF) * y[e];
                lane[t] += sc[j] * p;
            }
        }
        for (int t = 0; t < 8; t++)
            acc[t] = fmaf(d, (float)lane[t], acc[t]);
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
        for (int t = 0; t < 8; t++)
            acc[t] = fmaf(d, (float)lane[t], acc[t]);
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
                const int32_t p =
                    q[e] * q8[e] + q[e + 1] * q8[e + 1] + q[e + 2] * q8[e + 2] + q[e + 3] * q8[e + 3];
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
const sd_dot_fn sd_ref_dot[SD_TYPE_COUNT] = {
    [SD_TYPE_F32] = dot_f32,   [SD_TYPE_F16] = dot_f16,   [SD_TYPE_BF16] = dot_bf16,
    [SD_TYPE_Q4_0] = dot_q4_0, [SD_TYPE_Q4_1] = dot_q4_1, [SD_TYPE_Q5_0] = dot_q5_0,
    [SD_TYPE_Q5_1] = dot_q5_1, [SD_TYPE_Q8_0] = dot_q8_0, [SD_TYPE_Q4_K] = dot_q4_K,
    [SD_TYPE_Q5_K] = dot_q5_K, [SD_TYPE_Q6_K] = dot_q6_K,
};
