/*
 * draft/tree.c - the draft tree: nodes added chain by chain, with shared
 * prefixes merged, under the depth, branching and node budgets (draft.h).
 *
 * The tree is at most a few dozen nodes (the verifier's L2 rows), so a
 * child lookup walks the parent's sibling list; that is a handful of
 * compares and needs no hash.
 */
#include <string.h>

#include "draft/draft.h"

struct sd_draft_params sd_draft_default_params(void) {
    struct sd_draft_params p = {
        .max_depth = 16,
        .max_branch = 4,
        .budget = 32,
        .branch_levels = 3,
        .min_match = 1,
        .pld_max_ngram = 3,
        .pld_min_ngram = 1,
        .calib_min_match = 2,
        .calib_lead = -1,
        .follow = true,
    };
    return p;
}

int sd_draft_tree_init(struct sd_draft_tree *t, int32_t cap, struct sd_err *err) {
    if (!t || cap < 1) return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "draft tree: capacity %d < 1", (int)cap);
    memset(t, 0, sizeof *t);
    size_t n = (size_t)cap;
    t->tok = sd_malloc(n * sizeof *t->tok);
    t->parent = sd_malloc(n * sizeof *t->parent);
    t->depth = sd_malloc(n * sizeof *t->depth);
    t->first_child = sd_malloc(n * sizeof *t->first_child);
    t->next_sibling = sd_malloc(n * sizeof *t->next_sibling);
    if (!t->tok || !t->parent || !t->depth || !t->first_child || !t->next_sibling) {
        sd_draft_tree_free(t);
        return sd_err_set(err, SDNPU_ERR_OOM, "draft tree: out of memory for %d nodes", (int)cap);
    }
    t->cap = cap;
    sd_draft_tree_clear(t);
    return SDNPU_OK;
}

void sd_draft_tree_free(struct sd_draft_tree *t) {
    if (!t) return;
    sd_free(t->tok);
    sd_free(t->parent);
    sd_free(t->depth);
    sd_free(t->first_child);
    sd_free(t->next_sibling);
    memset(t, 0, sizeof *t);
}

void sd_draft_tree_clear(struct sd_draft_tree *t) {
    t->n = 0;
    t->n_main = 0;
    t->root_child = -1;
    t->main_store = SD_DRAFT_STORE_NONE;
    t->main_match = 0;
}

static inline int32_t first_child_of(const struct sd_draft_tree *t, int32_t parent) {
    return parent < 0 ? t->root_child : t->first_child[parent];
}

int32_t sd_draft_tree_child(const struct sd_draft_tree *t, int32_t parent, int32_t tok) {
    for (int32_t c = first_child_of(t, parent); c >= 0; c = t->next_sibling[c])
        if (t->tok[c] == tok) return c;
    return -1;
}

int32_t sd_draft_tree_n_children(const struct sd_draft_tree *t, int32_t parent) {
    int32_t n = 0;
    for (int32_t c = first_child_of(t, parent); c >= 0; c = t->next_sibling[c])
        n++;
    return n;
}

int32_t sd_draft_tree_add(struct sd_draft_tree *t, int32_t parent, int32_t tok,
                          const struct sd_draft_params *p) {
    if (parent < -1 || parent >= t->n) return -1;
    int32_t last = -1, n_children = 0;
    for (int32_t c = first_child_of(t, parent); c >= 0; c = t->next_sibling[c]) {
        if (t->tok[c] == tok) return c;
        last = c;
        n_children++;
    }
    int32_t depth = parent < 0 ? 1 : t->depth[parent] + 1;
    int32_t budget = SD_MIN(t->cap, p->budget);
    if (t->n >= budget || depth > p->max_depth || n_children >= p->max_branch) return -1;
    int32_t i = t->n++;
    t->tok[i] = tok;
    t->parent[i] = parent;
    t->depth[i] = depth;
    t->first_child[i] = -1;
    t->next_sibling[i] = -1;
    /* Appending at the tail keeps siblings in insertion (rank) order. */
    if (last >= 0)
        t->next_sibling[last] = i;
    else if (parent < 0)
        t->root_child = i;
    else
        t->first_child[parent] = i;
    return i;
}

int32_t sd_draft_tree_add_chain(struct sd_draft_tree *t, int32_t parent, const int32_t *tok, int32_t n,
                                const struct sd_draft_params *p) {
    int32_t placed = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t node = sd_draft_tree_add(t, parent, tok[i], p);
        if (node < 0) break;
        parent = node;
        placed++;
    }
    return placed;
}

int sd_draft_tree_validate(const struct sd_draft_tree *t, const struct sd_draft_params *p,
                           struct sd_err *err) {
    if (t->n < 0 || t->n > t->cap)
        return sd_err_set(err, SDNPU_ERR_STATE, "draft tree: n %d outside [0, %d]", (int)t->n, (int)t->cap);
    if (t->n_main < 0 || t->n_main > t->n)
        return sd_err_set(err, SDNPU_ERR_STATE, "draft tree: main path %d longer than the tree (%d)",
                          (int)t->n_main, (int)t->n);
    if (p && t->n > p->budget)
        return sd_err_set(err, SDNPU_ERR_STATE, "draft tree: %d nodes over the budget %d", (int)t->n,
                          (int)p->budget);
    for (int32_t i = 0; i < t->n; i++) {
        int32_t par = t->parent[i];
        if (par < -1 || par >= i)
            return sd_err_set(err, SDNPU_ERR_STATE, "draft tree: node %d has parent %d (must be in [-1, %d))",
                              (int)i, (int)par, (int)i);
        int32_t want = par < 0 ? 1 : t->depth[par] + 1;
        if (t->depth[i] != want)
            return sd_err_set(err, SDNPU_ERR_STATE, "draft tree: node %d has depth %d, parent says %d",
                              (int)i, (int)t->depth[i], (int)want);
        if (p && t->depth[i] > p->max_depth)
            return sd_err_set(err, SDNPU_ERR_STATE, "draft tree: node %d at depth %d beyond %d", (int)i,
                              (int)t->depth[i], (int)p->max_depth);
        if (i < t->n_main && par != i - 1)
            return sd_err_set(err, SDNPU_ERR_STATE, "draft tree: main-path node %d has parent %d", (int)i,
                              (int)par);
        /* Siblings are the earlier nodes with the same parent: O(n^2) on a
         * few dozen nodes, and independent of the private child links. */
        int32_t n_sib = 1;
        for (int32_t j = 0; j < i; j++) {
            if (t->parent[j] != par) continue;
            n_sib++;
            if (t->tok[j] == t->tok[i])
                return sd_err_set(err, SDNPU_ERR_STATE,
                                  "draft tree: nodes %d and %d are siblings with token %d", (int)j, (int)i,
                                  (int)t->tok[i]);
        }
        if (p && n_sib > p->max_branch)
            return sd_err_set(err, SDNPU_ERR_STATE, "draft tree: parent %d has more than %d children",
                              (int)par, (int)p->max_branch);
    }
    return SDNPU_OK;
}
