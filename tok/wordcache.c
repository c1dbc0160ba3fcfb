/*
 * tok/wordcache.c - the per-call word cache: one tokenize call of a long
 * text remembers the ids of each short word it has merged.
 *
 * A file of its own because both merge algorithms use it: SPM and BPE alike
 * cut text into words that merge alone (spm.c, bpe.c), so a word
 * that comes again can take its ids from here, whichever algorithm made them.
 */
#include "tok/tokenizer.h"

#include <string.h>

#include "tok/internal.h"

/* ---- the per-call word cache
 *
 * Text repeats its words, and a word always tokenizes the same way, so one
 * tokenize call of a long text remembers the ids of each short word it has
 * merged. The cache belongs to the call (the vocabulary stays read-only and
 * thread-safe); failing to grow it only turns it off. */

#define WC_MAX_WORD 64

static bool wc_lookup(struct run *r, const char *w, uint32_t len, uint64_t h, int *rc) {
    struct wcache *c = &r->wc;
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & c->mask;; i = (i + 1) & c->mask) {
        uint64_t s = c->slot[i];
        if (!s) return false;
        if ((uint32_t)(s >> 32) != tag) continue;
        const struct wc_entry *e = &c->ent[(uint32_t)s - 1];
        if (e->len != len || memcmp(c->text + e->text_off, w, len)) continue;
        struct sd_tokvec *o = r->out;
        if (sd_tok_grow((void **)&o->ids, &o->cap, o->n + e->n_ids, sizeof *o->ids)) {
            *rc = SDNPU_ERR_OOM;
            return true;
        }
        memcpy(o->ids + o->n, c->ids + e->ids_off, e->n_ids * sizeof *o->ids);
        o->n += e->n_ids;
        *rc = SDNPU_OK;
        return true;
    }
}

static void wc_insert(struct run *r, const char *w, uint32_t len, uint64_t h, const int32_t *ids,
                      uint32_t n) {
    struct wcache *c = &r->wc;
    if (c->n_ent >= (c->mask + 1) / 2) return; /* full: keep what is there */
    if (sd_tok_grow((void **)&c->ent, &c->cap_ent, c->n_ent + 1, sizeof *c->ent) ||
        sd_tok_grow((void **)&c->text, &c->cap_text, c->n_text + len, 1) ||
        sd_tok_grow((void **)&c->ids, &c->cap_ids, c->n_ids + n, sizeof *c->ids)) {
        c->on = false;
        return;
    }
    struct wc_entry *e = &c->ent[c->n_ent];
    e->text_off = (uint32_t)c->n_text;
    e->len = len;
    e->ids_off = (uint32_t)c->n_ids;
    e->n_ids = n;
    memcpy(c->text + c->n_text, w, len);
    c->n_text += len;
    memcpy(c->ids + c->n_ids, ids, n * sizeof *ids);
    c->n_ids += n;
    uint32_t i = (uint32_t)h & c->mask;
    while (c->slot[i])
        i = (i + 1) & c->mask;
    c->slot[i] = (h >> 32) << 32 | (uint32_t)(c->n_ent + 1);
    c->n_ent++;
}

int sd_tok_cached_word(struct run *r, const char *w, uint32_t len,
                       int (*fn)(struct run *, const char *, uint32_t)) {
    if (!r->wc.on || len > WC_MAX_WORD) return fn(r, w, len);
    uint64_t h = sd_tok_hash_bytes(w, len);
    int rc;
    if (wc_lookup(r, w, len, h, &rc)) return rc;
    size_t n0 = r->out->n;
    if ((rc = fn(r, w, len))) return rc;
    wc_insert(r, w, len, h, r->out->ids + n0, (uint32_t)(r->out->n - n0));
    return SDNPU_OK;
}
