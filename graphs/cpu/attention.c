/* graphs/cpu/attention.c - the fast-order attention of graphs/cpu/attention.h:
 * a row, a row's keys split between threads, and tiles of rows that share
 * a run of keys, from the steps of attn_scores.c, rowmath.c and attn_pv.c. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "graphs/cpu/attn_internal.h"

#include <string.h>

/* The SIMD paths take heads of whole blocks of 16 values, up to a tile's. */
enum sd_attn_impl sd_attn_impl_for(int32_t hd) {
    if (sd_quant_get_impl() != SD_IMPL_AVX2 || hd % 16 || hd > TILE_HD) return SD_ATTN_SCALAR;
    return sd_quant_avx512_active() ? SD_ATTN_AVX512 : SD_ATTN_AVX2;
}

/* out += p.V of every output value of the nh heads. */
static void pv_part(enum sd_attn_impl im, const float *p, const float *inv, int32_t nh, int32_t hd,
                    const uint16_t *v, size_t stride, const int32_t *slots, int32_t n, size_t cap,
                    float *out) {
    sd_attn_pv_dims(im, p, inv, nh, hd, 0, hd, v, stride, slots, n, cap, out);
}

bool sd_attn_few_rows_tiled(int32_t hd) { return sd_attn_impl_for(hd) != SD_ATTN_SCALAR; }

void sd_attn_fast(const float *q, int32_t nh, int32_t hd, const int16_t *k, const float *ks,
                  const uint16_t *v, size_t stride, const int32_t *slots, int32_t n, float kscale,
                  float *scores, float *out) {
    const size_t cap = sd_attn_cap(n);
    const enum sd_attn_impl im = sd_attn_impl_for(hd);
    sd_attn_scores_part(im, q, nh, hd, k, ks, slots, n, kscale, scores, cap);
    sd_attn_softmax_heads(scores, nh, n, cap, !sd_attn_pv_scales(im));
    memset(out, 0, (size_t)nh * (size_t)hd * sizeof(float));
    pv_part(im, scores, scores + (size_t)nh * cap, nh, hd, v, stride, slots, n, cap, out);
}

void sd_attn_fast_scores(const float *q, int32_t nh, int32_t hd, const int16_t *k, const float *ks,
                         size_t stride, const int32_t *slots, int32_t n, int32_t i0, int32_t i1, float kscale,
                         float *scores) {
    if (i1 > i0)
        sd_attn_scores_part(sd_attn_impl_for(hd), q, nh, hd, k, ks, slots + i0, i1 - i0, kscale, scores + i0,
                            sd_attn_cap(n));
}

void sd_attn_fast_softmax(float *scores, int32_t nh, int32_t hd, int32_t n) {
    sd_attn_softmax_heads(scores, nh, n, sd_attn_cap(n), !sd_attn_pv_scales(sd_attn_impl_for(hd)));
}

void sd_attn_fast_pv(int32_t nh, int32_t hd, const uint16_t *v, size_t stride, const int32_t *slots, int32_t n,
                     const float *scores, int32_t d0, int32_t d1, float *out) {
    for (int32_t h = 0; h < nh; h++) memset(out + (size_t)h * hd + d0, 0, (size_t)(d1 - d0) * sizeof(float));
    const size_t cap = sd_attn_cap(n);
    if (d1 > d0)
        sd_attn_pv_dims(sd_attn_impl_for(hd), scores, scores + (size_t)nh * cap, nh, hd, d0, d1, v, stride,
                        slots, n, cap, out);
}

#ifdef SD_X86
/* A row's keys outside the tile's run: before it (i in [0, a)) and after
 * it (i in [a + m, n)), one row at a time. */
static void rest_scores(enum sd_attn_impl im, const struct sd_attn_row *r, const int16_t *lev,
                        const float *qk, int32_t m, int32_t nh, int32_t hd, const int16_t *k,
                        const float *ks) {
    const size_t cap = sd_attn_cap(r->n);
    const int32_t b = r->a + m;
    if (r->a > 0) sd_attn_scores_lev(im, lev, qk, nh, hd, k, ks, r->slots, r->a, r->scores, cap);
    if (r->n > b) sd_attn_scores_lev(im, lev, qk, nh, hd, k, ks, r->slots + b, r->n - b, r->scores + b, cap);
}

static void rest_pv(enum sd_attn_impl im, const struct sd_attn_row *r, int32_t i0, int32_t i1, int32_t nh,
                    int32_t hd, const uint16_t *v, size_t stride) {
    const size_t cap = sd_attn_cap(r->n);
    if (i1 > i0)
        pv_part(im, r->scores + i0, r->scores + (size_t)nh * cap, nh, hd, v, stride, r->slots + i0, i1 - i0,
                cap, r->out);
}
#endif

void sd_attn_fast_rows(const struct sd_attn_row *rows, int32_t n_rows, int32_t m, int32_t nh, int32_t hd,
                       const int16_t *k, const float *ks, const uint16_t *v, size_t stride, float kscale) {
    const enum sd_attn_impl im = sd_attn_impl_for(hd);
    if (im == SD_ATTN_SCALAR || m <= 0 || nh > T16_PAIRS || nh * hd > Q_CHUNK) {
        for (int32_t r = 0; r < n_rows; r++)
            sd_attn_fast(rows[r].q, nh, hd, k, ks, v, stride, rows[r].slots, rows[r].n, kscale,
                         rows[r].scores, rows[r].out);
        return;
    }
#ifdef SD_X86
    /* Rows a tile's worth at a time, so that every (row, head) pair's q is
     * quantized once (Q_CHUNK values on the stack) and the run's scores take
     * one pass over its keys (a row's result does not depend on the rows
     * beside it). */
    const int32_t per = SD_MIN(T16_PAIRS / nh, Q_CHUNK / (nh * hd));
    if (n_rows > per) {
        for (int32_t r = 0; r < n_rows; r += per)
            sd_attn_fast_rows(rows + r, SD_MIN(per, n_rows - r), m, nh, hd, k, ks, v, stride, kscale);
        return;
    }
    _Alignas(64) int16_t lev[Q_CHUNK];
    float qk[T16_PAIRS] = {0};
    for (int32_t r = 0; r < n_rows; r++) {
        int16_t *lr = lev + (size_t)r * (size_t)nh * (size_t)hd;
        sd_attn_quant_heads(rows[r].q, 0, nh, hd, kscale, lr, qk + r * nh);
        rest_scores(im, &rows[r], lr, qk + r * nh, m, nh, hd, k, ks);
    }
    sd_attn_scores_run(im, rows, n_rows, m, nh, hd, lev, qk, k, ks);
    /* p.V: each row's keys before its part of the run, the run's part in
     * tiles of the rows of each parity, the keys after. */
    for (int32_t r = 0; r < n_rows; r++) {
        const struct sd_attn_row *row = &rows[r];
        sd_attn_softmax_heads(row->scores, nh, row->n, sd_attn_cap(row->n), !sd_attn_pv_scales(im));
        memset(row->out, 0, (size_t)nh * (size_t)hd * sizeof(float));
        rest_pv(im, row, 0, row->a + (row->a & 1), nh, hd, v, stride);
    }
    for (int32_t par = 0; par < 2; par++)
        sd_attn_pv_run(im, rows, n_rows, m, par, nh, hd, v, stride);
    for (int32_t r = 0; r < n_rows; r++) {
        const int32_t par = rows[r].a & 1;
        rest_pv(im, &rows[r], rows[r].a + par + sd_attn_pv_run_len(m, par), rows[r].n, nh, hd, v, stride);
    }
#endif
}
