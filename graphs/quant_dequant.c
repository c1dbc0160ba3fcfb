/* graphs/quant_dequant.c - the scalar reference's dequantization: every
 * element type's blocks back to floats, as ggml's dequantize_row_* do, and
 * the unpacking of the K formats' scales and q6_K's quants that the other
 * kernels share. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <stdint.h>
#include <string.h>

#include "base/base.h"
#include "quant_ref.h"

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
        for (int j = 0; j < SD_QK; j++)
            dst[j] = (float)b->qs[j] * d;
    }
}

static void dequant_q8_1(const void *src, float *dst, int64_t n) {
    const struct sd_block_q8_1 *b = src;
    for (int64_t i = 0; i < n / SD_QK; i++, b++, dst += SD_QK) {
        const float d = h2f(b->d);
        for (int j = 0; j < SD_QK; j++)
            dst[j] = (float)b->qs[j] * d;
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
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * (float)(q[l] >> 4) - m2;
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
        for (int k = 0; k < SD_QK_K; k++)
            dst[k] = d * (float)(int8_t)p[4 + k];
    }
}
const sd_dequant_fn sd_ref_dequant[SD_TYPE_COUNT] = {
    [SD_TYPE_F32] = dequant_f32,   [SD_TYPE_F16] = dequant_f16,   [SD_TYPE_BF16] = dequant_bf16,
    [SD_TYPE_Q4_0] = dequant_q4_0, [SD_TYPE_Q4_1] = dequant_q4_1, [SD_TYPE_Q5_0] = dequant_q5_0,
    [SD_TYPE_Q5_1] = dequant_q5_1, [SD_TYPE_Q8_0] = dequant_q8_0, [SD_TYPE_Q8_1] = dequant_q8_1,
    [SD_TYPE_Q4_K] = dequant_q4_K, [SD_TYPE_Q5_K] = dequant_q5_K, [SD_TYPE_Q6_K] = dequant_q6_K,
    [SD_TYPE_Q8_K] = dequant_q8_K,
};
