/*
 * cli/eval_dmodel.c - `sdnpu eval --analyze --draft-model PATH`: what a
 * draft model's greedy drafts would have had accepted along each output.
 *
 * Greedy verification accepts a draft token only where it equals the
 * model's next token, so along the model's greedy output a draft model's
 * draft at a step is accepted exactly as far as the draft model, reading
 * the output itself, predicts the output's next tokens: its i-th draft
 * token is read after the first i-1, and those count only if they were the
 * output's. One teacher-forced pass of the draft model over the prompt and
 * the output therefore gives, at every output position, all a replay needs
 * while the draft is still being accepted:
 *
 *   tok, p     its greedy token over the whole vocabulary and that token's
 *              probability (a confidence cut-off stops drafting below it);
 *   sub, p_sub the same among a subset of the vocabulary: the prompt's own
 *              tokens and the ids below k_dm_subset_ids[s] (Qwen's and
 *              Gemma's byte-pair ids rise with rarity), what a draft model
 *              whose head holds only those rows would draft. Its
 *              probability is normalised over the subset.
 *
 * After a rejected token the draft model would go on from its own wrong
 * token, which this pass never reads; the replay uses the teacher-forced
 * probabilities there only to decide where a cut-off would have stopped
 * drafting (those tokens are rejected whatever they are).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "eval.h"
#include "sample/sampler.h"

const int32_t k_dm_subset_ids[DM_SUBSETS] = {8192, 32768};

/* Output rows read per call: [DM_CHUNK][n_vocab] floats of logits. */
#define DM_CHUNK 16

struct dm {
    struct sdnpu_model *model;
    struct sdnpu_session *session;
    int32_t n_vocab;
    float *logits;      /* [DM_CHUNK][n_vocab] */
    unsigned char *in;  /* [n_vocab]: the token is in the prompt */
    int32_t *extra;     /* the prompt's distinct tokens, ascending ids */
    int32_t n_extra;
    int32_t window;     /* --draft-window: prompt tokens it reads, 0 all */
};

void eval_dm_close(struct dm *dm) {
    if (!dm) return;
    sdnpu_session_free(dm->session);
    sdnpu_model_free(dm->model);
    free(dm->logits);
    free(dm->in);
    free(dm->extra);
    free(dm);
}

/* The id of the first token the two models spell differently (special
 * tokens rendered), or -1 when they spell every id alike. */
static int32_t first_difference(const struct sdnpu_model *a, const struct sdnpu_model *b, int32_t n_vocab) {
    char pa[256], pb[256];
    for (int32_t t = 0; t < n_vocab; t++) {
        size_t na = 0, nb = 0;
        int ra = sdnpu_detokenize(a, &t, 1, true, pa, sizeof pa, &na);
        int rb = sdnpu_detokenize(b, &t, 1, true, pb, sizeof pb, &nb);
        if (ra != rb || na != nb || (!ra && memcmp(pa, pb, na))) return t;
    }
    return -1;
}

int eval_dm_open(const struct eval *ev, struct dm **out) {
    *out = NULL;
    struct dm *dm = calloc(1, sizeof *dm);
    if (!dm) return fprintf(stderr, "sdnpu eval: out of memory\n"), -1;
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = ev->n_threads;
    char err[512];
    int rc = sdnpu_model_load(ev->draft_model, mp, &dm->model, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sdnpu eval: --draft-model %s: %s: %s\n", ev->draft_model, sdnpu_status_str(rc), err);
        eval_dm_close(dm);
        return -1;
    }
    dm->n_vocab = sdnpu_model_n_vocab(dm->model);
    int32_t t = dm->n_vocab == sdnpu_model_n_vocab(ev->model) ? first_difference(dm->model, ev->model, dm->n_vocab) : -2;
    if (t != -1) {
        if (t == -2)
            fprintf(stderr, "sdnpu eval: --draft-model %s: its vocabulary has %d tokens, the model's %d: they must share one\n",
                    ev->draft_model, dm->n_vocab, sdnpu_model_n_vocab(ev->model));
        else
            fprintf(stderr, "sdnpu eval: --draft-model %s: token %d is spelt differently from the model's: they must share one vocabulary\n",
                    ev->draft_model, t);
        eval_dm_close(dm);
        return -1;
    }
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.kernels = ev->kernels;
    if ((rc = sdnpu_session_create(dm->model, sp, &dm->session))) {
        fprintf(stderr, "sdnpu eval: --draft-model: cannot make a session: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_model_last_error(dm->model));
        eval_dm_close(dm);
        return -1;
    }
    dm->logits = malloc((size_t)DM_CHUNK * (size_t)dm->n_vocab * sizeof *dm->logits);
    dm->in = calloc((size_t)dm->n_vocab, 1);
    dm->extra = malloc((size_t)dm->n_vocab * sizeof *dm->extra);
    if (!dm->logits || !dm->in || !dm->extra) {
        fprintf(stderr, "sdnpu eval: out of memory\n");
        eval_dm_close(dm);
        return -1;
    }
    dm->window = ev->draft_window;
    *out = dm;
    return 0;
}

void eval_dm_pred_free(struct dm_pred *p) {
    free(p->tok);
    free(p->p);
    for (int s = 0; s < DM_SUBSETS; s++) {
        free(p->sub[s]);
        free(p->p_sub[s]);
    }
    memset(p, 0, sizeof *p);
}

/* The prompt's distinct tokens, for the subsets. */
static void note_prompt(struct dm *dm, const int32_t *tok, int32_t n) {
    memset(dm->in, 0, (size_t)dm->n_vocab);
    for (int32_t i = 0; i < n; i++) dm->in[tok[i]] = 1;
    dm->n_extra = 0;
    for (int32_t t = 0; t < dm->n_vocab; t++)
        if (dm->in[t]) dm->extra[dm->n_extra++] = t;
}

/* The greedy token among ids [0, below) and the prompt's tokens, and its
 * probability normalised over them (the first of equal maxima). */
static int32_t subset_argmax(const struct dm *dm, const float *x, int32_t below, float *p) {
    below = SD_MIN(below, dm->n_vocab);
    int32_t best = 0;
    for (int32_t t = 1; t < below; t++)
        if (x[t] > x[best]) best = t;
    for (int32_t i = 0; i < dm->n_extra; i++)
        if (dm->extra[i] >= below && x[dm->extra[i]] > x[best]) best = dm->extra[i];
    double z = 0.0;
    for (int32_t t = 0; t < below; t++) z += exp((double)(x[t] - x[best]));
    for (int32_t i = 0; i < dm->n_extra; i++)
        if (dm->extra[i] >= below) z += exp((double)(x[dm->extra[i]] - x[best]));
    *p = (float)(1.0 / z);
    return best;
}

static int32_t subset_size(const struct dm *dm, int32_t below) {
    int32_t n = SD_MIN(below, dm->n_vocab);
    for (int32_t i = 0; i < dm->n_extra; i++) n += dm->extra[i] >= below;
    return n;
}

/* One row's logits into prediction i. */
static void predict_row(const struct dm *dm, const float *x, int32_t i, struct dm_pred *o) {
    int32_t best = sd_argmax(x, dm->n_vocab);
    double z = 0.0;
    for (int32_t t = 0; t < dm->n_vocab; t++) z += exp((double)(x[t] - x[best]));
    o->tok[i] = best;
    o->p[i] = (float)(1.0 / z);
    for (int s = 0; s < DM_SUBSETS; s++) o->sub[s][i] = subset_argmax(dm, x, k_dm_subset_ids[s], &o->p_sub[s][i]);
}

static int pred_alloc(struct dm_pred *o, int32_t n) {
    size_t k = (size_t)SD_MAX(n, 1);
    o->n = n;
    o->tok = calloc(k, sizeof *o->tok);
    o->p = calloc(k, sizeof *o->p);
    bool ok = o->tok && o->p;
    for (int s = 0; s < DM_SUBSETS; s++) {
        o->sub[s] = calloc(k, sizeof *o->sub[s]);
        o->p_sub[s] = calloc(k, sizeof *o->p_sub[s]);
        ok = ok && o->sub[s] && o->p_sub[s];
    }
    return ok ? 0 : -1;
}

int eval_dm_predict(struct dm *dm, const int32_t *all, int32_t n_prompt, int32_t n_all, struct dm_pred *o,
                    struct sd_err *err) {
    memset(o, 0, sizeof *o);
    const int32_t n_out = n_all - n_prompt;
    if (pred_alloc(o, n_out)) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory");
    note_prompt(dm, all, n_prompt);
    for (int s = 0; s < DM_SUBSETS; s++) o->n_sub[s] = subset_size(dm, k_dm_subset_ids[s]);
    sdnpu_session_reset(dm->session);
    /* --draft-window W: the draft model reads the prompt's last W tokens
     * only (its own words need little of a document that retrieval copies). */
    const int32_t skip = dm->window > 0 && n_prompt > dm->window ? n_prompt - dm->window : 0;
    double t0 = sd_time_ms();
    int rc = sdnpu_session_eval(dm->session, all + skip, (size_t)(n_prompt - skip), NULL, 0);
    o->prefill_ms = sd_time_ms() - t0;
    /* Row r of the output's evaluation predicts out[r + 1]; the last
     * output token predicts nothing the replay uses. */
    for (int32_t r0 = 0; !rc && r0 + 1 < n_out; r0 += DM_CHUNK) {
        int32_t n = SD_MIN(DM_CHUNK, n_out - 1 - r0);
        rc = sdnpu_session_eval(dm->session, all + n_prompt + r0, (size_t)n, dm->logits,
                                (size_t)DM_CHUNK * (size_t)dm->n_vocab);
        for (int32_t r = 0; !rc && r < n; r++) predict_row(dm, dm->logits + (size_t)r * (size_t)dm->n_vocab, r0 + r + 1, o);
    }
    if (rc) {
        sd_err_set(err, rc, "draft model: %s", sdnpu_session_last_error(dm->session));
        eval_dm_pred_free(o);
    }
    return rc;
}
