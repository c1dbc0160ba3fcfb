/* engine/api.h - the structs behind the public handles, shared by the
 * engine's implementation files (api.c, session.c). */
#ifndef SD_API_H
#define SD_API_H

#include <pthread.h>
#include <stdatomic.h>

#include "draft/draft.h"
#include "engine/chat.h"
#include "engine/history.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "graphs/forward.h"
#include "sched/runtime.h"
#include "verify/verify.h"
#include "sdnpu.h"

/* Rows of a verification batch: the root and up to 63 draft tokens. */
#define SD_VERIFY_MAX_ROWS 64

struct sdnpu_model {
    struct sd_model *m;
    char *path;          /* the file it was loaded from (its profile sits beside it) */
    int32_t n_threads;
    enum sd_chat_format chat;
    pthread_mutex_t mu;  /* guards last_error: tokenize may fail on many threads at once */
    char last_error[SD_ERR_MSG_MAX];
};

struct sdnpu_session {
    struct sdnpu_model *model;
    struct sd_pool *pool;
    struct sd_rt *rt;
    struct sd_kv_cache kv;
    int32_t n_ctx, n_batch, n_verify, n_past;
    struct sd_row *rows;   /* [n_batch] */
    int32_t *which;        /* [n_batch] 0..n_batch-1 */
    float *logits;         /* [n_vocab] next-token logits after the last evaluated token */
    bool have_logits;
    int32_t *ctx_tokens;   /* [n_ctx] the tokens held, in order */
    char *text;            /* streaming hold-back buffer */
    size_t text_cap;
    /* Speculative decoding, allocated on first use. */
    struct sd_drafter *drafter;
    struct sd_draft_tree tree;
    struct sd_reuse reuse; /* rejected-draft reuse state of the current generation */
    struct sd_policy policy; /* cost-aware drafting: costs and acceptance, carried across requests */
    struct sd_guard guard;   /* the degeneration guard of the current generation */
    float *vlogits;        /* [SD_VERIFY_MAX_ROWS][n_vocab] */
    float *probs;          /* [n_vocab] */
    struct sd_history *history;
    struct sd_sam *history_sam;
    _Atomic int cancel;
    struct sd_err err;
};

/* Record a failure on the model (thread-safe) and log it. */
int sd_model_fail(struct sdnpu_model *model, const struct sd_err *err);

/* The suffix that adds rejected-draft reuse to a drafting method. */
#define SD_REUSE_SUFFIX "+reuse"

/* Length of method's name without SD_REUSE_SUFFIX when it ends with it
 * (and has a name before it), else 0. */
size_t sd_method_reuse_base(const char *method);

#endif
