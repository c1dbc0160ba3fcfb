/* graphs/quant_types.c - the table of element types: block sizes, byte sizes,
 * names. Sizes follow the GGUF specification (ggml_type). */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "quant.h"

/* can_compute is filled in by graphs/quant.c's kernels table; here a type is
 * only known (sizable) or not. */
static const struct sd_type_traits g_types[SD_TYPE_COUNT] = {
    [SD_TYPE_F32] = {"f32", 1, 4, SD_TYPE_F32, true},
    [SD_TYPE_F16] = {"f16", 1, 2, SD_TYPE_F32, true},
    [SD_TYPE_Q4_0] = {"q4_0", 32, 18, SD_TYPE_Q8_0, true},
    [SD_TYPE_Q4_1] = {"q4_1", 32, 20, SD_TYPE_Q8_1, true},
    [SD_TYPE_Q5_0] = {"q5_0", 32, 22, SD_TYPE_Q8_0, true},
    [SD_TYPE_Q5_1] = {"q5_1", 32, 24, SD_TYPE_Q8_1, true},
    [SD_TYPE_Q8_0] = {"q8_0", 32, 34, SD_TYPE_Q8_0, true},
    [SD_TYPE_Q8_1] = {"q8_1", 32, 36, SD_TYPE_Q8_1, false},
    [SD_TYPE_Q2_K] = {"q2_K", 256, 84, SD_TYPE_Q8_K, false},
    [SD_TYPE_Q3_K] = {"q3_K", 256, 110, SD_TYPE_Q8_K, false},
    [SD_TYPE_Q4_K] = {"q4_K", 256, 144, SD_TYPE_Q8_K, true},
    [SD_TYPE_Q5_K] = {"q5_K", 256, 176, SD_TYPE_Q8_K, true},
    [SD_TYPE_Q6_K] = {"q6_K", 256, 210, SD_TYPE_Q8_K, true},
    [SD_TYPE_Q8_K] = {"q8_K", 256, 292, SD_TYPE_Q8_K, false},
    [16] = {"iq2_xxs", 256, 66, SD_TYPE_Q8_K, false},
    [17] = {"iq2_xs", 256, 74, SD_TYPE_Q8_K, false},
    [18] = {"iq3_xxs", 256, 98, SD_TYPE_Q8_K, false},
    [19] = {"iq1_s", 256, 50, SD_TYPE_Q8_K, false},
    [20] = {"iq4_nl", 32, 18, SD_TYPE_Q8_0, false},
    [21] = {"iq3_s", 256, 110, SD_TYPE_Q8_K, false},
    [22] = {"iq2_s", 256, 82, SD_TYPE_Q8_K, false},
    [23] = {"iq4_xs", 256, 136, SD_TYPE_Q8_K, false},
    [24] = {"i8", 1, 1, SD_TYPE_F32, false},
    [25] = {"i16", 1, 2, SD_TYPE_F32, false},
    [26] = {"i32", 1, 4, SD_TYPE_F32, false},
    [27] = {"i64", 1, 8, SD_TYPE_F32, false},
    [28] = {"f64", 1, 8, SD_TYPE_F32, false},
    [29] = {"iq1_m", 256, 56, SD_TYPE_Q8_K, false},
    [SD_TYPE_BF16] = {"bf16", 1, 2, SD_TYPE_F32, true},
    [34] = {"tq1_0", 256, 54, SD_TYPE_Q8_K, false},
    [35] = {"tq2_0", 256, 66, SD_TYPE_Q8_K, false},
    [39] = {"mxfp4", 32, 17, SD_TYPE_Q8_0, false},
};

const struct sd_type_traits *sd_type_get(int type) {
    if (type < 0 || type >= SD_TYPE_COUNT || g_types[type].name == NULL) return NULL;
    return &g_types[type];
}

const char *sd_type_name(int type) {
    const struct sd_type_traits *t = sd_type_get(type);
    return t ? t->name : "?";
}

bool sd_row_size(int type, int64_t n, size_t *out) {
    const struct sd_type_traits *t = sd_type_get(type);
    if (!t || n < 0 || n % t->blck_size != 0) return false;
    uint64_t bytes;
    if (sd_mul_ovf((uint64_t)(n / t->blck_size), t->type_size, &bytes) || bytes > SIZE_MAX) return false;
    *out = (size_t)bytes;
    return true;
}

/* ------------------------------------------------- half / bfloat16 */

float sd_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while ((mant & 0x400) == 0);
            mant &= 0x3ff;
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even, as the hardware conversion (F16C vcvtps2ph) does,
 * bit for bit: a NaN keeps its sign and the top ten bits of its payload and
 * becomes quiet (tests compare with the instruction over every exponent). */
uint16_t sd_fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) { /* inf or nan */
        if (absx == 0x7f800000u) return (uint16_t)(sign | 0x7c00);
        return (uint16_t)(sign | 0x7e00 | ((absx >> 13) & 0x3ff));
    }
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow -> inf */
    if (absx < 0x38800000u) {                                  /* subnormal or zero in half */
        if (absx < 0x33000000u) return (uint16_t)sign;        /* rounds to zero */
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (113 - e) - 1 */
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t e = (absx >> 23) - 127 + 15;
    uint32_t m = absx & 0x7fffff;
    uint32_t h = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float sd_bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t sd_fp32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet nan */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}
