/* verify/verify.c - tree batches, acceptance, KV compaction. */
#include "verify/verify.h"

#include <string.h>

int32_t sd_verify_rows(const struct sd_draft_tree *t, int32_t n_nodes, int32_t root, int32_t n_past,
                       struct sd_row *rows) {
    memset(&rows[0], 0, sizeof rows[0]);
    rows[0].token = root;
    rows[0].pos = n_past;
    rows[0].slot = n_past;
    rows[0].n_prefix = n_past;
    rows[0].anc[0] = 1;
    for (int32_t i = 0; i < n_nodes; i++) {
        struct sd_row *r = &rows[1 + i];
        int32_t p = t->parent[i];
        /* A node inherits its parent's ancestor set (the root for top-level
         * nodes) and adds itself. */
        memcpy(r->anc, rows[p < 0 ? 0 : 1 + p].anc, sizeof r->anc);
        r->anc[(1 + i) >> 6] |= 1ull << ((1 + i) & 63);
        r->token = t->tok[i];
        r->pos = n_past + t->depth[i];
        r->slot = n_past + 1 + i;
        r->n_prefix = n_past;
    }
    return 1 + n_nodes;
}

/* Children of a node (-1 = the root) among the first n_nodes, in order. */
static int32_t first_child(const struct sd_draft_tree *t, int32_t n_nodes, int32_t parent, int32_t from) {
    for (int32_t i = from; i < n_nodes; i++)
        if (t->parent[i] == parent) return i;
    return -1;
}

void sd_verify_accept(const struct sd_draft_tree *t, int32_t n_nodes, float *logits, const int32_t *argmax,
                      int32_t n_vocab, struct sd_sampler *smp, float *probs, int32_t *path, int32_t *n_acc,
                      int32_t *next) {
    bool greedy = !smp || sd_sampler_is_greedy(smp);
    int32_t node = -1, n = 0;
    for (;;) {
        float *l = logits + (size_t)(node + 1) * (size_t)n_vocab;
        int32_t chosen = -1, tok;
        if (greedy) {
            /* A greedy sampler's choice is sd_argmax (sd_sampler_is_greedy). */
            tok = argmax ? argmax[node + 1] : smp ? sd_sampler_sample(smp, l) : sd_argmax(l, n_vocab);
            if (argmax && smp && !sd_sampler_allows(smp, tok)) {
                *next = -1;
                break;
            }
            for (int32_t c = first_child(t, n_nodes, node, 0); c >= 0; c = first_child(t, n_nodes, node, c + 1))
                if (t->tok[c] == tok) {
                    chosen = c;
                    break;
                }
        } else {
            sd_sampler_probs(smp, l, probs);
            tok = -1;
            for (int32_t c = first_child(t, n_nodes, node, 0); c >= 0; c = first_child(t, n_nodes, node, c + 1)) {
                /* Accept the draft x with probability p(x) / sum(p): the
                 * residual after earlier rejections. */
                double sum = 0;
                for (int32_t v = 0; v < n_vocab; v++) sum += probs[v];
                float px = probs[t->tok[c]];
                if (sum > 0 && sd_sampler_uniform(smp) * sum < px) {
                    chosen = c;
                    tok = t->tok[c];
                    break;
                }
                probs[t->tok[c]] = 0.0f;
            }
            if (chosen < 0) tok = sd_sampler_draw(smp, probs, n_vocab);
        }
        if (smp) sd_sampler_accept(smp, tok);
        if (chosen < 0) {
            *next = tok;
            break;
        }
        path[n++] = chosen;
        node = chosen;
    }
    *n_acc = n;
}

void sd_verify_commit(struct sd_rt *rt, int32_t n_past, const int32_t *path, int32_t n_acc) {
    for (int32_t i = 0; i < n_acc; i++) sd_rt_kv_move(rt, n_past + 1 + path[i], n_past + 1 + i);
    sd_rt_kv_truncate(rt, n_past + 1 + n_acc);
}

/* ---------------------------------------------------- rejected-draft reuse */

void sd_reuse_reset(struct sd_reuse *r) {
    memset(r, 0, sizeof *r);
    r->first_node = -1;
    r->lead = -1;
}

int32_t sd_reuse_fill(struct sd_reuse *r, struct sd_draft_tree *t, const struct sd_draft_params *p) {
    r->first_node = -1;
    if (r->n == 0) return 0;
    /* Only rows a step computes anyway: a step with no draft runs the
     * one-row head (sched/runtime.c), and reuse rows there would make it
     * the L-row head, about three times the cost on a CPU. */
    if (t->n == 0) {
        r->age++;
        return 0;
    }
    /* Extra branches are what the spare rows are for: the branching limit
     * of the drafter's own tree does not bound them. */
    struct sd_draft_params q = *p;
    q.max_branch = SD_MAX(q.max_branch, SD_DRAFT_MAX_DEPTH);
    const int32_t n0 = t->n;
    /* The run below the root; x_e and the run below the root; then the run
     * below main-path node k = 0, 1, ... */
    int32_t with_lead[SD_REUSE_MAX + 1];
    with_lead[0] = r->lead;
    memcpy(with_lead + 1, r->tok, (size_t)r->n * sizeof(int32_t));
    for (int32_t k = -2; k < t->n_main && t->n < SD_MIN(q.budget, t->cap); k++) {
        if (k == -1 && r->lead < 0) continue;
        const int32_t before = t->n;
        if (k == -1) {
            sd_draft_tree_add_chain(t, -1, with_lead, r->n + 1, &q);
        } else {
            sd_draft_tree_add_chain(t, k < 0 ? -1 : k, r->tok, r->n, &q);
        }
        if (r->first_node < 0 && t->n > before) r->first_node = before;
    }
    r->age++;
    r->n_offered += t->n - n0;
    return t->n - n0;
}

void sd_reuse_update(struct sd_reuse *r, const struct sd_draft_tree *t, int32_t n_nodes, const float *logits,
                     const int32_t *argmax, int32_t n_vocab, const int32_t *path, int32_t n_acc) {
    /* Nodes from first_node on were added by the reuse fill. */
    int32_t used = 0;
    for (int32_t i = 0; i < n_acc; i++) used += r->first_node >= 0 && path[i] >= r->first_node;
    r->n_accepted += used;
    if (used > 0 || r->age >= SD_REUSE_MAX_AGE) {
        r->n = 0;
        r->lead = -1;
    }
    r->first_node = -1;
    /* Where the accepted path left the main path: e. */
    const int32_t n_main = SD_MIN(t->n_main, n_nodes);
    int32_t e = 0;
    while (e < n_acc && e < n_main && path[e] == e) e++;
    if (e >= n_main) return; /* the main path was accepted whole */
    /* Node i of the main path has row 1 + i; the model's choice after
     * node i - 1 (the root for i = 0) is the argmax of row i. */
    int32_t best_a = 0, best_len = 0, a = -1;
    for (int32_t i = e + 1; i < n_main; i++) {
        const int32_t y = argmax ? argmax[i] : sd_argmax(logits + (size_t)i * (size_t)n_vocab, n_vocab);
        if (y == t->tok[i]) {
            if (a < 0) a = i;
            if (i - a + 1 > best_len) {
                best_len = i - a + 1;
                best_a = a;
            }
        } else {
            a = -1;
        }
    }
    if (best_len == 0) return;
    r->n = SD_MIN(best_len, SD_REUSE_MAX);
    memcpy(r->tok, t->tok + best_a, (size_t)r->n * sizeof(int32_t));
    r->lead = best_a == e + 1 ? t->tok[e] : -1;
    r->age = 0;
}
