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

#include <stdbool.h>
#include <stdint.h>

#include "draft/draft.h"
#include "sample/sampler.h"
#include "sched/runtime.h"

/* Rows of a verification batch: the root and up to 63 draft tokens. */
#define SD_VERIFY_MAX_ROWS 64

/* Fill rows[0 .. 1 + n_nodes) for root token `root` and the first n_nodes
 * nodes of the tree (parents must precede children; n_nodes <= t->n).
 * Returns the row count. */
int32_t sd_verify_rows(const struct sd_draft_tree *t, int32_t n_nodes, int32_t root, int32_t n_past,
                       struct sd_row *rows);

/* Walk the tree with the model's choices. logits: [1 + n_nodes][n_vocab],
 * row order as sd_verify_rows; argmax: NULL, or each row's sd_argmax as
 * the head took it (sd_rt_decode), which greedy walks then read instead of
 * the logits. Greedy (sampler greedy or NULL): accept while a child holds
 * the argmax. Sampling: at each node, try its children in
 * order, accepting child c with probability p(c) and otherwise removing it
 * from p and renormalising (exact for a deterministic drafter); the token
 * drawn where no child is accepted ends the step.
 *   path[0 .. *n_acc)  accepted node indices (tree numbering)
 *   *next              the model's token after the last accepted node; -1
 *                      in a greedy walk on argmax when the sampler's grammar
 *                      refuses the argmax there: the constrained choice needs
 *                      that row's logits, which the caller computes (sd_step)
 * probs is scratch [n_vocab] for sampling. The sampler records accepted
 * tokens (repetition penalty history). */
void sd_verify_accept(const struct sd_draft_tree *t, int32_t n_nodes, float *logits, const int32_t *argmax,
                      int32_t n_vocab, struct sd_sampler *smp, float *probs, int32_t *path, int32_t *n_acc,
                      int32_t *next);

/* Move the accepted rows' K/V into consecutive slots after the root and
 * forget the rest of the batch. */
void sd_verify_commit(struct sd_rt *rt, int32_t n_past, const int32_t *path, int32_t n_acc);

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
 * logits and argmax and the accepted path: account for the offered nodes, age or drop
 * the kept run, and keep a new run from the rejected main path. */
void sd_reuse_update(struct sd_reuse *r, const struct sd_draft_tree *t, int32_t n_nodes, const float *logits,
                     const int32_t *argmax, int32_t n_vocab, const int32_t *path, int32_t n_acc);

/*
 * Cost-aware drafting: what each step verifies (issue 18).
 *
 * A drafted step costs a pass of the L2-row graph G2; a plain step one pass
 * of the one-row graph G0. A draft is worth verifying when the tokens it is
 * expected to yield per millisecond beat plain decoding's:
 *
 *     (1 + E[accepted]) / cost(G2)  >  1 / cost(G0)
 *
 * Costs: the profile's pass time at each L (blocks and head) as the prior,
 * then a running average of the step times the session measures (they grow
 * with the context, and this machine's speed wanders).
 *
 * Acceptance: a geometric model per level of the draft. Level i of a draft
 * whose main path came from a match of length m was predicted from a
 * match of length m + i - 1, and is accepted, given level i - 1 was, with
 * probability a(bucket(m + i - 1)); so
 *
 *     E[accepted] = sum over i <= depth of  prod over j <= i of a(bucket(m + j - 1)).
 *
 * Long matches are copied text and are accepted far more often than a
 * one-token match, and a match that keeps being accepted grows, so the
 * bucket by match length is the feature that carries the signal
 * (SD_EST_MATCH, the default; SD_EST_STORE buckets by the store the main
 * path came from, SD_EST_GLOBAL keeps one rate, for the comparison in
 * docs/benchmarks-gemma.md, "The evaluation datasets"). Each bucket keeps decayed counts of accepted and rejected
 * levels, shrunk toward the pooled rate when it has few.
 *
 * Every step feeds the model, verified or not: a verified step gives its
 * accepted levels and the first rejected one; a draft the policy ran as a
 * plain step instead is scored against the token the model then chose
 * (was it a child of the root?). So the estimate keeps learning while
 * drafts are skipped, and a request that starts copying its context again
 * turns drafting back on. Scoring a skipped draft with the model's actual
 * token is unbiased for sampling too: the verifier accepts some child
 * with probability sum p(child), the chance the plain step draws one.
 *
 * The policy only chooses how many rows to verify; what is accepted is the
 * verifier's alone, so every choice is lossless. Nothing here allocates.
 */
#define SD_POLICY_MAX_OPTS 4
#define SD_POLICY_BUCKETS 7

enum sd_policy_estimator { SD_EST_MATCH = 0, SD_EST_STORE = 1, SD_EST_GLOBAL = 2 };

struct sd_policy {
    bool adaptive;                    /* false: every non-empty draft runs on the largest graph */
    enum sd_policy_estimator estimator;
    int32_t n_opts;                   /* graphs a step may run, by rows ascending */
    int32_t L[SD_POLICY_MAX_OPTS];    /* rows of each (1 = the plain one-row graph) */
    bool usable[SD_POLICY_MAX_OPTS];  /* false once a graph failed to prepare (memory limit) */
    double cost_ms[SD_POLICY_MAX_OPTS]; /* a step on each: prior, then the running average */
    bool measured[SD_POLICY_MAX_OPTS]; /* the cost came from a profile or a step, not the guessed shape;
                                          while none did, cost_ms are row units */
    double prior_ms[SD_POLICY_MAX_OPTS]; /* cost_ms as sd_policy_init set them */
    bool reproducible;                /* decide from prior costs and this request alone (sampling) */
    double succ[SD_POLICY_BUCKETS];   /* decayed counts of accepted levels */
    double fail[SD_POLICY_BUCKETS];   /* ... and of rejected ones */
    double succ_all, fail_all;        /* pooled over buckets */
    double rate[SD_POLICY_BUCKETS];   /* a(bucket), kept current */
    int64_t n_choices, n_plain;       /* steps decided, and of those run without their draft */
};

/* Set up for graphs of L[0..n) rows (ascending; n <= SD_POLICY_MAX_OPTS)
 * with prior step costs cost_ms[0..n) (<= 0: unknown; a pass is then taken
 * to cost about 8 + L rows' worth until measured). A graph whose cost is
 * still that guess, once another's has been measured, runs the next
 * drafted step (unless the request is reproducible): the guessed shape
 * can be off by more than 2x (how much more an 8-row pass costs than a
 * one-row one depends on the CPU's instructions; docs/benchmarks.md), and
 * a short answer would otherwise end before the policy ever timed the
 * graph it keeps passing over. */
void sd_policy_init(struct sd_policy *p, bool adaptive, const int32_t *L, const double *cost_ms, int32_t n);

/* A new request: what earlier requests taught is kept as a weak prior (at
 * most four observations a bucket), so this one's own drafts soon decide.
 * reproducible: the choices must not depend on timing or on earlier
 * requests (sampling: which steps verify decides how the random stream is
 * used, and a seed must give the same output every run): the costs go
 * back to their priors and stay there, and nothing earlier is kept. */
void sd_policy_new_request(struct sd_policy *p, bool reproducible);

/* Choose the graph for a step whose draft tree t offers its first n_nodes
 * nodes (parents before children; main path first). Returns the option
 * index; *n_verify gets how many nodes to verify on it (0 for the one-row
 * graph: the draft is skipped). */
int32_t sd_policy_choose(struct sd_policy *p, const struct sd_draft_tree *t, int32_t n_nodes, int32_t *n_verify);

/* The expected accepted draft tokens of the first n_nodes nodes of t, as
 * sd_policy_choose reckons them. */
double sd_policy_expected(const struct sd_policy *p, const struct sd_draft_tree *t, int32_t n_nodes);

/* Learn from a verified step: the first n_nodes nodes of t were verified
 * and path[0 .. n_acc) accepted (as sd_verify_accept returns them). */
void sd_policy_observe(struct sd_policy *p, const struct sd_draft_tree *t, int32_t n_nodes, const int32_t *path,
                       int32_t n_acc);

/* Learn from a skipped draft: the step ran without it and the model chose
 * next after the root. */
void sd_policy_observe_skipped(struct sd_policy *p, const struct sd_draft_tree *t, int32_t n_nodes, int32_t next);

/* A step on option opt took ms (graph pass, head and acceptance). */
void sd_policy_observe_cost(struct sd_policy *p, int32_t opt, double ms);

/* Option opt cannot run (its graph did not fit the memory limit). */
void sd_policy_drop(struct sd_policy *p, int32_t opt);

/*
 * One decoding step: the verify/ stage's whole job, in order
 *     draft -> fill (reuse, padding) -> choose the graph -> run the rows
 *     -> accept -> commit the cache -> learn.
 * The session above owns the prompt, the tokens, prefill and streaming and
 * calls sd_step once per model call; everything between a sampled token
 * and the model's next token happens here.
 */
struct sd_step_cfg {
    bool on_l2;                  /* run on the L2-row graph even without a draft (npu-vanilla, drafting) */
    bool reuse;                  /* rejected-draft reuse fills spare rows */
    struct sd_draft_params dp;   /* drafting limits (budget <= L2 - 1) */
};

struct sd_stepper {
    struct sd_rt *rt;             /* the session's graphs and KV cache */
    struct sd_drafter *drafter;   /* NULL: no drafting */
    struct sd_draft_tree tree;    /* this step's draft */
    struct sd_reuse reuse;        /* rejected-draft reuse of the current request */
    struct sd_policy policy;      /* costs and acceptance, carried across requests */
    struct sd_row rows[SD_VERIFY_MAX_ROWS];
    float *logits;                /* [n_vocab] the session's: next-token logits after the last committed token */
    bool logits_stale;            /* ... except after a greedy verification step, which keeps no logits */
    float *probs;                 /* [n_vocab] sampling scratch */
    int32_t am[SD_VERIFY_MAX_ROWS]; /* the last pass's rows' greedy tokens (sd_rt_decode) */
    int32_t n_vocab, n_ctx, n_verify;
};

/* What one step did. */
struct sd_step_result {
    int32_t acc[SD_VERIFY_MAX_ROWS]; /* accepted draft tokens, in order */
    int32_t n_acc;
    int32_t next;                 /* the model's token after them (sampled, not yet in the cache) */
    int32_t n_verified;           /* draft rows verified (0: a plain row) */
    double draft_ms, verify_ms;
};

/* A stepper over rt with the session's logits buffer; nothing is allocated
 * until sd_step_prepare, and the policy is set by sd_step_init_policy. */
void sd_step_init(struct sd_stepper *x, struct sd_rt *rt, float *logits, int32_t n_vocab, int32_t n_ctx,
                  int32_t n_verify);
/* The session's runtime and context size changed (a resized context): the
 * drafter, sized to the context, is made again on first use; the policy
 * keeps what it learnt. */
void sd_step_resize(struct sd_stepper *x, struct sd_rt *rt, int32_t n_ctx);
/* Buffers for drafting (the verification logits, the tree); idempotent. */
int sd_step_prepare(struct sd_stepper *x, struct sd_err *err);
void sd_step_free(struct sd_stepper *x); /* the drafter too */

/* The graphs the cost-aware policy chooses between: one row on G0 and,
 * when n_verify > 1, n_verify rows on G2, with prior step costs
 * step_ms[0..2) (<= 0: unknown; sd_policy_init), the acceptance estimated
 * by est. Whether it adapts is set per request. Again with a profile's
 * costs, it starts over. */
void sd_step_init_policy(struct sd_stepper *x, enum sd_policy_estimator est, const double step_ms[2]);

/* Hold the drafter draft/'s registry calls name (a new one if the one held
 * is another), and the buffers drafting needs. */
int sd_step_use_drafter(struct sd_stepper *x, const char *name, struct sd_err *err);

/* A request starts: the policy adapts or verifies every draft (adaptive),
 * reproducible as sd_policy_new_request says, and the kept run of an
 * earlier request is dropped. */
void sd_step_begin_request(struct sd_stepper *x, bool adaptive, bool reproducible);

/* The drafter's stores for the request: the context ctx[0..n) just
 * prefilled, the history's and the session's earlier replies' automata
 * (NULL: none; a drafter that searches only the request ignores them) and
 * the request's calibrated store (NULL: none, never an earlier request's,
 * which would draft another context's sequences). */
int sd_step_begin_drafts(struct sd_stepper *x, const int32_t *ctx, size_t n, const struct sd_sam *history,
                         const struct sd_sam *replies, const struct sd_sam *calib, struct sd_err *err);

/* The history automaton is going away: the drafter lets go of it. */
void sd_step_drop_history(struct sd_stepper *x);

/* The session wrote the logits buffer itself (prefill): it holds the
 * logits after the last committed token. */
void sd_step_logits_written(struct sd_stepper *x);

/* The session replaced its context (a loaded state file): the logits
 * buffer no longer holds the logits after the last committed token. */
void sd_step_logits_lost(struct sd_stepper *x);

/* Whether the logits buffer lacks the logits after the last committed
 * token: a greedy verification step reads only its rows' greedy tokens. */
bool sd_step_logits_stale(const struct sd_stepper *x);

/* Make the logits buffer hold the logits after the last of the committed
 * tokens ctx[0..n_past) where a greedy verification step left them
 * behind: that token's row runs again, which also writes its own K/V
 * again, bit for bit (the pass is batch-invariant). Only a request that
 * starts without a prompt needs it. On failure the buffer stays stale. */
int sd_step_refresh_logits(struct sd_stepper *x, const int32_t *ctx, int32_t n_past, struct sd_err *err);

/* What the steps of the current request did beyond their results. */
struct sd_step_stats {
    int64_t n_reuse_offered;  /* draft rows rejected-draft reuse filled */
    int64_t n_reuse_accepted; /* of those, rows the verifier accepted */
    int64_t n_plain;          /* drafted steps the policy ran without their draft */
};
struct sd_step_stats sd_step_stats(const struct sd_stepper *x);

/* Evaluate the root tok at slot n_past (and, when draft, a draft of x's
 * drafter below it, as the policy chooses), accept what the model agrees
 * with, commit the cache: slots n_past .. n_past + n_acc hold the root and
 * the accepted tokens, and x->logits the model's logits after them. The
 * drafter sees tok and the accepted tokens. On failure the cache is back
 * at n_past. */
int sd_step(struct sd_stepper *x, const struct sd_step_cfg *c, struct sd_sampler *smp, int32_t tok, int32_t n_past,
            bool draft, struct sd_step_result *r, struct sd_err *err);

#endif
