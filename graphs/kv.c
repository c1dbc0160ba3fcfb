/* graphs/kv.c - the KV cache: one host buffer whatever the backend. */
#include "graphs/kv.h"

#include <math.h>
#include <string.h>

#include "graphs/quant.h"

int sd_kv_create(const struct sd_model *m, int32_t n_ctx, enum sd_kv_keys keys, struct sd_kv_cache *kv,
                 struct sd_err *err) {
    memset(kv, 0, sizeof *kv);
    if (n_ctx <= 0) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "context size %d must be positive", n_ctx);
    kv->n_ctx = n_ctx;
    kv->n_layer = m->cfg.n_layer;
    kv->n_head_kv = m->cfg.n_head_kv;
    kv->head_dim = m->cfg.head_dim;
    kv->kv_dim = m->cfg.n_head_kv * m->cfg.head_dim;
    kv->keys = keys;
    if (keys == SD_KV_KEYS_I16 && (kv->head_dim > SD_KV_MAX_HEAD_DIM || kv->head_dim % 2))
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED,
                          "head dimension %d: integer keys take an even one of at most %d", kv->head_dim,
                          SD_KV_MAX_HEAD_DIM);
    /* Whole key blocks a head, whichever the keys (a few slots at most). */
    const int64_t n_alloc = ((int64_t)n_ctx + SD_KV_KEY_BLOCK - 1) / SD_KV_KEY_BLOCK * SD_KV_KEY_BLOCK;
    uint64_t elems;
    if (n_alloc > INT32_MAX ||
        sd_mul_ovf((uint64_t)kv->n_layer * (uint64_t)n_alloc, (uint64_t)kv->kv_dim, &elems) ||
        elems > SIZE_MAX / 2)
        return sd_err_set(err, SDNPU_ERR_OOM, "KV cache of %d slots is too large", n_ctx);
    kv->n_alloc = (int32_t)n_alloc;
    /* Zeroed, as it always was: the scores load whole blocks of 16 slots,
     * unwritten ones too, and drop their lanes, so no old heap bytes enter
     * a computation even where they would be dropped (test_dirty_heap:
     * the replies do not depend on it). By pages the system zeroes as they
     * are first written where it can (sd_aligned_zalloc): a session's
     * cache costs what its tokens fill, not its context. */
    kv->k = sd_aligned_zalloc((size_t)elems * 2);
    kv->v = sd_aligned_zalloc((size_t)elems * 2);
    kv->slot_pos = sd_malloc((size_t)n_ctx * sizeof(int32_t));
    const size_t n_rows = (size_t)kv->n_layer * (size_t)kv->n_head_kv * (size_t)n_ctx;
    if (keys == SD_KV_KEYS_I16) kv->k_scale = sd_calloc(n_rows, sizeof(float));
    if (!kv->k || !kv->v || !kv->slot_pos || (keys == SD_KV_KEYS_I16 && !kv->k_scale)) {
        sd_kv_free(kv);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a KV cache of %d slots (%.1f MiB)", n_ctx,
                          (double)elems * 4 / (1024.0 * 1024.0));
    }
    /* Attention reads a layer's rows of the cache once a pass, from memory. */
    sd_advise_huge_pages(kv->k, (size_t)elems * 2);
    sd_advise_huge_pages(kv->v, (size_t)elems * 2);
    sd_kv_truncate(kv, 0);
    return SDNPU_OK;
}

void sd_kv_free(struct sd_kv_cache *kv) {
    sd_aligned_free(kv->k);
    sd_aligned_free(kv->v);
    sd_free(kv->k_scale);
    sd_free(kv->slot_pos);
    memset(kv, 0, sizeof *kv);
}

/* NaN values take level -L; an infinite one makes the scale infinite and
 * the levels -L or 0, so its scores are not finite, as fp16's. */
float sd_kv_quantize_key(const float *x, int32_t n, int16_t *q) {
    return sd_quantize_levels(x, n, SD_KV_KEY_LEVELS, q);
}

/* A pair of levels at a time, as the block holds them. */
void sd_kv_keys_get(const int16_t *head, int32_t s, int32_t hd, int16_t *row) {
    for (int32_t d = 0; d < hd; d += 2)
        memcpy(row + d, head + sd_kv_key_at(s, d, hd), 4);
}

void sd_kv_keys_put(int16_t *head, int32_t s, int32_t hd, const int16_t *row) {
    for (int32_t d = 0; d < hd; d += 2)
        memcpy(head + sd_kv_key_at(s, d, hd), row + d, 4);
}

static int16_t *head_keys(struct sd_kv_cache *kv, int32_t il, int32_t h) {
    return (int16_t *)kv->k + sd_kv_head_off(kv, il, h);
}

void sd_kv_write_k(struct sd_kv_cache *kv, int32_t il, int32_t h, int32_t slot, const float *k) {
    const size_t hd = (size_t)kv->head_dim;
    if (kv->keys == SD_KV_KEYS_I16) {
        int16_t lev[SD_KV_MAX_HEAD_DIM];
        kv->k_scale[sd_kv_scale_off(kv, il, h) + (size_t)slot] = sd_kv_quantize_key(k, kv->head_dim, lev);
        sd_kv_keys_put(head_keys(kv, il, h), slot, kv->head_dim, lev);
        return;
    }
    uint16_t *dst = kv->k + sd_kv_head_off(kv, il, h) + (size_t)slot * hd;
    for (size_t i = 0; i < hd; i++)
        dst[i] = sd_fp32_to_fp16(k[i]);
}

/* 65,280 in bf16: the largest bf16 value that fp16 holds. */
#define BF16_FP16_MAX 0x477Fu

/* Where x's fp16 is normal and finite (2^-14 <= |x| < 65,520), both
 * roundings are done on its bits: to 10 bits of fraction, then to 7, each
 * to nearest even (a carry runs into the exponent, as it should); every
 * other x (zero, fp16's subnormals, its overflow, NaN) through the scalar
 * conversions. A value per row element is written every pass, so this is
 * on the forward pass's path. */
uint16_t sd_kv_fast_v(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a < 0x38800000u || a >= 0x477FF000u) {
        const float h = sd_fp16_to_fp32(sd_fp32_to_fp16(x));
        const uint16_t b = sd_fp32_to_bf16(h);
        return isfinite(h) && fabsf(sd_bf16_to_fp32(b)) > 65504.0f ? (uint16_t)((b & 0x8000u) | BF16_FP16_MAX)
                                                                   : b;
    }
    uint32_t r = (u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu;
    r = (r + 0x7FFFu + ((r >> 16) & 1u)) >> 16;
    return (uint16_t)((r & 0x7FFFu) > BF16_FP16_MAX ? (r & 0x8000u) | BF16_FP16_MAX : r);
}

/* The fp16 of a bf16 value that fp16 holds exactly (the fast order's V):
 * on its bits where that fp16 is normal, else the scalar conversions. */
static uint16_t fast_v_fp16(uint16_t b) {
    const uint32_t e = (b >> 7) & 0xFFu;
    if (e < 113 || e > 142) return sd_fp32_to_fp16(sd_bf16_to_fp32(b));
    return (uint16_t)((b & 0x8000u) | ((e - 112) << 10) | ((b & 0x7Fu) << 3));
}

void sd_kv_write_v(struct sd_kv_cache *kv, int32_t il, int32_t h, int32_t slot, const float *v) {
    const size_t hd = (size_t)kv->head_dim;
    uint16_t *dst = kv->v + sd_kv_head_off(kv, il, h) + (size_t)slot * hd;
    for (size_t i = 0; i < hd; i++)
        dst[i] = kv->keys == SD_KV_KEYS_I16 ? sd_kv_fast_v(v[i]) : sd_fp32_to_fp16(v[i]);
}

void sd_kv_move(struct sd_kv_cache *kv, int32_t src, int32_t dst) {
    if (src == dst) return;
    const size_t hd = (size_t)kv->head_dim;
    for (int32_t l = 0; l < kv->n_layer; l++)
        for (int32_t h = 0; h < kv->n_head_kv; h++) {
            const size_t off = sd_kv_head_off(kv, l, h);
            if (kv->keys == SD_KV_KEYS_I16) {
                int16_t lev[SD_KV_MAX_HEAD_DIM];
                sd_kv_keys_get(head_keys(kv, l, h), src, kv->head_dim, lev);
                sd_kv_keys_put(head_keys(kv, l, h), dst, kv->head_dim, lev);
            } else {
                memcpy(kv->k + off + (size_t)dst * hd, kv->k + off + (size_t)src * hd, hd * 2);
            }
            memcpy(kv->v + off + (size_t)dst * hd, kv->v + off + (size_t)src * hd, hd * 2);
            if (kv->k_scale) {
                float *sc = kv->k_scale + sd_kv_scale_off(kv, l, h);
                sc[dst] = sc[src];
            }
        }
    kv->slot_pos[dst] = kv->slot_pos[src];
}

void sd_kv_truncate(struct sd_kv_cache *kv, int32_t from) {
    for (int32_t i = from < 0 ? 0 : from; i < kv->n_ctx; i++) kv->slot_pos[i] = -1;
}

size_t sd_kv_snapshot_bytes_as(const struct sd_kv_cache *kv, enum sd_kv_keys keys, int32_t n) {
    const size_t words = (size_t)kv->n_layer * 2 * (size_t)n * (size_t)kv->kv_dim * 2;
    return words + (keys == SD_KV_KEYS_I16 ? (size_t)kv->n_layer * (size_t)n * (size_t)kv->n_head_kv * 4 : 0);
}

size_t sd_kv_snapshot_bytes(const struct sd_kv_cache *kv, int32_t n) {
    return sd_kv_snapshot_bytes_as(kv, kv->keys, n);
}

/* How copy_rows takes each 16-bit value: as it is, the fast order's bf16
 * V made the snapshot's fp16 (exact), or a snapshot's fp16 V made the fast
 * order's (sd_kv_fast_v). */
enum row_conv { ROWS_AS_THEY_ARE, ROWS_BF16_TO_FP16, ROWS_FP16_TO_FAST_V };

static uint16_t conv_value(enum row_conv c, uint16_t x) {
    return c == ROWS_BF16_TO_FP16 ? fast_v_fp16(x) : sd_kv_fast_v(sd_fp16_to_fp32(x));
}

/* n rows of len values from src to dst, each with its own stride: a K/V
 * head's rows of the cache to or from their places in the snapshot's rows,
 * where each slot holds its heads side by side. */
static void copy_rows(uint16_t *dst, size_t dst_stride, const uint16_t *src, size_t src_stride, int32_t n,
                      size_t len, enum row_conv c) {
    for (int32_t s = 0; s < n; s++) {
        uint16_t *d = dst + (size_t)s * dst_stride;
        const uint16_t *r = src + (size_t)s * src_stride;
        if (c == ROWS_AS_THEY_ARE) {
            memcpy(d, r, len * 2);
            continue;
        }
        for (size_t i = 0; i < len; i++)
            d[i] = conv_value(c, r[i]);
    }
}

/* A snapshot's K scales of n_src slots: [n_layer][n_src][n_head_kv]. */
static float *snapshot_scales(const struct sd_kv_cache *kv, const void *snap, int32_t n_src) {
    return (float *)((char *)snap + sd_kv_snapshot_bytes_as(kv, SD_KV_KEYS_FP16, n_src));
}

void sd_kv_snapshot(const struct sd_kv_cache *kv, int32_t n, void *dst) {
    const size_t hd = (size_t)kv->head_dim, row = (size_t)kv->kv_dim, span = (size_t)n * row;
    uint16_t *d = dst;
    float *sc = kv->k_scale ? snapshot_scales(kv, dst, n) : NULL;
    for (int32_t l = 0; l < kv->n_layer; l++, d += 2 * span)
        for (int32_t h = 0; h < kv->n_head_kv; h++) {
            const size_t off = sd_kv_head_off(kv, l, h);
            if (kv->keys == SD_KV_KEYS_I16)
                for (int32_t s = 0; s < n; s++)
                    sd_kv_keys_get((const int16_t *)kv->k + off, s, kv->head_dim,
                                   (int16_t *)(d + (size_t)h * hd + (size_t)s * row));
            else
                copy_rows(d + (size_t)h * hd, row, kv->k + off, hd, n, hd, ROWS_AS_THEY_ARE);
            copy_rows(d + span + (size_t)h * hd, row, kv->v + off, hd, n, hd,
                      kv->keys == SD_KV_KEYS_I16 ? ROWS_BF16_TO_FP16 : ROWS_AS_THEY_ARE);
            for (int32_t s = 0; sc && s < n; s++)
                sc[((size_t)l * (size_t)n + (size_t)s) * (size_t)kv->n_head_kv + (size_t)h] =
                    kv->k_scale[sd_kv_scale_off(kv, l, h) + (size_t)s];
        }
}

/* Slot s's K row of head h from a snapshot row of the other kind of keys:
 * fp16 values quantized (sd_kv_write_k), or levels times scale in fp16. */
static void convert_key(struct sd_kv_cache *kv, int32_t l, int32_t h, int32_t s, const uint16_t *src,
                        float scale) {
    float x[SD_KV_MAX_HEAD_DIM];
    const int32_t hd = kv->head_dim;
    if (kv->keys == SD_KV_KEYS_I16) {
        for (int32_t i = 0; i < hd; i++)
            x[i] = sd_fp16_to_fp32(src[i]);
    } else {
        for (int32_t i = 0; i < hd; i++)
            x[i] = (float)(int16_t)src[i] * scale;
    }
    sd_kv_write_k(kv, l, h, s, x);
}

void sd_kv_restore(struct sd_kv_cache *kv, const void *src, enum sd_kv_keys src_keys, int32_t n_src,
                   int32_t n) {
    const size_t hd = (size_t)kv->head_dim, row = (size_t)kv->kv_dim, span = (size_t)n_src * row;
    const uint16_t *s = src;
    const float *ssc = src_keys == SD_KV_KEYS_I16 ? snapshot_scales(kv, src, n_src) : NULL;
    for (int32_t l = 0; l < kv->n_layer; l++, s += 2 * span)
        for (int32_t h = 0; h < kv->n_head_kv; h++) {
            const size_t off = sd_kv_head_off(kv, l, h);
            copy_rows(kv->v + off, hd, s + span + (size_t)h * hd, row, n, hd,
                      kv->keys == SD_KV_KEYS_I16 ? ROWS_FP16_TO_FAST_V : ROWS_AS_THEY_ARE);
            for (int32_t i = 0; i < n; i++) {
                const uint16_t *kr = s + (size_t)i * row + (size_t)h * hd;
                const float sc =
                    ssc ? ssc[((size_t)l * (size_t)n_src + (size_t)i) * (size_t)kv->n_head_kv + (size_t)h]
                        : 0;
                if (src_keys != kv->keys) {
                    convert_key(kv, l, h, i, kr, sc);
                    continue;
                }
                if (!kv->k_scale) {
                    memcpy(kv->k + off + (size_t)i * hd, kr, hd * 2);
                    continue;
                }
                kv->k_scale[sd_kv_scale_off(kv, l, h) + (size_t)i] = sc;
                /* Levels past the bound (a forged file) would overflow the scores' int32 sums. */
                int16_t q[SD_KV_MAX_HEAD_DIM];
                memcpy(q, kr, hd * 2);
                for (size_t d = 0; d < hd; d++)
                    q[d] = (int16_t)SD_MAX(SD_MIN(q[d], SD_KV_KEY_LEVELS), -SD_KV_KEY_LEVELS);
                sd_kv_keys_put((int16_t *)kv->k + off, i, kv->head_dim, q);
            }
        }
    for (int32_t i = 0; i < n; i++) kv->slot_pos[i] = i;
    sd_kv_truncate(kv, n);
}

/* Slots of real rows hold their positions before attention runs, so rows of
 * the same batch see each other as the mask allows. */
void sd_kv_mark_rows(struct sd_kv_cache *kv, const struct sd_row *rows, int32_t n_rows) {
    for (int32_t r = 0; r < n_rows; r++)
        if (rows[r].token >= 0 && rows[r].slot >= 0 && rows[r].slot < kv->n_ctx) kv->slot_pos[rows[r].slot] = rows[r].pos;
}
