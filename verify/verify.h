/*
 * verify/verify.h - lossless tree verification.
 *
 * A draft tree (draft/draft.h) below the last sampled token is flattened into
 * one batch: row 0 is the root (the sampled token, not yet in the cache),
 * row 1 + i is draft node i. Every row attends to the committed cache
 * [0, n_past) and to its own ancestors in the batch, at position
 * n_past + depth. Because the forward pass is batch-invariant, the logits of
 * each row are bit-identical to those plain decoding would compute after
 * the same path, so accepting while the model's own choice matches a child
 * gives exactly the plain decoding output.
 */
#ifndef SD_VERIFY_H
#define SD_VERIFY_H

#include <stdint.h>

#include "draft/draft.h"
#include "engine/sampler.h"
#include "graphs/forward.h"

/* Fill rows[0 .. 1 + n_nodes) for root token `root` and the first n_nodes
 * nodes of the tree (parents must precede children; n_nodes <= t->n).
 * Returns the row count. */
int32_t sd_verify_rows(const struct sd_draft_tree *t, int32_t n_nodes, int32_t root, int32_t n_past,
                       struct sd_row *rows);

/* Walk the tree with the model's choices. logits: [1 + n_nodes][n_vocab],
 * row order as sd_verify_rows. Greedy (sampler greedy or NULL): accept while
 * a child holds the argmax. Sampling: at each node, try its children in
 * order, accepting child c with probability p(c) and otherwise removing it
 * from p and renormalising (exact for a deterministic drafter); the token
 * drawn where no child is accepted ends the step.
 *   path[0 .. *n_acc)  accepted node indices (tree numbering)
 *   *next              the model's token after the last accepted node
 * probs is scratch [n_vocab] for sampling. The sampler records accepted
 * tokens (repetition penalty history). */
void sd_verify_accept(const struct sd_draft_tree *t, int32_t n_nodes, float *logits, int32_t n_vocab,
                      struct sd_sampler *smp, float *probs, int32_t *path, int32_t *n_acc, int32_t *next);

/* Move the accepted rows' K/V into consecutive slots after the root and
 * forget the rest of the batch. */
void sd_verify_commit(struct sd_kv_cache *kv, int32_t n_past, const int32_t *path, int32_t n_acc);

/*
 * Rejected-draft reuse (paper section 3.4). When verification rejects the
 * main path x_1..x_n at x_e, the rows after it still say what the model
 * predicts there: y_i, the argmax after x_1..x_{i-1}. The longest run
 * x_a..x_b (a > e) with y_i = x_i for every i in it agrees with the model
 * although it followed a wrong token (paper eq. 3): the draft was off by a
 * missing or a synonymous span, not wrong throughout. That run is kept and
 * offered again in the next steps' spare rows, the ones a static graph of L
 * rows would otherwise compute as padding (in steps that verify a draft at
 * all: a step with no draft runs the one-row head): as a chain below the root (the
 * rejected span was a synonym of the model's token), then, when the run
 * starts right after x_e, as x_e and the run below the root (the model's
 * token was missing from the draft: paper Table 2), then below each
 * main-path node in turn (each placement a guess at how many tokens come
 * before it). A run is dropped once a step accepts any of its
 * nodes (the drafter's stores take over from there), when a newer run
 * replaces it, or after SD_REUSE_MAX_AGE steps.
 *
 * Losslessness is untouched: these are draft rows like any other, and the
 * verifier accepts only what the model itself chooses.
 */
#define SD_REUSE_MAX 32
#define SD_REUSE_MAX_AGE 4

struct sd_reuse {
    int32_t tok[SD_REUSE_MAX]; /* the kept run */
    int32_t n;                 /* its length; 0: nothing kept */
    int32_t lead;              /* x_e when the run starts right after it, else -1 */
    int32_t age;               /* steps it has been offered in */
    int32_t first_node;        /* tree index of the first node it added in the current step (-1: none) */
    int64_t n_offered;         /* draft rows it filled, over the generation */
    int64_t n_accepted;        /* of those, rows the verifier accepted */
};

void sd_reuse_reset(struct sd_reuse *r);

/* Fill spare rows of the drafted tree t (up to p->budget nodes) with the
 * kept run; nothing when t is empty. Either way the run ages a step.
 * Returns the number of nodes added. */
int32_t sd_reuse_fill(struct sd_reuse *r, struct sd_draft_tree *t, const struct sd_draft_params *p);

/* After sd_verify_accept on the first n_nodes nodes of t, with the same
 * logits and the accepted path: account for the offered nodes, age or drop
 * the kept run, and keep a new run from the rejected main path. */
void sd_reuse_update(struct sd_reuse *r, const struct sd_draft_tree *t, int32_t n_nodes, const float *logits,
                     int32_t n_vocab, const int32_t *path, int32_t n_acc);

#endif
