/*
 * calib/calib.h - in-context distribution calibration (DESIGN.md item 3,
 * paper section 3.3, Figure 9): drafts in the model's own words, from what
 * prefill computes anyway.
 *
 * Documents are written by people; the model answers in its own words. A
 * draft copied from the context ("Clinton 's security detail has arrived")
 * is rejected where the model would say it differently ("Clinton arrived
 * at"). Prefill runs the model over every context position, so its
 * next-token predictions there say how the model continues each context
 * token. Calibration turns them into a store of model-aligned sequences:
 *
 *   collect  per prefilled position, the top_k next tokens and their
 *            probabilities (never [n][n_vocab] logits: see "Cost" below);
 *   sample   at each position whose likely successors differ from what the
 *            context says next, the successors with probability >= min_prob;
 *   search   each successor t is looked up in the context automaton (the
 *            occurrence of t with the longest left context in common with
 *            the sequence so far, most recent first), and the search goes on
 *            from that occurrence's own predictions, depth first, within
 *            max_depth tokens and node_budget nodes per position;
 *   store    each root-to-leaf path, keyed by the `prefix` context tokens
 *            that end at the position, becomes one record of a suffix
 *            automaton (draft.h's SD_DRAFT_STORE_CALIB). Siblings are stored
 *            least likely first, so the most recent record under a key (the
 *            one drafters copy from) is the model's most likely path.
 *
 * Cost. Sampling needs the model's distribution at every context position,
 * but the output projection (Gemma 3: 262,144 x 640) for every row would
 * cost more than prefill's layers. Calibration asks the runtime for logits
 * over the context's own distinct tokens only (sched/runtime.h's subset
 * sink): those are the tokens the search can continue from, and a few
 * thousand rows of the projection cost a few per cent of prefill. What it
 * gives up: a successor outside the context is never sampled (the search
 * could not continue from it anyway), and the probabilities are normalised
 * over the subset, so they are upper bounds of the model's (exact when the
 * mass outside the subset is small, which is when the context predicts
 * the model well). `sdnpu bench calib` measures both.
 *
 * Calibration changes drafts only: verification keeps the output
 * bit-identical to plain decoding whatever the store holds.
 *
 * Threading: a calibrator belongs to one session's thread.
 */
#ifndef SD_CALIB_H
#define SD_CALIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "draft/draft.h"

/* Deepest sequence the search builds after its root. */
#define SD_CALIB_MAX_DEPTH 32
/* Most successors kept per position. */
#define SD_CALIB_MAX_K 8

struct sd_calib_params {
    int32_t top_k;       /* successors kept per position, <= SD_CALIB_MAX_K (3) */
    float min_prob;      /* a successor is sampled with at least this probability (0.2) */
    int32_t max_depth;   /* tokens after the root in one sequence, <= SD_CALIB_MAX_DEPTH (8) */
    int32_t node_budget; /* search nodes per root position (12) */
    int32_t prefix;      /* context tokens ending at the root that key its sequences (3) */
    int32_t max_store;   /* the store holds at most this many tokens per prefilled position (24) */
};
struct sd_calib_params sd_calib_default_params(void);

struct sd_calib_stats {
    int32_t n_positions; /* prefilled positions with predictions */
    int32_t n_subset;    /* distinct context tokens (the subset head's rows) */
    int32_t n_roots;     /* positions whose sampled successors differ from the context */
    int32_t n_records;   /* sequences stored */
    int64_t n_tokens;    /* tokens stored, keys and separators included */
    int64_t n_nodes;     /* search nodes visited */
    bool truncated;      /* the store bound stopped the build early */
    size_t bytes;        /* memory held: table, context automaton and the store */
    double collect_ms;   /* time in the sink (normalising, top_k), not the subset head's run */
    double build_ms;     /* sample + search + store + freeze */
};

struct sd_calib;

/* p NULL: the defaults. Parameters out of range are refused with
 * SDNPU_ERR_INVALID_ARG naming the field. */
int sd_calib_create(const struct sd_calib_params *p, struct sd_calib **out, struct sd_err *err);
void sd_calib_free(struct sd_calib *c); /* NULL is fine */

/* Start calibrating a request. The context is old[0..n_old) (tokens already
 * in the session, no predictions) followed by prompt[0..n_prompt) (the
 * tokens about to be prefilled: predictions come for these). Copies both,
 * computes the subset (the prompt's distinct tokens, ascending) and clears
 * the table. SDNPU_ERR_INVALID_ARG for a negative token. */
int sd_calib_begin(struct sd_calib *c, const int32_t *old, int32_t n_old, const int32_t *prompt, int32_t n_prompt,
                   struct sd_err *err);
/* Start calibrating a request on a new context ctx[0..n) whose first
 * n_kept tokens an earlier begin on a new context (n_old 0) already
 * calibrated (prefix reuse: those positions are not prefilled again). Their
 * predictions are kept as collected then; the sink's positions now count
 * from n_kept, and the subset is the whole context's distinct tokens, as a
 * fresh begin's would be. SDNPU_ERR_INVALID_ARG if the earlier context does
 * not begin with ctx[0..n_kept). */
int sd_calib_begin_kept(struct sd_calib *c, const int32_t *ctx, int32_t n_kept, int32_t n, struct sd_err *err);
/* The subset begin computed: [*n] distinct token ids, ascending. */
const int32_t *sd_calib_subset(const struct sd_calib *c, int32_t *n);

/* The subset sink's function (sched/runtime.h's struct sd_subset_sink):
 * logits [n][n_subset] of prompt positions pos0 .. pos0+n-1. Keeps each
 * position's top_k tokens with their probabilities, normalised over the
 * subset. Returns false (stopping prefill) only for rows outside the
 * prompt. */
bool sd_calib_collect(void *calib, int32_t pos0, int32_t n, const float *logits);
/* Set prompt position pos's predictions by hand (tests): k tokens, most
 * likely first, with their probabilities. */
int sd_calib_set(struct sd_calib *c, int32_t pos, const int32_t *tok, const float *prob, int32_t k,
                 struct sd_err *err);

/* Prompt position pos's predictions as collected or set: up to top_k
 * tokens, most likely first, and their probabilities. Returns how many
 * (0: none, or pos out of range). */
int32_t sd_calib_get(const struct sd_calib *c, int32_t pos, int32_t *tok, float *prob);

/* Sample, search and store: the calibrated sequences go into store
 * (cleared first, then frozen). The store may be attached to drafters as
 * SD_DRAFT_STORE_CALIB. Bounded by the parameters: at most
 * n_prompt * max_store tokens, n_prompt * node_budget search nodes. */
int sd_calib_build(struct sd_calib *c, struct sd_sam *store, struct sd_err *err);

struct sd_calib_stats sd_calib_stats(const struct sd_calib *c);

#endif /* SD_CALIB_H */
