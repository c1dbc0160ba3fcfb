/* engine/prefix.c - prefix reuse: a request on a new context keeps what
 * the session's context or its prompt cache already computed for the
 * prompt's first tokens, and prefills only the rest.
 *
 * Batch invariance makes this exact: a row's K and V do not depend on the
 * chunk, graph or neighbours it was computed with, so the kept prefix plus
 * the prefilled rest is the KV cache a fresh prefill writes, bit for bit
 * (test_prefix checks it with ==). */
#include <string.h>

#include "engine/api.h"
#include "engine/pcache.h"

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = SD_MIN(na, nb), i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* The most bytes the prompt cache may hold now: its capacity, and under a
 * memory limit what the prepared graphs leave of it. */
static size_t cache_limit(const struct sdnpu_session *s) {
    size_t cap = sd_pcache_stats(s->pcache).capacity;
    if (!s->mem_limit) return cap;
    size_t used = sd_rt_prepared_bytes(s->rt);
    return used >= s->mem_limit ? 0 : SD_MIN(cap, s->mem_limit - used);
}

int32_t sd_session_keep_prefix(struct sdnpu_session *s, const int32_t *tokens, int32_t n, bool calib) {
    /* The last token is always evaluated: its logits start the reply. */
    int32_t most = SD_MAX(0, n - 1), shared = common_prefix(s->ctx_tokens, s->n_past, tokens, n);
    int32_t live = SD_MIN(shared, most);
    /* Calibration needs each kept position's predictions: only the live
     * context's first calib_valid positions have them (a snapshot has none). */
    if (calib) live = SD_MIN(live, s->calib_valid);
    int32_t entry = -1, cached = 0;
    if (s->pcache && !calib) cached = SD_MIN(sd_pcache_match(s->pcache, tokens, n, &entry), most);
    bool hit = entry >= 0 && cached > live;
    /* The live context is about to be replaced: a snapshot keeps it for the
     * request that comes back to it. A follow-up that keeps most of it
     * (another question on the same document) costs no snapshot: the
     * document stays live, and copying it for the short tail each time
     * would fill the cache with near-twins. */
    int32_t cut = s->n_past - (hit ? 0 : shared);
    if (s->pcache && cut >= SD_MAX(SD_PCACHE_MIN_TOKENS, s->n_past / 2))
        sd_pcache_put(s->pcache, s->ctx_tokens, s->n_past, s->rt, cache_limit(s), hit ? entry : -1);
    int32_t keep = hit ? cached : live;
    if (hit) {
        sd_pcache_restore(s->pcache, entry, keep, s->rt, s->ctx_tokens);
        s->calib_valid = 0;
    } else {
        sd_rt_kv_truncate(s->rt, keep);
        s->calib_valid = SD_MIN(s->calib_valid, keep);
    }
    s->n_past = keep;
    s->have_logits = false;
    sd_pcache_count(s->pcache, hit, keep);
    return keep;
}

int32_t sdnpu_session_prefix_match(const struct sdnpu_session *s, const sdnpu_token *tokens, size_t n) {
    if (!s || !tokens || n == 0) return 0;
    int32_t nn = n > (size_t)INT32_MAX ? INT32_MAX : (int32_t)n, most = nn - 1, entry;
    int32_t live = common_prefix(s->ctx_tokens, s->n_past, tokens, nn);
    int32_t cached = s->pcache ? sd_pcache_match(s->pcache, tokens, nn, &entry) : 0;
    return SD_MIN(SD_MAX(live, cached), most);
}

enum sdnpu_status sdnpu_session_prompt_cache_stats(const struct sdnpu_session *s, struct sdnpu_prompt_cache_stats *out) {
    if (!s || !out) return SDNPU_ERR_INVALID_ARG;
    struct sd_pcache_stats c = sd_pcache_stats(s->pcache);
    *out = (struct sdnpu_prompt_cache_stats){.hits = c.hits,
                                             .misses = c.misses,
                                             .reused_tokens = c.reused_tokens,
                                             .evictions = c.evictions,
                                             .n_entries = c.n_entries,
                                             .bytes = c.bytes,
                                             .capacity = c.capacity};
    return SDNPU_OK;
}
