/*
 * calib/calib.c - in-context distribution calibration (calib/calib.h).
 *
 * The search from one root position builds a small tree best-first: the
 * node budget goes to the most probable paths (by the product of the
 * successors' probabilities along them), so the model's likeliest
 * continuation is always complete before any unlikely sibling takes a
 * node. (A plain depth-first search spends a budget on the deepest
 * alternatives first, the least likely ones.) The tree is then stored
 * depth first, each node's children least likely first, so that under
 * every node the most recent record follows its likeliest child: that is
 * the record a drafter copies from.
 */
#include "calib/calib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Most nodes one root's search may hold. */
#define NODE_MAX 64

struct sd_calib {
    struct sd_calib_params p;
    int32_t *ctx;    /* [n_ctx] old context then the prompt */
    int32_t n_ctx, n_old, cap_ctx;
    int32_t n_kept;  /* positions whose predictions an earlier request collected (sd_calib_begin_kept) */
    int32_t *subset; /* [n_subset] the prompt's distinct tokens, ascending */
    int32_t n_subset;
    /* Predictions of prompt position q (context position n_old + q): the
     * next token's top_k candidates, most likely first. */
    int32_t *pred_tok;  /* [n_prompt][top_k] */
    float *pred_prob;   /* [n_prompt][top_k] */
    uint8_t *pred_n;    /* [n_prompt] candidates held; 0 = not collected */
    struct sd_sam *ctx_sam; /* the context automaton the search looks successors up in */
    struct sd_calib_stats st;
};

/* One node of a root's search tree. */
struct node {
    int32_t tok, parent, depth;
    float prob;               /* the path's probability from the root */
    int32_t at;               /* context position whose predictions continue it, or -1 */
    struct sd_sam_cursor cur; /* the context automaton after root key + path */
    bool has_child;
};

/* A root's search: the tree, the frontier of candidates, and the records
 * waiting to be stored. */
struct search {
    struct sd_calib *c;
    struct sd_sam *store;
    struct node n[NODE_MAX];
    int32_t n_nodes;
    struct node cand[NODE_MAX * SD_CALIB_MAX_K + SD_CALIB_MAX_K];
    int32_t n_cand;
    int32_t rec[SD_CALIB_MAX_DEPTH + 64]; /* key + path of one record */
    int32_t key_n;
    int64_t token_cap;
    struct sd_err *err;
};

struct sd_calib_params sd_calib_default_params(void) {
    return (struct sd_calib_params){
        .top_k = 3, .min_prob = 0.2f, .max_depth = 8, .node_budget = 12, .prefix = 3, .max_store = 24};
}

static int check_params(const struct sd_calib_params *p, struct sd_err *err) {
    if (p->top_k < 1 || p->top_k > SD_CALIB_MAX_K)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calibration: top_k %d must be 1..%d", p->top_k, SD_CALIB_MAX_K);
    if (!(p->min_prob >= 0.0f && p->min_prob <= 1.0f))
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calibration: min_prob %g must be in [0, 1]", (double)p->min_prob);
    if (p->max_depth < 1 || p->max_depth > SD_CALIB_MAX_DEPTH)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calibration: max_depth %d must be 1..%d", p->max_depth,
                          SD_CALIB_MAX_DEPTH);
    if (p->node_budget < 1 || p->node_budget > NODE_MAX)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calibration: node_budget %d must be 1..%d", p->node_budget,
                          NODE_MAX);
    if (p->prefix < 1 || p->prefix > 64)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calibration: prefix %d must be 1..64", p->prefix);
    if (p->max_store < 1)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calibration: max_store %d must be >= 1", p->max_store);
    return SDNPU_OK;
}

int sd_calib_create(const struct sd_calib_params *p, struct sd_calib **out, struct sd_err *err) {
    *out = NULL;
    struct sd_calib_params q = p ? *p : sd_calib_default_params();
    int rc = check_params(&q, err);
    if (rc) return rc;
    struct sd_calib *c = sd_calloc(1, sizeof *c);
    if (!c) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for calibration");
    c->p = q;
    if ((rc = sd_sam_create(1024, &c->ctx_sam, err))) {
        sd_free(c);
        return rc;
    }
    *out = c;
    return SDNPU_OK;
}

static void free_arrays(struct sd_calib *c) {
    sd_free(c->ctx);
    sd_free(c->subset);
    sd_free(c->pred_tok);
    sd_free(c->pred_prob);
    sd_free(c->pred_n);
    c->ctx = c->subset = c->pred_tok = NULL;
    c->pred_prob = NULL;
    c->pred_n = NULL;
    c->cap_ctx = c->n_ctx = c->n_old = c->n_subset = 0;
}

void sd_calib_free(struct sd_calib *c) {
    if (!c) return;
    free_arrays(c);
    sd_sam_free(c->ctx_sam);
    sd_free(c);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The prompt's distinct tokens, ascending: sort a copy, drop repeats. */
static void make_subset(struct sd_calib *c, const int32_t *prompt, int32_t n) {
    if (n > 0) memcpy(c->subset, prompt, (size_t)n * sizeof *prompt);
    qsort(c->subset, (size_t)n, sizeof *c->subset, cmp_i32);
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++)
        if (k == 0 || c->subset[k - 1] != c->subset[i]) c->subset[k++] = c->subset[i];
    c->n_subset = k;
}

/* Room for n context tokens and their predictions; the first keep
 * positions' tokens and predictions survive a growth. */
static int reserve(struct sd_calib *c, int32_t n, int32_t keep, struct sd_err *err) {
    if (n <= c->cap_ctx && c->ctx) return SDNPU_OK; /* the first begin allocates, even for an empty context */
    int32_t cap = SD_MAX(n, 256), k = c->p.top_k;
    int32_t *ctx = sd_malloc((size_t)cap * sizeof *ctx), *subset = sd_malloc((size_t)cap * sizeof *subset);
    int32_t *ptok = sd_malloc((size_t)cap * (size_t)k * sizeof *ptok);
    float *pprob = sd_malloc((size_t)cap * (size_t)k * sizeof *pprob);
    uint8_t *pn = sd_malloc((size_t)cap);
    if (!ctx || !subset || !ptok || !pprob || !pn) {
        sd_free(ctx), sd_free(subset), sd_free(ptok), sd_free(pprob), sd_free(pn);
        return sd_err_set(err, SDNPU_ERR_OOM, "calibration: out of memory for %d context tokens", n);
    }
    if (keep > 0) {
        memcpy(ctx, c->ctx, (size_t)keep * sizeof *ctx);
        memcpy(ptok, c->pred_tok, (size_t)keep * (size_t)k * sizeof *ptok);
        memcpy(pprob, c->pred_prob, (size_t)keep * (size_t)k * sizeof *pprob);
        memcpy(pn, c->pred_n, (size_t)keep);
    }
    free_arrays(c);
    c->ctx = ctx, c->subset = subset, c->pred_tok = ptok, c->pred_prob = pprob, c->pred_n = pn;
    c->cap_ctx = cap;
    return SDNPU_OK;
}

int sd_calib_begin(struct sd_calib *c, const int32_t *old, int32_t n_old, const int32_t *prompt, int32_t n_prompt,
                   struct sd_err *err) {
    if (!c || n_old < 0 || n_prompt < 0 || (n_old && !old) || (n_prompt && !prompt) || n_prompt > INT32_MAX - n_old)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calibration: bad context (%d + %d tokens)", n_old, n_prompt);
    for (int32_t i = 0; i < n_old + n_prompt; i++) {
        int32_t t = i < n_old ? old[i] : prompt[i - n_old];
        if (t < 0) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calibration: context token %d is negative (%d)", i, t);
    }
    int32_t n = n_old + n_prompt;
    int rc = reserve(c, n, 0, err);
    if (rc) return rc;
    if (n_old) memcpy(c->ctx, old, (size_t)n_old * sizeof *old);
    if (n_prompt) memcpy(c->ctx + n_old, prompt, (size_t)n_prompt * sizeof *prompt);
    c->n_ctx = n;
    c->n_old = n_old;
    c->n_kept = 0;
    memset(c->pred_n, 0, (size_t)c->cap_ctx);
    make_subset(c, prompt, n_prompt);
    memset(&c->st, 0, sizeof c->st);
    c->st.n_subset = c->n_subset;
    return SDNPU_OK;
}

int sd_calib_begin_kept(struct sd_calib *c, const int32_t *ctx, int32_t n_kept, int32_t n, struct sd_err *err) {
    if (!c || !ctx || n_kept < 0 || n < n_kept || !c->ctx || c->n_old != 0 || n_kept > c->n_ctx ||
        (n_kept && memcmp(c->ctx, ctx, (size_t)n_kept * sizeof *ctx)))
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG,
                          "calibration: the kept %d tokens are not the context calibrated before", n_kept);
    for (int32_t i = n_kept; i < n; i++)
        if (ctx[i] < 0) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calibration: context token %d is negative (%d)", i, ctx[i]);
    int rc = reserve(c, n, n_kept, err);
    if (rc) return rc;
    memcpy(c->ctx + n_kept, ctx + n_kept, (size_t)(n - n_kept) * sizeof *ctx);
    c->n_ctx = n;
    c->n_kept = n_kept;
    memset(c->pred_n + n_kept, 0, (size_t)(c->cap_ctx - n_kept));
    make_subset(c, ctx, n);
    memset(&c->st, 0, sizeof c->st);
    c->st.n_subset = c->n_subset;
    for (int32_t i = 0; i < n_kept; i++) c->st.n_positions += c->pred_n[i] > 0;
    return SDNPU_OK;
}

const int32_t *sd_calib_subset(const struct sd_calib *c, int32_t *n) {
    *n = c ? c->n_subset : 0;
    return c ? c->subset : NULL;
}

/* One row of subset logits: the top_k by logit (ties: the lower token,
 * which comes first in the ascending subset), normalised over the row. */
static void collect_row(struct sd_calib *c, int32_t q, const float *lg) {
    int32_t k = c->p.top_k, n = 0, idx[SD_CALIB_MAX_K];
    float mx = -INFINITY;
    for (int32_t j = 0; j < c->n_subset; j++) {
        float v = lg[j];
        if (v > mx) mx = v;
        if (n == k && !(v > lg[idx[n - 1]])) continue;
        int32_t at = n < k ? n++ : n - 1;
        while (at > 0 && v > lg[idx[at - 1]]) {
            idx[at] = idx[at - 1];
            at--;
        }
        idx[at] = j;
    }
    double z = 0.0;
    for (int32_t j = 0; j < c->n_subset; j++) z += exp((double)(lg[j] - mx));
    int32_t *tok = c->pred_tok + (size_t)q * (size_t)k;
    float *prob = c->pred_prob + (size_t)q * (size_t)k;
    for (int32_t i = 0; i < n; i++) {
        tok[i] = c->subset[idx[i]];
        prob[i] = (float)(exp((double)(lg[idx[i]] - mx)) / z);
    }
    c->pred_n[q] = (uint8_t)n;
}

bool sd_calib_collect(void *calib, int32_t pos0, int32_t n, const float *logits) {
    struct sd_calib *c = calib;
    int32_t n_prompt = c->n_ctx - c->n_old;
    pos0 += c->n_kept;
    if (pos0 < c->n_kept || n < 0 || n > n_prompt - pos0) return false;
    double t0 = sd_time_ms();
    for (int32_t r = 0; r < n; r++) collect_row(c, pos0 + r, logits + (size_t)r * (size_t)c->n_subset);
    c->st.n_positions += n;
    c->st.collect_ms += sd_time_ms() - t0;
    return true;
}

int sd_calib_set(struct sd_calib *c, int32_t pos, const int32_t *tok, const float *prob, int32_t k,
                 struct sd_err *err) {
    if (!c || pos < 0 || pos >= c->n_ctx - c->n_old || k < 0 || (k && (!tok || !prob)))
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calibration: no prompt position %d", pos);
    k = SD_MIN(k, c->p.top_k);
    for (int32_t i = 0; i < k; i++) {
        if (tok[i] < 0) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calibration: token %d is negative", tok[i]);
        c->pred_tok[(size_t)pos * (size_t)c->p.top_k + (size_t)i] = tok[i];
        c->pred_prob[(size_t)pos * (size_t)c->p.top_k + (size_t)i] = prob[i];
    }
    if (c->pred_n[pos] == 0 && k > 0) c->st.n_positions++;
    c->pred_n[pos] = (uint8_t)k;
    return SDNPU_OK;
}

int32_t sd_calib_get(const struct sd_calib *c, int32_t pos, int32_t *tok, float *prob) {
    if (!c || pos < 0 || pos >= c->n_ctx - c->n_old) return 0;
    size_t k = (size_t)c->p.top_k;
    int32_t n = c->pred_n[pos];
    memcpy(tok, c->pred_tok + (size_t)pos * k, (size_t)n * sizeof *tok);
    memcpy(prob, c->pred_prob + (size_t)pos * k, (size_t)n * sizeof *prob);
    return n;
}

/* ------------------------------------------------------------ the search */

/* The successors sampled at context position i: its candidates with
 * probability >= min_prob, most likely first. 0 where i has none. */
static int32_t sampled(const struct sd_calib *c, int32_t i, const int32_t **tok, const float **prob) {
    if (i < c->n_old || i >= c->n_ctx) return 0;
    size_t q = (size_t)(i - c->n_old), k = (size_t)c->p.top_k;
    *tok = c->pred_tok + q * k;
    *prob = c->pred_prob + q * k;
    int32_t n = 0;
    while (n < c->pred_n[q] && (*prob)[n] >= c->p.min_prob) n++;
    return n;
}

/* A root is worth searching when the model would go somewhere the context
 * does not: a sampled successor other than the context's next token (the
 * context store drafts that one already). The prompt's last position, the
 * start of the response, always is. */
static bool diverges(const struct sd_calib *c, int32_t i) {
    const int32_t *tok;
    const float *prob;
    int32_t n = sampled(c, i, &tok, &prob);
    if (n == 0) return false;
    if (i + 1 >= c->n_ctx) return true;
    for (int32_t a = 0; a < n; a++)
        if (tok[a] != c->ctx[i + 1]) return true;
    return false;
}

/* The children of node `parent` (-1: the root, continuing from position
 * at with cursor cur) join the frontier. */
static void push_children(struct search *s, int32_t parent, int32_t at, struct sd_sam_cursor cur, float prob,
                          int32_t depth) {
    const struct sd_calib *c = s->c;
    if (depth >= c->p.max_depth) return;
    const int32_t *tok;
    const float *pr;
    int32_t n = sampled(c, at, &tok, &pr);
    for (int32_t a = 0; a < n; a++) {
        struct node *x = &s->cand[s->n_cand++];
        *x = (struct node){tok[a], parent, depth + 1, prob * pr[a], -1, cur, false};
    }
}

/* Take the most probable frontier candidate into the tree and look its
 * token up in the context: the occurrence sharing the longest left context
 * with the key and path (the automaton's cursor), the most recent of them.
 * Its predictions continue the path. */
static void take_best(struct search *s) {
    int32_t b = 0;
    for (int32_t i = 1; i < s->n_cand; i++)
        if (s->cand[i].prob > s->cand[b].prob) b = i;
    struct node x = s->cand[b];
    s->cand[b] = s->cand[--s->n_cand];
    sd_sam_cursor_advance(s->c->ctx_sam, &x.cur, x.tok);
    x.at = x.cur.len > 0 ? sd_sam_last_end(s->c->ctx_sam, x.cur.state) : -1;
    int32_t id = s->n_nodes++;
    s->n[id] = x;
    if (x.parent >= 0) s->n[x.parent].has_child = true;
    push_children(s, id, x.at, x.cur, x.prob, x.depth);
}

/* One record: the key, the path from the root to node v, a separator. */
static int emit(struct search *s, int32_t v) {
    int32_t d = s->n[v].depth;
    for (int32_t u = v; u >= 0; u = s->n[u].parent) s->rec[s->key_n + s->n[u].depth - 1] = s->n[u].tok;
    int32_t len = s->key_n + d;
    if (s->c->st.n_tokens + len + 1 > s->token_cap) {
        s->c->st.truncated = true;
        return SDNPU_ERR_CONTEXT_FULL; /* the store is full: stop building, keep what is in */
    }
    int rc = sd_sam_append_n(s->store, s->rec, (size_t)len, s->err);
    if (!rc) rc = sd_sam_append(s->store, SD_SAM_SEP, NULL, s->err);
    if (rc) return rc;
    s->c->st.n_tokens += len + 1;
    s->c->st.n_records++;
    return SDNPU_OK;
}

/* Store the subtree below v (-1: the root) depth first, children least
 * likely first, a record per leaf. */
static int store_below(struct search *s, int32_t v) {
    int32_t kids[SD_CALIB_MAX_K], n = 0;
    for (int32_t i = 0; i < s->n_nodes && n < SD_CALIB_MAX_K; i++)
        if (s->n[i].parent == v) {
            int32_t at = n++;
            while (at > 0 && s->n[kids[at - 1]].prob < s->n[i].prob) {
                kids[at] = kids[at - 1];
                at--;
            }
            kids[at] = i;
        }
    for (int32_t a = n - 1; a >= 0; a--) {
        int rc = s->n[kids[a]].has_child ? store_below(s, kids[a]) : emit(s, kids[a]);
        if (rc) return rc;
    }
    return SDNPU_OK;
}

/* Search from context position i (its cursor: the automaton after
 * ctx[0..i]) and store the tree. */
static int search_root(struct search *s, int32_t i, struct sd_sam_cursor cur) {
    const struct sd_calib *c = s->c;
    s->key_n = SD_MIN(c->p.prefix, i + 1);
    memcpy(s->rec, c->ctx + i + 1 - s->key_n, (size_t)s->key_n * sizeof *s->rec);
    s->n_nodes = s->n_cand = 0;
    push_children(s, -1, i, cur, 1.0f, 0);
    while (s->n_cand > 0 && s->n_nodes < c->p.node_budget) take_best(s);
    s->c->st.n_nodes += s->n_nodes;
    s->c->st.n_roots++;
    return store_below(s, -1);
}

int sd_calib_build(struct sd_calib *c, struct sd_sam *store, struct sd_err *err) {
    if (!c || !store) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calibration: NULL argument");
    double t0 = sd_time_ms();
    sd_sam_clear(store);
    sd_sam_clear(c->ctx_sam);
    int rc = sd_sam_append_n(c->ctx_sam, c->ctx, (size_t)c->n_ctx, err);
    if (!rc) rc = sd_sam_freeze(c->ctx_sam, err);
    if (rc) return rc;
    int32_t n_prompt = c->n_ctx - c->n_old;
    struct search *s = sd_malloc(sizeof *s);
    if (!s) return sd_err_set(err, SDNPU_ERR_OOM, "calibration: out of memory for the search");
    s->c = c;
    s->store = store;
    s->err = err;
    s->token_cap = (int64_t)n_prompt * c->p.max_store;
    c->st.n_roots = c->st.n_records = 0;
    c->st.n_tokens = c->st.n_nodes = 0;
    c->st.truncated = false;
    struct sd_sam_cursor cur;
    sd_sam_cursor_reset(&cur);
    for (int32_t i = 0; i < c->n_ctx && !rc; i++) {
        sd_sam_cursor_advance(c->ctx_sam, &cur, c->ctx[i]);
        if (i >= c->n_old && diverges(c, i)) rc = search_root(s, i, cur);
    }
    sd_free(s);
    if (rc == SDNPU_ERR_CONTEXT_FULL && c->st.truncated) {
        sd_err_clear(err);
        rc = SDNPU_OK;
    }
    if (!rc) rc = sd_sam_freeze(store, err);
    c->st.bytes = (size_t)c->cap_ctx * (2 * sizeof(int32_t) + (size_t)c->p.top_k * (sizeof(int32_t) + sizeof(float)) + 1) +
                  sd_sam_memory(c->ctx_sam) + sd_sam_memory(store);
    c->st.build_ms = sd_time_ms() - t0;
    return rc;
}

struct sd_calib_stats sd_calib_stats(const struct sd_calib *c) {
    struct sd_calib_stats z = {0};
    return c ? c->st : z;
}
