/*
 * draft/drafter.c - the drafters behind struct sd_drafter_i: pld, sam and
 * sam-tree (draft.h).
 *
 * sam and sam-tree share one implementation; the tree flag only adds the
 * side branches after the main path, so the tree's main path is the linear
 * draft by construction (test_draft checks it).
 */
#include <string.h>

#include "draft/draft.h"

/* Most alternatives taken per automaton state, and most side chains per
 * draft; fixed so the scratch space is allocated once. */
#define ALT_MAX 16
#define LEVEL_MAX 8
#define SUFFIX_LEVELS 2
#define SIDE_MAX (SD_DRAFT_STORE_COUNT + (LEVEL_MAX + SUFFIX_LEVELS) * ALT_MAX)
/* How many generated tokens a late-attached store's cursor re-reads. */
#define REFEED 256

static int check_params(const struct sd_draft_params *p, struct sd_draft_tree *out, struct sd_err *err) {
    if (!p || !out || !out->tok) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "draft: NULL params or tree");
    if (p->max_depth < 1 || p->max_branch < 1 || p->budget < 1)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG,
                          "draft: max_depth %d, max_branch %d, budget %d must be >= 1", (int)p->max_depth,
                          (int)p->max_branch, (int)p->budget);
    return SDNPU_OK;
}

/* The longest chain a draft may hold. */
static int32_t chain_cap(const struct sd_draft_params *p, const struct sd_draft_tree *out) {
    return SD_MIN(SD_MIN(p->max_depth, SD_DRAFT_MAX_DEPTH), SD_MIN(p->budget, out->cap));
}

/* The best place to draft from in one store: the deepest state on the
 * cursor's suffix-link path whose strings have a continuation. */
struct cand {
    int32_t store; /* enum sd_draft_store */
    int32_t state;
    int32_t match; /* matched suffix length */
    int32_t end;   /* end position of the occurrence to copy from */
};

static bool cand_find(const struct sd_sam *sam, struct sd_sam_cursor c, int32_t store, int32_t min_match,
                      int32_t from, struct cand *out) {
    int32_t v = c.state, m = c.len;
    if (v < 0 || (size_t)v >= sd_sam_n_states(sam)) return false;
    /* Usually zero or one step: a state without a continuation has all its
     * occurrences at the end of the text or of a record. With from >= 0 the
     * first occurrence at or after it, where there is one (draft.h's
     * follow). */
    while (v > 0 && m >= min_match) {
        int32_t e = from >= 0 ? sd_sam_end_from(sam, v, from) : -1;
        if (e < 0) e = sd_sam_cont_end(sam, v);
        if (e >= 0) {
            *out = (struct cand){store, v, m, e};
            return true;
        }
        v = sd_sam_link(sam, v);
        m = sd_sam_len(sam, v);
    }
    return false;
}

/* Better candidate: by draft_params' calib_lead (draft.h) for calibrated
 * sequences; otherwise the longer match, then the store order of the enum.
 * A calibrated sequence loses a tie: its key is a few context tokens, and
 * where the generated text matches another store as far, that store's
 * continuation drafts better. */
static int32_t cand_rank(const struct cand *a, int32_t lead) {
    if (a->store != SD_DRAFT_STORE_CALIB) return a->store;
    return lead > 0 && a->match >= lead ? -1 : SD_DRAFT_STORE_COUNT;
}

static bool cand_above(const struct cand *a, const struct cand *b, int32_t lead) {
    int32_t ra = cand_rank(a, lead), rb = cand_rank(b, lead);
    bool fa = ra == SD_DRAFT_STORE_COUNT, fb = rb == SD_DRAFT_STORE_COUNT;
    if (lead < 0 && fa != fb) return fb; /* calibrated sequences come last */
    if ((ra < 0) != (rb < 0)) return ra < 0;
    if (a->match != b->match) return a->match > b->match;
    return ra < rb;
}

/* ====================================================================== pld */

struct pld_drafter {
    struct sd_drafter base;
    int32_t *text; /* [cap] context then output */
    size_t n, cap, n_ctx;
    bool has_output;
    const struct sd_sam *calib;  /* borrowed: the calibrated store, or NULL */
    struct sd_sam_cursor cur;    /* the text's longest suffix in calib */
    int32_t buf[SD_DRAFT_MAX_DEPTH];
};

static int pld_push(struct pld_drafter *d, const int32_t *tok, size_t n, struct sd_err *err) {
    if (n > SIZE_MAX / sizeof(int32_t) / 2 - d->n)
        return sd_err_set(err, SDNPU_ERR_CONTEXT_FULL, "pld: %zu tokens is too many", n);
    if (d->n + n > d->cap) {
        size_t cap = d->cap ? d->cap : 256;
        while (cap < d->n + n)
            cap *= 2;
        int32_t *t = sd_realloc(d->text, cap * sizeof *t);
        if (!t) return sd_err_set(err, SDNPU_ERR_OOM, "pld: out of memory for %zu tokens", cap);
        d->text = t;
        d->cap = cap;
    }
    memcpy(d->text + d->n, tok, n * sizeof *tok);
    d->n += n;
    if (d->calib)
        for (size_t i = 0; i < n; i++) sd_sam_cursor_advance(d->calib, &d->cur, tok[i]);
    return SDNPU_OK;
}

static int pld_reset(struct sd_drafter *self, struct sd_err *err) {
    (void)err;
    struct pld_drafter *d = (struct pld_drafter *)self;
    d->n = d->n_ctx = 0;
    d->has_output = false;
    sd_sam_cursor_reset(&d->cur);
    return SDNPU_OK;
}

static int pld_observe_context(struct sd_drafter *self, const int32_t *tok, size_t n, struct sd_err *err) {
    struct pld_drafter *d = (struct pld_drafter *)self;
    if (d->has_output) return sd_err_set(err, SDNPU_ERR_STATE, "pld: context after output (reset first)");
    int rc = pld_push(d, tok, n, err);
    if (rc == SDNPU_OK) d->n_ctx = d->n;
    return rc;
}

static int pld_observe_output(struct sd_drafter *self, int32_t tok, struct sd_err *err) {
    struct pld_drafter *d = (struct pld_drafter *)self;
    int rc = pld_push(d, &tok, 1, err);
    if (rc == SDNPU_OK) d->has_output = true;
    return rc;
}

static int pld_draft(struct sd_drafter *self, const struct sd_draft_params *p, struct sd_draft_tree *out,
                     struct sd_err *err) {
    struct pld_drafter *d = (struct pld_drafter *)self;
    int rc = check_params(p, out, err);
    if (rc) return rc;
    sd_draft_tree_clear(out);
    int32_t ngram = 0;
    int32_t n =
        sd_pld_lookup(d->text, d->n, p->pld_max_ngram, p->pld_min_ngram, d->buf, chain_cap(p, out), &ngram);
    int32_t store = SD_DRAFT_STORE_CONTEXT;
    /* A calibrated sequence drafts instead where no n-gram recurs, or where
     * it ranks above the n-gram as the sam drafter ranks its stores. */
    struct cand c, gram = {SD_DRAFT_STORE_CONTEXT, 0, ngram, 0};
    if (d->calib && cand_find(d->calib, d->cur, SD_DRAFT_STORE_CALIB, SD_MAX(p->min_match, p->calib_min_match), -1, &c) &&
        (n == 0 || cand_above(&c, &gram, p->calib_lead))) {
        n = sd_sam_continuation(d->calib, c.end, d->buf, chain_cap(p, out));
        ngram = c.match;
        store = SD_DRAFT_STORE_CALIB;
    }
    out->n_main = sd_draft_tree_add_chain(out, -1, d->buf, n, p);
    if (out->n_main > 0) {
        out->main_store = store;
        out->main_match = ngram;
    }
    return SDNPU_OK;
}

/* Prompt lookup searches the request's own text; a calibrated store is the
 * one store it takes besides (pld+calib). */
static int pld_attach(struct sd_drafter *self, enum sd_draft_store which, const struct sd_sam *sam,
                      struct sd_err *err) {
    struct pld_drafter *d = (struct pld_drafter *)self;
    if (which != SD_DRAFT_STORE_CALIB)
        return sd_err_set(err, SDNPU_ERR_UNSUPPORTED, "pld: prompt lookup searches only the request's own text");
    d->calib = sam;
    sd_sam_cursor_reset(&d->cur);
    if (sam)
        for (size_t i = d->n > REFEED ? d->n - REFEED : 0; i < d->n; i++) sd_sam_cursor_advance(sam, &d->cur, d->text[i]);
    return SDNPU_OK;
}

static void pld_destroy(struct sd_drafter *self) {
    struct pld_drafter *d = (struct pld_drafter *)self;
    sd_free(d->text);
    sd_free(d);
}

static const struct sd_drafter_i pld_vt = {
    .name = "pld",
    .reset = pld_reset,
    .observe_context = pld_observe_context,
    .observe_output = pld_observe_output,
    .draft = pld_draft,
    .attach = pld_attach,
    .destroy = pld_destroy,
};

static int pld_create(size_t hint, struct sd_drafter **out, struct sd_err *err) {
    struct pld_drafter *d = sd_calloc(1, sizeof *d);
    if (!d) return sd_err_set(err, SDNPU_ERR_OOM, "pld: out of memory");
    d->base.vt = &pld_vt;
    if (hint) {
        d->text = sd_malloc(hint * sizeof *d->text);
        if (!d->text) {
            sd_free(d);
            return sd_err_set(err, SDNPU_ERR_OOM, "pld: out of memory for %zu tokens", hint);
        }
        d->cap = hint;
    }
    *out = &d->base;
    return SDNPU_OK;
}

/* ================================================================ sam / tree */

/* One side branch to add: tok (or, with tok < 0, nothing) followed by the
 * text after `end` in `store`, under tree node `parent`. */
struct side {
    int32_t parent;
    int32_t store;
    int32_t tok;
    int32_t end;
};

struct sam_drafter {
    struct sd_drafter base;
    bool tree;
    bool has_output;
    struct sd_sam *ctx;                             /* owned: the request's context, frozen before drafting */
    struct sd_sam *out;                             /* owned: the output so far, never frozen */
    const struct sd_sam *sam[SD_DRAFT_STORE_COUNT]; /* ctx, out and the borrowed ones */
    struct sd_sam_cursor cur[SD_DRAFT_STORE_COUNT];
    int32_t buf[SD_DRAFT_MAX_DEPTH];   /* main path */
    int32_t chain[SD_DRAFT_MAX_DEPTH]; /* one side chain */
    int32_t state_path[LEVEL_MAX + 1]; /* main-store state at each level */
    int32_t alt_tok[ALT_MAX], alt_to[ALT_MAX];
    struct side side[SIDE_MAX];
    /* Where in the context the text is being copied from (draft.h's
     * follow): the last draft's main path, copy_n tokens, if it came from
     * the context, was copied after end position copy_end (else -1);
     * copy_k of its tokens were accepted so far; read_at is the context
     * position of the last accepted copied token (-1: none this request). */
    int32_t copy_end, copy_k, copy_n, read_at;
};

static int sam_ensure_frozen(struct sam_drafter *d, struct sd_err *err) {
    int rc = sd_sam_freeze(d->ctx, err);
    if (!rc) rc = sd_sam_index_ends(d->ctx, err);
    if (rc) sd_err_prefix(err, "sam drafter: context store");
    return rc;
}

static int sam_reset(struct sd_drafter *self, struct sd_err *err) {
    (void)err;
    struct sam_drafter *d = (struct sam_drafter *)self;
    sd_sam_clear(d->ctx);
    sd_sam_clear(d->out);
    for (int w = 0; w < SD_DRAFT_STORE_COUNT; w++)
        sd_sam_cursor_reset(&d->cur[w]);
    d->has_output = false;
    d->copy_end = d->read_at = -1;
    return SDNPU_OK;
}

static const int k_borrowed[] = {SD_DRAFT_STORE_HISTORY, SD_DRAFT_STORE_REPLIES, SD_DRAFT_STORE_CALIB};

static void advance_borrowed(struct sam_drafter *d, int32_t tok) {
    for (size_t i = 0; i < sizeof k_borrowed / sizeof k_borrowed[0]; i++)
        if (d->sam[k_borrowed[i]]) sd_sam_cursor_advance(d->sam[k_borrowed[i]], &d->cur[k_borrowed[i]], tok);
}

static int sam_observe_context(struct sd_drafter *self, const int32_t *tok, size_t n, struct sd_err *err) {
    struct sam_drafter *d = (struct sam_drafter *)self;
    if (d->has_output)
        return sd_err_set(err, SDNPU_ERR_STATE, "sam drafter: context after output (reset first)");
    for (size_t i = 0; i < n; i++)
        if (tok[i] < 0)
            return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "sam drafter: context token %zu is negative (%d)",
                              i, (int)tok[i]);
    int rc = sd_sam_reserve(d->ctx, n, err);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        /* The context cursor reads each token before it is appended, so it
         * holds the longest suffix that occurred earlier, i.e. one with a
         * continuation; the borrowed stores are static. */
        sd_sam_cursor_advance(d->ctx, &d->cur[SD_DRAFT_STORE_CONTEXT], tok[i]);
        rc = sd_sam_append(d->ctx, tok[i], &d->cur[SD_DRAFT_STORE_CONTEXT], err);
        if (rc) return rc; /* cannot happen after the reserve, but stays a status */
        advance_borrowed(d, tok[i]);
    }
    return SDNPU_OK;
}

/* An accepted token that goes on copying the context moves read_at. */
static void follow_copy(struct sam_drafter *d, int32_t tok) {
    if (d->copy_end < 0) return;
    if (d->copy_k < d->copy_n && d->buf[d->copy_k] == tok) {
        d->copy_k++;
        d->read_at = d->copy_end + d->copy_k;
    } else {
        d->copy_end = -1;
    }
}

static int sam_observe_output(struct sd_drafter *self, int32_t tok, struct sd_err *err) {
    struct sam_drafter *d = (struct sam_drafter *)self;
    if (tok < 0)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "sam drafter: output token %d is negative", (int)tok);
    int rc = sam_ensure_frozen(d, err);
    if (rc) return rc;
    /* The output store grows, so its cursor reads the token first (the
     * longest suffix that occurred before, which has a continuation) and
     * then follows the append. Only after the append succeeds is anything
     * committed, so a failure leaves the token unobserved everywhere. */
    struct sd_sam_cursor c = d->cur[SD_DRAFT_STORE_OUTPUT];
    sd_sam_cursor_advance(d->out, &c, tok);
    rc = sd_sam_append(d->out, tok, &c, err);
    if (rc) {
        sd_err_prefix(err, "sam drafter: output store");
        return rc;
    }
    d->cur[SD_DRAFT_STORE_OUTPUT] = c;
    follow_copy(d, tok);
    sd_sam_cursor_advance(d->ctx, &d->cur[SD_DRAFT_STORE_CONTEXT], tok);
    advance_borrowed(d, tok);
    d->has_output = true;
    return SDNPU_OK;
}

/* Add side chain s under its parent: its token (if any), then the text
 * after s->end, as deep as the depth limit allows, sharing any prefix that
 * is already on the tree for free but adding at most max_new new nodes. */
static void side_add(struct sam_drafter *d, const struct side *s, int32_t max_new,
                     const struct sd_draft_params *p, struct sd_draft_tree *out) {
    int32_t room = SD_MIN(SD_DRAFT_MAX_DEPTH, p->max_depth - (s->parent < 0 ? 0 : out->depth[s->parent]));
    int32_t n = 0;
    if (room <= 0) return;
    if (s->tok >= 0) d->chain[n++] = s->tok;
    if (s->end >= 0 && n < room) n += sd_sam_continuation(d->sam[s->store], s->end, d->chain + n, room - n);
    int32_t node = s->parent, added = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t next = sd_draft_tree_child(out, node, d->chain[i]);
        if (next < 0) {
            if (added == max_new) return;
            next = sd_draft_tree_add(out, node, d->chain[i], p);
            if (next < 0) return;
            added++;
        }
        node = next;
    }
}

/* The side branches of sam-tree, in priority order:
 *   1. the other stores' longest-match continuations, under the root
 *      (merged with the main path where they share a prefix);
 *   2. at main-path levels 0 .. branch_levels-1, the other successors of
 *      the matched suffix in the main store, ranked by count and recency,
 *      each followed by the text after its most recent occurrence;
 *   3. at the root, successors of shorter suffixes (suffix links), which
 *      fill the batch when the longest match is unique.
 * The budget left after the main path is shared evenly among the side
 * chains still to come, so early chains cannot starve later ones and what
 * a chain does not use passes on. */
static void sam_tree_sides(struct sam_drafter *d, const struct cand *c, int32_t n_cand,
                           const struct sd_draft_params *p, struct sd_draft_tree *out) {
    const struct cand *main = &c[0];
    const struct sd_sam *ms = d->sam[main->store];
    int32_t n_side = 0;
    int32_t k_alt = SD_MIN(p->max_branch, ALT_MAX);
    int32_t levels = SD_MIN(SD_MIN(p->branch_levels, LEVEL_MAX), out->n_main);

    for (int32_t i = 1; i < n_cand; i++)
        d->side[n_side++] = (struct side){-1, c[i].store, -1, c[i].end};

    /* The main path was read from one occurrence of the matched suffix, so
     * each of its tokens is an edge out of the previous level's state. */
    d->state_path[0] = main->state;
    for (int32_t l = 1; l < levels; l++)
        d->state_path[l] = sd_sam_next(ms, d->state_path[l - 1], d->buf[l - 1]);
    for (int32_t l = 0; l < levels; l++) {
        int32_t v = d->state_path[l];
        if (v < 0) break;
        int32_t n = sd_sam_top_edges(ms, v, k_alt, d->buf[l], d->alt_tok, d->alt_to);
        for (int32_t a = 0; a < n; a++)
            d->side[n_side++] =
                (struct side){l - 1, main->store, d->alt_tok[a], sd_sam_cont_end(ms, d->alt_to[a])};
    }
    int32_t w = sd_sam_link(ms, main->state);
    for (int32_t l = 0; l < SUFFIX_LEVELS && w > 0 && sd_sam_len(ms, w) >= p->min_match; l++) {
        int32_t n =
            sd_sam_top_edges(ms, w, k_alt, out->n_main > 0 ? d->buf[0] : SD_SAM_SEP, d->alt_tok, d->alt_to);
        for (int32_t a = 0; a < n; a++) {
            if (sd_draft_tree_child(out, -1, d->alt_tok[a]) >= 0) continue;
            d->side[n_side++] =
                (struct side){-1, main->store, d->alt_tok[a], sd_sam_cont_end(ms, d->alt_to[a])};
        }
        w = sd_sam_link(ms, w);
    }

    int32_t budget = SD_MIN(p->budget, out->cap);
    for (int32_t i = 0; i < n_side && out->n < budget; i++) {
        int32_t share = SD_MAX(1, (budget - out->n) / (n_side - i));
        side_add(d, &d->side[i], share, p, out);
    }
}

static int sam_draft(struct sd_drafter *self, const struct sd_draft_params *p, struct sd_draft_tree *out,
                     struct sd_err *err) {
    struct sam_drafter *d = (struct sam_drafter *)self;
    int rc = check_params(p, out, err);
    if (rc) return rc;
    sd_draft_tree_clear(out);
    rc = sam_ensure_frozen(d, err);
    if (rc) return rc;

    /* One candidate per store, best first (insertion sort of <= 4). */
    struct cand c[SD_DRAFT_STORE_COUNT];
    int32_t n_cand = 0;
    int32_t min_match = SD_MAX(1, p->min_match);
    for (int32_t w = 0; w < SD_DRAFT_STORE_COUNT; w++) {
        struct cand x;
        int32_t mm = w == SD_DRAFT_STORE_CALIB ? SD_MAX(min_match, p->calib_min_match) : min_match;
        int32_t from = p->follow && w == SD_DRAFT_STORE_CONTEXT ? d->read_at : -1;
        if (!d->sam[w] || !cand_find(d->sam[w], d->cur[w], w, mm, from, &x)) continue;
        int32_t i = n_cand++;
        while (i > 0 && cand_above(&x, &c[i - 1], p->calib_lead)) {
            c[i] = c[i - 1];
            i--;
        }
        c[i] = x;
    }
    d->copy_end = -1;
    if (n_cand == 0) return SDNPU_OK;

    int32_t n = sd_sam_continuation(d->sam[c[0].store], c[0].end, d->buf, chain_cap(p, out));
    out->n_main = sd_draft_tree_add_chain(out, -1, d->buf, n, p);
    if (c[0].store == SD_DRAFT_STORE_CONTEXT) {
        d->copy_end = c[0].end;
        d->copy_k = 0;
        d->copy_n = out->n_main;
    }
    out->main_store = c[0].store;
    out->main_match = c[0].match;
    if (d->tree) sam_tree_sides(d, c, n_cand, p, out);
    return SDNPU_OK;
}

static int sam_attach(struct sd_drafter *self, enum sd_draft_store which, const struct sd_sam *sam,
                      struct sd_err *err) {
    struct sam_drafter *d = (struct sam_drafter *)self;
    if (which != SD_DRAFT_STORE_HISTORY && which != SD_DRAFT_STORE_REPLIES && which != SD_DRAFT_STORE_CALIB)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG,
                          "sam drafter: store %d cannot be attached (history, replies or calib only)", (int)which);
    d->sam[which] = sam;
    struct sd_sam_cursor *c = &d->cur[which];
    sd_sam_cursor_reset(c);
    if (!sam) return SDNPU_OK;
    /* Matches longer than REFEED tokens are rare and only make the first
     * draft shorter, so the new cursor reads just the tail of the
     * generated text (context then output). */
    size_t n_ctx = sd_sam_n_tokens(d->ctx), n_out = sd_sam_n_tokens(d->out);
    size_t from = n_ctx + n_out > REFEED ? n_ctx + n_out - REFEED : 0;
    const int32_t *ctx = sd_sam_text(d->ctx), *outp = sd_sam_text(d->out);
    for (size_t i = from; i < n_ctx + n_out; i++)
        sd_sam_cursor_advance(sam, c, i < n_ctx ? ctx[i] : outp[i - n_ctx]);
    return SDNPU_OK;
}

static void sam_destroy(struct sd_drafter *self) {
    struct sam_drafter *d = (struct sam_drafter *)self;
    sd_sam_free(d->ctx);
    sd_sam_free(d->out);
    sd_free(d);
}

static const struct sd_drafter_i sam_vt = {
    .name = "sam",
    .reset = sam_reset,
    .observe_context = sam_observe_context,
    .observe_output = sam_observe_output,
    .draft = sam_draft,
    .attach = sam_attach,
    .destroy = sam_destroy,
};

static const struct sd_drafter_i sam_tree_vt = {
    .name = "sam-tree",
    .reset = sam_reset,
    .observe_context = sam_observe_context,
    .observe_output = sam_observe_output,
    .draft = sam_draft,
    .attach = sam_attach,
    .destroy = sam_destroy,
};

static int sam_create(bool tree, size_t hint, struct sd_drafter **out, struct sd_err *err) {
    struct sam_drafter *d = sd_calloc(1, sizeof *d);
    if (!d) return sd_err_set(err, SDNPU_ERR_OOM, "sam drafter: out of memory");
    d->base.vt = tree ? &sam_tree_vt : &sam_vt;
    d->tree = tree;
    /* The output is usually far shorter than the context; a quarter of the
     * hint (at least 1k tokens) covers it without a rehash. */
    int rc = sd_sam_create(hint, &d->ctx, err);
    if (rc == SDNPU_OK) rc = sd_sam_create(SD_MAX(hint / 4, (size_t)1024), &d->out, err);
    if (rc) {
        sam_destroy(&d->base);
        return rc;
    }
    d->sam[SD_DRAFT_STORE_CONTEXT] = d->ctx;
    d->sam[SD_DRAFT_STORE_OUTPUT] = d->out;
    d->copy_end = d->read_at = -1;
    for (int w = 0; w < SD_DRAFT_STORE_COUNT; w++)
        sd_sam_cursor_reset(&d->cur[w]);
    *out = &d->base;
    return SDNPU_OK;
}

/* ================================================================= common */

int sd_drafter_create(const char *name, size_t n_tokens_hint, struct sd_drafter **out, struct sd_err *err) {
    if (!name || !out) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "drafter: NULL argument");
    *out = NULL;
    if (strcmp(name, "pld") == 0) return pld_create(n_tokens_hint, out, err);
    if (strcmp(name, "sam") == 0) return sam_create(false, n_tokens_hint, out, err);
    if (strcmp(name, "sam-tree") == 0) return sam_create(true, n_tokens_hint, out, err);
    return sd_err_set(err, SDNPU_ERR_NOT_FOUND, "drafter: no drafter named '%s' (pld, sam, sam-tree)", name);
}

void sd_drafter_free(struct sd_drafter *d) {
    if (d) d->vt->destroy(d);
}

const char *sd_drafter_name(const struct sd_drafter *d) { return d ? d->vt->name : "(null)"; }

int sd_drafter_reset(struct sd_drafter *d, struct sd_err *err) {
    if (!d) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "drafter: NULL handle");
    return d->vt->reset(d, err);
}

int sd_drafter_observe_context(struct sd_drafter *d, const int32_t *tok, size_t n, struct sd_err *err) {
    if (!d || (!tok && n)) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "drafter: NULL argument");
    return d->vt->observe_context(d, tok, n, err);
}

int sd_drafter_observe_output(struct sd_drafter *d, int32_t tok, struct sd_err *err) {
    if (!d) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "drafter: NULL handle");
    return d->vt->observe_output(d, tok, err);
}

int sd_drafter_draft(struct sd_drafter *d, const struct sd_draft_params *p, struct sd_draft_tree *out,
                     struct sd_err *err) {
    if (!d) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "drafter: NULL handle");
    return d->vt->draft(d, p, out, err);
}

int sd_drafter_attach(struct sd_drafter *d, enum sd_draft_store which, const struct sd_sam *sam,
                      struct sd_err *err) {
    if (!d) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "drafter: NULL handle");
    return d->vt->attach(d, which, sam, err);
}
