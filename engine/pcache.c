/* engine/pcache.c - a session's prompt cache (engine/pcache.h). */
#include "engine/pcache.h"

#include <string.h>

/* A handful of documents in flight is what a session's users send; the
 * byte bound, not this, is what normally evicts. */
#define SD_PCACHE_MAX_ENTRIES 64

struct entry {
    int32_t *tokens; /* [n] */
    void *kv;        /* sd_rt_kv_snapshot of n slots */
    int32_t n;
    size_t bytes;    /* tokens + kv */
    uint64_t used;   /* the clock at its last use; 0: the slot is free */
};

struct sd_pcache {
    struct entry e[SD_PCACHE_MAX_ENTRIES];
    uint64_t clock;
    struct sd_pcache_stats st;
};

int sd_pcache_create(size_t capacity, struct sd_pcache **out, struct sd_err *err) {
    *out = sd_calloc(1, sizeof **out);
    if (!*out) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the prompt cache");
    (*out)->st.capacity = capacity;
    return SDNPU_OK;
}

static void drop(struct sd_pcache *c, int32_t i) {
    struct entry *x = &c->e[i];
    sd_free(x->tokens);
    sd_aligned_free(x->kv);
    c->st.bytes -= x->bytes;
    c->st.n_entries--;
    memset(x, 0, sizeof *x);
}

void sd_pcache_free(struct sd_pcache *c) {
    if (!c) return;
    for (int32_t i = 0; i < SD_PCACHE_MAX_ENTRIES; i++)
        if (c->e[i].used) drop(c, i);
    sd_free(c);
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = SD_MIN(na, nb), i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

int32_t sd_pcache_match(const struct sd_pcache *c, const int32_t *tokens, int32_t n, int32_t *entry) {
    int32_t best = 0;
    *entry = -1;
    for (int32_t i = 0; c && i < SD_PCACHE_MAX_ENTRIES; i++) {
        const struct entry *x = &c->e[i];
        if (!x->used) continue;
        int32_t m = common_prefix(x->tokens, x->n, tokens, n);
        if (m > best) best = m, *entry = i;
    }
    return best;
}

void sd_pcache_restore(struct sd_pcache *c, int32_t entry, int32_t n, struct sd_rt *rt, int32_t *tokens) {
    struct entry *x = &c->e[entry];
    n = SD_MIN(n, x->n);
    sd_rt_kv_restore(rt, x->kv, sd_rt_kv_keys(rt), x->n, n); /* the session's own snapshots: its keys */
    memcpy(tokens, x->tokens, (size_t)n * sizeof *tokens);
    x->used = ++c->clock;
}

/* The least recently used entry but pin, or -1. */
static int32_t oldest(const struct sd_pcache *c, int32_t pin) {
    int32_t o = -1;
    for (int32_t i = 0; i < SD_PCACHE_MAX_ENTRIES; i++)
        if (c->e[i].used && i != pin && (o < 0 || c->e[i].used < c->e[o].used)) o = i;
    return o;
}

/* Room for bytes more within limit and a free slot, evicting the least
 * recently used; false if even evicting all but pin does not make it. */
static bool make_room(struct sd_pcache *c, size_t bytes, size_t limit, int32_t pin, int32_t *slot) {
    for (;;) {
        *slot = -1;
        for (int32_t i = 0; i < SD_PCACHE_MAX_ENTRIES && *slot < 0; i++)
            if (!c->e[i].used) *slot = i;
        if (*slot >= 0 && c->st.bytes + bytes <= limit) return true;
        int32_t o = oldest(c, pin);
        if (o < 0) return false;
        drop(c, o);
        c->st.evictions++;
    }
}

void sd_pcache_put(struct sd_pcache *c, const int32_t *tokens, int32_t n, const struct sd_rt *rt, size_t limit,
                   int32_t pin) {
    if (!c || n < SD_PCACHE_MIN_TOKENS) return;
    limit = SD_MIN(limit, c->st.capacity);
    /* An entry holding these tokens and more serves every request this
     * one would; entries these tokens extend are served by this one. */
    for (int32_t i = 0; i < SD_PCACHE_MAX_ENTRIES; i++) {
        struct entry *x = &c->e[i];
        if (!x->used) continue;
        int32_t m = common_prefix(x->tokens, x->n, tokens, n);
        if (m == n) {
            x->used = ++c->clock;
            return;
        }
        if (m == x->n && i != pin) drop(c, i);
    }
    size_t kvb = sd_rt_kv_snapshot_bytes(rt, n), bytes = kvb + (size_t)n * sizeof *tokens;
    int32_t slot;
    if (bytes > limit || !make_room(c, bytes, limit, pin, &slot)) return;
    struct entry *x = &c->e[slot];
    x->tokens = sd_malloc((size_t)n * sizeof *tokens);
    x->kv = sd_aligned_alloc(kvb);
    if (!x->tokens || !x->kv) {
        SD_LOGD("prompt cache: no memory for a snapshot of %d tokens; not kept", n);
        sd_free(x->tokens);
        sd_aligned_free(x->kv);
        memset(x, 0, sizeof *x);
        return;
    }
    memcpy(x->tokens, tokens, (size_t)n * sizeof *tokens);
    sd_rt_kv_snapshot(rt, n, x->kv);
    x->n = n;
    x->bytes = bytes;
    x->used = ++c->clock;
    c->st.bytes += bytes;
    c->st.n_entries++;
}

void sd_pcache_count(struct sd_pcache *c, bool hit, int32_t reused) {
    if (!c) return;
    if (hit) c->st.hits++;
    else c->st.misses++;
    c->st.reused_tokens += reused;
}

struct sd_pcache_stats sd_pcache_stats(const struct sd_pcache *c) {
    struct sd_pcache_stats z = {0};
    return c ? c->st : z;
}
