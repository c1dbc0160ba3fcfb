/* graphs/cert.c - a packed q8_0 or q6_K head's certificate
 * (graphs/cert.h). */
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

/* The copy's type: one of the head's activation class (both products read
 * the same prepared activations), about two thirds of its bytes. */
static enum sd_type copy_type(enum sd_type t) { return t == SD_TYPE_Q6_K ? SD_TYPE_Q4_K : SD_TYPE_Q5_0; }

/* Values a block of the head's activations (one float scale each). */
static int64_t act_block(enum sd_type t) { return t == SD_TYPE_Q6_K ? 256 : 32; }

int32_t sd_cert_max_rows(enum sd_type t) { return t == SD_TYPE_Q6_K ? 1 : SD_CERT_MAX_ROWS; }

bool sd_cert_supported(enum sd_type t, int64_t n_in) {
    return (t == SD_TYPE_Q8_0 || t == SD_TYPE_Q6_K) && n_in > 0 && n_in % act_block(t) == 0 &&
           sd_packed_act_same(t, copy_type(t));
}

static size_t copy_bytes(enum sd_type t, int64_t n_out, int64_t n_in) {
    return sd_packed_bytes(copy_type(t), n_out, n_in);
}

size_t sd_cert_bytes(enum sd_type t, int64_t n_out, int64_t n_in) {
    if (!sd_cert_supported(t, n_in) || n_out <= 0) return 0;
    const size_t outs = (size_t)((n_out + SD_PK_COLS - 1) / SD_PK_COLS) * SD_PK_COLS;
    return copy_bytes(t, n_out, n_in) + ((outs * sizeof(float) + 63) & ~(size_t)63);
}

void sd_cert_matmul(enum sd_type t, const void *cert, int64_t n_out, int64_t n_in, const void *xq,
                    size_t xq_row_bytes, int64_t n_rows, float *y, size_t y_stride, int64_t out_begin,
                    int64_t out_end) {
    sd_packed_matmul(copy_type(t), cert, n_out, n_in, xq, xq_row_bytes, n_rows, y, y_stride, out_begin,
                     out_end);
}

const float *sd_cert_margins(enum sd_type t, const void *cert, int64_t n_out, int64_t n_in) {
    return (const float *)(const void *)((const uint8_t *)cert + copy_bytes(t, n_out, n_in));
}

/* The float at or above v. */
static float round_up(double v) {
    float f = (float)v;
    if ((double)f < v) f = nextafterf(f, INFINITY);
    return f;
}

static double norm_of(const float *v, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)v[i] * (double)v[i];
    return sqrt(s);
}

/* ||a - b||, in double. */
static double dist_of(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s);
}

/* c_j (graphs/cert.h) of the q8_0 row w and its q5_0 copy w', both
 * dequantized exactly; infinity where they are not finite (an untrusted
 * file's scales). */
static double margin_q8(const float *w, const float *wc, int64_t n_in) {
    const double g = (double)(n_in / 32 + 4) * 0x1p-23;
    return dist_of(w, wc, n_in) + g * (norm_of(w, n_in) + norm_of(wc, n_in));
}

/* A q4_K row's parts: its scales' (d sc q, with the mins' scale made 0)
 * into pos and its mins' (-dmin m, the scale made 0) into neg, each value
 * one exact product; tmp holds a row. */
static void q4k_parts(const uint8_t *q, int64_t n_in, uint8_t *tmp, float *pos, float *neg) {
    const int64_t nb = n_in / SD_QK_K;
    for (int pass = 0; pass < 2; pass++) {
        struct sd_block_q4_K *blk = (struct sd_block_q4_K *)(void *)tmp;
        memcpy(tmp, q, (size_t)nb * sizeof *blk);
        for (int64_t b = 0; b < nb; b++) {
            if (pass)
                blk[b].d = 0;
            else
                blk[b].dmin = 0;
        }
        sd_dequantize_row(SD_TYPE_Q4_K, tmp, pass ? neg : pos, n_in);
    }
}

/* c_j of the q6_K row w and its q4_K copy w' (wc, float-dequantized; pos
 * and neg its two parts). The kernels' float steps are bounded by the sums
 * of the magnitudes of the terms they add, each within a rounding depth
 * of k steps, so by (k + 4) 2^-23 times: q6_K's sub-block products of w,
 * 16 to a super-block then its scale product and nsb fused multiply-adds
 * (k = nsb + 17), at most ||w|| ||x~|| together; q4_K's, 8 sub-block
 * products then the scale's and the mins' products and two fused
 * multiply-adds a super-block (k = 2 nsb + 9), at most (||pos|| +
 * ||neg||) ||x~||. wc's own rounding (d sc q - dmin m in floats) adds
 * 2^-24 ||wc|| at most to ||w - w'||. */
static double margin_q6(const float *w, const float *wc, const float *pos, const float *neg, int64_t n_in) {
    const double nsb = (double)(n_in / 256), g6 = (nsb + 21) * 0x1p-23, g4 = (2 * nsb + 13) * 0x1p-23;
    return dist_of(w, wc, n_in) + 0x1p-23 * norm_of(wc, n_in) + g6 * norm_of(w, n_in) +
           g4 * (norm_of(pos, n_in) + norm_of(neg, n_in));
}

static size_t copy_row_bytes(enum sd_type t, int64_t n_in) {
    size_t b = 0;
    sd_row_size(copy_type(t), n_in, &b);
    return b;
}

/* Floats of work space copy_row takes before the copy's row. */
static int64_t work_floats(int64_t n_in) { return 4 * n_in; }

/* Row o's copy into cq and its margin; work holds work_floats floats and
 * then a copy row. A row that is not finite (an untrusted file's scales)
 * gets a zero copy and an infinite margin: the whole head runs then. */
static float copy_row(enum sd_type t, const uint8_t *src, int64_t n_in, uint8_t *cq, float *work) {
    const enum sd_type ct = copy_type(t);
    float *w = work, *wc = w + n_in;
    sd_dequantize_row(t, src, w, n_in);
    bool finite = true;
    for (int64_t i = 0; i < n_in; i++) finite &= isfinite(w[i]) != 0;
    if (!finite) memset(w, 0, (size_t)n_in * sizeof *w);
    if (ct == SD_TYPE_Q4_K)
        sd_quantize_q4_K_coarse(w, cq, n_in); /* the margin measures what it loses */
    else
        sd_quantize_row(ct, w, cq, n_in);
    if (!finite) return INFINITY;
    sd_dequantize_row(ct, cq, wc, n_in);
    double c;
    if (t == SD_TYPE_Q6_K) {
        float *pos = wc + n_in, *neg = pos + n_in;
        q4k_parts(cq, n_in, (uint8_t *)(work + work_floats(n_in)), pos, neg);
        c = margin_q6(w, wc, pos, neg, n_in);
    } else {
        c = margin_q8(w, wc, n_in);
    }
    c *= 1.0 + 0x1p-10;
    return isfinite(c) ? round_up(c) : INFINITY;
}

size_t sd_cert_scratch_bytes(enum sd_type t, int64_t n_in) {
    return ((size_t)work_floats(n_in) * sizeof(float) + (SD_PK_COLS + 1) * copy_row_bytes(t, n_in) + 63) &
           ~(size_t)63;
}

void sd_cert_build(enum sd_type t, const void *src, size_t row_bytes, int64_t n_out, int64_t n_in, void *cert,
                   int64_t g0, int64_t g1, void *scratch) {
    const size_t crow = copy_row_bytes(t, n_in), gb = sd_packed_group_bytes(copy_type(t), n_in);
    float *c = (float *)(void *)((uint8_t *)cert + copy_bytes(t, n_out, n_in));
    float *work = scratch;
    uint8_t *cq = (uint8_t *)(work + work_floats(n_in)) + crow; /* after copy_row's own row */
    for (int64_t g = g0; g < g1; g++) {
        const int64_t o0 = g * SD_PK_COLS, k = SD_MIN(SD_PK_COLS, n_out - o0);
        for (int64_t i = k; i < SD_PK_COLS; i++)
            c[o0 + i] = 0.0f; /* no output: never scanned */
        for (int64_t i = 0; i < k; i++)
            c[o0 + i] = copy_row(t, (const uint8_t *)src + (size_t)(o0 + i) * row_bytes, n_in,
                                 cq + (size_t)i * crow, work);
        sd_pack_weights(copy_type(t), cq, crow, k, n_in, (uint8_t *)cert + (size_t)g * gb);
    }
}

float sd_cert_act_norm(enum sd_type t, const void *xq, int64_t n_in) {
    /* either class: n int8 values, then a float scale a block */
    const int64_t bk = act_block(t);
    const int8_t *q = xq;
    const float *d = (const float *)(const void *)((const uint8_t *)xq + n_in);
    double s = 0;
    for (int64_t b = 0; b < n_in / bk; b++) {
        int64_t q2 = 0;
        for (int64_t i = 0; i < bk; i++)
            q2 += (int64_t)q[bk * b + i] * q[bk * b + i];
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
