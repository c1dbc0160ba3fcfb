/* engine/generate.c - a session's request: prompt, prefill, decoding
 * (draft, verify, stream) and history, sdnpu_session_generate's pipeline. */
#include <stdio.h>
#include <string.h>

#include "engine/api.h"
#include "engine/stream.h"
#include "verify/verify.h"

/* The drafter's name in draft/'s registry. */
static const char *drafter_name(enum sdnpu_drafter d) {
    return d == SDNPU_DRAFTER_PLD ? "pld" : d == SDNPU_DRAFTER_SAM ? "sam" : "sam-tree";
}

static int given_tokens(struct sdnpu_session *s, const struct sdnpu_generate_params *p,
                        struct sd_tokvec *tv) {
    int32_t nv = s->model->m->cfg.n_vocab;
    for (size_t i = 0; i < p->n_prompt_tokens; i++)
        if (p->prompt_tokens[i] < 0 || p->prompt_tokens[i] >= nv)
            return sd_err_set(&s->err, SDNPU_ERR_INVALID_ARG,
                              "prompt token %d at index %zu is outside the vocabulary (0..%d)",
                              p->prompt_tokens[i], i, nv - 1);
    if (p->n_prompt_tokens > (size_t)INT32_MAX)
        return sd_err_set(&s->err, SDNPU_ERR_CONTEXT_FULL, "the prompt has %zu tokens", p->n_prompt_tokens);
    tv->ids = sd_malloc(SD_MAX(p->n_prompt_tokens, 1) * sizeof *tv->ids);
    if (!tv->ids) return sd_err_set(&s->err, SDNPU_ERR_OOM, "out of memory for the prompt's tokens");
    memcpy(tv->ids, p->prompt_tokens, p->n_prompt_tokens * sizeof *tv->ids);
    tv->n = tv->cap = p->n_prompt_tokens;
    return SDNPU_OK;
}

static int check_prompt_fits(struct sdnpu_session *s, const struct sd_tokvec *tv, int32_t n_past,
                             bool have_logits) {
    if (tv->n == 0 && !have_logits)
        return sd_err_set(&s->err, SDNPU_ERR_INVALID_ARG,
                          "the prompt is empty and the session holds no context");
    if (tv->n + 1 > (size_t)(s->n_ctx - n_past))
        return sd_err_set(
            &s->err, SDNPU_ERR_CONTEXT_FULL,
            "the prompt has %zu tokens; the context has room for %d more (%d of %d used) and one to generate",
            tv->n, s->n_ctx - n_past - 1, n_past, s->n_ctx);
    return SDNPU_OK;
}

/* A continuation starts with the token the last request left pending. */
static int prepend_pending(struct sdnpu_session *s, const struct sdnpu_generate_params *p,
                           struct sd_tokvec *tv) {
    if (p->new_context || !s->has_pending) return SDNPU_OK;
    int32_t *ids = sd_realloc(tv->ids, (tv->n + 1) * sizeof *ids);
    if (!ids) return sd_err_set(&s->err, SDNPU_ERR_OOM, "out of memory for the prompt");
    memmove(ids + 1, ids, tv->n * sizeof *ids);
    ids[0] = s->ctx_tokens[s->n_past];
    tv->ids = ids;
    tv->n++;
    tv->cap = tv->n;
    return SDNPU_OK;
}

/* Stage 1, the prompt: given as tokens, or rendered in the chat format if
 * asked and tokenized; checked to fit with one token to generate. On a new
 * context it is the whole context to be, so it fits from position 0. */
static int prompt_tokens(struct sdnpu_session *s, const char *prompt, size_t len,
                         const struct sdnpu_generate_params *p, struct sd_tokvec *tv) {
    int32_t n_past = p->new_context ? 0 : s->n_past;
    bool have_logits = !p->new_context && s->have_logits;
    if (p->prompt_tokens) {
        int rc = given_tokens(s, p, tv);
        if (!rc) rc = prepend_pending(s, p, tv);
        if (rc) return rc;
        return check_prompt_fits(s, tv, n_past, have_logits);
    }
    const char *text = prompt ? prompt : "";
    size_t text_len = len;
    unsigned tflags = n_past == 0 ? SD_TOK_ADD_SPECIAL : 0;
    char *rendered = NULL;
    int rc = SDNPU_OK;
    if (p->chat) {
        char *content = sd_strndup(text, len);
        if (!content) return sd_err_set(&s->err, SDNPU_ERR_OOM, "out of memory for the prompt");
        const struct sd_chat *chat = &s->model->chat;
        int64_t need = -sd_chat_render_turn(chat, p->system, content, NULL, 0);
        rendered = sd_malloc((size_t)need);
        if (rendered)
            text_len = (size_t)sd_chat_render_turn(chat, p->system, content, rendered, (size_t)need);
        sd_free(content);
        if (!rendered) return sd_err_set(&s->err, SDNPU_ERR_OOM, "out of memory for the chat prompt");
        text = rendered;
        tflags |= SD_TOK_PARSE_SPECIAL;
    }
    rc = sd_tokenize(s->model->vocab, text, text_len, tflags, tv, &s->err);
    sd_free(rendered);
    if (!rc) rc = prepend_pending(s, p, tv);
    if (rc) return rc;
    return check_prompt_fits(s, tv, n_past, have_logits);
}

/* The sampler, with the repetition penalty's window filled from the
 * context and the prompt. */
static int make_sampler(struct sdnpu_session *s, const struct sdnpu_generate_params *p,
                        const struct sd_tokvec *tv, struct sd_sampler **smp) {
    const struct sdnpu_sampling_params *q = &p->sampling;
    struct sd_sampler_params sp = {q->temperature,    q->top_k,         q->top_p, q->min_p,
                                   q->repeat_penalty, q->repeat_last_n, q->seed};
    int rc = sd_sampler_create(&sp, s->model->m->cfg.n_vocab, smp, &s->err);
    if (rc) return rc;
    for (int32_t i = SD_MAX(0, s->n_past - sp.repeat_last_n); i < s->n_past; i++)
        sd_sampler_accept(*smp, s->ctx_tokens[i]);
    for (size_t i = 0; i < tv->n; i++)
        sd_sampler_accept(*smp, tv->ids[i]);
    return SDNPU_OK;
}

/* A token's text and end mark for the grammar (grammar/grammar.h). */
static int32_t token_text(const void *ud, int32_t id, char *buf, size_t cap) {
    return sd_token_to_piece(ud, id, false, buf, cap);
}

static bool token_ends(const void *ud, int32_t id) { return sd_vocab_is_eog(ud, id); }

/* The request's schema, compiled; the previous request's goes. */
static int compile_schema(struct sdnpu_session *s, const struct sdnpu_generate_params *p) {
    sd_schema_free(s->schema);
    s->schema = NULL;
    if (p->format != SDNPU_FORMAT_JSON_SCHEMA) return SDNPU_OK;
    if (!p->json_schema)
        return sd_err_set(&s->err, SDNPU_ERR_INVALID_ARG, "format json_schema without a json_schema");
    return sd_schema_compile(p->json_schema, strlen(p->json_schema), &s->schema, &s->err);
}

enum sdnpu_status sdnpu_json_schema_check(const char *schema, char *err, size_t err_size) {
    struct sd_err e = {0};
    struct sd_schema *c = NULL;
    int rc = schema ? sd_schema_compile(schema, strlen(schema), &c, &e)
                    : sd_err_set(&e, SDNPU_ERR_INVALID_ARG, "json schema: none given");
    sd_schema_free(c);
    if (err && err_size) snprintf(err, err_size, "%s", rc ? e.msg : "");
    return (enum sdnpu_status)rc;
}

/* The requested format: JSON constrains the sampler from the first output
 * token on (the prompt's tokens were accepted before). The token texts are
 * read on the session's first JSON request. */
static int constrain(struct sdnpu_session *s, const struct sdnpu_generate_params *p, struct sd_sampler *smp) {
    if ((unsigned)p->format > SDNPU_FORMAT_JSON_SCHEMA)
        return sd_err_set(&s->err, SDNPU_ERR_INVALID_ARG,
                          "unknown output format %d (text 0, json 1, json_schema 2)", (int)p->format);
    int rc = compile_schema(s, p); /* also lets the previous request's go */
    if (rc || p->format == SDNPU_FORMAT_TEXT) return rc;
    const struct sd_vocab *v = s->model->vocab;
    /* As long as the logits: ids past the vocabulary have no text. */
    int32_t n = s->model->m->cfg.n_vocab;
    if (!s->json && (rc = sd_grammar_create(n, token_text, token_ends, v, &s->json, &s->err))) return rc;
    sd_sampler_constrain(smp, s->json, s->schema);
    return SDNPU_OK;
}

/* The spec, checked before anything is evaluated, turned into the step
 * configuration: none decodes one row on G0; npu-vanilla and every
 * drafting drafter run the L2-row graph G2, padding what a step does not
 * fill. *drafting: whether steps draft. */
static int spec_begin(struct sdnpu_session *s, const struct sdnpu_generate_params *p, bool sampling,
                      struct sd_step_cfg *cfg, bool *drafting) {
    char msg[SD_ERR_MSG_MAX];
    enum sdnpu_status st = sdnpu_spec_check(p->spec, msg, sizeof msg);
    if (st) return sd_err_set(&s->err, (int)st, "speculative decoding: %s", msg);
    memset(cfg, 0, sizeof *cfg);
    cfg->on_l2 = p->spec.drafter != SDNPU_DRAFTER_NONE;
    cfg->reuse = p->spec.reuse;
    sd_rt_set_switch(s->rt, p->spec.graph_switching ? s->switch_mode : SD_SWITCH_OFF);
    *drafting = p->spec.drafter >= SDNPU_DRAFTER_PLD;
    int rc;
    if (*drafting && (rc = sd_step_use_drafter(&s->step, drafter_name(p->spec.drafter), &s->err))) return rc;
    sd_step_begin_request(&s->step, p->adaptive, sampling || s->fixed_prices);
    struct sd_draft_params dp = sd_draft_default_params();
    dp.budget = p->draft_max > 0 ? p->draft_max : s->n_verify - 1;
    dp.budget = SD_MIN(dp.budget, s->n_verify - 1);
    if (p->draft_depth > 0) dp.max_depth = p->draft_depth;
    dp.calib_lead = s->calib_lead;
    dp.calib_min_match = s->calib_min_match;
    dp.max_depth = SD_MAX(1, SD_MIN(dp.max_depth, dp.budget));
    cfg->dp = dp;
    return SDNPU_OK;
}

/* Stage 2's companion, in-context calibration: before prefill, the
 * calibrator takes the context and names the subset its head computes
 * (the prompt's distinct tokens)... */
static int calib_begin(struct sdnpu_session *s, const struct sd_tokvec *tv, bool new_context,
                       struct sd_subset_sink *sink) {
    int rc;
    if (!s->calib && (rc = sd_calib_create(&s->calib_params, &s->calib, &s->err))) return rc;
    if (!s->calib_sam && (rc = sd_sam_create(4096, &s->calib_sam, &s->err))) return rc;
    if (new_context && s->n_past > 0) {
        /* A kept prefix (at most calib_valid long) keeps its predictions;
         * the whole context is the calibrated prompt, as on a fresh one. */
        memcpy(s->ctx_tokens + s->n_past, tv->ids, tv->n * sizeof *tv->ids);
        rc = sd_calib_begin_kept(s->calib, s->ctx_tokens, s->n_past, s->n_past + (int32_t)tv->n, &s->err);
    } else {
        rc = sd_calib_begin(s->calib, s->ctx_tokens, s->n_past, tv->ids, (int32_t)tv->n, &s->err);
    }
    if (rc) return rc;
    memset(sink, 0, sizeof *sink);
    sink->tok = sd_calib_subset(s->calib, &sink->n_tok);
    sink->fn = sd_calib_collect;
    sink->ud = s->calib;
    return SDNPU_OK;
}

/* ... and after prefill builds the calibrated store from what the sink
 * collected. Its cost goes to the stats: the subset head's runs and the
 * sink (inside prefill) and the build. */
static int calib_build(struct sdnpu_session *s, double subset_ms0, struct sdnpu_stats *st) {
    int rc = sd_calib_build(s->calib, s->calib_sam, &s->err);
    if (rc) return rc;
    struct sd_calib_stats cs = sd_calib_stats(s->calib);
    st->calib_ms = sd_rt_counts(s->rt).subset_ms - subset_ms0 + cs.collect_ms + cs.build_ms;
    st->n_calib_records = cs.n_records;
    st->calib_bytes = cs.bytes;
    SD_LOGD(
        "calibration: %d positions, %d subset tokens, %d roots, %d records, %lld tokens%s, %.1f + %.1f ms",
        cs.n_positions, cs.n_subset, cs.n_roots, cs.n_records, (long long)cs.n_tokens,
        cs.truncated ? " (store bound reached)" : "", cs.collect_ms, cs.build_ms);
    return SDNPU_OK;
}

/* What stage 3 carries from step to step. */
struct decode {
    struct sd_sampler *smp;
    struct sd_step_cfg cfg;
    bool drafting;
    int32_t limit; /* most tokens to emit */
    int32_t *outs; /* the response's tokens for the history and the replies store, or NULL */
    size_t n_outs, outs_cap;
    int32_t last_root; /* the last token emitted before its evaluation */
};

/* Stage 3: decode from the sampled token tok until a stop. Each token is
 * emitted before it is evaluated, so the token that ends the answer (end
 * of turn, a stop string's last token, the budget's last) costs no model
 * call; each step then evaluates the root and, when drafting, a draft below
 * it (verify/'s sd_step), and emits the drafts it accepted. */
static int decode_loop(struct sdnpu_session *s, struct decode *d, struct sd_stream *ss, int32_t tok,
                       struct sdnpu_stats *st) {
    struct sd_step_result r;
    for (;;) {
        if (atomic_load(&s->cancel)) {
            st->stop_reason = SDNPU_STOP_CALLBACK;
            return SDNPU_OK;
        }
        d->last_root = tok;
        int stop = sd_stream_emit(s, ss, &tok, 1, d->limit, d->outs, &d->n_outs, st);
        if (stop) return stop < 0 ? stop : SDNPU_OK;
        if (s->n_past >= s->n_ctx) { /* tok was sampled but there is no room to evaluate it */
            st->stop_reason = SDNPU_STOP_CONTEXT_FULL;
            return SDNPU_OK;
        }
        /* With one token left to emit, the one-row step gives it. */
        bool draft = d->drafting && st->n_generated + 1 < d->limit;
        int rc = sd_step(&s->step, &d->cfg, d->smp, tok, s->n_past, draft, &r, &s->err);
        if (rc) return rc;
        st->draft_ms += r.draft_ms;
        st->verify_ms += r.verify_ms;
        st->n_verify_steps++;
        st->n_drafted += r.n_verified;
        st->n_accepted += r.n_acc;
        s->ctx_tokens[s->n_past++] = tok;
        for (int32_t i = 0; i < r.n_acc; i++)
            s->ctx_tokens[s->n_past++] = r.acc[i];
        int32_t before = st->n_generated;
        stop = r.n_acc ? sd_stream_emit(s, ss, r.acc, r.n_acc, d->limit, d->outs, &d->n_outs, st) : 0;
        if (stop > 0 &&
            st->stop_reason != SDNPU_STOP_REPETITION) /* drafts accepted past the stop are not output */
            st->n_accepted -= r.n_acc - (st->n_generated - before + (st->stop_reason == SDNPU_STOP_EOG));
        if (stop) return stop < 0 ? stop : SDNPU_OK;
        tok = r.next;
    }
}

/* A reply joins a store of replies (the history, the replies store): its
 * records and their automaton. Where the append evicted the oldest records
 * the automaton is built again from what is left, so it stays within the
 * store's bound. */
static int store_append(struct sd_history *h, struct sd_sam *sam, const int32_t *outs, size_t n,
                        struct sd_err *err) {
    size_t before = sd_history_n_records(h);
    int rc = sd_history_append(h, outs, n, NULL, 0, err);
    if (rc) return rc;
    if (sd_history_n_records(h) <= before) {
        sd_sam_clear(sam);
        return sd_history_to_sam(h, sam, err);
    }
    rc = sd_sam_append_record(sam, outs, n, err);
    if (!rc) rc = sd_sam_freeze(sam, err);
    return rc;
}

/* Stage 4: the output d->outs joins the history (file and automaton) and
 * the replies store; there with the end-of-turn token that ended it, if
 * one did (eog >= 0), so that where a reply ends is drafted too. The
 * replies store only helps drafting, so the request succeeds whatever it
 * cannot take: a reply longer than its bound is left out, and after
 * running out of memory the store starts over. */
static int history_append(struct sdnpu_session *s, struct decode *d, int32_t eog, bool remember) {
    size_t n = d->n_outs;
    int rc = s->history && n > 0 ? store_append(s->history, s->history_sam, d->outs, n, &s->err) : SDNPU_OK;
    if (rc || !s->replies || !remember) return rc;
    if (eog >= 0 && n < d->outs_cap) d->outs[n++] = eog;
    if (n == 0) return SDNPU_OK;
    struct sd_err e = {0};
    rc = store_append(s->replies, s->replies_sam, d->outs, n, &e);
    if (rc == SDNPU_ERR_INVALID_ARG) {
        SD_LOGI("replies store: a reply of %zu tokens is larger than its %llu bytes; not kept", n,
                (unsigned long long)s->replies_bytes);
    } else if (rc) {
        SD_LOGW("replies store: %s; it starts over", e.msg);
        sdnpu_session_forget_replies(s);
    }
    return SDNPU_OK;
}

/* A request's memory: the prepared graphs, the weights, the peak RSS. */
static void memory_stats(struct sdnpu_session *s, struct sdnpu_stats *st) {
    st->prepared_bytes = sd_rt_prepared_bytes(s->rt);
    st->shared_weight_bytes = sd_rt_shared_weight_bytes(s->rt);
    st->weight_cache = sd_wstore_cache_state(st->shared_weight_bytes ? s->model->weights : NULL);
    st->head = st->shared_weight_bytes && sd_wstore_certified(s->model->weights) ? "certified" : "exact";
    st->peak_rss_bytes = sd_peak_rss();
}

/* The stats of a finished request. t1: decoding's start; prep0/prep1:
 * preparation time before prefill and before decoding. */
static void finish_stats(struct sdnpu_session *s, struct sdnpu_stats *st, bool drafting, double t1,
                         double prep0, double prep1, struct sd_rt_counts counts0) {
    double prep = sd_rt_prepare_ms(s->rt);
    st->prepare_ms = prep - prep0;
    st->decode_ms = sd_time_ms() - t1 - (prep - prep1);
    memory_stats(s, st);
    int32_t prefilled = st->n_prompt_tokens - st->n_prompt_reused;
    st->prompt_tokens_per_s = st->prefill_ms > 0 ? prefilled / (st->prefill_ms / 1e3) : 0;
    st->gen_tokens_per_s = st->decode_ms > 0 ? st->n_generated / (st->decode_ms / 1e3) : 0;
    struct sd_step_stats ss = sd_step_stats(&s->step);
    st->n_reuse_drafted = (int32_t)ss.n_reuse_offered;
    st->n_reuse_accepted = (int32_t)ss.n_reuse_accepted;
    st->n_plain_steps = drafting ? (int32_t)ss.n_plain : 0;
    st->acceptance =
        st->n_verify_steps > 0 ? (double)(st->n_verify_steps + st->n_accepted) / st->n_verify_steps : 1.0;
    struct sd_rt_counts counts1 = sd_rt_counts(s->rt);
    st->n_graph_rows = counts1.rows - counts0.rows;
    st->n_pad_rows = counts1.pad_rows - counts0.pad_rows;
}

/* The stats of a request stopped during its prefill (SDNPU_STOP_PREFILL):
 * the time it ran and the memory; nothing was generated or kept. */
static void stopped_stats(struct sdnpu_session *s, struct sdnpu_stats *st, double t0, double prep0) {
    st->prepare_ms = sd_rt_prepare_ms(s->rt) - prep0;
    st->prefill_ms = sd_time_ms() - t0 - st->prepare_ms;
    memory_stats(s, st);
}

/* The request's pipeline: prompt -> prefill -> decode (draft, verify,
 * stream) -> history, each stage a function above. */
enum sdnpu_status sdnpu_session_generate(struct sdnpu_session *s, const char *prompt, size_t len,
                                         const struct sdnpu_generate_params *p, struct sdnpu_stats *stats) {
    if (!s || !p || (!prompt && len)) return SDNPU_ERR_INVALID_ARG;
    sd_err_clear(&s->err);
    atomic_store(&s->cancel, 0);
    struct sdnpu_stats st = {0};
    struct sd_tokvec tv = {0};
    struct decode d = {0};
    int rc;
    s->eog_token = -1;
    bool pending = !p->new_context && s->has_pending; /* prompt_tokens puts it first: not the caller's */
    if ((rc = prompt_tokens(s, prompt, len, p, &tv))) goto done;
    st.n_prompt_tokens = (int32_t)tv.n - pending;
    bool want_calib = p->spec.drafter >= SDNPU_DRAFTER_PLD && p->spec.calibration;
    double keep_ms = 0;
    if (p->new_context) {
        s->has_pending = false;
        /* Prefix reuse: what the session holds of this prompt stays, the
         * rest is prefilled below. Restoring a snapshot counts as prefill. */
        keep_ms = sd_time_ms();
        int32_t kept = sd_session_keep_prefix(s, tv.ids, (int32_t)tv.n, want_calib);
        memmove(tv.ids, tv.ids + kept, (tv.n - (size_t)kept) * sizeof *tv.ids);
        tv.n -= (size_t)kept;
        st.n_prompt_reused = kept;
        keep_ms = sd_time_ms() - keep_ms;
    }
    if ((rc = make_sampler(s, p, &tv, &d.smp)) || (rc = constrain(s, p, d.smp))) goto done;
    if ((rc = spec_begin(s, p, !sd_sampler_is_greedy(d.smp), &d.cfg, &d.drafting))) goto done;
    d.limit = p->n_predict < 0 ? INT32_MAX : p->n_predict;

    /* 2. Prefill. */
    double prep0 = sd_rt_prepare_ms(s->rt), t0 = sd_time_ms();
    struct sd_subset_sink calib_sink;
    bool calib = d.drafting && p->spec.calibration;
    double subset_ms0 = sd_rt_counts(s->rt).subset_ms;
    if (calib && (rc = calib_begin(s, &tv, p->new_context, &calib_sink))) goto done;
    const bool calib_begun = calib;
    rc = sd_session_prefill(s, tv.ids, tv.n, p, calib ? &calib_sink : NULL);
    if (rc == SDNPU_ERR_OOM && calib) {
        /* The subset head is prepared before any chunk runs: where it does
         * not fit the memory limit, the request runs without calibration
         * rather than fail. */
        SD_LOGW("%s; the request runs without calibration", s->err.msg);
        sd_err_clear(&s->err);
        calib = false;
        rc = sd_session_prefill(s, tv.ids, tv.n, p, NULL);
    }
    if (rc) {
        /* calib_begin began the calibrator on this prompt: the predictions
         * a kept prefix had are no longer there to keep. */
        if (calib_begun) s->calib_valid = 0;
        if (rc == SDNPU_ABORTED) {
            st.stop_reason = SDNPU_STOP_PREFILL;
            stopped_stats(s, &st, t0, prep0);
        }
        goto done;
    }
    s->has_pending = false; /* a continuation's prompt began with it */
    /* Predictions by context position exist only where the calibration
     * started on a new context: those a later request may keep. A request
     * without calibration left the kept positions' predictions alone. */
    if (d.drafting && want_calib) s->calib_valid = calib && p->new_context ? s->n_past : 0;
    if (calib && (rc = calib_build(s, subset_ms0, &st))) goto done;
    double t1 = sd_time_ms(), prep1 = sd_rt_prepare_ms(s->rt);
    int32_t base_past = s->n_past;
    st.prefill_ms = t1 - t0 - (prep1 - prep0) + keep_ms;

    /* 3. Decode. A plain chat script has no end-of-turn token: the reply
     * ends where the model starts writing the user's next line. */
    struct sd_stream ss = {
        s, p, p->chat && s->model->chat.format == SD_CHAT_PLAIN ? sd_chat_end_of_turn(SD_CHAT_PLAIN) : NULL,
        0, 0, p->stop_on_repeat ? &s->guard : NULL};
    st.stop_reason = SDNPU_STOP_LENGTH;
    size_t room = (size_t)SD_MIN((int64_t)d.limit, (int64_t)s->n_ctx) + SD_VERIFY_MAX_ROWS;
    if (p->stop_on_repeat && (rc = sd_guard_reset(&s->guard, room, &s->err))) goto done;
    struct sd_rt_counts counts0 = sd_rt_counts(s->rt);
    /* Stage 3's start: the drafter's stores get the request. A sampled
     * request drafts from neither the replies store nor anything else an
     * earlier request left (as the policy, verify.h): its output for a seed
     * then depends on the request alone. */
    if (d.drafting && (rc = sd_step_begin_drafts(&s->step, s->ctx_tokens, (size_t)s->n_past, s->history_sam,
                                                 sd_sampler_is_greedy(d.smp) ? s->replies_sam : NULL,
                                                 calib ? s->calib_sam : NULL, &s->err)))
        goto done;
    d.outs_cap = SD_MIN(room, (size_t)s->n_ctx + 1);
    if ((s->history || s->replies) && !(d.outs = sd_malloc(sizeof(int32_t) * d.outs_cap))) {
        rc = sd_err_set(&s->err, SDNPU_ERR_OOM, "out of memory for the response tokens");
        goto done;
    }
    if ((rc = sd_step_refresh_logits(&s->step, s->ctx_tokens, s->n_past, &s->err))) goto done;
    int32_t tok = sd_sampler_sample(d.smp, s->logits);
    sd_sampler_accept(d.smp, tok);
    if ((rc = decode_loop(s, &d, &ss, tok, &st))) goto done;
    /* The context holds every emitted token: the last one, emitted before
     * its evaluation, pending (unless the context is full). A token sampled
     * at the end (or past a stop) is not in it, and drafts accepted past a
     * stop are dropped from the cache, so the session can continue. */
    int32_t held = base_past + st.n_generated;
    if (s->n_past > held) {
        s->n_past = held;
        sd_rt_kv_truncate(s->rt, s->n_past);
        s->have_logits = false;
    } else if (s->n_past == held - 1 && s->n_past < s->n_ctx) { /* a full context has no room to hold it */
        s->ctx_tokens[s->n_past] = d.last_root;
        s->has_pending = true;
        s->have_logits = false;
    }
    /* 4. History. */
    if (d.outs &&
        (rc = history_append(s, &d, st.stop_reason == SDNPU_STOP_EOG ? s->eog_token : -1, !p->forget)))
        goto done;
    if (st.stop_reason != SDNPU_STOP_STRING && st.stop_reason != SDNPU_STOP_CALLBACK &&
        sd_stream_flush(&ss, true) == 2)
        st.stop_reason = SDNPU_STOP_CALLBACK;
    finish_stats(s, &st, d.drafting, t1, prep0, prep1, counts0);
    rc = st.stop_reason == SDNPU_STOP_CALLBACK ? SDNPU_ABORTED : SDNPU_OK;
done:
    sd_rt_set_switch(s->rt, SD_SWITCH_OFF); /* sdnpu_session_eval and the next request choose their own */
    sd_free(d.outs);
    if (stats) *stats = st;
    sd_sampler_free(d.smp);
    sd_tokvec_free(&tv);
    if (rc < 0) return sd_session_fail(s, rc);
    return rc;
}
