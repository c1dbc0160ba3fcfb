/* engine/request.c - context-augmented requests (instruction + documents +
 * history) built into a prompt and run on a fresh context. */
#include <string.h>

#include "engine/api.h"

#define SD_REQUEST_SYSTEM "You are a helpful assistant. Answer from the documents the user gives."

struct sdnpu_request sdnpu_request_default_params(void) {
    struct sdnpu_request r = {0};
    r.gen = sdnpu_generate_default_params();
    r.gen.sampling.temperature = 0.0f;
    r.gen.spec.drafter = SDNPU_DRAFTER_SAM;
    r.gen.stop_on_repeat = true; /* pipelines keep what a person would keep */
    return r;
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
    size_t len = strlen(instr) + 1;
    for (size_t i = 0; i < req->n_documents; i++) {
        if (!req->documents[i]) return request_fail(s, SDNPU_ERR_INVALID_ARG, "a request document is NULL");
        len += strlen(req->documents[i]) + 2;
    }
    char *prompt = sd_malloc(len + 2);
    if (!prompt) return request_fail(s, SDNPU_ERR_OOM, "out of memory for the request's prompt");
    size_t n = 0;
    for (size_t i = 0; i < req->n_documents; i++) {
        size_t dl = strlen(req->documents[i]);
        memcpy(prompt + n, req->documents[i], dl);
        n += dl;
        memcpy(prompt + n, "\n\n", 2);
        n += 2;
    }
    memcpy(prompt + n, instr, strlen(instr));
    n += strlen(instr);
    prompt[n] = '\0';
    /* A fresh context, but not a fresh prefill: what the session (or its
     * prompt cache) holds of the same documents is kept (new_context). */
    enum sdnpu_status rc = SDNPU_OK;
    if (req->history_path) rc = sdnpu_session_set_history(s, req->history_path);
    if (rc == SDNPU_OK) {
        struct sdnpu_generate_params gp = req->gen;
        gp.chat = sdnpu_model_has_chat_template(s->model);
        gp.new_context = true;
        gp.prompt_tokens = NULL;
        gp.n_prompt_tokens = 0;
        /* An instruction-tuned model gets its task stated in a system turn,
         * unless the caller gave one; the documents and the instruction
         * are the user's turn, documents first, so that requests on the
         * same documents share their prompt's beginning. */
        if (gp.chat && !gp.system) gp.system = SD_REQUEST_SYSTEM;
        rc = sdnpu_session_generate(s, prompt, n, &gp, stats);
    }
    sd_free(prompt);
    return rc;
}
