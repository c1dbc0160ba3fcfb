/* graphs/kv.c - the KV cache: one host buffer whatever the backend. */
#include "graphs/kv.h"

#include <string.h>

int sd_kv_create(const struct sd_model *m, int32_t n_ctx, struct sd_kv_cache *kv, struct sd_err *err) {
    memset(kv, 0, sizeof *kv);
    if (n_ctx <= 0) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "context size %d must be positive", n_ctx);
    kv->n_ctx = n_ctx;
    kv->n_layer = m->cfg.n_layer;
    kv->n_head_kv = m->cfg.n_head_kv;
    kv->head_dim = m->cfg.head_dim;
    kv->kv_dim = m->cfg.n_head_kv * m->cfg.head_dim;
    uint64_t elems;
    if (sd_mul_ovf((uint64_t)kv->n_layer * (uint64_t)n_ctx, (uint64_t)kv->kv_dim, &elems) || elems > SIZE_MAX / 2)
        return sd_err_set(err, SDNPU_ERR_OOM, "KV cache of %d slots is too large", n_ctx);
    kv->k = sd_aligned_alloc((size_t)elems * 2);
    kv->v = sd_aligned_alloc((size_t)elems * 2);
    kv->slot_pos = sd_malloc((size_t)n_ctx * sizeof(int32_t));
    if (!kv->k || !kv->v || !kv->slot_pos) {
        sd_kv_free(kv);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for a KV cache of %d slots (%.1f MiB)", n_ctx,
                          (double)elems * 4 / (1024.0 * 1024.0));
    }
    /* Attention reads a layer's rows of the cache once a pass, from memory. */
    sd_advise_huge_pages(kv->k, (size_t)elems * 2);
    sd_advise_huge_pages(kv->v, (size_t)elems * 2);
    memset(kv->k, 0, (size_t)elems * 2);
    memset(kv->v, 0, (size_t)elems * 2);
    sd_kv_truncate(kv, 0);
    return SDNPU_OK;
}

void sd_kv_free(struct sd_kv_cache *kv) {
    sd_aligned_free(kv->k);
    sd_aligned_free(kv->v);
    sd_free(kv->slot_pos);
    memset(kv, 0, sizeof *kv);
}

void sd_kv_move(struct sd_kv_cache *kv, int32_t src, int32_t dst) {
    if (src == dst) return;
    const size_t hd = (size_t)kv->head_dim;
    for (int32_t l = 0; l < kv->n_layer; l++)
        for (int32_t h = 0; h < kv->n_head_kv; h++) {
            const size_t off = sd_kv_head_off(kv, l, h);
            memcpy(kv->k + off + (size_t)dst * hd, kv->k + off + (size_t)src * hd, hd * 2);
            memcpy(kv->v + off + (size_t)dst * hd, kv->v + off + (size_t)src * hd, hd * 2);
        }
    kv->slot_pos[dst] = kv->slot_pos[src];
}

void sd_kv_truncate(struct sd_kv_cache *kv, int32_t from) {
    for (int32_t i = from < 0 ? 0 : from; i < kv->n_ctx; i++) kv->slot_pos[i] = -1;
}

size_t sd_kv_snapshot_bytes(const struct sd_kv_cache *kv, int32_t n) {
    return (size_t)kv->n_layer * 2 * (size_t)n * (size_t)kv->kv_dim * 2;
}

/* n rows of len values from src to dst, each with its own stride: a K/V
 * head's rows of the cache to or from their places in the snapshot's rows,
 * where each slot holds its heads side by side. */
static void copy_rows(uint16_t *dst, size_t dst_stride, const uint16_t *src, size_t src_stride, int32_t n,
                      size_t len) {
    for (int32_t s = 0; s < n; s++)
        memcpy(dst + (size_t)s * dst_stride, src + (size_t)s * src_stride, len * 2);
}

void sd_kv_snapshot(const struct sd_kv_cache *kv, int32_t n, void *dst) {
    const size_t hd = (size_t)kv->head_dim, row = (size_t)kv->kv_dim, span = (size_t)n * row;
    uint16_t *d = dst;
    for (int32_t l = 0; l < kv->n_layer; l++, d += 2 * span)
        for (int32_t h = 0; h < kv->n_head_kv; h++) {
            const size_t off = sd_kv_head_off(kv, l, h);
            copy_rows(d + (size_t)h * hd, row, kv->k + off, hd, n, hd);
            copy_rows(d + span + (size_t)h * hd, row, kv->v + off, hd, n, hd);
        }
}

void sd_kv_restore(struct sd_kv_cache *kv, const void *src, int32_t n_src, int32_t n) {
    const size_t hd = (size_t)kv->head_dim, row = (size_t)kv->kv_dim, span = (size_t)n_src * row;
    const uint16_t *s = src;
    for (int32_t l = 0; l < kv->n_layer; l++, s += 2 * span)
        for (int32_t h = 0; h < kv->n_head_kv; h++) {
            const size_t off = sd_kv_head_off(kv, l, h);
            copy_rows(kv->k + off, hd, s + (size_t)h * hd, row, n, hd);
            copy_rows(kv->v + off, hd, s + span + (size_t)h * hd, row, n, hd);
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
