/*
 * tok/special.c - special tokens: the trie over their texts, built at
 * load, and the partition of input text into special tokens and the raw
 * fragments between them, the first step of every tokenize call.
 *
 * They share a file because the partition is the trie's only reader and
 * rests on the order the trie ranks tokens in (longest first, as llama.cpp
 * tries them). The partition finds every candidate match in one pass and
 * resolves only clusters of overlapping matches; the raw fragments go to
 * sd_tok_flush_raw (tokenizer.c), which merges them by SPM or BPE.
 */
#include "tok/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "tok/internal.h"

/* ------------------------------------------------------ special trie */

/* Children of the root and of its children are in direct tables (the walk
 * from every space of a text usually ends at depth two); deeper edges are
 * hashed. The root's children are nodes 1..n_l1. */
static inline int32_t trie_child(const struct sd_vocab *v, int32_t node, uint8_t b) {
    if (node == 0) return v->root_child[b];
    if (node <= v->n_l1) return v->l2[(size_t)(node - 1) * 256 + b];
    uint64_t key1 = ((uint64_t)(uint32_t)node << 8 | b) + 1;
    for (uint32_t i = (uint32_t)sd_tok_mix64(key1) & v->edge_mask;; i = (i + 1) & v->edge_mask) {
        uint64_t e = v->edges[i];
        if (!e) return -1;
        if (e >> 32 == key1) return (int32_t)(uint32_t)e;
    }
}

static void trie_set_child(struct sd_vocab *v, int32_t node, uint8_t b, int32_t child) {
    if (node == 0) {
        v->root_child[b] = child;
        return;
    }
    if (node <= v->n_l1) {
        v->l2[(size_t)(node - 1) * 256 + b] = child;
        return;
    }
    uint64_t key1 = ((uint64_t)(uint32_t)node << 8 | b) + 1;
    for (uint32_t i = (uint32_t)sd_tok_mix64(key1) & v->edge_mask;; i = (i + 1) & v->edge_mask) {
        if (!v->edges[i]) {
            v->edges[i] = key1 << 32 | (uint32_t)child;
            return;
        }
    }
}

/* The matching order is sorted as (length, id) keys packed into 64-bit
 * integers, since C11 qsort cannot pass the vocabulary to a comparator.
 * llama.cpp sorts by length alone with std::sort, so its order among
 * equal-length tokens is unspecified; it matters only for two such tokens
 * that overlap in the text (a suffix of one is a prefix of the other), of
 * which the vocabularies we know have none. */
static int u64_cmp(const void *pa, const void *pb) {
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    return a < b ? -1 : (a > b);
}

int sd_tok_build_specials(struct sd_vocab *v) {
    int32_t n = 0;
    size_t total = 1;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if (v->attr[i] & TA_SPECIAL) {
            n++;
            total += v->poff[i + 1] - v->poff[i];
        }
    }
    for (int b = 0; b < 256; b++)
        v->root_child[b] = -1;
    v->n_spec = n;
    v->spec = sd_malloc((size_t)n * sizeof *v->spec);
    uint64_t *keys = sd_malloc((size_t)n * sizeof *keys);
    v->best_any = sd_malloc(total * sizeof *v->best_any);
    v->best_ud = sd_malloc(total * sizeof *v->best_ud);
    v->edge_mask = sd_tok_pow2_at_least((uint64_t)total * 2) - 1;
    v->edges = sd_calloc((size_t)v->edge_mask + 1, sizeof *v->edges);
    if (!v->spec || !keys || !v->best_any || !v->best_ud || !v->edges) {
        sd_free(keys);
        return SDNPU_ERR_OOM;
    }
    n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if (!(v->attr[i] & TA_SPECIAL)) continue;
        uint64_t len = v->poff[i + 1] - v->poff[i] - 1;
        /* Longest first, then by id: (~len) sorts descending lengths. */
        keys[n++] = (uint64_t)(0xFFFFFFFFu - (uint32_t)len) << 32 | (uint32_t)i;
    }
    qsort(keys, (size_t)n, sizeof *keys, u64_cmp);
    v->n_nodes = 1;
    v->best_any[0] = v->best_ud[0] = INT32_MAX;
    for (int32_t r = 0; r < n; r++) { /* the root's children first: nodes 1..n_l1 */
        uint32_t len;
        const char *t = sd_tok_piece_text(v, (int32_t)(uint32_t)keys[r], &len);
        if (len && v->root_child[(uint8_t)t[0]] < 0) {
            int32_t c = v->n_nodes++;
            v->best_any[c] = v->best_ud[c] = INT32_MAX;
            v->root_child[(uint8_t)t[0]] = c;
        }
    }
    v->n_l1 = v->n_nodes - 1;
    v->l2 = sd_malloc((size_t)v->n_l1 * 256 * sizeof *v->l2 + 1);
    if (!v->l2) {
        sd_free(keys);
        return SDNPU_ERR_OOM;
    }
    for (size_t i = 0; i < (size_t)v->n_l1 * 256; i++)
        v->l2[i] = -1;
    for (int32_t r = 0; r < n; r++) {
        int32_t id = (int32_t)(uint32_t)keys[r];
        v->spec[r] = id;
        uint32_t len;
        const char *t = sd_tok_piece_text(v, id, &len);
        if (len == 0) continue;
        bool ud = (v->attr[id] & TA_USER_DEFINED) && !(v->attr[id] & (TA_CONTROL | TA_UNKNOWN));
        int32_t node = 0;
        for (uint32_t k = 0; k < len; k++) {
            int32_t c = trie_child(v, node, (uint8_t)t[k]);
            if (c < 0) {
                c = v->n_nodes++;
                v->best_any[c] = v->best_ud[c] = INT32_MAX;
                trie_set_child(v, node, (uint8_t)t[k], c);
            }
            node = c;
        }
        if (v->best_any[node] == INT32_MAX) v->best_any[node] = r;
        if (ud && v->best_ud[node] == INT32_MAX) v->best_ud[node] = r;
        v->start_any[(uint8_t)t[0]] = true;
        if (ud) {
            v->start_ud[(uint8_t)t[0]] = true;
            v->has_ud = true;
        }
    }
    sd_free(keys);
    return SDNPU_OK;
}

/* ------------------------------------------------ the partition */

/* Raw text pieces that touch are one fragment, as in llama.cpp, where only
 * a matched special token ends a fragment. */
static int add_raw(struct run *r, uint32_t start, uint32_t end) {
    if (end <= start) return SDNPU_OK;
    if (r->raw_pending && r->raw_end == start) {
        r->raw_end = end;
        return SDNPU_OK;
    }
    int rc = sd_tok_flush_raw(r);
    if (rc) return rc;
    r->raw_pending = true;
    r->raw_start = start;
    r->raw_end = end;
    return SDNPU_OK;
}

static int add_special(struct run *r, int32_t id) {
    int rc = sd_tok_flush_raw(r);
    if (rc) return rc;
    r->prev_special = true;
    return sd_tok_emit(r, id);
}

static int push_task(struct run *r, struct task t) {
    if (r->n_task == r->cap_task &&
        sd_tok_grow((void **)&r->task, &r->cap_task, r->n_task + 1, sizeof *r->task))
        return SDNPU_ERR_OOM;
    r->task[r->n_task++] = t;
    return SDNPU_OK;
}

/* Resolve one cluster of overlapping special-token matches, [start, end).
 *
 * llama.cpp (tokenizer_st_partition) takes the special tokens one by one,
 * longest first, and cuts each of its leftmost non-overlapping occurrences
 * out of whatever raw fragments remain. Equivalently: within a raw gap, the
 * first token in that order that occurs anywhere in the gap takes all its
 * leftmost non-overlapping occurrences, and the pieces between them are
 * resolved the same way with the tokens after it. Matches that do not
 * overlap cannot affect each other, so each cluster is resolved alone; the
 * rescans stay inside it. */
static int resolve_cluster(struct run *r, uint32_t start, uint32_t end) {
    const struct sd_vocab *v = r->v;
    const uint8_t *t = (const uint8_t *)r->text;
    const bool *start_tab = r->parse_special ? v->start_any : v->start_ud;
    const int32_t *best_tab = r->parse_special ? v->best_any : v->best_ud;
    int rc;
    r->n_task = 0;
    if ((rc = push_task(r, (struct task){start, end, -1, -1}))) return rc;
    while (r->n_task) {
        struct task tk = r->task[--r->n_task];
        if (tk.token >= 0) {
            if ((rc = add_special(r, tk.token))) return rc;
            continue;
        }
        int32_t best = INT32_MAX;
        uint32_t best_pos = 0;
        for (uint32_t p = tk.start; p < tk.end; p++) {
            if (!start_tab[t[p]]) continue;
            int32_t node = 0;
            for (uint32_t q = p; q < tk.end; q++) {
                node = trie_child(v, node, t[q]);
                if (node < 0) break;
                int32_t rk = best_tab[node];
                if (rk > tk.min_rank && rk < best) {
                    best = rk;
                    best_pos = p;
                }
            }
        }
        if (best == INT32_MAX) {
            if ((rc = add_raw(r, tk.start, tk.end))) return rc;
            continue;
        }
        /* Queue gap, token, gap, token, ..., gap; then reverse so the stack
         * pops them in text order. */
        int32_t id = v->spec[best];
        uint32_t tl;
        const char *tt = sd_tok_piece_text(v, id, &tl);
        size_t base = r->n_task;
        uint32_t cur = tk.start, p = best_pos;
        for (;;) {
            if ((rc = push_task(r, (struct task){cur, p, best, -1}))) return rc;
            if ((rc = push_task(r, (struct task){0, 0, best, id}))) return rc;
            cur = p + tl;
            /* next occurrence in [cur, end) */
            bool found = false;
            for (uint32_t q = cur; q + tl <= tk.end; q++) {
                if (t[q] == (uint8_t)tt[0] && !memcmp(t + q, tt, tl)) {
                    p = q;
                    found = true;
                    break;
                }
            }
            if (!found) break;
        }
        if ((rc = push_task(r, (struct task){cur, tk.end, best, -1}))) return rc;
        for (size_t i = base, j = r->n_task - 1; i < j; i++, j--) {
            struct task x = r->task[i];
            r->task[i] = r->task[j];
            r->task[j] = x;
        }
    }
    return SDNPU_OK;
}

int sd_tok_partition(struct run *r, uint32_t len) {
    const struct sd_vocab *v = r->v;
    const bool *start_tab = r->parse_special ? v->start_any : v->start_ud;
    const int32_t *best_tab = r->parse_special ? v->best_any : v->best_ud;
    const uint8_t *t = (const uint8_t *)r->text;
    bool any = r->parse_special ? v->n_spec > 0 : v->has_ud;
    if (!any) return add_raw(r, 0, len);
    int rc;
    uint32_t done = 0;       /* text before this is handled */
    uint32_t cs = 0, ce = 0; /* the open cluster, empty if ce == 0 */
    for (uint32_t p = 0; p < len; p++) {
        if (!start_tab[t[p]]) continue;
        int32_t node = 0;
        uint32_t mend = 0;
        for (uint32_t q = p; q < len; q++) {
            node = trie_child(v, node, t[q]);
            if (node < 0) break;
            if (best_tab[node] != INT32_MAX) mend = q + 1;
        }
        if (!mend) continue;
        if (ce && p >= ce) { /* the open cluster cannot grow any more */
            if ((rc = add_raw(r, done, cs)) || (rc = resolve_cluster(r, cs, ce))) return rc;
            done = ce;
            ce = 0;
        }
        if (!ce) {
            cs = p;
            ce = mend;
        } else if (mend > ce) {
            ce = mend;
        }
    }
    if (ce) {
        if ((rc = add_raw(r, done, cs)) || (rc = resolve_cluster(r, cs, ce))) return rc;
        done = ce;
    }
    return add_raw(r, done, len);
}
