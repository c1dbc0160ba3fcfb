/* engine/session.c - sessions: their making, context, chunked prefill and
 * state; a request runs in engine/generate.c. */
#include <stdio.h>
#include <string.h>

#include "engine/api.h"
#include "engine/pcache.h"
#include "engine/stream.h"
#include "engine/tools.h"
#include "sched/profile.h"
#include "verify/verify.h"

/* Rows of the decode/verification graph G2 where no profile chooses them:
 * the root and three draft tokens. On the instruct models the drafts'
 * accepted runs are short (72-76% of steps accept nothing), and without a
 * matrix unit an 8-row pass costs 1.3-1.4x a 4-row one (Xeon, AVX-512
 * VNNI; more where the CPU has AVX2 alone), which the priced replay of
 * cost-aware drafting (sdnpu eval --analyze --costs; docs/acceptance.md,
 * "How many rows a verification should have") puts behind 4 rows on both
 * models: 0.5B 1.64x vs 1.71x over plain decoding, 1.5B 1.33x vs 1.50x. */
#define SD_DEFAULT_N_VERIFY 4
/* A profile takes them down to 3 where a step of 4 rows costs more than
 * this many times one of 3, and on to 2 where a step of 3 costs more than
 * SD_VERIFY_DOWN_TO_2_COST one of 2. Each bound sits between the two
 * instruct models' break-evens in `sdnpu eval --analyze --costs` ("Where
 * more rows stop paying": the cost-aware replay over the evaluation's
 * product prompts with the larger graph's step priced at a ratio of the
 * smaller's; docs/acceptance.md, "Stop 92"): from 4 rows to 3 at 1.07x on
 * the 0.5B and 1.05x on the 1.5B, from 3 to 2 at 1.15x and 1.10x. */
#define SD_VERIFY_DOWN_TO_3_COST 1.06
#define SD_VERIFY_DOWN_TO_2_COST 1.12
/* A profile doubles them to 8 where a step of 8 rows costs at most this
 * many times one of 4 (the same replay's break-even: 1.12x on the 0.5B,
 * 1.06x on the 1.5B) ... */
#define SD_VERIFY_FIRST_DOUBLE_COST 1.09
/* ... and on while a step of twice the rows costs at most this many times
 * one of half: each doubling past 8 gained only 2-8% tokens a call in the
 * replay of the evaluation datasets, so only a nearly free one pays. */
#define SD_VERIFY_DOUBLE_COST 1.05
/* The replies store's bound when the session params leave it 0: about
 * 16,000 tokens (20 bytes a record, 4 a token), tens of replies, whose
 * automaton takes a few MiB at most. */
#define SD_REPLIES_BYTES ((uint64_t)64 << 10)

struct sdnpu_session_params sdnpu_session_default_params(void) {
    struct sd_draft_params dp = sd_draft_default_params();
    struct sdnpu_session_params p = {.n_ctx = 4096,
                                     .n_batch = 256,
                                     .n_threads = 0,
                                     .n_verify = 0,
                                     .calib_lead = dp.calib_lead,
                                     .calib_min_match = dp.calib_min_match};
    return p;
}

struct sdnpu_sampling_params sdnpu_sampling_default_params(void) {
    struct sdnpu_sampling_params p = {.temperature = 0.8f,
                                      .top_k = 40,
                                      .top_p = 0.95f,
                                      .min_p = 0.05f,
                                      .repeat_penalty = 1.0f,
                                      .repeat_last_n = 64,
                                      .seed = 0xC0FFEE};
    return p;
}

struct sdnpu_generate_params sdnpu_generate_default_params(void) {
    struct sdnpu_generate_params p = {0};
    p.n_predict = 256;
    p.sampling = sdnpu_sampling_default_params();
    p.adaptive = true;
    return p;
}

int sd_session_fail(struct sdnpu_session *s, int status) {
    if (s->err.status == 0) s->err.status = status;
    SD_LOGE("%s", s->err.msg);
    return status;
}

/* The graph switch's times from the profile: each block's L1 chunk on G1
 * and on G2 (ceil(L1 / L2) passes), and its G2 load, and the head's. The
 * profile prepares with the session's threads; the loader thread prepares
 * alone, so its loads are taken to be that many times as long until
 * measured. */
static void profile_switch_costs(struct sdnpu_session *s, const struct sd_profile *prof) {
    int32_t L1 = sd_rt_n_prefill(s->rt), L2 = s->n_verify, passes = (L1 + L2 - 1) / L2;
    double g1[SD_MAX_BLOCKS] = {0}, g2[SD_MAX_BLOCKS] = {0}, load[SD_MAX_BLOCKS + 1] = {0};
    int32_t nb = sd_rt_n_blocks(s->rt), threads = sd_pool_n_threads(s->pool);
    for (int32_t e = 0; e < prof->n_entries; e++) {
        const struct sd_profile_entry *x = &prof->entries[e];
        int32_t b = x->block < 0 ? nb : x->block;
        if (b > nb || (x->block >= 0 && prof->n_blocks != nb)) continue;
        if (x->L == L1 && b < nb) g1[b] = x->compute_ms;
        if (x->L == L2 && b < nb) g2[b] = x->compute_ms * passes;
        if (x->L == L2) load[b] = x->load_ms * threads;
    }
    sd_rt_set_block_costs(s->rt, g1, g2, load);
}

/* The key this session's profile is kept under: its model, machine,
 * backend (kernels, weights) and threads. */
static void profile_key(const struct sdnpu_session *s, char *key, size_t cap) {
    sd_profile_key(s->model->path, sd_rt_backend_desc(s->rt), sd_pool_n_threads(s->pool), key, cap);
}

/* The profile beside the model (written by `sdnpu profile`), if it was
 * measured for this model, machine, backend and thread count. */
static bool load_profile(struct sdnpu_session *s, struct sd_profile *prof) {
    char key[512], found[4096];
    profile_key(s, key, sizeof key);
    struct sd_err err = {0};
    if (sd_profile_load_for(s->model->path, key, prof, found, sizeof found, &err)) {
        if (err.status != SDNPU_ERR_NOT_FOUND) SD_LOGD("not using the profile: %s", err.msg);
        return false;
    }
    SD_LOGD("using the profile %s", found);
    return true;
}

int sd_tool_profile_target(struct sdnpu_model *model, struct sdnpu_session_params sp, char *key, size_t cap,
                           struct sd_wstore **weights) {
    struct sdnpu_session *s = NULL;
    const int rc = sdnpu_session_create(model, sp, &s);
    if (rc) return rc;
    profile_key(s, key, cap);
    *weights = s->rp.weights;
    sdnpu_session_free(s);
    return SDNPU_OK;
}

/* Appends "a step of B rows costs R times one of A (above|at most
 * BOUND)" to why (at most cap bytes, ";"-separated), where why is given. */
static void say_ratio(char *why, size_t cap, int32_t a_rows, int32_t b_rows, double r, double bound) {
    if (!why || !cap) return;
    const size_t n = strlen(why);
    if (n + 1 >= cap) return;
    snprintf(why + n, cap - n, "%sa step of %d rows costs %.3f times one of %d (%s %.2f)", n ? "; " : "",
             b_rows, r, a_rows, r > bound ? "above" : "at most", bound);
}

/* L2 from the profile: SD_DEFAULT_N_VERIFY, one row fewer while the
 * smaller step is profiled and the larger costs more than
 * SD_VERIFY_DOWN_TO_3_COST (4 to 3) or SD_VERIFY_DOWN_TO_2_COST (3 to 2) times it;
 * else doubled while the doubling is profiled and costs at most
 * SD_VERIFY_FIRST_DOUBLE_COST the first time, SD_VERIFY_DOUBLE_COST after.
 * A profile without 3 rows (made before they were measured) keeps 4. */
int32_t sd_session_verify_rows_why(const struct sd_profile *prof, char *why, size_t cap) {
    if (why && cap) why[0] = '\0';
    int32_t L = SD_DEFAULT_N_VERIFY;
    while (L > 2) {
        const double a = sd_profile_step_ms(prof, L - 1), b = sd_profile_step_ms(prof, L);
        const double most = L == SD_DEFAULT_N_VERIFY ? SD_VERIFY_DOWN_TO_3_COST : SD_VERIFY_DOWN_TO_2_COST;
        if (!(a > 0 && b > 0)) break;
        say_ratio(why, cap, L - 1, L, b / a, most);
        if (!(b > most * a)) break;
        L--;
    }
    if (L < SD_DEFAULT_N_VERIFY) return L;
    while (2 * L <= SD_VERIFY_MAX_ROWS) {
        const double a = sd_profile_step_ms(prof, L), b = sd_profile_step_ms(prof, 2 * L);
        const double most = L == SD_DEFAULT_N_VERIFY ? SD_VERIFY_FIRST_DOUBLE_COST : SD_VERIFY_DOUBLE_COST;
        if (!(a > 0 && b > 0)) break;
        say_ratio(why, cap, L, 2 * L, b / a, most);
        if (!(b <= most * a)) break;
        L *= 2;
    }
    return L;
}

int32_t sd_session_verify_rows(const struct sd_profile *prof) {
    return sd_session_verify_rows_why(prof, NULL, 0);
}

/* The profile's costs for the prefill policy, graph switching and the
 * cost-aware drafting policy. */
static void rt_costs(struct sdnpu_session *s, const struct sd_profile *prof) {
    double ms[SD_SET_N];
    ms[SD_SET_G1] = sd_profile_pass_ms(prof, sd_rt_n_prefill(s->rt));
    ms[SD_SET_G2] = sd_profile_pass_ms(prof, s->n_verify);
    ms[SD_SET_G0] = sd_profile_pass_ms(prof, 1);
    ms[SD_SET_GR] = sd_profile_pass_ms(prof, sd_rt_set_rows(s->rt, SD_SET_GR)); /* -1 where unused (0 rows) */
    sd_rt_set_costs(s->rt, ms);
    profile_switch_costs(s, prof);
}

static void use_profile(struct sdnpu_session *s, const struct sd_profile *prof) {
    rt_costs(s, prof);
    double step[2] = {sd_profile_step_ms(prof, 1), sd_profile_step_ms(prof, s->n_verify)};
    sd_step_init_policy(&s->step, s->estimator, step);
}

/* calib_params' text, "top_k=3,min_prob=0.2,...", over calibration's
 * defaults. The ranges are sd_calib_create's to check. */
static int parse_calib_params(const char *text, struct sd_calib_params *cp, struct sd_err *err) {
    *cp = sd_calib_default_params();
    for (const char *q = text; q && *q;) {
        char name[32];
        double v;
        int used = 0;
        if (sscanf(q, "%31[^=,]=%lf%n", name, &v, &used) != 2 || (q[used] && q[used] != ',') || !(v >= -1e9 && v <= 1e9))
            return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calib_params \"%s\": expected name=value[,name=value...]",
                              text);
        if (!strcmp(name, "top_k")) cp->top_k = (int32_t)v;
        else if (!strcmp(name, "min_prob")) cp->min_prob = (float)v;
        else if (!strcmp(name, "max_depth")) cp->max_depth = (int32_t)v;
        else if (!strcmp(name, "node_budget")) cp->node_budget = (int32_t)v;
        else if (!strcmp(name, "prefix")) cp->prefix = (int32_t)v;
        else if (!strcmp(name, "max_store")) cp->max_store = (int32_t)v;
        else
            return sd_err_set(err, SDNPU_ERR_INVALID_ARG,
                              "calib_params: unknown parameter '%s' (top_k, min_prob, max_depth, node_budget, prefix, "
                              "max_store)",
                              name);
        q += used;
        if (*q == ',') q++;
    }
    return SDNPU_OK;
}

/* Drafting's tuning, checked: the settings the measurements that chose
 * the defaults compare (docs/benchmarks-gemma.md, "The evaluation
 * datasets"; docs/benchmarks-stages.md, "In-context calibration"). None
 * of it changes the output. */
static int check_tuning(const struct sdnpu_session_params *p, struct sd_calib_params *cp, struct sd_err *err) {
    if ((unsigned)p->policy_estimator > SDNPU_POLICY_ESTIMATOR_GLOBAL)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "policy_estimator %d: 0 match, 1 store, 2 global",
                          (int)p->policy_estimator);
    if (p->calib_lead < -1)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calib_lead %d: -1 last, 0 by match length, N > 0 first",
                          p->calib_lead);
    if (p->calib_min_match < 1)
        return sd_err_set(err, SDNPU_ERR_INVALID_ARG, "calib_min_match %d must be at least 1", p->calib_min_match);
    return parse_calib_params(p->calib_params, cp, err);
}

/* An empty in-memory store of the session's replies, s->replies_bytes of
 * records at most. */
static int replies_open(const struct sdnpu_session *s, struct sd_history **out, struct sd_err *err) {
    struct sd_history_params hp = sd_history_default_params();
    hp.max_bytes = s->replies_bytes;
    hp.fsync = false;
    return sd_history_open(NULL, &hp, out, err);
}

/* The replies store of sdnpu_session_params.replies_bytes (none for < 0). */
static int replies_create(struct sdnpu_session *s, int64_t bytes, struct sd_err *err) {
    if (bytes < 0) return SDNPU_OK;
    s->replies_bytes = bytes ? (uint64_t)bytes : SD_REPLIES_BYTES;
    int rc = replies_open(s, &s->replies, err);
    if (!rc) rc = sd_sam_create(1024, &s->replies_sam, err);
    if (!rc) rc = sd_sam_freeze(s->replies_sam, err);
    return rc;
}

void sdnpu_session_forget_replies(struct sdnpu_session *s) {
    if (!s || !s->replies) return;
    struct sd_history *fresh = NULL;
    if (replies_open(s, &fresh, NULL)) return; /* out of memory: the old replies stay */
    sd_history_close(s->replies);
    s->replies = fresh;
    sd_sam_clear(s->replies_sam);
    sd_sam_freeze(s->replies_sam, NULL);
}

enum sdnpu_status sdnpu_session_create(struct sdnpu_model *model, struct sdnpu_session_params p,
                                       struct sdnpu_session **out) {
    if (!out) return SDNPU_ERR_INVALID_ARG;
    *out = NULL;
    if (!model) return SDNPU_ERR_INVALID_ARG;
    struct sd_err err = {0};
    const struct sd_model_config *c = &model->m->cfg;
    if (c->n_layer == 0) {
        sd_err_set(&err, SDNPU_ERR_STATE, "the model was loaded vocab_only; it cannot run a session");
        return sd_model_fail(model, &err);
    }
    if (p.n_ctx <= 0) p.n_ctx = 4096;
    if (p.n_ctx > c->n_ctx_train) p.n_ctx = c->n_ctx_train;
    if (p.n_batch <= 0) p.n_batch = 256;
    if (p.n_batch > SD_MAX_BATCH_ROWS) {
        sd_err_set(&err, SDNPU_ERR_INVALID_ARG, "n_batch %d is larger than %d", p.n_batch, SD_MAX_BATCH_ROWS);
        return sd_model_fail(model, &err);
    }
    const bool auto_verify = p.n_verify <= 0;
    if (auto_verify) p.n_verify = SD_DEFAULT_N_VERIFY;
    if (p.n_verify > SD_VERIFY_MAX_ROWS) {
        sd_err_set(&err, SDNPU_ERR_INVALID_ARG, "n_verify %d is larger than %d", p.n_verify, SD_VERIFY_MAX_ROWS);
        return sd_model_fail(model, &err);
    }
    enum sd_kernels kernels;
    if (!sd_kernels_parse(p.kernels, &kernels)) {
        sd_err_set(&err, SDNPU_ERR_INVALID_ARG, "kernels \"%s\": expected \"fast\" or \"ggml\"", p.kernels);
        return sd_model_fail(model, &err);
    }
    enum sd_weights_mode weights;
    if (!sd_weights_mode_parse(p.weights, &weights)) {
        sd_err_set(&err, SDNPU_ERR_INVALID_ARG, "weights \"%s\": expected \"shared\" or \"private\"", p.weights);
        return sd_model_fail(model, &err);
    }
    /* A cache directory that cannot be made costs only the cache. */
    if (weights == SD_WEIGHTS_SHARED && kernels == SD_KERNELS_FAST && p.weight_cache &&
        sd_wstore_use_cache(model->weights, p.weight_cache, &model->cache_key, &err)) {
        SD_LOGW("%s; the weights are packed without a cache", err.msg);
        sd_err_clear(&err);
    }
    static const enum sd_switch_mode modes[] = {SD_SWITCH_PROGRESSIVE, SD_SWITCH_SYNC, SD_SWITCH_NAIVE};
    if ((unsigned)p.graph_switch > SDNPU_GRAPH_SWITCH_NAIVE_ASYNC) {
        sd_err_set(&err, SDNPU_ERR_INVALID_ARG, "graph_switch %d: 0 progressive, 1 sync, 2 naive-async",
                   (int)p.graph_switch);
        return sd_model_fail(model, &err);
    }
    static const enum sd_prefill_policy policies[] = {SD_PREFILL_AUTO, SD_PREFILL_PAD, SD_PREFILL_PIPE};
    if ((unsigned)p.prefill_policy > SDNPU_PREFILL_PIPE) {
        sd_err_set(&err, SDNPU_ERR_INVALID_ARG, "prefill_policy %d: 0 auto, 1 pad, 2 pipe", (int)p.prefill_policy);
        return sd_model_fail(model, &err);
    }
    static const enum sd_policy_estimator estimators[] = {SD_EST_MATCH, SD_EST_STORE, SD_EST_GLOBAL};
    struct sd_calib_params cp;
    if (check_tuning(&p, &cp, &err)) return sd_model_fail(model, &err);
    int rc;
    struct sdnpu_session *s = sd_calloc(1, sizeof *s);
    if (!s) {
        sd_err_set(&err, SDNPU_ERR_OOM, "out of memory for a session");
        return sd_model_fail(model, &err);
    }
    s->model = model;
    s->n_ctx = p.n_ctx;
    s->n_batch = p.n_batch;
    if ((rc = sd_pool_create(p.n_threads > 0 ? p.n_threads : model->n_threads, &s->pool, &err))) goto fail;
    s->n_verify = p.n_verify;
    s->switch_mode = modes[p.graph_switch];
    s->estimator = estimators[p.policy_estimator];
    s->calib_lead = p.calib_lead;
    s->calib_min_match = p.calib_min_match;
    s->calib_params = cp;
    /* Calibration is made on first use; parameters of the caller's are
     * checked now, so that a bad one fails here and not a later request. */
    if (p.calib_params && *p.calib_params && (rc = sd_calib_create(&s->calib_params, &s->calib, &err))) goto fail;
    s->mem_limit = p.mem_limit;
    if ((rc = replies_create(s, p.replies_bytes, &err))) goto fail;
    if (p.prompt_cache_bytes && (rc = sd_pcache_create(p.prompt_cache_bytes, &s->pcache, &err))) goto fail;
    struct sd_rt_params rp = {.backend = p.backend,
                              .cl_device = p.cl_device,
                              .kernels = kernels,
                              .weights = weights == SD_WEIGHTS_SHARED ? model->weights : NULL,
                              .n_ctx = s->n_ctx,
                              .n_prefill = s->n_batch,
                              .n_verify = s->n_verify,
                              .mem_limit = p.mem_limit,
                              .prefill_policy = policies[p.prefill_policy]};
    if ((rc = sd_rt_create(model->m, s->pool, &rp, &s->rt, &err))) goto fail;
    struct sd_profile prof;
    const bool profiled = load_profile(s, &prof);
    const int32_t L2 = profiled && auto_verify ? sd_session_verify_rows(&prof) : s->n_verify;
    if (L2 != s->n_verify) {
        /* Nothing is prepared yet: a runtime of the profile's L2 instead. */
        sd_rt_free(s->rt);
        s->rt = NULL;
        rp.n_verify = s->n_verify = L2;
        if ((rc = sd_rt_create(model->m, s->pool, &rp, &s->rt, &err))) {
            sd_profile_free(&prof);
            goto fail;
        }
    }
    SD_LOGD("verification graph of %d rows (%s)", L2,
            !auto_verify ? "the caller's n_verify"
            : profiled   ? "the profile's choice"
                         : "no profile: the default");
    s->rp = rp;
    if (rp.backend)
        s->rp.backend = strcmp(rp.backend, "opencl") ? "cpu" : "opencl"; /* not the caller's string */
    s->logits = sd_calloc((size_t)c->n_vocab, sizeof *s->logits);
    sd_step_init(&s->step, s->rt, s->logits, c->n_vocab, s->n_ctx, s->n_verify);
    sd_step_init_policy(&s->step, s->estimator, (double[2]){0, 0});
    if (profiled) {
        use_profile(s, &prof);
        sd_profile_free(&prof);
    }
    s->ctx_tokens = sd_calloc((size_t)s->n_ctx, sizeof *s->ctx_tokens);
    s->eog_token = -1;
    s->text_cap = 4096;
    s->text = sd_malloc(s->text_cap);
    if (!s->logits || !s->ctx_tokens || !s->text) {
        rc = sd_err_set(&err, SDNPU_ERR_OOM, "out of memory for session buffers");
        goto fail;
    }
    *out = s;
    return SDNPU_OK;
fail:
    sdnpu_session_free(s);
    return sd_model_fail(model, &err);
}

void sdnpu_session_free(struct sdnpu_session *s) {
    if (!s) return;
    sd_rt_free(s->rt);
    sd_pool_free(s->pool);
    sd_free(s->logits);
    sd_free(s->ctx_tokens);
    sd_free(s->text);
    sd_step_free(&s->step);
    sd_history_close(s->history);
    sd_sam_free(s->history_sam);
    sd_history_close(s->replies);
    sd_sam_free(s->replies_sam);
    sd_calib_free(s->calib);
    sd_sam_free(s->calib_sam);
    sd_pcache_free(s->pcache);
    sd_guard_free(&s->guard);
    sd_grammar_free(s->json);
    sd_schema_free(s->schema);
    sd_free(s);
}

const char *sdnpu_session_last_error(const struct sdnpu_session *s) { return s ? s->err.msg : ""; }

void sdnpu_session_reset(struct sdnpu_session *s) {
    if (!s) return;
    s->n_past = 0;
    s->have_logits = false;
    s->has_pending = false;
    s->calib_valid = 0;
    sd_rt_kv_truncate(s->rt, 0);
}

int32_t sdnpu_session_n_past(const struct sdnpu_session *s) { return s ? s->n_past + s->has_pending : 0; }

int32_t sdnpu_session_n_ctx(const struct sdnpu_session *s) { return s ? s->n_ctx : 0; }

/* A runtime of n_ctx slots holding the first n of rt's (a snapshot moved
 * across) and the graph sets rt holds (so the shared weights stay in the
 * store when rt goes), or NULL with the reason in err. */
static struct sd_rt *rt_moved(struct sdnpu_session *s, int32_t n_ctx, int32_t n, struct sd_err *err) {
    struct sd_rt_params rp = s->rp;
    rp.n_ctx = n_ctx;
    const size_t bytes = sd_rt_kv_snapshot_bytes(s->rt, n);
    void *kv = n > 0 ? sd_malloc(bytes) : NULL;
    struct sd_rt *rt = NULL;
    if (n > 0 && !kv) {
        sd_err_set(err, SDNPU_ERR_OOM, "out of memory moving %d tokens of context (%zu bytes)", n, bytes);
        return NULL;
    }
    if (!sd_rt_create(s->model->m, s->pool, &rp, &rt, err) && n > 0) {
        sd_rt_kv_snapshot(s->rt, n, kv);
        sd_rt_kv_restore(rt, kv, sd_rt_kv_keys(s->rt), n, n);
    }
    sd_free(kv);
    if (rt && sd_rt_prepare_like(rt, s->rt, err)) {
        sd_rt_free(rt);
        return NULL;
    }
    return rt;
}

enum sdnpu_status sdnpu_session_set_n_ctx(struct sdnpu_session *s, int32_t n_ctx) {
    if (!s) return SDNPU_ERR_INVALID_ARG;
    sd_err_clear(&s->err);
    const int32_t held = s->n_past + s->has_pending;
    if (n_ctx < 1)
        return sd_session_fail(s,
                               sd_err_set(&s->err, SDNPU_ERR_INVALID_ARG, "a context of %d tokens", n_ctx));
    n_ctx = SD_MIN(n_ctx, s->model->m->cfg.n_ctx_train);
    if (n_ctx < held)
        return sd_session_fail(s, sd_err_set(&s->err, SDNPU_ERR_CONTEXT_FULL,
                                             "the session holds %d tokens; a context of %d cannot hold them",
                                             held, n_ctx));
    if (n_ctx == s->n_ctx) return SDNPU_OK;
    int32_t *tokens = sd_calloc((size_t)n_ctx, sizeof *tokens);
    if (!tokens)
        return sd_session_fail(s, sd_err_set(&s->err, SDNPU_ERR_OOM, "out of memory for %d tokens", n_ctx));
    struct sd_rt *rt = rt_moved(s, n_ctx, s->n_past, &s->err);
    if (!rt) {
        sd_free(tokens);
        return sd_session_fail(s, s->err.status);
    }
    memcpy(tokens, s->ctx_tokens, (size_t)held * sizeof *tokens);
    sd_rt_free(s->rt);
    sd_free(s->ctx_tokens);
    if (n_ctx < s->n_ctx) sd_heap_trim(); /* a smaller context is memory given back: all of it */
    s->rt = rt;
    s->ctx_tokens = tokens;
    s->n_ctx = s->rp.n_ctx = n_ctx;
    sd_step_resize(&s->step, rt, n_ctx);
    struct sd_profile prof;
    if (load_profile(s, &prof)) {
        rt_costs(s, &prof);
        sd_profile_free(&prof);
    }
    return SDNPU_OK;
}

enum sdnpu_status sdnpu_session_reserve(struct sdnpu_session *s, int64_t n_tokens, int32_t n_ctx_max) {
    if (!s) return SDNPU_ERR_INVALID_ARG;
    sd_err_clear(&s->err);
    const int32_t model = s->model->m->cfg.n_ctx_train;
    const int64_t most = n_ctx_max > 0 && n_ctx_max < model ? n_ctx_max : model;
    if (n_tokens <= s->n_ctx) return SDNPU_OK;
    if (n_tokens > most)
        return sd_session_fail(s, sd_err_set(&s->err, SDNPU_ERR_CONTEXT_FULL,
                                             "%lld tokens do not fit: the context grows to %lld at most",
                                             (long long)n_tokens, (long long)most));
    const int64_t want = SD_MAX(2 * (int64_t)s->n_ctx, (n_tokens + 4095) / 4096 * 4096);
    return sdnpu_session_set_n_ctx(s, (int32_t)SD_MIN(want, most));
}

void sdnpu_session_cancel(struct sdnpu_session *s) {
    if (s) atomic_store(&s->cancel, 1);
}

/* A logit sink that copies each prefill pass's logits into a caller's
 * [n][n_vocab] buffer (sdnpu_session_eval's contract). */
struct logits_copy {
    float *dst;
    size_t n_vocab;
};

static bool copy_logits(void *ud, int32_t pos0, int32_t n, const float *logits) {
    struct logits_copy *c = ud;
    memcpy(c->dst + (size_t)pos0 * c->n_vocab, logits, (size_t)n * c->n_vocab * sizeof(float));
    return true;
}

/* Evaluate n tokens (causal chunked prefill on the session's graphs).
 * all_logits (if not NULL) receives logits for every token; the last
 * token's logits are kept in s->logits. */
static int eval_tokens(struct sdnpu_session *s, const int32_t *tokens, size_t n, float *all_logits,
                       const struct sd_subset_sink *subset, const struct sd_prefill_watch *watch) {
    int32_t nv = s->model->m->cfg.n_vocab;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= nv)
            return sd_err_set(&s->err, SDNPU_ERR_INVALID_ARG, "token %d at index %zu is outside the vocabulary (0..%d)",
                              tokens[i], i, nv - 1);
    if (n > (size_t)(s->n_ctx - s->n_past))
        return sd_err_set(&s->err, SDNPU_ERR_CONTEXT_FULL,
                          "%zu tokens do not fit: the context holds %d of %d tokens already", n, s->n_past, s->n_ctx);
    if (n == 0) return SDNPU_OK;
    struct logits_copy copy = {all_logits, (size_t)nv};
    struct sd_logit_sink sink = {copy_logits, &copy};
    int rc = sd_rt_prefill(s->rt, tokens, (int32_t)n, s->n_past, all_logits ? &sink : NULL, subset, watch, s->logits,
                           &s->err);
    if (rc) {
        /* Whatever a failed chunk wrote is not part of the context. */
        sd_rt_kv_truncate(s->rt, s->n_past);
        return rc;
    }
    memcpy(s->ctx_tokens + s->n_past, tokens, n * sizeof *tokens);
    s->n_past += (int32_t)n;
    s->have_logits = true;
    sd_step_logits_written(&s->step);
    return SDNPU_OK;
}

int sd_session_flush_pending(struct sdnpu_session *s) {
    if (!s->has_pending) return SDNPU_OK;
    int32_t tok = s->ctx_tokens[s->n_past];
    int rc = eval_tokens(s, &tok, 1, NULL, NULL, NULL);
    if (!rc) s->has_pending = false;
    return rc;
}

/* The watch over a prefill's chunks, a generate's prompt (p its params)
 * or sdnpu_session_eval's tokens (p NULL): the caller's progress callback,
 * and a cancel stops the prefill after the chunk it came in (a document or
 * transcript of thousands of tokens takes seconds to minutes). */
struct prefill_watch {
    struct sdnpu_session *s;
    const struct sdnpu_generate_params *p;
};

static bool prefill_chunk(void *ud, int32_t done, int32_t n) {
    const struct prefill_watch *w = ud;
    const bool go = !w->p || !w->p->on_prefill || w->p->on_prefill(done, n, w->p->user);
    return go && !atomic_load(&w->s->cancel);
}

int sd_session_prefill(struct sdnpu_session *s, const int32_t *tokens, size_t n,
                       const struct sdnpu_generate_params *p, const struct sd_subset_sink *subset) {
    const struct prefill_watch pw = {s, p};
    const struct sd_prefill_watch watch = {prefill_chunk, (void *)&pw};
    return eval_tokens(s, tokens, n, NULL, subset, &watch);
}

enum sdnpu_status sdnpu_session_eval(struct sdnpu_session *s, const sdnpu_token *tokens, size_t n_tokens,
                                     float *logits, size_t logits_cap) {
    if (!s || (!tokens && n_tokens)) return SDNPU_ERR_INVALID_ARG;
    sd_err_clear(&s->err);
    if (logits) {
        size_t need;
        if (sd_mul_ovf_size(n_tokens, (size_t)s->model->m->cfg.n_vocab, &need) || need > logits_cap) {
            sd_err_set(&s->err, SDNPU_ERR_BUFFER_TOO_SMALL, "logits buffer holds %zu floats, %zu tokens need %zu",
                       logits_cap, n_tokens, n_tokens * (size_t)s->model->m->cfg.n_vocab);
            return sd_session_fail(s, SDNPU_ERR_BUFFER_TOO_SMALL);
        }
    }
    atomic_store(&s->cancel, 0);
    int rc = sd_session_flush_pending(s);
    const struct prefill_watch pw = {s, NULL};
    const struct sd_prefill_watch watch = {prefill_chunk, (void *)&pw};
    if (!rc) rc = eval_tokens(s, tokens, n_tokens, logits, NULL, &watch);
    if (rc == SDNPU_ABORTED) /* asked for: the error string says so, the log does not */
        return sd_err_set(&s->err, SDNPU_ABORTED, "cancelled: none of the %zu tokens were kept", n_tokens);
    return rc ? sd_session_fail(s, rc) : SDNPU_OK;
}

/* The drafter's name in draft/'s registry. */
enum sdnpu_status sdnpu_session_set_history(struct sdnpu_session *s, const char *path) {
    if (!s) return SDNPU_ERR_INVALID_ARG;
    sd_err_clear(&s->err);
    sd_history_close(s->history);
    sd_sam_free(s->history_sam);
    s->history = NULL;
    s->history_sam = NULL;
    sd_step_drop_history(&s->step);
    if (!path) return SDNPU_OK;
    struct sd_history_params hp = sd_history_default_params();
    int rc = sd_history_open(path, &hp, &s->history, &s->err);
    if (rc) return sd_session_fail(s, rc);
    if ((rc = sd_sam_create(1024, &s->history_sam, &s->err)) || (rc = sd_history_to_sam(s->history, s->history_sam, &s->err))) {
        sd_history_close(s->history);
        sd_sam_free(s->history_sam);
        s->history = NULL;
        s->history_sam = NULL;
        return sd_session_fail(s, rc);
    }
    return SDNPU_OK;
}

/* The caller's prompt tokens, copied and checked against the vocabulary. */
