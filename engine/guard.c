/* engine/guard.c - the degeneration guard: does the output repeat a
 * sentence or a run of tokens of its own? (guard.h explains the rules.) */
#include <string.h>

#include "engine/guard.h"

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv_byte(uint64_t h, unsigned char c) { return (h ^ c) * FNV_PRIME; }

/* Tables keep 0 for an empty slot, so no key is 0. */
static uint64_t nonzero(uint64_t h) { return h ? h : 1; }

static uint64_t ngram_hash(const int32_t *t) {
    uint64_t h = FNV_OFFSET;
    for (int i = 0; i < SD_GUARD_NGRAM; i++)
        for (int b = 0; b < 4; b++) h = fnv_byte(h, (unsigned char)((uint32_t)t[i] >> (8 * b)));
    return nonzero(h);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

/* The slot of key in a table of cap (a power of two) slots: where it is, or
 * the empty slot where it would go. */
static size_t probe(const uint64_t *table, size_t cap, uint64_t key) {
    size_t i = (size_t)key & (cap - 1);
    while (table[i] && table[i] != key) i = (i + 1) & (cap - 1);
    return i;
}

static void ngram_insert(struct sd_guard *g, uint64_t key, int32_t end) {
    size_t i = probe(g->ngram, g->ngram_cap, key);
    if (!g->ngram[i]) {
        g->ngram[i] = key;
        g->ngram_end[i] = end;
        g->n_ngram++;
    }
}

/* Room for n output tokens: the token array, and the n-gram table at most
 * half full (rebuilt from the tokens when it grows). */
static int reserve_tokens(struct sd_guard *g, size_t n, struct sd_err *err) {
    if (n <= g->cap) return SDNPU_OK;
    size_t cap = pow2_at_least(n), tcap = 2 * cap;
    int32_t *tok = sd_realloc(g->tok, cap * sizeof *tok);
    if (!tok) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the repetition guard");
    g->tok = tok;
    uint64_t *ng = sd_calloc(tcap, sizeof *ng);
    int32_t *ne = sd_malloc(tcap * sizeof *ne);
    if (!ng || !ne) {
        sd_free(ng);
        sd_free(ne);
        return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the repetition guard");
    }
    sd_free(g->ngram);
    sd_free(g->ngram_end);
    g->ngram = ng;
    g->ngram_end = ne;
    g->ngram_cap = tcap;
    g->cap = cap;
    g->n_ngram = 0;
    for (size_t e = SD_GUARD_NGRAM; e <= g->n_tok; e++)
        ngram_insert(g, ngram_hash(g->tok + e - SD_GUARD_NGRAM), (int32_t)e);
    return SDNPU_OK;
}

/* Room for one more sentence hash, the table at most half full. */
static int reserve_sentence(struct sd_guard *g, struct sd_err *err) {
    if (2 * (g->n_sent + 1) <= g->sent_cap) return SDNPU_OK;
    size_t cap = pow2_at_least(4 * (g->n_sent + 1));
    uint64_t *t = sd_calloc(cap, sizeof *t);
    if (!t) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the repetition guard");
    for (size_t i = 0; i < g->sent_cap; i++)
        if (g->sent[i]) t[probe(t, cap, g->sent[i])] = g->sent[i];
    sd_free(g->sent);
    g->sent = t;
    g->sent_cap = cap;
    return SDNPU_OK;
}

static void sentence_start(struct sd_guard *g) {
    g->sent_hash = FNV_OFFSET;
    g->sent_len = 0;
    g->sent_space = false;
}

int sd_guard_reset(struct sd_guard *g, size_t n_hint, struct sd_err *err) {
    g->n_tok = g->n_bytes = g->kept_tok = g->kept_bytes = 0;
    g->pending_end = false;
    sentence_start(g);
    if (g->ngram) memset(g->ngram, 0, g->ngram_cap * sizeof *g->ngram);
    if (g->sent) memset(g->sent, 0, g->sent_cap * sizeof *g->sent);
    g->n_ngram = g->n_sent = 0;
    int rc = reserve_tokens(g, SD_MAX(n_hint, (size_t)64), err);
    if (rc) return rc;
    return reserve_sentence(g, err);
}

void sd_guard_free(struct sd_guard *g) {
    sd_free(g->tok);
    sd_free(g->ngram);
    sd_free(g->ngram_end);
    sd_free(g->sent);
    memset(g, 0, sizeof *g);
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* The sentence in progress ends after tok_end tokens and byte_end bytes.
 * Returns true when it repeats an earlier one (the boundary stays where it
 * was, so the repeat is dropped whole); else the boundary moves here. */
static bool sentence_end(struct sd_guard *g, size_t tok_end, size_t byte_end) {
    bool seen = false;
    if (g->sent_len >= SD_GUARD_MIN_SENTENCE) {
        uint64_t key = nonzero(g->sent_hash);
        size_t i = probe(g->sent, g->sent_cap, key);
        seen = g->sent[i] != 0;
        if (!seen) {
            g->sent[i] = key;
            g->n_sent++;
        }
    }
    sentence_start(g);
    if (!seen) {
        g->kept_tok = tok_end;
        g->kept_bytes = byte_end;
    }
    return seen;
}

/* Whether the piece, closing quotes and brackets aside, ends a sentence if
 * whitespace follows. */
static bool ends_with_stop(const char *piece, size_t len) {
    while (len > 0 && strchr("\"')]", piece[len - 1])) len--;
    return len > 0 && strchr(".!?", piece[len - 1]) != NULL;
}

/* Whether the last SD_GUARD_NGRAM tokens occurred earlier; records them. */
static bool ngram_repeats(struct sd_guard *g) {
    if (g->n_tok < SD_GUARD_NGRAM) return false;
    const int32_t *last = g->tok + g->n_tok - SD_GUARD_NGRAM;
    uint64_t key = ngram_hash(last);
    size_t i = probe(g->ngram, g->ngram_cap, key);
    if (g->ngram[i]) {
        int32_t e = g->ngram_end[i];
        return !memcmp(g->tok + e - SD_GUARD_NGRAM, last, SD_GUARD_NGRAM * sizeof *last);
    }
    ngram_insert(g, key, (int32_t)g->n_tok);
    return false;
}

int sd_guard_push(struct sd_guard *g, int32_t tok, const char *piece, size_t len, bool *repeats,
                  struct sd_err *err) {
    *repeats = false;
    int rc = reserve_tokens(g, g->n_tok + 1, err);
    if (rc || (rc = reserve_sentence(g, err))) return rc;
    /* The last token ended a sentence if this one starts with whitespace. */
    if (g->pending_end && len > 0 && is_space(piece[0]) && sentence_end(g, g->n_tok, g->n_bytes)) {
        *repeats = true;
        return SDNPU_OK;
    }
    g->tok[g->n_tok++] = tok;
    bool newline = false;
    for (size_t i = 0; i < len; i++) {
        char c = piece[i];
        newline |= c == '\n';
        if (is_space(c)) {
            g->sent_space = g->sent_len > 0;
            continue;
        }
        if (g->sent_space) g->sent_hash = fnv_byte(g->sent_hash, ' ');
        g->sent_space = false;
        g->sent_hash = fnv_byte(g->sent_hash, (unsigned char)c);
        g->sent_len++;
    }
    g->n_bytes += len;
    g->pending_end = ends_with_stop(piece, len);
    if (ngram_repeats(g) || (newline && sentence_end(g, g->n_tok, g->n_bytes))) *repeats = true;
    return SDNPU_OK;
}
