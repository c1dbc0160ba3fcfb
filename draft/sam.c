/*
 * draft/sam.c - the suffix automaton over int32 token texts (see draft.h).
 *
 * Layout. States are an array of small structs; transitions are one
 * open-addressing hash table (linear probing, load <= 1/2) of slots keyed by
 * (state, token), and each state threads its own slots into a list through
 * slot.next so its edges can be listed (for cloning and for ranking
 * successors). A lookup is one probe sequence in one array, and a state of
 * the root's degree (tens of thousands of distinct tokens in a 100k-token
 * history) costs no more than a leaf.
 *
 * Failure atomicity. An append first walks the automaton without changing
 * it to count the states and edges it will add, reserves them, and only
 * then mutates. So SDNPU_ERR_OOM always leaves a consistent automaton of the
 * text before the failed token, which the allocation-failure tests check.
 */
#include <string.h>

#include "draft/draft.h"

/* Texts are indexed by int32; one position is kept back so e + 1 never
 * overflows when reading a continuation. */
#define SAM_MAX_TOKENS ((size_t)INT32_MAX - 2)
#define SAM_MIN_SLOTS 16

struct sam_state {
    int32_t len;       /* longest string in the class */
    int32_t link;      /* suffix link; -1 for the root */
    int32_t edges;     /* first slot of this state's edge list; -1 none */
    int32_t degree;    /* number of outgoing edges */
    int32_t first_end; /* end position of the first occurrence (exact online) */
    int32_t last_end;  /* most recent end position (exact when frozen) */
    int32_t cont_end;  /* most recent end with a continuation (frozen only) */
    int32_t count;     /* number of end positions (frozen only) */
};

struct sam_slot {
    int32_t state; /* source state; -1 marks an empty slot */
    int32_t tok;
    int32_t to;   /* target state */
    int32_t next; /* next slot of the same source state; -1 ends the list */
};

struct sd_sam {
    struct sam_state *st; /* [cap_st] */
    size_t n_st, cap_st;
    int32_t *text;      /* [cap_tok] tokens, separators stored as SD_SAM_SEP */
    int32_t *pos_state; /* [cap_tok] the state whose longest string ends at i (-1 at separators) */
    size_t n_tok, cap_tok;
    struct sam_slot *slot; /* [cap_slot], cap_slot a power of two */
    size_t cap_slot, n_edges;
    int32_t last; /* state of the whole current record (the text's longest suffix) */
    bool frozen;
    /* The end-position index (sd_sam_index_ends): every end position of
     * state v is ends[ends_from[v] .. ends_to[v]), the suffix-link subtree
     * of v laid out in depth-first order. NULL until built; stale (and
     * unused) once the text grows. */
    int32_t *ends, *ends_from, *ends_to; /* [cap_tok], [cap_st], [cap_st] */
    size_t ends_cap_tok, ends_cap_st;
    bool indexed;
};

/* --------------------------------------------------------------- hashing */

/* The 64-bit finalizer of MurmurHash3: (state, token) pairs are highly
 * regular (consecutive states, small token ids), so they need full mixing
 * before masking to a power of two. */
static inline size_t slot_hash(int32_t st, int32_t tok) {
    uint64_t k = ((uint64_t)(uint32_t)st << 32) | (uint32_t)tok;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return (size_t)k;
}

/* The slot holding (st, tok), or the empty slot where it would go. */
static inline size_t slot_find(const struct sd_sam *s, int32_t st, int32_t tok) {
    size_t mask = s->cap_slot - 1;
    size_t h = slot_hash(st, tok) & mask;
    for (;;) {
        const struct sam_slot *e = &s->slot[h];
        if (e->state < 0 || (e->state == st && e->tok == tok)) return h;
        h = (h + 1) & mask;
    }
}

static inline int32_t sam_next(const struct sd_sam *s, int32_t st, int32_t tok) {
    if (tok < 0) return -1;
    const struct sam_slot *e = &s->slot[slot_find(s, st, tok)];
    return e->state >= 0 ? e->to : -1;
}

/* Add an edge known to be absent; room was reserved by the caller. */
static void edge_insert(struct sd_sam *s, int32_t st, int32_t tok, int32_t to) {
    size_t h = slot_find(s, st, tok);
    struct sam_slot *e = &s->slot[h];
    e->state = st;
    e->tok = tok;
    e->to = to;
    e->next = s->st[st].edges;
    s->st[st].edges = (int32_t)h;
    s->st[st].degree++;
    s->n_edges++;
}

/* ------------------------------------------------------------- capacity */

static int grow_tokens(struct sd_sam *s, size_t need, struct sd_err *err) {
    if (need <= s->cap_tok) return SDNPU_OK;
    size_t cap = s->cap_tok ? s->cap_tok : 64;
    while (cap < need)
        cap *= 2;
    int32_t *text = sd_realloc(s->text, cap * sizeof *text);
    if (!text) goto fail_oom;
    s->text = text;
    int32_t *pos = sd_realloc(s->pos_state, cap * sizeof *pos);
    if (!pos) goto fail_oom;
    s->pos_state = pos;
    s->cap_tok = cap;
    return SDNPU_OK;
fail_oom:
    /* A grown text array with an old-size pos array is harmless: cap_tok
     * still names the smaller of the two. */
    return sd_err_set(err, SDNPU_ERR_OOM, "suffix automaton: out of memory for %zu tokens", need);
}

static int grow_states(struct sd_sam *s, size_t need, struct sd_err *err) {
    if (need <= s->cap_st) return SDNPU_OK;
    size_t cap = s->cap_st ? s->cap_st : 64;
    while (cap < need)
        cap *= 2;
    struct sam_state *st = sd_realloc(s->st, cap * sizeof *st);
    if (!st) return sd_err_set(err, SDNPU_ERR_OOM, "suffix automaton: out of memory for %zu states", need);
    s->st = st;
    s->cap_st = cap;
    return SDNPU_OK;
}

/* Rehash into a table with room for `need` edges at load <= 1/2. The edge
 * lists are rebuilt as the slots move; their order does not matter. */
static int grow_edges(struct sd_sam *s, size_t need, struct sd_err *err) {
    if (need <= s->cap_slot / 2) return SDNPU_OK;
    size_t cap = s->cap_slot ? s->cap_slot : SAM_MIN_SLOTS;
    while (cap / 2 < need)
        cap *= 2;
    struct sam_slot *slot = sd_malloc(cap * sizeof *slot);
    if (!slot) return sd_err_set(err, SDNPU_ERR_OOM, "suffix automaton: out of memory for %zu edges", need);
    for (size_t i = 0; i < cap; i++)
        slot[i].state = -1;
    struct sam_slot *old = s->slot;
    size_t old_cap = s->cap_slot;
    s->slot = slot;
    s->cap_slot = cap;
    s->n_edges = 0;
    for (size_t v = 0; v < s->n_st; v++) {
        s->st[v].edges = -1;
        s->st[v].degree = 0;
    }
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].state >= 0) edge_insert(s, old[i].state, old[i].tok, old[i].to);
    }
    sd_free(old);
    return SDNPU_OK;
}

int sd_sam_reserve(struct sd_sam *s, size_t n_tokens, struct sd_err *err) {
    if (!s) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "suffix automaton: NULL handle");
    if (n_tokens > SAM_MAX_TOKENS - s->n_tok)
        return sd_err_set(err, SDNPU_ERR_CONTEXT_FULL, "suffix automaton: %zu tokens is too many", n_tokens);
    /* At most 2n states; natural text has about 1.5 edges per token (3n is
     * the bound, reached only on adversarial text, and then we rehash). */
    size_t n = s->n_tok + n_tokens;
    int rc = grow_tokens(s, n, err);
    if (rc == SDNPU_OK) rc = grow_states(s, 2 * n + 2, err);
    if (rc == SDNPU_OK) rc = grow_edges(s, n + n / 2 + 1, err);
    return rc;
}

/* ------------------------------------------------------------- lifetime */

static void root_init(struct sd_sam *s) {
    s->st[0] = (struct sam_state){.len = 0,
                                  .link = -1,
                                  .edges = -1,
                                  .degree = 0,
                                  .first_end = -1,
                                  .last_end = -1,
                                  .cont_end = -1,
                                  .count = 0};
    s->n_st = 1;
    s->last = 0;
}

int sd_sam_create(size_t n_tokens_hint, struct sd_sam **out, struct sd_err *err) {
    if (!out) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "suffix automaton: NULL output pointer");
    *out = NULL;
    struct sd_sam *s = sd_calloc(1, sizeof *s);
    if (!s) return sd_err_set(err, SDNPU_ERR_OOM, "suffix automaton: out of memory");
    int rc = grow_states(s, 1, err);
    if (rc) goto fail;
    rc = grow_edges(s, 1, err);
    if (rc) goto fail;
    root_init(s);
    rc = sd_sam_reserve(s, n_tokens_hint, err);
    if (rc) goto fail;
    *out = s;
    return SDNPU_OK;
fail:
    sd_sam_free(s);
    return rc;
}

void sd_sam_free(struct sd_sam *s) {
    if (!s) return;
    sd_free(s->st);
    sd_free(s->text);
    sd_free(s->pos_state);
    sd_free(s->slot);
    sd_free(s->ends);
    sd_free(s->ends_from);
    sd_free(s->ends_to);
    sd_free(s);
}

void sd_sam_clear(struct sd_sam *s) {
    if (!s) return;
    for (size_t i = 0; i < s->cap_slot; i++)
        s->slot[i].state = -1;
    s->n_edges = 0;
    s->n_tok = 0;
    s->frozen = false;
    s->indexed = false;
    root_init(s);
}

/* --------------------------------------------------------------- append */

/* A copy of q that takes q's strings of length <= len; q keeps the longer
 * ones. Its end positions are q's plus the one being added now (pos), which
 * is therefore its most recent one. */
static int32_t clone_state(struct sd_sam *s, int32_t q, int32_t len, int32_t pos) {
    int32_t c = (int32_t)s->n_st++;
    s->st[c] = (struct sam_state){.len = len,
                                  .link = s->st[q].link,
                                  .edges = -1,
                                  .degree = 0,
                                  .first_end = s->st[q].first_end,
                                  .last_end = pos,
                                  .cont_end = -1,
                                  .count = 0};
    /* Inserting only fills empty slots, so walking q's list meanwhile is safe. */
    for (int32_t e = s->st[q].edges; e >= 0; e = s->slot[e].next)
        edge_insert(s, c, s->slot[e].tok, s->slot[e].to);
    s->st[q].link = c;
    return c;
}

/* Point the tok-edges that led to q from p and its suffix-link ancestors at
 * the clone instead, for as long as they led to q. */
static void redirect(struct sd_sam *s, int32_t p, int32_t tok, int32_t q, int32_t c) {
    while (p >= 0) {
        struct sam_slot *e = &s->slot[slot_find(s, p, tok)];
        if (e->state != p || e->to != q) break;
        e->to = c;
        p = s->st[p].link;
    }
}

static void track_split(const struct sd_sam *s, struct sd_sam_cursor *track, int32_t q, int32_t c) {
    if (track && track->state == q && track->len <= s->st[c].len) track->state = c;
}

int sd_sam_append(struct sd_sam *s, int32_t tok, struct sd_sam_cursor *track, struct sd_err *err) {
    if (!s) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "suffix automaton: NULL handle");
    if (s->n_tok >= SAM_MAX_TOKENS)
        return sd_err_set(err, SDNPU_ERR_CONTEXT_FULL, "suffix automaton: text full at %zu tokens", s->n_tok);
    int rc = grow_tokens(s, s->n_tok + 1, err);
    if (rc) return rc;
    int32_t pos = (int32_t)s->n_tok;

    if (tok < 0) {
        /* A separator ends the record: the next token starts again from
         * the root, and no edge ever reads a separator. */
        s->text[pos] = SD_SAM_SEP;
        s->pos_state[pos] = -1;
        s->n_tok++;
        s->last = 0;
        s->frozen = false;
        s->indexed = false;
        return SDNPU_OK;
    }

    /* Dry run: count what the append adds, so it can be reserved first. */
    int32_t last = s->last;
    int32_t q = sam_next(s, last, tok);
    size_t need_st = 0, need_edges = 0;
    if (q >= 0) {
        /* Generalized case: the record so far, plus tok, occurred before
         * (only possible after a separator). No new state unless q holds
         * longer strings too and has to be split. */
        if (s->st[q].len != s->st[last].len + 1) {
            need_st = 1;
            need_edges = (size_t)s->st[q].degree;
        }
    } else {
        int32_t p = last;
        need_st = 1;
        while (p >= 0 && sam_next(s, p, tok) < 0) {
            need_edges++;
            p = s->st[p].link;
        }
        if (p >= 0) {
            int32_t qq = sam_next(s, p, tok);
            if (s->st[p].len + 1 != s->st[qq].len) {
                need_st = 2;
                need_edges += (size_t)s->st[qq].degree;
            }
        }
    }
    rc = grow_states(s, s->n_st + need_st, err);
    if (rc) return rc;
    rc = grow_edges(s, s->n_edges + need_edges, err);
    if (rc) return rc;

    /* Commit. */
    s->text[pos] = tok;
    s->n_tok++;
    s->frozen = false;
    s->indexed = false;
    if (q >= 0) {
        if (s->st[q].len == s->st[last].len + 1) {
            s->st[q].last_end = pos;
            s->last = q;
        } else {
            int32_t c = clone_state(s, q, s->st[last].len + 1, pos);
            redirect(s, last, tok, q, c);
            track_split(s, track, q, c);
            s->last = c;
        }
        s->pos_state[pos] = s->last;
        return SDNPU_OK;
    }

    int32_t cur = (int32_t)s->n_st++;
    s->st[cur] = (struct sam_state){.len = s->st[last].len + 1,
                                    .link = 0,
                                    .edges = -1,
                                    .degree = 0,
                                    .first_end = pos,
                                    .last_end = pos,
                                    .cont_end = -1,
                                    .count = 0};
    int32_t p = last;
    while (p >= 0 && sam_next(s, p, tok) < 0) {
        edge_insert(s, p, tok, cur);
        p = s->st[p].link;
    }
    if (p >= 0) {
        int32_t qq = sam_next(s, p, tok);
        if (s->st[p].len + 1 == s->st[qq].len) {
            s->st[cur].link = qq;
        } else {
            int32_t c = clone_state(s, qq, s->st[p].len + 1, pos);
            s->st[cur].link = c;
            redirect(s, p, tok, qq, c);
            track_split(s, track, qq, c);
        }
    }
    s->last = cur;
    s->pos_state[pos] = cur;
    return SDNPU_OK;
}

int sd_sam_append_n(struct sd_sam *s, const int32_t *tok, size_t n, struct sd_err *err) {
    if (!s || (!tok && n)) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "suffix automaton: NULL argument");
    int rc = sd_sam_reserve(s, n, err);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        rc = sd_sam_append(s, tok[i], NULL, err);
        if (rc) return rc;
    }
    return SDNPU_OK;
}

int sd_sam_append_record(struct sd_sam *s, const int32_t *tok, size_t n, struct sd_err *err) {
    int rc = sd_sam_append_n(s, tok, n, err);
    return rc ? rc : sd_sam_append(s, SD_SAM_SEP, NULL, err);
}

/* --------------------------------------------------------------- freeze */

static inline bool has_cont(const struct sd_sam *s, int32_t e) {
    return e >= 0 && (size_t)e + 1 < s->n_tok && s->text[e + 1] >= 0;
}

int sd_sam_freeze(struct sd_sam *s, struct sd_err *err) {
    if (!s) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "suffix automaton: NULL handle");
    if (s->frozen) return SDNPU_OK;
    size_t n = s->n_st;
    int32_t max_len = 0;
    for (size_t v = 0; v < n; v++)
        max_len = SD_MAX(max_len, s->st[v].len);
    int32_t *bucket = sd_calloc((size_t)max_len + 1, sizeof *bucket); /* [max_len+1] */
    int32_t *order = sd_malloc(n * sizeof *order);                    /* [n_st] states by len */
    if (!bucket || !order) {
        sd_free(bucket);
        sd_free(order);
        return sd_err_set(err, SDNPU_ERR_OOM, "suffix automaton: out of memory freezing %zu states", n);
    }
    /* Counting sort by len: a state's suffix link is strictly shorter, so
     * walking the order backwards visits every child before its parent in
     * the suffix-link tree. */
    for (size_t v = 0; v < n; v++)
        bucket[s->st[v].len]++;
    for (int32_t l = 1; l <= max_len; l++)
        bucket[l] += bucket[l - 1];
    for (size_t v = n; v-- > 0;)
        order[--bucket[s->st[v].len]] = (int32_t)v;

    for (size_t v = 0; v < n; v++) {
        s->st[v].count = 0;
        s->st[v].last_end = -1;
        s->st[v].cont_end = -1;
    }
    /* Each non-separator position is the end of exactly one state's longest
     * string; everything else inherits it along suffix links. */
    for (size_t i = 0; i < s->n_tok; i++) {
        int32_t v = s->pos_state[i];
        if (v < 0) continue;
        s->st[v].count++;
        s->st[v].last_end = (int32_t)i;
        if (has_cont(s, (int32_t)i)) s->st[v].cont_end = (int32_t)i;
    }
    for (size_t k = n; k-- > 1;) {
        const struct sam_state *c = &s->st[order[k]];
        struct sam_state *u = &s->st[c->link];
        u->count += c->count;
        u->last_end = SD_MAX(u->last_end, c->last_end);
        u->cont_end = SD_MAX(u->cont_end, c->cont_end);
    }
    sd_free(bucket);
    sd_free(order);
    s->frozen = true;
    return SDNPU_OK;
}

bool sd_sam_frozen(const struct sd_sam *s) { return s && s->frozen; }

/* ---------------------------------------------------- end-position index */

static int ends_reserve(struct sd_sam *s, struct sd_err *err) {
    if (s->ends_cap_tok < s->n_tok) {
        int32_t *e = sd_realloc(s->ends, s->n_tok * sizeof *e);
        if (!e) return sd_err_set(err, SDNPU_ERR_OOM, "suffix automaton: out of memory indexing %zu tokens", s->n_tok);
        s->ends = e;
        s->ends_cap_tok = s->n_tok;
    }
    if (s->ends_cap_st < s->n_st) {
        int32_t *f = sd_realloc(s->ends_from, s->n_st * sizeof *f);
        if (f) s->ends_from = f;
        int32_t *t = f ? sd_realloc(s->ends_to, s->n_st * sizeof *t) : NULL;
        if (!t) return sd_err_set(err, SDNPU_ERR_OOM, "suffix automaton: out of memory indexing %zu states", s->n_st);
        s->ends_to = t;
        s->ends_cap_st = s->n_st;
    }
    return SDNPU_OK;
}

/* CSR lists: for each key k < n_keys, the items i < n_items with key[i] ==
 * k (keys < 0 skipped), as list[start[k] .. start[k+1]). */
static void csr_build(const int32_t *key, size_t n_items, size_t n_keys, int32_t *start, int32_t *list) {
    memset(start, 0, (n_keys + 1) * sizeof *start);
    for (size_t i = 0; i < n_items; i++)
        if (key[i] >= 0) start[key[i] + 1]++;
    for (size_t k = 0; k < n_keys; k++)
        start[k + 1] += start[k];
    for (size_t i = 0; i < n_items; i++)
        if (key[i] >= 0) list[start[key[i]]++] = (int32_t)i;
    for (size_t k = n_keys; k > 0; k--) /* the fill advanced each start to the next one's */
        start[k] = start[k - 1];
    start[0] = 0;
}

/* Lay out the end positions of the suffix-link tree in depth-first order:
 * a state's own positions (kid and own are CSR lists, csr_build) and then
 * its subtree's, so each state's set is one range. stack holds 2 n_st. */
static void ends_layout(struct sd_sam *s, const int32_t *kid_at, const int32_t *kid, const int32_t *own_at,
                        const int32_t *own, int32_t *stack) {
    int32_t k = 0, top = 0;
    stack[top++] = 0;
    while (top > 0) { /* each state is pushed once, and once more as ~v to mark its exit */
        int32_t v = stack[--top];
        if (v < 0) {
            s->ends_to[~v] = k;
            continue;
        }
        s->ends_from[v] = k;
        for (int32_t i = own_at[v]; i < own_at[v + 1]; i++)
            s->ends[k++] = own[i];
        stack[top++] = ~v;
        for (int32_t i = kid_at[v]; i < kid_at[v + 1]; i++)
            stack[top++] = kid[i];
    }
}

int sd_sam_index_ends(struct sd_sam *s, struct sd_err *err) {
    if (!s) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "suffix automaton: NULL handle");
    if (s->indexed) return SDNPU_OK;
    size_t n = s->n_st, nt = s->n_tok ? s->n_tok : 1;
    int32_t *link = sd_malloc(n * sizeof *link), *kid = sd_malloc(n * sizeof *kid);
    int32_t *kid_at = sd_malloc((n + 1) * sizeof *kid_at), *own_at = sd_malloc((n + 1) * sizeof *own_at);
    int32_t *own = sd_malloc(nt * sizeof *own), *stack = sd_malloc(2 * n * sizeof *stack);
    int rc = link && kid && kid_at && own_at && own && stack
                 ? ends_reserve(s, err)
                 : sd_err_set(err, SDNPU_ERR_OOM, "suffix automaton: out of memory indexing %zu states", n);
    if (!rc) {
        for (size_t v = 0; v < n; v++)
            link[v] = s->st[v].link;
        csr_build(link, n, n, kid_at, kid);
        /* Each position is owned by the state its longest suffix ends in. */
        csr_build(s->pos_state, s->n_tok, n, own_at, own);
        ends_layout(s, kid_at, kid, own_at, own, stack);
        s->indexed = true;
    }
    sd_free(link);
    sd_free(kid);
    sd_free(kid_at);
    sd_free(own_at);
    sd_free(own);
    sd_free(stack);
    return rc;
}

bool sd_sam_indexed(const struct sd_sam *s) { return s && s->indexed; }

int32_t sd_sam_end_from(const struct sd_sam *s, int32_t st, int32_t pos) {
    if (!s->indexed) return -1;
    int32_t best = -1;
    for (int32_t i = s->ends_from[st]; i < s->ends_to[st]; i++) {
        int32_t e = s->ends[i];
        if (e >= pos && (best < 0 || e < best) && has_cont(s, e)) best = e;
    }
    return best;
}


/* -------------------------------------------------------------- queries */

size_t sd_sam_n_tokens(const struct sd_sam *s) { return s ? s->n_tok : 0; }
const int32_t *sd_sam_text(const struct sd_sam *s) { return s ? s->text : NULL; }
size_t sd_sam_n_states(const struct sd_sam *s) { return s ? s->n_st : 0; }
size_t sd_sam_n_edges(const struct sd_sam *s) { return s ? s->n_edges : 0; }

size_t sd_sam_memory(const struct sd_sam *s) {
    if (!s) return 0;
    return sizeof *s + s->cap_st * sizeof *s->st + s->cap_tok * 2 * sizeof(int32_t) +
           s->cap_slot * sizeof *s->slot + (s->ends_cap_tok + 2 * s->ends_cap_st) * sizeof(int32_t);
}

int32_t sd_sam_len(const struct sd_sam *s, int32_t st) { return s->st[st].len; }
int32_t sd_sam_link(const struct sd_sam *s, int32_t st) { return s->st[st].link; }
int32_t sd_sam_next(const struct sd_sam *s, int32_t st, int32_t tok) { return sam_next(s, st, tok); }
int32_t sd_sam_degree(const struct sd_sam *s, int32_t st) { return s->st[st].degree; }
int32_t sd_sam_first_end(const struct sd_sam *s, int32_t st) { return s->st[st].first_end; }
int32_t sd_sam_last_end(const struct sd_sam *s, int32_t st) { return s->st[st].last_end; }
int32_t sd_sam_count(const struct sd_sam *s, int32_t st) { return s->frozen ? s->st[st].count : 0; }

int32_t sd_sam_cont_end(const struct sd_sam *s, int32_t st) {
    const struct sam_state *v = &s->st[st];
    if (s->frozen) return v->cont_end;
    if (has_cont(s, v->last_end)) return v->last_end;
    if (has_cont(s, v->first_end)) return v->first_end;
    return -1;
}

int32_t sd_sam_continuation(const struct sd_sam *s, int32_t e, int32_t *out, int32_t max) {
    int32_t n = 0;
    if (e < -1) return 0;
    for (size_t j = (size_t)(e + 1); j < s->n_tok && n < max && s->text[j] >= 0; j++)
        out[n++] = s->text[j];
    return n;
}

/* True if edge a ranks above edge b: more occurrences, then more recent,
 * then the smaller token (so ties are deterministic). */
static inline bool rank_above(int32_t ca, int32_t ra, int32_t ta, int32_t cb, int32_t rb, int32_t tb) {
    if (ca != cb) return ca > cb;
    if (ra != rb) return ra > rb;
    return ta < tb;
}

int32_t sd_sam_top_edges(const struct sd_sam *s, int32_t st, int32_t k, int32_t exclude, int32_t *tok,
                         int32_t *to) {
    int32_t n = 0;
    if (k <= 0) return 0;
    for (int32_t e = s->st[st].edges; e >= 0; e = s->slot[e].next) {
        int32_t t = s->slot[e].tok, u = s->slot[e].to;
        if (t == exclude) continue;
        int32_t cu = s->frozen ? s->st[u].count : 0, ru = s->st[u].last_end;
        /* Insertion into the sorted top-k: k is a handful, degree is what
         * it is, so this beats sorting all edges. */
        int32_t i = n < k ? n++ : k;
        while (i > 0) {
            int32_t w = to[i - 1];
            int32_t cw = s->frozen ? s->st[w].count : 0;
            if (!rank_above(cu, ru, t, cw, s->st[w].last_end, tok[i - 1])) break;
            if (i < k) {
                tok[i] = tok[i - 1];
                to[i] = to[i - 1];
            }
            i--;
        }
        if (i < k) {
            tok[i] = t;
            to[i] = u;
        }
    }
    return n;
}

/* --------------------------------------------------------------- cursor */

void sd_sam_cursor_reset(struct sd_sam_cursor *c) {
    c->state = 0;
    c->len = 0;
}

void sd_sam_cursor_advance(const struct sd_sam *s, struct sd_sam_cursor *c, int32_t tok) {
    int32_t v = c->state, len = c->len;
    /* A cursor left over from before sd_sam_clear starts again. */
    if (v < 0 || (size_t)v >= s->n_st || tok < 0) {
        sd_sam_cursor_reset(c);
        return;
    }
    for (;;) {
        int32_t to = sam_next(s, v, tok);
        if (to >= 0) {
            c->state = to;
            c->len = len + 1;
            return;
        }
        if (v == 0) {
            sd_sam_cursor_reset(c);
            return;
        }
        v = s->st[v].link;
        len = s->st[v].len;
    }
}
