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

#endif
