/* verify/step.c - one decoding step: draft, fill, run, accept, commit
 * (verify/verify.h). */
#include <string.h>

#include "verify/verify.h"

void sd_step_init(struct sd_stepper *x, struct sd_rt *rt, float *logits, int32_t n_vocab, int32_t n_ctx,
                  int32_t n_verify) {
    memset(x, 0, sizeof *x);
    x->rt = rt;
    x->logits = logits;
    x->n_vocab = n_vocab;
    x->n_ctx = n_ctx;
    x->n_verify = n_verify;
}

void sd_step_resize(struct sd_stepper *x, struct sd_rt *rt, int32_t n_ctx) {
    sd_drafter_free(x->drafter);
    x->drafter = NULL;
    x->rt = rt;
    x->n_ctx = n_ctx;
}

int sd_step_prepare(struct sd_stepper *x, struct sd_err *err) {
    size_t nv = (size_t)x->n_vocab;
    if (!x->probs) {
        x->probs = sd_malloc(nv * sizeof(float));
        if (!x->probs) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for verification probabilities");
    }
    if (!x->tree.cap) return sd_draft_tree_init(&x->tree, SD_VERIFY_MAX_ROWS, err);
    return SDNPU_OK;
}

void sd_step_free(struct sd_stepper *x) {
    sd_drafter_free(x->drafter);
    sd_draft_tree_free(&x->tree);
    sd_free(x->probs);
    x->drafter = NULL;
    x->probs = NULL;
}

void sd_step_init_policy(struct sd_stepper *x, enum sd_policy_estimator est, const double step_ms[2]) {
    const int32_t L[2] = {1, x->n_verify};
    sd_policy_init(&x->policy, true, L, step_ms, x->n_verify > 1 ? 2 : 1);
    x->policy.estimator = est;
}

int sd_step_use_drafter(struct sd_stepper *x, const char *name, struct sd_err *err) {
    if (x->drafter && strcmp(sd_drafter_name(x->drafter), name) != 0) {
        sd_drafter_free(x->drafter);
        x->drafter = NULL;
    }
    int rc;
    if (!x->drafter && (rc = sd_drafter_create(name, (size_t)x->n_ctx, &x->drafter, err))) return rc;
    return sd_step_prepare(x, err);
}

void sd_step_begin_request(struct sd_stepper *x, bool adaptive, bool reproducible) {
    x->policy.adaptive = adaptive;
    sd_policy_new_request(&x->policy, reproducible);
    sd_reuse_reset(&x->reuse);
}

/* Attach (or, with NULL, detach) a store the drafter may not search: a
 * drafter that searches only the request (pld) ignores it. */
static int attach_optional(struct sd_drafter *d, enum sd_draft_store which, const struct sd_sam *sam, struct sd_err *err) {
    int rc = sd_drafter_attach(d, which, sam, err);
    if (rc == SDNPU_ERR_UNSUPPORTED) {
        sd_err_clear(err);
        rc = SDNPU_OK;
    }
    return rc;
}

int sd_step_begin_drafts(struct sd_stepper *x, const int32_t *ctx, size_t n, const struct sd_sam *history,
                         const struct sd_sam *replies, const struct sd_sam *calib, struct sd_err *err) {
    struct sd_drafter *d = x->drafter;
    int rc = sd_drafter_reset(d, err);
    if (!rc) rc = attach_optional(d, SD_DRAFT_STORE_HISTORY, history, err);
    if (!rc) rc = attach_optional(d, SD_DRAFT_STORE_REPLIES, replies, err);
    if (!rc) rc = sd_drafter_observe_context(d, ctx, n, err);
    if (!rc) rc = sd_drafter_attach(d, SD_DRAFT_STORE_CALIB, calib, err);
    return rc;
}

void sd_step_drop_history(struct sd_stepper *x) {
    if (x->drafter) sd_drafter_attach(x->drafter, SD_DRAFT_STORE_HISTORY, NULL, NULL);
}

void sd_step_logits_written(struct sd_stepper *x) { x->logits_stale = false; }

bool sd_step_logits_stale(const struct sd_stepper *x) { return x->logits_stale; }

void sd_step_logits_lost(struct sd_stepper *x) { x->logits_stale = true; }

/* Run the committed token tok at position p again, alone, for its full
 * logits: bit-identical to any pass's (the pass is batch-invariant), and
 * its K/V is written again, the same. */
static int rerun_row(struct sd_stepper *x, int32_t tok, int32_t p, struct sd_err *err) {
    struct sd_row row = {.token = tok, .pos = p, .slot = p, .n_prefix = p};
    row.anc[0] = 1;
    int rc = sd_rt_decode(x->rt, &row, 1, p, false, x->logits, NULL, err);
    if (!rc) x->logits_stale = false;
    return rc;
}

int sd_step_refresh_logits(struct sd_stepper *x, const int32_t *ctx, int32_t n_past, struct sd_err *err) {
    if (!x->logits_stale || n_past == 0) return SDNPU_OK;
    return rerun_row(x, ctx[n_past - 1], n_past - 1, err);
}

/* A greedy step under a grammar reads the head's argmax like any other:
 * where the grammar allows it, it is the constrained choice too. Where it
 * refuses the argmax after the last accepted token (at position p), that
 * row runs again for its logits and the sampler takes the best token the
 * grammar allows. Refusals are rare while the model writes JSON (its
 * opening fence, a closing one), so this costs less than computing every
 * row's full logits. */
static int constrained_next(struct sd_stepper *x, struct sd_sampler *smp, int32_t tok, int32_t p,
                            int32_t *next, struct sd_err *err) {
    int rc = rerun_row(x, tok, p, err);
    if (rc) return rc;
    *next = sd_sampler_sample(smp, x->logits);
    sd_sampler_accept(smp, *next);
    return SDNPU_OK;
}

struct sd_step_stats sd_step_stats(const struct sd_stepper *x) {
    return (struct sd_step_stats){x->reuse.n_offered, x->reuse.n_accepted, x->policy.n_plain};
}

/* Run a step on the graph the policy picks: the draft's first n_verify
 * nodes on option opt. A greedy step's pass keeps no logits: the rows'
 * greedy tokens (x->am) are all it reads. Rejected-draft reuse fills the spare rows of a step
 * that keeps its draft: it decides nothing, its rows come free with the
 * L2-row graph. A one-row graph that does not fit the memory limit is
 * dropped and the step runs on the L2-row graph. */
/* What a sampling step's sampler reads of the logits (sd_sampler_topk). */
struct topk_req {
    int32_t k;
    const int32_t *keep;
    int32_t n_keep;
};

static int run_rows(struct sd_stepper *x, const struct sd_step_cfg *c, int32_t tok, int32_t n_past, bool drafted,
                    bool greedy, const struct topk_req *tk, int32_t n_nodes, int32_t *opt, int32_t *n_verify,
                    struct sd_err *err) {
    bool on_l2 = c->on_l2, fill = c->reuse;
    for (;;) {
        if (drafted) {
            *opt = sd_policy_choose(&x->policy, &x->tree, n_nodes, n_verify);
            on_l2 = x->policy.L[*opt] > 1;
            if (fill && (*n_verify > 0 || x->tree.n == 0)) {
                sd_reuse_fill(&x->reuse, &x->tree, &c->dp);
                *n_verify = SD_MIN(x->tree.n, x->n_ctx - n_past - 1);
                fill = false;
            }
        }
        int32_t n_rows = sd_verify_rows(&x->tree, *n_verify, tok, n_past, x->rows);
        /* A verification pass's logits stay in the runtime (sd_rt_logits);
         * a greedy pass keeps none (sd_step_refresh_logits writes them if
         * a later step samples). */
        int rc;
        if (greedy)
            rc = sd_rt_decode_greedy(x->rt, x->rows, n_rows, n_past, on_l2, x->am, err);
        else if (n_rows == 1 && tk) /* a sampling step: the rows its sampler reads */
            rc = sd_rt_decode_topk(x->rt, x->rows, 1, n_past, on_l2, x->logits, tk->k, tk->keep, tk->n_keep, err);
        else
            rc = sd_rt_decode(x->rt, x->rows, n_rows, n_past, on_l2, n_rows == 1 ? x->logits : NULL, x->am, err);
        if (rc == SDNPU_ERR_OOM && drafted && !on_l2 && x->policy.n_opts > 1) {
            SD_LOGW("%s; cost-aware drafting keeps to the %d-row graph", err->msg, x->n_verify);
            sd_err_clear(err);
            sd_policy_drop(&x->policy, *opt);
            continue;
        }
        if (rc) sd_rt_kv_truncate(x->rt, n_past);
        return rc;
    }
}

/* Draft below tok: the number of nodes there is room for in the context
 * (the root and every draft row need a slot). */
static int draft_tree(struct sd_stepper *x, const struct sd_step_cfg *c, int32_t tok, int32_t n_past,
                      int32_t *n_nodes, struct sd_err *err) {
    int rc = sd_drafter_observe_output(x->drafter, tok, err);
    if (!rc) rc = sd_drafter_draft(x->drafter, &c->dp, &x->tree, err);
    if (rc) return rc;
    *n_nodes = SD_MAX(0, SD_MIN(x->tree.n, x->n_ctx - n_past - 1));
    return SDNPU_OK;
}

int sd_step(struct sd_stepper *x, const struct sd_step_cfg *c, struct sd_sampler *smp, int32_t tok, int32_t n_past,
            bool draft, struct sd_step_result *r, struct sd_err *err) {
    memset(r, 0, sizeof *r);
    bool drafted = draft && x->drafter;
    int32_t n_nodes = 0, opt = -1;
    int rc;
    if (drafted) {
        double td = sd_time_ms();
        if ((rc = draft_tree(x, c, tok, n_past, &n_nodes, err))) return rc;
        r->draft_ms = sd_time_ms() - td;
    } else {
        x->tree.n = 0;
    }
    int32_t n_verify = drafted ? n_nodes : 0, path[SD_VERIFY_MAX_ROWS];
    double prep0 = sd_rt_prepare_ms(x->rt), t0 = sd_time_ms();
    const bool greedy = sd_sampler_is_greedy(smp);
    struct topk_req tk;
    const bool partial = !greedy && sd_sampler_topk(smp, &tk.k, &tk.keep, &tk.n_keep);
    if ((rc = run_rows(x, c, tok, n_past, drafted, greedy, partial ? &tk : NULL, n_nodes, &opt, &n_verify, err)))
        return rc;
    r->verify_ms = sd_time_ms() - t0;
    r->n_verified = n_verify;
    if (n_verify == 0) {
        x->logits_stale = greedy || partial; /* a top-k step's logits may hold only what its sampler reads */
        if (greedy && !sd_sampler_allows(smp, x->am[0])) {
            if ((rc = constrained_next(x, smp, tok, n_past, &r->next, err))) {
                sd_rt_kv_truncate(x->rt, n_past);
                return rc;
            }
        } else {
            r->next = greedy ? x->am[0] : sd_sampler_sample(smp, x->logits);
            sd_sampler_accept(smp, r->next);
        }
    } else {
        size_t nv = (size_t)x->n_vocab;
        float *vl = sd_rt_logits(x->rt);
        sd_verify_accept(&x->tree, n_verify, vl, greedy ? x->am : NULL, x->n_vocab, smp, x->probs, path,
                         &r->n_acc, &r->next);
        if (c->reuse) sd_reuse_update(&x->reuse, &x->tree, n_verify, vl, x->am, x->n_vocab, path, r->n_acc);
        x->logits_stale = greedy;
        if (!greedy) memcpy(x->logits, vl + (size_t)(r->n_acc ? path[r->n_acc - 1] + 1 : 0) * nv, nv * sizeof(float));
        sd_verify_commit(x->rt, n_past, path, r->n_acc);
        for (int32_t i = 0; i < r->n_acc; i++) r->acc[i] = x->tree.tok[path[i]];
        const int32_t last = r->n_acc ? r->acc[r->n_acc - 1] : tok;
        if (r->next < 0 && (rc = constrained_next(x, smp, last, n_past + r->n_acc, &r->next, err))) {
            sd_rt_kv_truncate(x->rt, n_past);
            return rc;
        }
    }
    if (drafted) {
        /* The step's cost as the policy compares them: the pass, the head
         * and acceptance, without any first-use graph preparation. */
        sd_policy_observe_cost(&x->policy, opt, sd_time_ms() - t0 - (sd_rt_prepare_ms(x->rt) - prep0));
        if (n_verify > 0) sd_policy_observe(&x->policy, &x->tree, n_verify, path, r->n_acc);
        else sd_policy_observe_skipped(&x->policy, &x->tree, n_nodes, r->next);
        for (int32_t i = 0; i < r->n_acc; i++)
            if ((rc = sd_drafter_observe_output(x->drafter, r->acc[i], err))) return rc;
    }
    return SDNPU_OK;
}
