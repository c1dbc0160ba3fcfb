/*
 * graphs/weights.h - one prepared copy of a model's weights, shared by
 * every graph that reads it, and the weight cache on disk behind it.
 *
 * A static-graph runtime gives its graphs prepared weights; whether each
 * graph owns a copy is the runtime's choice. One without weight sharing
 * must (sdnpu's `--weights private` models that NPU, graphs/graph.h); one
 * with it prepares each weight once for all its graphs, as a QNN context
 * binary holds a prefill graph and a one-token graph over one set of
 * weights. The store is that one copy, in the cpu backend's packed layout
 * (graphs/packed.h): the graphs of every L, both heads and every session
 * over the model read it. Each packed weight is built once (on the pool
 * of the session that first needs it), counted by the backends holding it
 * (struct sd_wholder) and freed with the last of them. After a weight is
 * packed, its pages in the model file's mapping are given back
 * (sd_drop_pages): nothing reads them again but the embedding's
 * look-ups and a calibration head's gather, which fault in the rows they
 * touch.
 *
 * The weight cache is the compiled context binary: with a cache file set
 * (sd_wstore_use_cache), the first weight anyone takes brings in the whole
 * packed model at once, mapped read-only from the file when it is valid
 * (its pages are the page cache's: no copy, and every process using the
 * model shares one), else packed and written there for the next start.
 * The file is untrusted input: its
 * key (the model file and the layout), its table and a checksum of all its
 * bytes are checked, and any mismatch is logged with what was wrong and
 * the file rebuilt. A file that cannot be written costs only the cache.
 *
 * Threads: every call may come from any thread (the store locks); a
 * holder is used by one backend, whose loader and session threads may
 * both call it.
 */
#ifndef SD_WEIGHTS_H
#define SD_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "graphs/model.h"
#include "graphs/pool.h"

/* Whether a session's graphs share one prepared copy (the default) or
 * each keep their own (an NPU runtime without weight sharing). */
enum sd_weights_mode { SD_WEIGHTS_SHARED = 0, SD_WEIGHTS_PRIVATE = 1 };

/* "shared" (or NULL) and "private". */
bool sd_weights_mode_parse(const char *s, enum sd_weights_mode *out);

/* Whether greedy heads of few rows certify their argmax from a smaller
 * copy of the output projection (graphs/cert.h): "auto" (or NULL) where
 * the copy adds at most a quarter to the packed weights' bytes (the
 * Qwen 0.5B's q8_0 head: +20%, not Gemma 270M's: +48%), "certified"
 * wherever the head's type allows, "exact" never. */
enum sd_head_mode { SD_HEAD_AUTO = 0, SD_HEAD_EXACT = 1, SD_HEAD_CERTIFIED = 2 };
bool sd_head_mode_parse(const char *s, enum sd_head_mode *out);
struct sd_wstore;
struct sd_wholder;

/* What names a cache file and what its contents must match: name tells
 * model files apart (a hash of the file's path: a new file at the same
 * path replaces the old cache), id tells versions of one file apart (its
 * size, time and header bytes). The maker of the model computes both. */
struct sd_wcache_key {
    uint64_t name;
    uint64_t id;
};

/* A store over m's weights (the packed types only; the others are read in
 * place), the output projection's certificate with it where head says.
 * m must outlive it. */
int sd_wstore_create(const struct sd_model *m, enum sd_head_mode head, struct sd_wstore **out, struct sd_err *err);
/* Whether the store's output projection carries a certificate. */
bool sd_wstore_certified(const struct sd_wstore *ws);
/* Free the store: every holder must have been freed. NULL is allowed. */
void sd_wstore_free(struct sd_wstore *ws);

/* Back the store with dir/NAME.sdw (dir is made if missing). Takes effect
 * when nothing is held; later calls with a store already set are ignored.
 * The file's layout does not depend on "auto" or "exact": under "exact" it
 * holds the certificate "auto" would use, unread (built with the file). */
int sd_wstore_use_cache(struct sd_wstore *ws, const char *dir, const struct sd_wcache_key *key, struct sd_err *err);
/* What the cache did: "none", "loaded", "built" or "failed" (the file could
 * not be read or written: the weights were packed without it). */
const char *sd_wstore_cache_state(const struct sd_wstore *ws);
/* Bytes the store holds now, each weight once, over all holders. */
size_t sd_wstore_bytes(struct sd_wstore *ws);

/* A backend's share of the store. */
int sd_wholder_create(struct sd_wstore *ws, struct sd_wholder **out, struct sd_err *err);
/* Drop everything the holder holds. NULL is allowed. */
void sd_wholder_free(struct sd_wholder *h);
/* Whether the store has w (a weight of its model in a packed type). */
bool sd_wholder_has(const struct sd_wholder *h, const struct sd_weight *w);
/* w's prepared copy, packed on pool the first time (pool NULL: on this
 * thread alone). Held until sd_wholder_drop. */
int sd_wholder_take(struct sd_wholder *h, const struct sd_weight *w, struct sd_pool *pool, const void **data,
                    struct sd_err *err);
void sd_wholder_drop(struct sd_wholder *h, const struct sd_weight *w);
/* The certificate of w whose copy sd_wholder_take gave as data, or NULL. */
const void *sd_wholder_cert(const struct sd_wholder *h, const struct sd_weight *w, const void *data);
/* Bytes that taking w[0..n) would add to what the holder holds: each one
 * it does not hold yet, once (with a cache, the whole cached model if the
 * holder holds none of it yet). Weights not in the store count nothing. */
size_t sd_wholder_need(struct sd_wholder *h, const struct sd_weight *const *w, int32_t n);
/* Bytes the holder holds, each weight once. */
size_t sd_wholder_bytes(struct sd_wholder *h);

/* Pack w (GGUF rows, a packed type) into dst (sd_packed_bytes of it) on
 * every thread of pool, or on this thread alone with pool NULL. */
void sd_weight_pack(struct sd_pool *pool, const struct sd_weight *w, void *dst);

#endif /* SD_WEIGHTS_H */
