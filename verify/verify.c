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

void sd_verify_accept(const struct sd_draft_tree *t, int32_t n_nodes, float *logits, int32_t n_vocab,
                      struct sd_sampler *smp, float *probs, int32_t *path, int32_t *n_acc, int32_t *next) {
    bool greedy = !smp || sd_sampler_is_greedy(smp);
    int32_t node = -1, n = 0;
    for (;;) {
        float *l = logits + (size_t)(node + 1) * (size_t)n_vocab;
        int32_t chosen = -1, tok;
        if (greedy) {
            tok = smp ? sd_sampler_sample(smp, l) : sd_argmax(l, n_vocab);
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

void sd_verify_commit(struct sd_kv_cache *kv, int32_t n_past, const int32_t *path, int32_t n_acc) {
    for (int32_t i = 0; i < n_acc; i++) sd_kv_move(kv, n_past + 1 + path[i], n_past + 1 + i);
    sd_kv_truncate(kv, n_past + 1 + n_acc);
}
