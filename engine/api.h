/* engine/api.h - the structs behind the public handles, shared by the
 * engine's implementation files (api.c, session.c, stream.c, request.c). */
#ifndef SD_API_H
#define SD_API_H

#include <pthread.h>
#include <stdatomic.h>

#include "calib/calib.h"
#include "draft/draft.h"
#include "engine/chat.h"
#include "engine/history.h"
#include "engine/model.h"
#include "engine/guard.h"
#include "sample/sampler.h"
#include "sched/runtime.h"
#include "verify/verify.h"
#include "sdnpu.h"

struct sdnpu_model {
    struct sd_model_file *file;
    const struct sd_model *m;    /* &file->m: the weights the graphs run */
    struct sd_vocab *vocab;       /* file->vocab */
    char *path;          /* the file it was loaded from (its profile sits beside it) */
    struct sd_wstore *weights;   /* the prepared weights its sessions share (graphs/weights.h); NULL if vocab_only */
    struct sd_wcache_key cache_key; /* names this file's weight cache and what it must hold */
    int32_t n_threads;
    struct sd_chat chat; /* its format and default system turn */
    pthread_mutex_t mu;  /* guards last_error: tokenize may fail on many threads at once */
    char last_error[SD_ERR_MSG_MAX];
};

struct sdnpu_session {
    struct sdnpu_model *model;
    struct sd_pool *pool;
    struct sd_rt *rt;      /* the graphs and the KV cache */
    struct sd_rt_params rp; /* what rt was made with (a resized context makes another) */
    int32_t n_ctx, n_batch, n_verify, n_past;
    enum sd_switch_mode switch_mode; /* what a request with spec "switch" runs (session params' graph_switch) */
    enum sd_policy_estimator estimator;    /* drafting's tuning, from the session params */
    bool fixed_prices; /* cost-aware drafting decides every request as it does a sampled one: from its
                          prior costs (the profile's, or sd_step_init_policy's) and the request's own
                          drafts, never from step times, so the same steps on every run and machine
                          (tests set it; no parameter does) */
    int32_t calib_lead, calib_min_match;
    struct sd_calib_params calib_params;
    float *logits;         /* [n_vocab] next-token logits after the last evaluated token */
    bool have_logits;
    int32_t *ctx_tokens;   /* [n_ctx] the tokens held, in order */
    int32_t eog_token;     /* the end-of-generation token that ended the last request, or -1 */
    bool has_pending;      /* ctx_tokens[n_past] is held too but not evaluated: the token a request
                              emitted last, whose stop needed no model call (what comes next
                              evaluates it first) */
    char *text;            /* streaming hold-back buffer */
    size_t text_cap;
    struct sd_stepper step;  /* decoding steps: drafter, tree, reuse, policy; buffers on first use */
    struct sd_guard guard;   /* the degeneration guard of the current generation */
    struct sd_grammar *json; /* the JSON format's token texts, made by the first request that asks for it */
    struct sd_schema *schema; /* the request's compiled json_schema (SDNPU_FORMAT_JSON_SCHEMA), else NULL */
    struct sd_history *history;
    struct sd_sam *history_sam;
    struct sd_history *replies; /* the session's own earlier replies, in memory (NULL: none) */
    struct sd_sam *replies_sam;
    uint64_t replies_bytes;     /* their bound */
    struct sd_calib *calib;  /* in-context calibration (+calib), made on first use */
    struct sd_sam *calib_sam; /* the current request's calibrated store */
    int32_t calib_valid;     /* the context's first calib_valid positions have calibration predictions in
                                s->calib (prefix reuse keeps them); 0 after anything else replaces the context */
    struct sd_pcache *pcache; /* the prompt cache (engine/pcache.h), NULL without one */
    size_t mem_limit;        /* the session params' mem_limit (0 none): the prompt cache stays under it too */
    _Atomic int cancel;
    struct sd_err err;
};

/* Prefix reuse (engine/prefix.c): make the context the longest prefix of
 * tokens[0..n) that the session's context or its prompt cache holds (at
 * most n - 1 tokens; with calib, only positions whose calibration
 * predictions are held), snapshotting the live context into the cache
 * before most of it is replaced. Returns the tokens kept; the caller prefills the rest. */
int32_t sd_session_keep_prefix(struct sdnpu_session *s, const int32_t *tokens, int32_t n, bool calib);

/* Evaluate the pending token (has_pending), so that the context's tokens
 * are all in the KV cache: before an append of the caller's tokens or a
 * save. SDNPU_OK when none is pending. */
int sd_session_flush_pending(struct sdnpu_session *s);

/* Record a failed call's status on the session (its error string set by
 * the caller) and log it; returns status (engine/session.c). */
int sd_session_fail(struct sdnpu_session *s, int status);

/* Prefill tokens[0, n) after the context (engine/session.c's chunked
 * prefill), watched by p's progress callback and the session's cancel
 * (SDNPU_ABORTED after the chunk it came in); subset (NULL: none) takes
 * the calibration's logits of each chunk. The last token's logits are kept
 * for the decoding that follows. */
struct sd_subset_sink;
int sd_session_prefill(struct sdnpu_session *s, const int32_t *tokens, size_t n,
                       const struct sdnpu_generate_params *p, const struct sd_subset_sink *subset);

/* Record a failure on the model (thread-safe) and log it. */
int sd_model_fail(struct sdnpu_model *model, const struct sd_err *err);

#endif
