/* graphs/cert.c - a packed q8_0 head's certificate (graphs/cert.h). */
#include "graphs/cert.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "graphs/packed.h"
#include "graphs/types.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define CERT_AVX512 1
#endif

#define COPY_TYPE SD_TYPE_Q5_0

bool sd_cert_supported(enum sd_type t, int64_t n_in) {
    return t == SD_TYPE_Q8_0 && n_in > 0 && n_in % 32 == 0 && sd_packed_act_same(t, COPY_TYPE);
}

static size_t copy_bytes(int64_t n_out, int64_t n_in) { return sd_packed_bytes(COPY_TYPE, n_out, n_in); }

size_t sd_cert_bytes(enum sd_type t, int64_t n_out, int64_t n_in) {
    if (!sd_cert_supported(t, n_in) || n_out <= 0) return 0;
    const size_t outs = (size_t)((n_out + SD_PK_COLS - 1) / SD_PK_COLS) * SD_PK_COLS;
    return copy_bytes(n_out, n_in) + ((outs * sizeof(float) + 63) & ~(size_t)63);
}

void sd_cert_matmul(const void *cert, int64_t n_out, int64_t n_in, const void *xq, size_t xq_row_bytes,
                    int64_t n_rows, float *y, size_t y_stride, int64_t out_begin, int64_t out_end) {
    sd_packed_matmul(COPY_TYPE, cert, n_out, n_in, xq, xq_row_bytes, n_rows, y, y_stride, out_begin, out_end);
}

const float *sd_cert_margins(const void *cert, int64_t n_out, int64_t n_in) {
    return (const float *)(const void *)((const uint8_t *)cert + copy_bytes(n_out, n_in));
}

/* The float at or above v. */
static float round_up(double v) {
    float f = (float)v;
    if ((double)f < v) f = nextafterf(f, INFINITY);
    return f;
}

/* c_j (graphs/cert.h) of the q8_0 row w and its copy w', both dequantized;
 * infinity where they are not finite (an untrusted file's scales). */
static float margin_of(const float *w, const float *wc, int64_t n_in) {
    double d2 = 0, n1 = 0, n2 = 0;
    for (int64_t i = 0; i < n_in; i++) {
        const double a = w[i], b = wc[i];
        d2 += (a - b) * (a - b), n1 += a * a, n2 += b * b;
    }
    const double g = (double)(n_in / 32 + 4) * 0x1p-23;
    const double c = (sqrt(d2) + g * (sqrt(n1) + sqrt(n2))) * (1.0 + 0x1p-10);
    return isfinite(c) ? round_up(c) : INFINITY;
}

/* Row o's q5_0 copy into q5 and its margin; the work buffers w and wc hold
 * n_in floats each. A row that is not finite (an untrusted file's scales)
 * gets a zero copy and an infinite margin: the whole head runs then. */
static float copy_row(enum sd_type t, const uint8_t *src, int64_t n_in, uint8_t *q5, float *w, float *wc) {
    sd_dequantize_row(t, src, w, n_in);
    bool finite = true;
    for (int64_t i = 0; i < n_in; i++) finite &= isfinite(w[i]) != 0;
    if (!finite) memset(w, 0, (size_t)n_in * sizeof *w);
    sd_quantize_row(COPY_TYPE, w, q5, n_in);
    if (!finite) return INFINITY;
    sd_dequantize_row(COPY_TYPE, q5, wc, n_in);
    return margin_of(w, wc, n_in);
}

static size_t q5_row_bytes(int64_t n_in) {
    size_t b = 0;
    sd_row_size(COPY_TYPE, n_in, &b);
    return b;
}

size_t sd_cert_scratch_bytes(int64_t n_in) {
    return (2 * (size_t)n_in * sizeof(float) + SD_PK_COLS * q5_row_bytes(n_in) + 63) & ~(size_t)63;
}

void sd_cert_build(enum sd_type t, const void *src, size_t row_bytes, int64_t n_out, int64_t n_in, void *cert,
                   int64_t g0, int64_t g1, void *scratch) {
    const size_t q5_row = q5_row_bytes(n_in), gb = sd_packed_group_bytes(COPY_TYPE, n_in);
    float *c = (float *)(void *)((uint8_t *)cert + copy_bytes(n_out, n_in));
    float *w = scratch;
    uint8_t *q5 = (uint8_t *)(w + 2 * n_in);
    for (int64_t g = g0; g < g1; g++) {
        const int64_t o0 = g * SD_PK_COLS, k = SD_MIN(SD_PK_COLS, n_out - o0);
        for (int64_t i = k; i < SD_PK_COLS; i++)
            c[o0 + i] = 0.0f; /* no output: never scanned */
        for (int64_t i = 0; i < k; i++)
            c[o0 + i] = copy_row(t, (const uint8_t *)src + (size_t)(o0 + i) * row_bytes, n_in,
                                 q5 + (size_t)i * q5_row, w, w + n_in);
        sd_pack_weights(COPY_TYPE, q5, q5_row, k, n_in, (uint8_t *)cert + (size_t)g * gb);
    }
}

float sd_cert_act_norm(enum sd_type t, const void *xq, int64_t n_in) {
    (void)t; /* the 32-value class: n int8 values, then a float scale a block */
    const int8_t *q = xq;
    const float *d = (const float *)(const void *)((const uint8_t *)xq + n_in);
    double s = 0;
    for (int64_t b = 0; b < n_in / 32; b++) {
        int64_t q2 = 0;
        for (int i = 0; i < 32; i++)
            q2 += (int64_t)q[32 * b + i] * q[32 * b + i];
        s += (double)sd_pk_f32(d + b) * (double)sd_pk_f32(d + b) * (double)q2;
    }
    return isfinite(s) ? round_up(sqrt(s) * (1.0 + 0x1p-20)) : INFINITY;
}

/* One group a vector (a group is 16 outputs): the build has no -mavx512*,
 * so the function carries its target. The bounds need not match the
 * scalar scan's bits: any valid bound certifies the same argmax. */
#ifdef CERT_AVX512
__attribute__((target("avx512f"))) static bool scan_avx512(const float *a, const float *c, float xn,
                                                           int64_t n, float *best_lo, float *gmax, float *glo) {
    const __m512 vx = _mm512_set1_ps(xn), floor = _mm512_set1_ps(0x1p-100f), big = _mm512_set1_ps(FLT_MAX);
    __m512 blo = _mm512_set1_ps(*best_lo);
    __mmask16 bad = 0;
    for (int64_t o = 0; o < n; o += SD_PK_COLS) {
        const int64_t k = SD_MIN(SD_PK_COLS, n - o);
        const __mmask16 live = (__mmask16)((1u << k) - 1);
        const __m512 va = _mm512_maskz_loadu_ps(live, a + o), vc = _mm512_maskz_loadu_ps(live, c + o);
        const __m512 m = _mm512_add_ps(_mm512_mul_ps(vx, vc), floor);
        const __m512 lo = _mm512_sub_ps(va, m), hi = _mm512_add_ps(va, m);
        bad |= _mm512_mask_cmp_ps_mask(live, _mm512_sub_ps(hi, lo), big, _CMP_NLE_UQ); /* NaN or infinity */
        gmax[o / SD_PK_COLS] = _mm512_mask_reduce_max_ps(live, hi);
        if (glo) glo[o / SD_PK_COLS] = _mm512_mask_reduce_max_ps(live, lo);
        blo = _mm512_mask_max_ps(blo, live, blo, lo);
    }
    *best_lo = _mm512_reduce_max_ps(blo);
    return !bad;
}
#endif

bool sd_cert_scan(const float *a, const float *c, float xn, int64_t n, float *best_lo, float *gmax, float *glo) {
#ifdef CERT_AVX512
    if (sd_quant_get_impl() == SD_IMPL_AVX2 && sd_quant_avx512_active())
        return scan_avx512(a, c, xn, n, best_lo, gmax, glo);
#endif
    float blo = *best_lo;
    int bad = 0;
    for (int64_t o = 0; o < n; o += SD_PK_COLS) {
        const int64_t k = SD_MIN(SD_PK_COLS, n - o);
        float gm = -INFINITY, gl = -INFINITY;
        for (int64_t i = 0; i < k; i++) {
            /* The floor covers products that fall below the normal range. */
            const float m = xn * c[o + i] + 0x1p-100f, lo = a[o + i] - m, hi = a[o + i] + m;
            bad |= !(hi - lo <= FLT_MAX); /* NaN or infinity anywhere */
            gm = hi > gm ? hi : gm;
            gl = lo > gl ? lo : gl;
        }
        gmax[o / SD_PK_COLS] = gm;
        if (glo) glo[o / SD_PK_COLS] = gl;
        blo = gl > blo ? gl : blo;
    }
    *best_lo = blo;
    return !bad;
}
