/* graphs/kv.c - the KV cache: one host buffer whatever the backend. */
#include "graphs/kv.h"

#include <string.h>

int sd_kv_create(const struct sd_model *m, int32_t n_ctx, struct sd_kv_cache *kv, struct sd_err *err) {
    memset(kv, 0, sizeof *kv);
    if (n_ctx <= 0) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "context size %d must be positive", n_ctx);
    kv->n_ctx = n_ctx;
    kv->n_layer = m->cfg.n_layer;
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
    size_t row = (size_t)kv->kv_dim;
    for (int32_t l = 0; l < kv->n_layer; l++) {
        size_t base = (size_t)l * (size_t)kv->n_ctx * row;
        memcpy(kv->k + base + (size_t)dst * row, kv->k + base + (size_t)src * row, row * 2);
        memcpy(kv->v + base + (size_t)dst * row, kv->v + base + (size_t)src * row, row * 2);
    }
    kv->slot_pos[dst] = kv->slot_pos[src];
}

void sd_kv_truncate(struct sd_kv_cache *kv, int32_t from) {
    for (int32_t i = from < 0 ? 0 : from; i < kv->n_ctx; i++) kv->slot_pos[i] = -1;
}

size_t sd_kv_snapshot_bytes(const struct sd_kv_cache *kv, int32_t n) {
    return (size_t)kv->n_layer * 2 * (size_t)n * (size_t)kv->kv_dim * 2;
}

void sd_kv_snapshot(const struct sd_kv_cache *kv, int32_t n, void *dst) {
    size_t row = (size_t)kv->kv_dim, span = (size_t)n * row;
    uint16_t *d = dst;
    for (int32_t l = 0; l < kv->n_layer; l++) {
        size_t base = (size_t)l * (size_t)kv->n_ctx * row;
        memcpy(d, kv->k + base, span * 2);
        memcpy(d + span, kv->v + base, span * 2);
        d += 2 * span;
    }
}

void sd_kv_restore(struct sd_kv_cache *kv, const void *src, int32_t n_src, int32_t n) {
    size_t row = (size_t)kv->kv_dim, span = (size_t)n_src * row;
    const uint16_t *s = src;
    for (int32_t l = 0; l < kv->n_layer; l++) {
        size_t base = (size_t)l * (size_t)kv->n_ctx * row;
        memcpy(kv->k + base, s, (size_t)n * row * 2);
        memcpy(kv->v + base, s + span, (size_t)n * row * 2);
        s += 2 * span;
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
