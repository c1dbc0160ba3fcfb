/*
 * cli/eval_analyze.c - `sdnpu eval --analyze`: where the drafts die.
 *
 * Greedy speculative decoding is lossless, so the output of every method is
 * the plain greedy output, and what a drafter would have had accepted at
 * each step is a function of that output and the stores alone: a step whose
 * root is out[j] accepts the longest path of its draft tree that spells
 * out[j+1..], then the next step's root is the token after it. So one
 * generation per sample (sam+calib, for its calibrated store) and a replay
 * of the drafters over its output give the acceptance of every drafting
 * variant with every draft verified (the engine's METHOD:fixed; tests/
 * eval.cmake holds the replay to the engine's own count), and the answers
 * to what a drafter cannot see:
 *
 *   variants   pld, sam and sam-tree, with and without the calibrated store
 *              (calib_lead -1, 0, 1), and trees of 4, 8, 16 and 32 rows, some
 *              with a shorter main path (depth) for more side branches,
 *              copying the most recent occurrence instead of the one the
 *              text follows (draft.h's follow), and with the earlier
 *              samples' outputs as the replies store, in eval's run order
 *              (as a session keeps them);
 *   ceiling    the longest prefix of the rest of the output (at most 7
 *              tokens, an 8-row graph's draft) found anywhere in the
 *              context, the output so far, the history, the calibrated
 *              store: what perfect selection among the stores' text would
 *              be accepted. Far below it, the drafter picks the wrong
 *              occurrence; near it, the model's words are not in the stores;
 *   stores     which store's path each accepted token came from;
 *   outcomes   for sam+calib, how each step ended: no draft (and whether
 *              any store held the next token), rejected at the draft's
 *              first token or later, or the whole draft accepted; the
 *              rejected position's kind (a word's start, inside a word,
 *              punctuation or space), whether the model's token occurs in
 *              the context at all, and the commonest (draft, model) pairs.
 *
 * Tables on stdout, the numbers in OUT/analysis.json. Speed is not measured
 * here (the methods' own runs do that); tokens per call are exact.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "draft/draft.h"
#include "engine/tools.h"
#include "eval_analyze.h"
#include "sched/profile.h"
#include "verify/verify.h"

/* ------------------------------------------------------------ replay */

void an_piece(const struct an *an, int32_t tok, char *buf, size_t *n) {
    if (sdnpu_detokenize(an->ev->model, &tok, 1, true, buf, AN_PIECE - 1, n) != SDNPU_OK) *n = 0;
    buf[*n] = '\0';
}

static bool wordish(unsigned char c) { return isalnum(c) || c >= 0x80; }

/* The kind of position the model's token m takes after prev. */
static int token_class(const struct an *an, int32_t m, int32_t prev) {
    char a[AN_PIECE], b[AN_PIECE];
    size_t na, nb;
    an_piece(an, m, a, &na);
    an_piece(an, prev, b, &nb);
    if (na == 0) return C_PUNCT;
    if (a[0] == ' ' && na > 1 && wordish((unsigned char)a[1])) return C_WORD;
    if (!wordish((unsigned char)a[0])) return C_PUNCT;
    return nb && wordish((unsigned char)b[nb - 1]) ? C_INSIDE : C_WORD;
}

static void count_pair(struct an *an, int32_t d, int32_t m) {
    uint32_t h = ((uint32_t)d * 2654435761u) ^ ((uint32_t)m * 40503u);
    for (int probe = 0; probe < AN_PAIRS; probe++) {
        struct an_pair *p = &an->pairs[(h + (uint32_t)probe) % AN_PAIRS];
        if (p->n == 0) *p = (struct an_pair){d, m, 0};
        if (p->draft == d && p->model == m) {
            p->n++;
            return;
        }
    }
}

/* The longest prefix of x[0..n) that occurs in s. */
static int32_t longest_in(const struct sd_sam *s, const int32_t *x, int32_t n) {
    int32_t st = 0, k = 0;
    while (s && k < n && (st = sd_sam_next(s, st, x[k])) >= 0) k++;
    return k;
}

/* The ceiling at root j: the longest prefix of out[j+1..] in the stores. */
static int32_t ceiling_at(const struct an_stores *st, int which, const int32_t *out, int32_t n_out, int32_t j) {
    const int32_t *x = out + j + 1;
    int32_t n = SD_MIN(AN_DEPTH, n_out - j - 1), a = longest_in(st->ctx, x, n);
    if (which >= OR_CTX_OUT) a = SD_MAX(a, longest_in(st->out, x, n));
    if (which >= OR_NO_CALIB) a = SD_MAX(a, longest_in(st->hist, x, n));
    if (which >= OR_ALL) a = SD_MAX(a, longest_in(st->calib, x, n));
    return a;
}

/* The output store holds out[0..j] (the roots so far). */
static int grow_out(struct an_stores *st, const int32_t *out, int32_t j, struct sd_err *err) {
    int rc = SDNPU_OK;
    for (int32_t k = (int32_t)sd_sam_n_tokens(st->out); k <= j && !rc; k++) rc = sd_sam_append(st->out, out[k], NULL, err);
    return rc;
}

static int replay_ceilings(struct an_stores *st, const int32_t *out, int32_t n_out, struct an_set *acc,
                           struct sd_err *err) {
    for (int w = 0; w < OR_COUNT; w++) {
        sd_sam_clear(st->out);
        for (int32_t j = 0; j + 1 < n_out;) {
            int rc = grow_out(st, out, j, err);
            if (rc) return rc;
            j += ceiling_at(st, w, out, n_out, j) + 1;
            acc->oracle_steps[w]++;
        }
    }
    acc->oracle_tokens += n_out - 1;
    return SDNPU_OK;
}

/* The accepted path of the first n_nodes nodes of t under the true
 * continuation x[0..n): node indices into path[SD_VERIFY_MAX_ROWS], as the
 * verifier returns them; its length. */
static int32_t accepted_nodes(const struct sd_draft_tree *t, int32_t n_nodes, const int32_t *x, int32_t n,
                              int32_t *path) {
    int32_t parent = -1, a = 0;
    while (a < n && a < SD_VERIFY_MAX_ROWS) {
        int32_t c = sd_draft_tree_child(t, parent, x[a]);
        if (c < 0 || c >= n_nodes) break;
        path[a++] = parent = c;
    }
    return a;
}

/* The same over the whole tree, and whether the path left the main path. */
static int32_t accepted_path(const struct sd_draft_tree *t, const int32_t *x, int32_t n, bool *side) {
    int32_t path[SD_VERIFY_MAX_ROWS];
    int32_t a = accepted_nodes(t, t->n, x, n, path);
    *side = false;
    for (int32_t i = 0; i < a; i++) *side |= path[i] >= t->n_main;
    return a;
}

/* How a step of the focus variant ended (see the opening comment). */
static void note_outcome(struct an *an, const struct an_stores *st, const int32_t *out, int32_t n_out, int32_t j,
                         int32_t a, struct an_outcomes *oc) {
    const struct sd_draft_tree *t = &an->tree;
    if (t->n == 0) {
        oc->outcome[ceiling_at(st, OR_ALL, out, n_out, j) > 0 ? O_MISSED : O_ABSENT]++;
        return;
    }
    if (a >= t->n_main || j + 1 + a >= n_out) {
        oc->outcome[O_USED_UP]++;
        return;
    }
    int32_t m = out[j + 1 + a];
    oc->outcome[a == 0 ? O_FIRST : O_LATER]++;
    oc->cls[token_class(an, m, out[j + a])]++;
    oc->novel += sd_sam_next(st->ctx, 0, m) < 0;
    if (t->main_store >= 0 && t->main_store < SD_DRAFT_STORE_COUNT) oc->by_store[t->main_store]++;
    count_pair(an, t->tok[a], m);
}

static void count_step(struct an_count *c, const struct sd_draft_tree *t, int32_t a, bool side) {
    c->steps++;
    c->accepted += a;
    c->drafted += t->n;
    c->empty += t->n == 0;
    if (a > 0) c->by_store[side ? SD_DRAFT_STORE_COUNT : SD_MAX(0, t->main_store)] += a;
    c->runs[a == 0 ? 0 : a == 1 ? 1 : a < 4 ? 2 : a < 8 ? 3 : 4]++;
}

static int drafter_for(const struct an_variant *v, struct an_stores *st, const int32_t *ctx, int32_t n_ctx,
                       size_t hint, struct sd_drafter **d, struct sd_err *err) {
    int rc = sd_drafter_create(v->drafter, hint, d, err);
    if (!rc && st->hist && strcmp(v->drafter, "pld")) rc = sd_drafter_attach(*d, SD_DRAFT_STORE_HISTORY, st->hist, err);
    if (!rc) rc = sd_drafter_observe_context(*d, ctx, (size_t)n_ctx, err);
    if (!rc && v->calib && st->calib) rc = sd_drafter_attach(*d, SD_DRAFT_STORE_CALIB, st->calib, err);
    if (!rc && v->replies && strcmp(v->drafter, "pld")) rc = sd_drafter_attach(*d, SD_DRAFT_STORE_REPLIES, st->replies, err);
    return rc;
}

/* Replay variant v over the output, as the engine's steps draft and accept. */
static int replay_variant(struct an *an, int vi, struct an_stores *st, const int32_t *ctx, int32_t n_ctx,
                          const int32_t *out, int32_t n_out, struct an_set *acc) {
    const struct an_variant *v = &k_variants[vi];
    struct sd_drafter *d = NULL;
    struct sd_draft_params dp = sd_draft_default_params();
    dp.budget = v->rows - 1;
    if (v->depth > 0) dp.max_depth = v->depth;
    dp.max_depth = SD_MIN(dp.max_depth, dp.budget);
    dp.calib_lead = v->lead;
    dp.follow = !v->recent;
    int rc = drafter_for(v, st, ctx, n_ctx, (size_t)(n_ctx + n_out + 16), &d, &an->err);
    if (vi == AN_FOCUS && !rc) sd_sam_clear(st->out);
    for (int32_t j = 0; !rc && j + 1 < n_out;) {
        /* As the engine: no draft for the budget's last token (j + 2 tokens emitted then). */
        if (!(rc = sd_drafter_observe_output(d, out[j], &an->err)))
            rc = j + 2 < an->ev->n_predict ? sd_drafter_draft(d, &dp, &an->tree, &an->err)
                                           : (sd_draft_tree_clear(&an->tree), SDNPU_OK);
        if (!rc && vi == AN_FOCUS) rc = grow_out(st, out, j, &an->err);
        if (rc) break;
        bool side;
        int32_t a = accepted_path(&an->tree, out + j + 1, n_out - j - 1, &side);
        count_step(&acc->v[vi], &an->tree, a, side);
        if (vi == AN_FOCUS) note_outcome(an, st, out, n_out, j, a, &acc->oc);
        for (int32_t k = 1; k <= a && !rc; k++) rc = sd_drafter_observe_output(d, out[j + k], &an->err);
        j += a + 1;
    }
    acc->v[vi].tokens += SD_MAX(0, n_out - 1);
    sd_drafter_free(d);
    return rc;
}

/* Cost-aware drafting replayed over the output on the graphs of option set
 * oi, each step priced at the profile's step time for its rows, drafting
 * as the engine's default does (sam-tree, follow, the earlier samples'
 * replies): the same
 * policy (verify.h) chooses how much of each sam-tree draft to verify and
 * learns from what the verifier would have accepted. An oracle set knows
 * instead: it verifies a draft exactly where a token of it is accepted,
 * the most any policy deciding between drafting and a plain step could
 * gain with these drafts. */
/* The graph (option index) a priced step runs and the draft nodes it
 * verifies: the policy's choice, or the oracle's, which sees the model's
 * next tokens x[0..n). */
static int32_t choose_graph(struct an *an, const struct an_opts *o, struct sd_policy *pol, const int32_t *x, int32_t n,
                            int32_t *nv) {
    const int32_t opt = sd_policy_choose(pol, &an->tree, an->tree.n, nv);
    if (!o->oracle) return opt;
    int32_t path[SD_VERIFY_MAX_ROWS];
    *nv = SD_MIN(an->tree.n, o->L[o->n - 1] - 1);
    if (accepted_nodes(&an->tree, *nv, x, n, path) > 0) return o->n - 1;
    *nv = 0;
    return 0;
}

static int replay_priced(struct an *an, int oi, const double *step_ms, struct an_stores *st,
                         const int32_t *ctx, int32_t n_ctx, const int32_t *out, int32_t n_out,
                         struct an_priced *pr) {
    const struct an_opts *o = &k_opts[oi];
    const struct an_variant v = {"priced", "sam-tree", false, -1, o->L[o->n - 1], 0, false, true};
    struct sd_drafter *d = NULL;
    struct sd_draft_params dp = sd_draft_default_params();
    dp.budget = v.rows - 1;
    dp.max_depth = SD_MIN(dp.max_depth, dp.budget);
    struct sd_policy pol;
    sd_policy_init(&pol, true, o->L, step_ms, o->n);
    sd_policy_new_request(&pol, true);
    int rc = drafter_for(&v, st, ctx, n_ctx, (size_t)(n_ctx + n_out + 16), &d, &an->err);
    int32_t path[SD_VERIFY_MAX_ROWS];
    for (int32_t j = 0; !rc && j + 1 < n_out;) {
        if (!(rc = sd_drafter_observe_output(d, out[j], &an->err)))
            rc = j + 2 < an->ev->n_predict ? sd_drafter_draft(d, &dp, &an->tree, &an->err)
                                           : (sd_draft_tree_clear(&an->tree), SDNPU_OK);
        if (rc) break;
        int32_t nv = 0, opt = choose_graph(an, o, &pol, out + j + 1, n_out - j - 1, &nv);
        int32_t a = accepted_nodes(&an->tree, nv, out + j + 1, n_out - j - 1, path);
        if (nv > 0) sd_policy_observe(&pol, &an->tree, nv, path, a);
        else sd_policy_observe_skipped(&pol, &an->tree, an->tree.n, out[j + 1]);
        pr->steps++;
        pr->tokens += a + 1;
        pr->by_L[opt]++;
        pr->ms += step_ms[opt];
        for (int32_t k = 1; k <= a && !rc; k++) rc = sd_drafter_observe_output(d, out[j + k], &an->err);
        j += a + 1;
    }
    sd_drafter_free(d);
    return rc;
}

/* Break-even pair p replayed at every ratio of the grid: the larger set's
 * one-row step as profiled, its largest graph's at the ratio times the
 * smaller set's largest. */
static int replay_break_even(struct an *an, int p, struct an_stores *st, const int32_t *ctx, int32_t n_ctx,
                             const int32_t *out, int32_t n_out, struct an_priced *be) {
    const struct an_be_pair *q = &k_be_pairs[p];
    const int last_small = k_opts[q->small].n - 1, last_large = k_opts[q->large].n - 1;
    int rc = SDNPU_OK;
    for (int g = 0; g < AN_BE_GRID && !rc; g++) {
        double ms[SD_POLICY_MAX_OPTS];
        memcpy(ms, an->step_ms[q->large], sizeof ms);
        ms[last_large] = an_be_ratio(g) * an->step_ms[q->small][last_small];
        rc = replay_priced(an, q->large, ms, st, ctx, n_ctx, out, n_out, &be[g]);
    }
    return rc;
}

/* ------------------------------------------------------------ draft model */

/* The step time of a graph of at least rows rows in profile p (the
 * smallest profiled one of 1, 2, 4, 8 and 16; more rows than the largest
 * profiled take as many of its passes as they need), the head included
 * or not; 0 when none is profiled. */
static double rows_ms(const struct sd_profile *p, int32_t rows, bool head) {
    static const int32_t Ls[] = {1, 2, 4, 8, 16};
    double largest = 0.0;
    int32_t L_largest = 1;
    for (size_t i = 0; i < SD_ARRAY_LEN(Ls); i++) {
        double ms = head ? sd_profile_step_ms(p, Ls[i]) : sd_profile_pass_ms(p, Ls[i]);
        if (ms <= 0) continue;
        if (Ls[i] >= rows) return ms;
        largest = ms, L_largest = Ls[i];
    }
    return largest * (double)((rows + L_largest - 1) / L_largest);
}

/* The draft model's passes of one step: the first reads the tokens it has
 * not read (pending, the root last), each other one the draft token before
 * it; every pass runs the head's share `head` of the whole head. */
static double dm_passes_ms(const struct an *an, int32_t pending, int32_t passes, double head) {
    const struct sd_profile *p = &an->dprof;
    if (passes == 0) return 0.0;
    double head_ms = (sd_profile_step_ms(p, 1) - sd_profile_pass_ms(p, 1)) * head;
    return rows_ms(p, SD_MAX(1, pending), false) + (passes - 1) * sd_profile_pass_ms(p, 1) + passes * head_ms;
}

struct dm_step {
    int32_t drafted, accepted, passes;
};

/* The draft model's draft at the step whose root is out[j]: up to k
 * tokens, each pass one token, stopped at one whose probability is below
 * pmin (its pass was run). Accepted while it spells the output. */
static struct dm_step dm_draft(const int32_t *tok, const float *p, const int32_t *out, int32_t n_out, int32_t j,
                               int32_t k, float pmin) {
    struct dm_step s = {0, 0, 0};
    for (int32_t q = j + 1; s.drafted < k && q < n_out; q++) {
        s.passes++;
        if (p[q] < pmin) break;
        s.drafted++;
        if (s.accepted == s.drafted - 1 && tok[q] == out[q]) s.accepted++;
    }
    return s;
}

/* Draft-model variant vi replayed over the output. pending counts the
 * tokens up to the root that the draft model has not read: after its own
 * step, the last accepted draft token if its pass was not run (every
 * drafted token accepted, none cut off); after a retrieval step, all it
 * accepted. */
static int replay_dm(struct an *an, int vi, struct an_stores *st, const int32_t *ctx, int32_t n_ctx, const int32_t *out,
                     int32_t n_out, struct an_dm_count *c) {
    const struct an_dm_variant *v = &k_dm_variants[vi];
    const struct dm_pred *pr = &an->pred;
    const int32_t *tok = v->sub < 0 ? pr->tok : pr->sub[v->sub];
    const float *p = v->sub < 0 ? pr->p : pr->p_sub[v->sub];
    const double head = v->sub < 0 ? 1.0 : (double)pr->n_sub[v->sub] / sdnpu_model_n_vocab(an->ev->model);
    const bool costs = an->dprof.n_entries > 0 && an->prof.n_entries > 0;
    const struct an_variant retrieval = {"hybrid", "sam-tree", false, -1, 4, 0, false, true};
    struct sd_draft_params dp = sd_draft_default_params();
    dp.budget = retrieval.rows - 1;
    dp.max_depth = SD_MIN(dp.max_depth, dp.budget);
    struct sd_drafter *d = NULL;
    int rc = v->hybrid ? drafter_for(&retrieval, st, ctx, n_ctx, (size_t)(n_ctx + n_out + 16), &d, &an->err) : 0;
    int32_t pending = 0, path[SD_VERIFY_MAX_ROWS];
    for (int32_t j = 0; !rc && j + 1 < n_out;) {
        const bool may = j + 2 < an->ev->n_predict; /* as the engine: no draft for the budget's last token */
        pending++;
        sd_draft_tree_clear(&an->tree);
        if (d && !(rc = sd_drafter_observe_output(d, out[j], &an->err)) && may)
            rc = sd_drafter_draft(d, &dp, &an->tree, &an->err);
        if (rc) break;
        int32_t a = 0, rows = 1;
        if (an->tree.n > 0 && an->tree.main_match >= v->hybrid) {
            a = accepted_nodes(&an->tree, an->tree.n, out + j + 1, n_out - j - 1, path);
            rows = an->tree.n + 1;
            c->from_ret += a;
            pending += a;
        } else if (may && v->k > 0) {
            struct dm_step s = dm_draft(tok, p, out, n_out, j, v->k, v->pmin);
            a = s.accepted;
            rows = s.drafted + 1;
            c->from_dm += a;
            c->drafted += s.drafted;
            c->passes += s.passes;
            if (costs) c->ms += dm_passes_ms(an, pending, s.passes, head);
            pending = a == s.passes;
        }
        if (costs) c->ms += rows_ms(&an->prof, rows, true);
        c->steps++;
        for (int32_t k = 1; k <= a && d && !rc; k++) rc = sd_drafter_observe_output(d, out[j + k], &an->err);
        j += a + 1;
    }
    c->tokens += SD_MAX(0, n_out - 1);
    sd_drafter_free(d);
    return rc;
}

/* Whether every graph of option set oi has a step time. */
bool an_priced(const struct an *an, int oi) {
    bool all = an->prof.n_entries > 0;
    for (int32_t i = 0; i < k_opts[oi].n; i++) all = all && an->step_ms[oi][i] > 0;
    return all;
}

bool an_be_priced(const struct an *an, int p) {
    return an_priced(an, k_be_pairs[p].small) && an_priced(an, k_be_pairs[p].large);
}

/* The step times of every option set from the profile (--costs): 0 when
 * any of its graphs was not profiled; -1, said, when no set is priced. */
static int load_costs(struct an *an) {
    if (!an->ev->costs) return 0;
    if (sd_profile_load(an->ev->costs, NULL, &an->prof, &an->err)) {
        fprintf(stderr, "sdnpu eval: --costs: %s\n", an->err.msg);
        return -1;
    }
    bool any = false;
    for (int oi = 0; oi < AN_OPTS; oi++) {
        for (int32_t i = 0; i < k_opts[oi].n; i++) an->step_ms[oi][i] = SD_MAX(0.0, sd_profile_step_ms(&an->prof, k_opts[oi].L[i]));
        any |= an_priced(an, oi);
    }
    if (!any)
        fprintf(stderr,
                "sdnpu eval: --costs: %s prices no step of 1 and 2, 3, 4, 8 or 16 rows (sdnpu profile --L "
                "1,2,3,4,8,16)\n",
                an->ev->costs);
    return any ? 0 : -1;
}

/* ------------------------------------------------------------ a sample */

/* The sample's history list as a store (one record per item). */
static int history_store(struct an *an, const struct ds_sample *s, struct sd_sam **out) {
    *out = NULL;
    if (!s->n_history) return SDNPU_OK;
    int rc = sd_sam_create(1024, out, &an->err);
    for (size_t i = 0; i < s->n_history && !rc; i++) {
        int32_t *tok = NULL;
        size_t n = 0;
        if ((rc = eval_tokenize(an->ev->model, s->history[i], &tok, &n)))
            sd_err_set(&an->err, rc, "history item %zu: %s", i + 1, sdnpu_model_last_error(an->ev->model));
        if (!rc) rc = sd_sam_append_record(*out, tok, n, &an->err);
        free(tok);
    }
    if (!rc) rc = sd_sam_freeze(*out, &an->err);
    return rc;
}

/* Generate the sample's greedy output once, with calibration on (its store
 * is the one the +calib variants search); *n_prompt and *n_all then count
 * the session's tokens: the prompt, then the output as evaluated. */
static int generate(struct an *an, const struct ds_sample *s, int32_t *n_prompt, int32_t **all, int32_t *n_all,
                    double *prefill_ms) {
    struct eval *ev = an->ev;
    struct prompt pr;
    if (eval_sample_prompt(ev, s, &pr)) return sd_err_set(&an->err, SDNPU_ERR_OOM, "out of memory");
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    char msg[256];
    int rc = sdnpu_spec_parse("sam+calib", &gp.spec, msg, sizeof msg);
    gp.n_predict = ev->n_predict;
    gp.sampling.temperature = 0.0f;
    gp.stop = pr.stops;
    gp.n_stop = pr.n_stops;
    gp.chat = pr.system != NULL;
    gp.system = pr.system;
    gp.stop_on_repeat = ev->guard;
    struct sdnpu_stats stats = {0};
    sdnpu_session_reset(ev->session);
    if (!rc) rc = sdnpu_session_generate(ev->session, pr.text, pr.len, &gp, &stats);
    free(pr.text);
    if (rc) return sd_err_set(&an->err, rc, "%s", sdnpu_session_last_error(ev->session));
    /* The session holds the prompt and the output; the end-of-generation
     * token that ended it was produced by a step too. */
    int32_t n = 0, eog = sd_tool_session_eog(ev->session);
    const int32_t *held = sd_tool_session_tokens(ev->session, &n);
    if (!(*all = malloc(((size_t)n + 1) * sizeof **all))) return sd_err_set(&an->err, SDNPU_ERR_OOM, "out of memory");
    memcpy(*all, held, (size_t)n * sizeof **all);
    if (eog >= 0) (*all)[n++] = eog;
    *n_prompt = stats.n_prompt_tokens;
    *n_all = n;
    *prefill_ms = stats.prefill_ms - stats.calib_ms;
    return SDNPU_OK;
}

static int analyze_sample(struct an *an, const struct ds_sample *s, struct an_set *acc) {
    int32_t n_prompt = 0, n_all = 0, *all = NULL;
    struct an_stores st = {0};
    double prefill_ms = 0.0;
    int rc = generate(an, s, &n_prompt, &all, &n_all, &prefill_ms);
    if (!rc && an->dm) rc = eval_dm_predict(an->dm, all, n_prompt, n_all, &an->pred, &an->err);
    if (!rc) rc = history_store(an, s, &st.hist);
    if (!rc) rc = sd_sam_create((size_t)n_prompt, &st.ctx, &an->err);
    if (!rc) rc = sd_sam_append_n(st.ctx, all, (size_t)n_prompt, &an->err);
    if (!rc) rc = sd_sam_freeze(st.ctx, &an->err);
    if (!rc) rc = sd_sam_create((size_t)(n_all - n_prompt + 1), &st.out, &an->err);
    st.calib = sd_tool_session_calib(an->ev->session);
    st.replies = an->replies;
    const int32_t *out = all + n_prompt;
    int32_t n_out = n_all - n_prompt;
    for (int vi = 0; vi < AN_VARIANTS && !rc; vi++) rc = replay_variant(an, vi, &st, all, n_prompt, out, n_out, acc);
    for (int oi = 0; oi < AN_OPTS && !rc; oi++)
        if (an_priced(an, oi))
            rc = replay_priced(an, oi, an->step_ms[oi], &st, all, n_prompt, out, n_out, &acc->pr[oi]);
    for (int p = 0; p < AN_BE_PAIRS && !rc; p++)
        if (an_be_priced(an, p)) rc = replay_break_even(an, p, &st, all, n_prompt, out, n_out, acc->be[p]);
    for (int vi = 0; vi < AN_DM && an->dm && !rc; vi++) rc = replay_dm(an, vi, &st, all, n_prompt, out, n_out, &acc->dm[vi]);
    if (!rc) rc = replay_ceilings(&st, out, n_out, acc, &an->err);
    /* The output joins the replies for the samples after it, as a
     * session's replies store keeps it (engine/session.c). */
    if (!rc) rc = sd_sam_append_record(an->replies, out, (size_t)n_out, &an->err);
    if (!rc) rc = sd_sam_freeze(an->replies, &an->err);
    if (!rc) {
        acc->samples++;
        acc->n_out += n_out;
        acc->prefill_ms += prefill_ms;
        acc->dm_prefill_ms += an->pred.prefill_ms;
    }
    eval_dm_pred_free(&an->pred);
    sd_sam_free(st.ctx);
    sd_sam_free(st.out);
    sd_sam_free(st.hist);
    free(all);
    return rc;
}

int eval_analyze(struct eval *ev) {
    struct an *an = calloc(1, sizeof *an);
    if (!an || !(an->sets = calloc(ev->n_sets ? ev->n_sets : 1, sizeof *an->sets)) ||
        sd_draft_tree_init(&an->tree, 256, &an->err) || sd_sam_create(4096, &an->replies, &an->err) ||
        sd_sam_freeze(an->replies, &an->err)) {
        fprintf(stderr, "sdnpu eval: out of memory\n");
        if (an) {
            sd_draft_tree_free(&an->tree);
            sd_sam_free(an->replies);
            free(an->sets);
        }
        free(an);
        return -1;
    }
    an->ev = ev;
    int rc = load_costs(an);
    if (!rc && ev->draft_model) rc = eval_dm_open(ev, &an->dm);
    if (!rc && ev->draft_costs && sd_profile_load(ev->draft_costs, NULL, &an->dprof, &an->err)) {
        fprintf(stderr, "sdnpu eval: --draft-costs: %s\n", an->err.msg);
        rc = -1;
    }
    size_t total = 0, done = 0, n_max = 0;
    for (size_t d = 0; d < ev->n_sets; d++) {
        total += ev->sets[d].n, an->sets[d].name = ev->sets[d].name;
        n_max = SD_MAX(n_max, ev->sets[d].n);
    }
    /* In the order the methods' runs take (eval.c): a sample of each
     * dataset in turn, so the replies store holds what it holds there. */
    for (size_t i = 0; i < n_max && !rc; i++) {
        for (size_t d = 0; d < ev->n_sets && !rc; d++) {
            if (i >= ev->sets[d].n) continue;
            const struct ds_sample *s = &ev->sets[d].samples[i];
            fprintf(stderr, "sdnpu eval: analyze %zu/%zu %s/%s\n", ++done, total, ev->sets[d].name, s->id);
            if ((rc = analyze_sample(an, s, &an->sets[d])))
                fprintf(stderr, "sdnpu eval: %s:%zu (%s): %s: %s\n", ev->sets[d].path, s->line, s->id,
                        sdnpu_status_str(rc), an->err.msg);
        }
    }
    if (!rc) rc = an_report(an);
    sd_draft_tree_free(&an->tree);
    sd_sam_free(an->replies);
    sd_profile_free(&an->prof);
    sd_profile_free(&an->dprof);
    eval_dm_close(an->dm);
    free(an->sets);
    free(an);
    return rc ? -1 : 0;
}
