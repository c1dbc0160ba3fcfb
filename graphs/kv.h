/*
 * graphs/kv.h - the KV cache and the rows that read and write it.
 *
 * Attention against the cache runs on the host side of every backend
 * (graphs/graph.h says why), so the cache is one host buffer whatever the
 * backend, and the layers above (the runtime, verification) change it only
 * through these functions: a backend's file is never reached into.
 */
#ifndef SD_GRAPHS_KV_H
#define SD_GRAPHS_KV_H

#include <stdint.h>

#include "base/base.h"
#include "graphs/model.h"

#define SD_MAX_BATCH_ROWS 256

/* The KV cache. V is stored in 16 bits, as mobile engines and llama.cpp do:
 * half the memory of f32, and the cache is the largest buffer at long
 * contexts; fp16 for the ggml order, and for the fast order bf16 values
 * that fp16 holds exactly too (sd_kv_fast_v): the form its p.V multiplies
 * (vdpbf16ps), so that no pass converts them (docs/benchmarks.md, "Stop
 * 83"), and a snapshot's fp16 rows without loss. K is fp16 too for the
 * ggml order; the fast order keeps each K
 * row (a slot's K/V head, head_dim values) as 14-bit integers times a
 * scale of its own (SD_KV_KEYS_I16: the same bytes, and the scores become
 * exact integer sums on vpdpwssd, graphs/cpu/attention.h). Each K/V head's
 * rows lie together, slot after slot: attention reads one head's keys and
 * values over the whole context, from memory, and a head's rows
 * interleaved with the other heads' (the row of a slot being all heads)
 * made that read strided; at 12,000 tokens on the 0.5B it ran at 8 GB/s
 * where the weights stream at 30 (docs/benchmarks.md). */
enum sd_kv_keys { SD_KV_KEYS_FP16, SD_KV_KEYS_I16 };
/* The largest magnitude of an I16 key's levels, and the longest I16 row. */
#define SD_KV_KEY_LEVELS 8191
#define SD_KV_MAX_HEAD_DIM 1024

/* The fast order's keys lie in blocks of SD_KV_KEY_BLOCK slots, their levels
 * in pairs: block b of a K/V head holds slots [16b, 16b + 16) as
 * [head_dim / 2][16] dwords, dword (j, l) being levels 2j and 2j + 1 of slot
 * 16b + l. That is the form in which the scores take sixteen keys in the
 * lanes of a vector (graphs/cpu/attn_scores.c), so a run of whole blocks is
 * read as it lies, where rows slot after slot were transposed sixteen at a
 * time for every pass (a quarter of one row's attention; docs/benchmarks.md,
 * "Stop 82"). head_dim is even. */
#define SD_KV_KEY_BLOCK 16

struct sd_kv_cache {
    int32_t n_ctx;     /* slots */
    int32_t n_alloc;   /* slots each head's rows hold: n_ctx rounded up to whole key blocks */
    int32_t n_layer;
    int32_t n_head_kv, head_dim;
    int32_t kv_dim;    /* n_head_kv * head_dim */
    enum sd_kv_keys keys;
    uint16_t *k;       /* [n_layer][n_head_kv][n_alloc][head_dim] fp16, or int16 levels in key blocks (I16) */
    uint16_t *v;       /* [n_layer][n_head_kv][n_alloc][head_dim] fp16, or bf16 (I16 keys: the fast order) */
    float *k_scale;    /* I16: [n_layer][n_head_kv][n_ctx], a K row's value = level * scale; else NULL */
    int32_t *slot_pos; /* [n_ctx] RoPE position held by each slot, -1 if empty */
};

/* Where layer il's rows of K/V head h start in k (or v): slot s's row is
 * the head_dim values from offset + s * head_dim (V, fp16 keys), or its
 * levels are in the key blocks from offset (I16). */
static inline size_t sd_kv_head_off(const struct sd_kv_cache *kv, int32_t il, int32_t h) {
    return ((size_t)il * (size_t)kv->n_head_kv + (size_t)h) * (size_t)kv->n_alloc * (size_t)kv->head_dim;
}
/* Where level d of slot s lies in a K/V head's key blocks (I16). */
static inline size_t sd_kv_key_at(int32_t s, int32_t d, int32_t hd) {
    return (size_t)(s / SD_KV_KEY_BLOCK) * SD_KV_KEY_BLOCK * (size_t)hd +
           (size_t)(d / 2) * 2 * SD_KV_KEY_BLOCK + (size_t)(s % SD_KV_KEY_BLOCK) * 2 + (size_t)(d % 2);
}
/* Slot s's hd levels in the key blocks from head: into row, or from it. */
void sd_kv_keys_get(const int16_t *head, int32_t s, int32_t hd, int16_t *row);
void sd_kv_keys_put(int16_t *head, int32_t s, int32_t hd, const int16_t *row);
/* Where their scales start in k_scale (I16): slot s's at offset + s. */
static inline size_t sd_kv_scale_off(const struct sd_kv_cache *kv, int32_t il, int32_t h) {
    return ((size_t)il * (size_t)kv->n_head_kv + (size_t)h) * (size_t)kv->n_ctx;
}

int sd_kv_create(const struct sd_model *m, int32_t n_ctx, enum sd_kv_keys keys, struct sd_kv_cache *kv,
                 struct sd_err *err);
void sd_kv_free(struct sd_kv_cache *kv);
/* Write layer il's K row of K/V head h at a slot from head_dim f32 values:
 * fp16, or for I16 keys the levels round(x * L / amax) and the scale
 * amax / L (L = SD_KV_KEY_LEVELS, amax the row's largest magnitude; a row
 * of zeros has scale 0). */
void sd_kv_write_k(struct sd_kv_cache *kv, int32_t il, int32_t h, int32_t slot, const float *k);
/* Layer il's V row of K/V head h at a slot from head_dim f32 values: fp16,
 * or for I16 keys each value as sd_kv_fast_v makes it. */
void sd_kv_write_v(struct sd_kv_cache *kv, int32_t il, int32_t h, int32_t slot, const float *v);
/* The fast order's V value of x, as bf16 bits: x rounded to fp16, then to
 * bf16 (each to nearest even), so that it is exact in both; the four
 * largest fp16 magnitudes, which round to 2^16, become 65,280, the largest
 * bf16 value fp16 holds. */
uint16_t sd_kv_fast_v(float x);
/* That row's levels of n values into levels; returns its scale. */
float sd_kv_quantize_key(const float *x, int32_t n, int16_t *levels);
/* Copy slot src to slot dst in every layer (moving accepted draft rows). */
void sd_kv_move(struct sd_kv_cache *kv, int32_t src, int32_t dst);
/* Mark slots [from, n_ctx) empty. */
void sd_kv_truncate(struct sd_kv_cache *kv, int32_t from);

/* Snapshots of the first n slots (the context's first n tokens at positions
 * 0..n-1), for the prompt cache and saved sessions. A snapshot is
 * [n_layer][2 (K, V)][n][kv_dim] 16-bit values, contiguous: each slot's
 * heads side by side, the format of saved sessions, whatever the cache's
 * layout, V in fp16 (the fast order's bf16 values converted exactly); for
 * I16 keys the K values are levels, followed by their scales,
 * [n_layer][n][n_head_kv] floats. */
size_t sd_kv_snapshot_bytes(const struct sd_kv_cache *kv, int32_t n);
/* The same for a cache of either keys of this model's shape. */
size_t sd_kv_snapshot_bytes_as(const struct sd_kv_cache *kv, enum sd_kv_keys keys, int32_t n);
/* Copy slots [0, n) into dst (sd_kv_snapshot_bytes(kv, n) bytes). */
void sd_kv_snapshot(const struct sd_kv_cache *kv, int32_t n, void *dst);
/* Fill slots [0, n) from the first n slots of a snapshot of n_src >= n
 * slots taken from a cache with keys src_keys, at positions 0..n-1, and mark
 * the rest empty. Keys of the other kind are converted (fp16 keys
 * quantized as sd_kv_write_k does, levels times their scale rounded to
 * fp16), and V into an I16 cache made sd_kv_fast_v's values: a session
 * saved by either order loads into the other. */
void sd_kv_restore(struct sd_kv_cache *kv, const void *src, enum sd_kv_keys src_keys, int32_t n_src,
                   int32_t n);

struct sd_row {
    int32_t token;     /* < 0: a padding row (computed, writes nothing, attends to nothing) */
    int32_t pos;       /* RoPE position */
    int32_t slot;      /* KV slot this row writes */
    int32_t n_prefix;  /* the row sees slots [0, n_prefix) ... */
    uint64_t anc[SD_MAX_BATCH_ROWS / 64]; /* ... and slots base + j for each bit j set (j < n_rows) */
};

/* Slots of real rows hold their positions before attention runs, so rows
 * of the same batch see each other as the mask allows: call once per batch
 * before its first layer. */
void sd_kv_mark_rows(struct sd_kv_cache *kv, const struct sd_row *rows, int32_t n_rows);

#endif /* SD_GRAPHS_KV_H */
