/* engine/request.c - context-augmented requests (instruction + documents +
 * history) built into a prompt and run on a fresh context. */
#include <string.h>

#include "engine/api.h"

struct sdnpu_request sdnpu_request_default_params(void) {
    struct sdnpu_request r = {0};
    r.gen = sdnpu_generate_default_params();
    r.gen.sampling.temperature = 0.0f;
    r.gen.spec.drafter = SDNPU_DRAFTER_SAM;
    r.gen.stop_on_repeat = true; /* pipelines keep what a person would keep */
    return r;
}

/* Appends len bytes of text at *n where buf has room; *n counts them all,
 * so that a first pass with no buffer measures. */
static void put(char *buf, size_t cap, size_t *n, const char *text, size_t len) {
    if (*n < cap) memcpy(buf + *n, text, SD_MIN(len, cap - *n));
    *n += len;
}

/* The documents, then text; returns the length, NUL excluded, and writes
 * what fits of it (the NUL too) into buf. An instruction-tuned model gets
 * each document between tags: asked after the document, the 0.5B ran away
 * copying 3 of 35 summary documents so against 6 with blank lines between
 * (docs/benchmarks.md, stop 88). A base model continues text, so it gets
 * the documents as text, blank lines between. */
static size_t layout(const char *const *docs, size_t n_docs, const char *text, bool tags, char *buf,
                     size_t cap) {
    static const char open[] = "<document>\n", close[] = "\n</document>\n\n";
    size_t n = 0;
    for (size_t i = 0; i < n_docs; i++) {
        if (tags) put(buf, cap, &n, open, sizeof open - 1);
        put(buf, cap, &n, docs[i], strlen(docs[i]));
        if (tags)
            put(buf, cap, &n, close, sizeof close - 1);
        else
            put(buf, cap, &n, "\n\n", 2);
    }
    put(buf, cap, &n, text, strlen(text));
    if (n < cap) buf[n] = '\0';
    return n;
}

enum sdnpu_status sdnpu_documents_format(const char *const *documents, size_t n_documents, const char *text,
                                         char *buf, size_t cap, size_t *n_bytes) {
    if (!text || !n_bytes || (!documents && n_documents) || (!buf && cap)) return SDNPU_ERR_INVALID_ARG;
    for (size_t i = 0; i < n_documents; i++)
        if (!documents[i]) return SDNPU_ERR_INVALID_ARG;
    size_t n = layout(documents, n_documents, text, true, NULL, 0);
    *n_bytes = n;
    if (n + 1 > cap) {
        *n_bytes = n + 1;
        return SDNPU_ERR_BUFFER_TOO_SMALL;
    }
    layout(documents, n_documents, text, true, buf, cap);
    return SDNPU_OK;
}

static enum sdnpu_status request_fail(struct sdnpu_session *s, int status, const char *what) {
    sd_err_set(&s->err, status, "%s", what);
    SD_LOGE("%s", s->err.msg);
    return (enum sdnpu_status)status;
}

enum sdnpu_status sdnpu_session_request(struct sdnpu_session *s, const struct sdnpu_request *req,
                                        struct sdnpu_stats *stats) {
    if (!s || !req || (!req->documents && req->n_documents)) return SDNPU_ERR_INVALID_ARG;
    sd_err_clear(&s->err);
    /* A stage this version lacks is refused before the session is touched. */
    char msg[SD_ERR_MSG_MAX];
    enum sdnpu_status st = sdnpu_spec_check(req->gen.spec, msg, sizeof msg);
    if (st) return request_fail(s, st, msg);
    const char *instr = req->instruction ? req->instruction : "";
    for (size_t i = 0; i < req->n_documents; i++)
        if (!req->documents[i]) return request_fail(s, SDNPU_ERR_INVALID_ARG, "a request document is NULL");
    const bool chat = sdnpu_model_has_chat_template(s->model);
    size_t n = layout(req->documents, req->n_documents, instr, chat, NULL, 0);
    char *prompt = sd_malloc(n + 1);
    if (!prompt) return request_fail(s, SDNPU_ERR_OOM, "out of memory for the request's prompt");
    layout(req->documents, req->n_documents, instr, chat, prompt, n + 1);
    /* A fresh context, but not a fresh prefill: what the session (or its
     * prompt cache) holds of the same documents is kept (new_context). */
    enum sdnpu_status rc = SDNPU_OK;
    if (req->history_path) rc = sdnpu_session_set_history(s, req->history_path);
    if (rc == SDNPU_OK) {
        struct sdnpu_generate_params gp = req->gen;
        gp.chat = chat;
        gp.new_context = true;
        gp.prompt_tokens = NULL;
        gp.n_prompt_tokens = 0;
        /* An instruction-tuned model gets its task stated in a system turn,
         * unless the caller gave one (or "" for none); the documents and
         * the instruction are the user's turn, documents first, so that
         * requests on the same documents share their prompt's beginning. */
        if (gp.chat && !gp.system) gp.system = SDNPU_REQUEST_SYSTEM;
        rc = sdnpu_session_generate(s, prompt, n, &gp, stats);
    }
    sd_free(prompt);
    return rc;
}
