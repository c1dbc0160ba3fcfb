/* engine/request.c - context-augmented requests (instruction + documents +
 * history) built into a prompt and run on a fresh context. */
#include <string.h>

#include "engine/api.h"

struct sdnpu_request sdnpu_request_default_params(void) {
    struct sdnpu_request r = {0};
    r.gen = sdnpu_generate_default_params();
    r.gen.sampling.temperature = 0.0f;
    r.gen.spec = "sam";
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
    /* The sd.npu refinements come with their own stages of the engine. */
    if (req->calibration || req->graph_switching || (req->gen.spec && strcmp(req->gen.spec, "sdnpu") == 0))
        return request_fail(s, SDNPU_ERR_UNSUPPORTED,
                            req->calibration ? "in-context calibration is not in this version of sdnpu"
                            : req->graph_switching
                                ? "progressive graph switching is not in this version of sdnpu"
                                : "the \"sdnpu\" method (calibration, reuse and graph switching) is not in this "
                                  "version of sdnpu; use sam-tree");
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
    sdnpu_session_reset(s);
    enum sdnpu_status rc = SDNPU_OK;
    if (req->history_path) rc = sdnpu_session_set_history(s, req->history_path);
    if (rc == SDNPU_OK) {
        struct sdnpu_generate_params gp = req->gen;
        gp.chat = sdnpu_model_has_chat_template(s->model);
        /* The reuse switch: the method with SD_REUSE_SUFFIX (once). */
        char method[80];
        const char *spec = gp.spec && *gp.spec ? gp.spec : "none";
        const size_t sl = strlen(spec);
        if (req->reuse && sd_method_reuse_base(spec) == 0) {
            if (sl + sizeof SD_REUSE_SUFFIX > sizeof method) {
                sd_free(prompt);
                return request_fail(s, SDNPU_ERR_INVALID_ARG, "the request's method name is too long");
            }
            memcpy(method, spec, sl);
            memcpy(method + sl, SD_REUSE_SUFFIX, sizeof SD_REUSE_SUFFIX);
            gp.spec = method;
        }
        rc = sdnpu_session_generate(s, prompt, n, &gp, stats);
    }
    sd_free(prompt);
    return rc;
}
