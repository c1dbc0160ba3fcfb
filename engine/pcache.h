/*
 * engine/pcache.h - a session's prompt cache: KV snapshots of earlier
 * contexts in host memory, keyed by their tokens (private to engine/).
 *
 * Pipelines send the same document again and again: a follow-up question
 * on the same notes, the next reply in the same thread. The live context
 * already serves a request that continues the last one; the cache serves
 * one that returns to an earlier document after another came between. A
 * snapshot is what the KV cache held for its tokens, so restoring its first
 * n slots and prefilling the rest gives the same cache, bit for bit, as
 * prefilling the whole prompt (batch invariance: a row's result does not
 * depend on the chunk it ran in).
 *
 * Bounded in bytes (tokens and KV), least recently used out first. An
 * entry whose tokens are a prefix of a newer one's is dropped (the newer
 * serves every request it served). Allocation failure costs only the
 * entry: the cache never fails a request.
 *
 * Threading: the session's thread.
 */
#ifndef SD_ENGINE_PCACHE_H
#define SD_ENGINE_PCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "sched/runtime.h"

/* Contexts shorter than this are not worth a snapshot: prefilling them
 * costs about what restoring does. */
#define SD_PCACHE_MIN_TOKENS 32

struct sd_pcache_stats {
    int64_t hits, misses, reused_tokens, evictions;
    int32_t n_entries;
    size_t bytes, capacity;
};

struct sd_pcache;

int sd_pcache_create(size_t capacity, struct sd_pcache **out, struct sd_err *err);
void sd_pcache_free(struct sd_pcache *c); /* NULL is fine */

/* The longest common prefix of tokens[0..n) with an entry's tokens; *entry
 * is that entry (-1 when none shares a token). */
int32_t sd_pcache_match(const struct sd_pcache *c, const int32_t *tokens, int32_t n, int32_t *entry);

/* Restore entry's first n tokens into the runtime's KV cache (slots
 * [0, n), the rest forgotten) and tokens[0..n); marks it used. n is at
 * most what sd_pcache_match gave for it. */
void sd_pcache_restore(struct sd_pcache *c, int32_t entry, int32_t n, struct sd_rt *rt, int32_t *tokens);

/* Keep a snapshot of the runtime's first n slots holding tokens[0..n),
 * within limit bytes (the capacity, or less where a memory limit leaves
 * less), evicting the least recently used; pin (an entry, or -1) is never
 * evicted. Too short, too large or out of memory: nothing is kept. */
void sd_pcache_put(struct sd_pcache *c, const int32_t *tokens, int32_t n, const struct sd_rt *rt, size_t limit,
                   int32_t pin);

/* Counting requests: a hit took its prefix from an entry, a miss found
 * none longer than the live context's; reused counts tokens not prefilled. */
void sd_pcache_count(struct sd_pcache *c, bool hit, int32_t reused);

struct sd_pcache_stats sd_pcache_stats(const struct sd_pcache *c);

#endif /* SD_ENGINE_PCACHE_H */
