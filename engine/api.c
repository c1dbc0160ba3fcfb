/* engine/api.c - the public model and tokenizer functions of sdnpu.h. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "engine/api.h"
#include "engine/tools.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

struct sdnpu_model_params sdnpu_model_default_params(void) {
    struct sdnpu_model_params p = {.n_threads = 0, .vocab_only = false, .use_mmap = true};
    return p;
}

/* The weight cache's key (graphs/weights.h): the file's real path names
 * it; its size, modification time and header bytes (metadata and the
 * tensor table) say which version of the file it is. */
static struct sd_wcache_key cache_key(const char *path, const struct sd_gguf *g) {
    struct sd_wcache_key k = {0};
    char real[PATH_MAX];
    const char *name = realpath(path, real) ? real : path;
    k.name = XXH3_64bits(name, strlen(name));
    struct stat st;
    uint64_t v[3] = {sd_gguf_file_size(g), 0, 0};
    if (stat(path, &st) == 0) {
        v[1] = (uint64_t)st.st_mtim.tv_sec;
        v[2] = (uint64_t)st.st_mtim.tv_nsec;
    }
    k.id = XXH3_64bits_withSeed(sd_gguf_bytes(g), sd_gguf_data_offset(g), XXH3_64bits(v, sizeof v));
    return k;
}

int sd_model_fail(struct sdnpu_model *model, const struct sd_err *err) {
    pthread_mutex_lock(&model->mu);
    snprintf(model->last_error, sizeof model->last_error, "%s", err->msg);
    pthread_mutex_unlock(&model->mu);
    SD_LOGE("%s", err->msg);
    return err->status;
}

enum sdnpu_status sdnpu_model_load(const char *path, struct sdnpu_model_params params, struct sdnpu_model **out,
                                   char *errbuf, size_t err_size) {
    struct sd_err err = {0};
    struct sd_gguf *g = NULL;
    struct sdnpu_model *model = NULL;
    int rc;
    if (errbuf && err_size) errbuf[0] = '\0';
    if (!out) return SDNPU_ERR_INVALID_ARG;
    *out = NULL;
    if (!path) {
        rc = sd_err_set(&err, SDNPU_ERR_INVALID_ARG, "model path is NULL");
        goto fail;
    }
    enum sd_head_mode head;
    if (!sd_head_mode_parse(params.head, &head)) {
        rc = sd_err_set(&err, SDNPU_ERR_INVALID_ARG,
                        "head \"%s\": expected \"auto\", \"exact\" or \"certified\"", params.head);
        goto fail;
    }
    if ((rc = sd_gguf_open(path, params.use_mmap, &g, &err))) goto fail;
    model = sd_calloc(1, sizeof *model);
    if (!model) {
        sd_gguf_close(g);
        rc = sd_err_set(&err, SDNPU_ERR_OOM, "out of memory for the model");
        goto fail;
    }
    if ((rc = sd_model_file_load(g, params.vocab_only, &model->file, &err))) { /* takes g either way */
        sd_free(model);
        goto fail;
    }
    model->m = &model->file->m;
    model->vocab = model->file->vocab;
    model->cache_key = cache_key(path, model->file->gguf);
    /* Loading read the metadata (the vocabulary, the template: copies now)
     * and the norm vectors (converted to F32): none of those pages is read
     * again, and each read left up to 64 KiB of the file mapped around it
     * (fault-around). Give the whole file back; the graphs fault in what
     * they read. */
    if (model->m->file_mapped)
        sd_drop_pages(sd_gguf_bytes(model->file->gguf), sd_gguf_file_size(model->file->gguf));
    if (!params.vocab_only && (rc = sd_wstore_create(model->m, head, &model->weights, &err))) {
        sd_model_file_free(model->file);
        sd_free(model);
        goto fail;
    }
    model->path = sd_strndup(path, strlen(path));
    if (!model->path) {
        sd_wstore_free(model->weights);
        sd_model_file_free(model->file);
        sd_free(model);
        rc = sd_err_set(&err, SDNPU_ERR_OOM, "out of memory for the model");
        goto fail;
    }
    model->n_threads = params.n_threads > 0 ? params.n_threads : sd_n_cores();
    pthread_mutex_init(&model->mu, NULL);
    bool recognized;
    if (sd_chat_detect(model->file->chat_template, &model->chat, &recognized)) {
        sdnpu_model_free(model); /* whole now: the mutex made, the chat empty */
        rc = sd_err_set(&err, SDNPU_ERR_OOM, "out of memory for the model's chat template");
        goto fail;
    }
    if (!recognized)
        SD_LOGW("%s: chat template not recognized; using the plain 'User: text' format", path);
    *out = model;
    return SDNPU_OK;
fail:
    if (path && !strstr(err.msg, path)) sd_err_prefix(&err, "%s", path);
    if (errbuf && err_size) snprintf(errbuf, err_size, "%s", err.msg);
    SD_LOGE("%s", err.msg);
    return rc;
}

void sdnpu_model_free(struct sdnpu_model *model) {
    if (!model) return;
    sd_wstore_free(model->weights);
    sd_model_file_free(model->file);
    sd_chat_free(&model->chat);
    pthread_mutex_destroy(&model->mu);
    sd_free(model->path);
    sd_free(model);
}

const char *sdnpu_model_last_error(const struct sdnpu_model *model) { return model ? model->last_error : ""; }

int32_t sdnpu_model_n_vocab(const struct sdnpu_model *model) { return model ? model->m->cfg.n_vocab : 0; }

int32_t sdnpu_model_n_ctx_train(const struct sdnpu_model *model) {
    return model ? model->m->cfg.n_ctx_train : 0;
}

size_t sdnpu_model_shared_weight_bytes(const struct sdnpu_model *model) {
    return model && model->weights ? sd_wstore_bytes(model->weights) : 0;
}

bool sdnpu_model_has_chat_template(const struct sdnpu_model *model) {
    return model && model->file->chat_template != NULL;
}

const char *sdnpu_model_arch(const struct sdnpu_model *model) { return model ? model->m->cfg.arch_name : ""; }

enum sdnpu_status sdnpu_tokenize(const struct sdnpu_model *cmodel, const char *text, size_t len, uint32_t flags,
                                 sdnpu_token *tokens, size_t cap, size_t *n_tokens) {
    if (!cmodel || (!text && len) || !n_tokens || (!tokens && cap)) return SDNPU_ERR_INVALID_ARG;
    struct sdnpu_model *model = (struct sdnpu_model *)cmodel; /* only last_error is written, under its lock */
    struct sd_tokvec tv = {0};
    struct sd_err err = {0};
    unsigned f = 0;
    if (flags & SDNPU_TOKENIZE_ADD_SPECIAL) f |= SD_TOK_ADD_SPECIAL;
    if (flags & SDNPU_TOKENIZE_PARSE_SPECIAL) f |= SD_TOK_PARSE_SPECIAL;
    if (flags & SDNPU_TOKENIZE_REPLACE_INVALID) f |= SD_TOK_REPLACE_INVALID;
    int rc = sd_tokenize(model->vocab, text ? text : "", len, f, &tv, &err);
    if (rc) {
        sd_tokvec_free(&tv);
        return sd_model_fail(model, &err);
    }
    *n_tokens = tv.n;
    if (tv.n > cap) {
        sd_tokvec_free(&tv);
        return SDNPU_ERR_BUFFER_TOO_SMALL;
    }
    if (tv.n) memcpy(tokens, tv.ids, tv.n * sizeof *tokens);
    sd_tokvec_free(&tv);
    return SDNPU_OK;
}

enum sdnpu_status sdnpu_detokenize(const struct sdnpu_model *model, const sdnpu_token *tokens, size_t n_tokens,
                                   bool render_special, char *text, size_t cap, size_t *n_bytes) {
    if (!model || (!tokens && n_tokens) || !n_bytes || (!text && cap)) return SDNPU_ERR_INVALID_ARG;
    int32_t nv = model->m->cfg.n_vocab;
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= nv) return SDNPU_ERR_INVALID_ARG;
    int64_t r = sd_detokenize(model->vocab, tokens, n_tokens, render_special, text, cap);
    if (r < 0) {
        *n_bytes = (size_t)(-r);
        return SDNPU_ERR_BUFFER_TOO_SMALL;
    }
    *n_bytes = (size_t)r;
    return SDNPU_OK;
}

/* The chat rendered with the tools' lines (NULL: none). */
static enum sdnpu_status chat_format(const struct sdnpu_model *model, const struct sdnpu_chat_message *msgs,
                                     size_t n_msgs, const char *tools, bool add_assistant, char *buf,
                                     size_t cap, size_t *n_bytes) {
    /* struct sdnpu_chat_message and struct sd_chat_msg have the same layout. */
    int64_t r = sd_chat_render_tools(&model->chat, (const struct sd_chat_msg *)msgs, n_msgs, tools,
                                     add_assistant, buf, cap);
    if (r < 0) {
        *n_bytes = (size_t)(-r);
        return SDNPU_ERR_BUFFER_TOO_SMALL;
    }
    *n_bytes = (size_t)r;
    return SDNPU_OK;
}

static bool chat_args_ok(const struct sdnpu_model *model, const struct sdnpu_chat_message *msgs,
                         size_t n_msgs, char *buf, size_t cap, size_t *n_bytes) {
    if (!model || (!msgs && n_msgs) || !n_bytes || (!buf && cap)) return false;
    for (size_t i = 0; i < n_msgs; i++)
        if (!msgs[i].role) return false;
    return true;
}

enum sdnpu_status sdnpu_chat_format(const struct sdnpu_model *model, const struct sdnpu_chat_message *msgs,
                                    size_t n_msgs, bool add_assistant, char *buf, size_t cap,
                                    size_t *n_bytes) {
    if (!chat_args_ok(model, msgs, n_msgs, buf, cap, n_bytes)) return SDNPU_ERR_INVALID_ARG;
    return chat_format(model, msgs, n_msgs, NULL, add_assistant, buf, cap, n_bytes);
}

bool sdnpu_model_chat_tools(const struct sdnpu_model *model) { return model && model->chat.tools_head; }

/* Tool t (a JSON object) as the template's tojson writes it (Python's
 * json.dumps: ", " and ": ", the keys in their order, UTF-8 as it is),
 * on a line of its own after what *out (n bytes, NUL-terminated) holds. */
static enum sdnpu_status append_tool(char **out, size_t *n, const json_t *t) {
    if (!json_is_object(t)) return SDNPU_ERR_INVALID_ARG;
    char *text = json_dumps(t, 0);
    const size_t len = text ? strlen(text) : 0;
    char *grown = text ? sd_realloc(*out, *n + len + 2) : NULL;
    if (grown) {
        if (*n) grown[(*n)++] = '\n';
        memcpy(grown + *n, text, len + 1);
        *out = grown, *n += len;
    }
    free(text);
    return grown ? SDNPU_OK : SDNPU_ERR_OOM;
}

/* The tools of the JSON array tools_json, one a line (sd_malloc'd), or
 * NULL with *rc the reason. */
static char *tool_lines(const char *tools_json, enum sdnpu_status *rc) {
    json_t *arr = json_loads(tools_json, JSON_REJECT_DUPLICATES, NULL);
    char *out = sd_strndup("", 0);
    size_t n = 0;
    *rc = !out ? SDNPU_ERR_OOM : json_is_array(arr) ? SDNPU_OK : SDNPU_ERR_INVALID_ARG;
    for (size_t i = 0; *rc == SDNPU_OK && i < json_array_size(arr); i++)
        *rc = append_tool(&out, &n, json_array_get(arr, i));
    json_decref(arr);
    if (*rc == SDNPU_OK) return out;
    sd_free(out);
    return NULL;
}

enum sdnpu_status sdnpu_chat_format_tools(const struct sdnpu_model *model,
                                          const struct sdnpu_chat_message *msgs, size_t n_msgs,
                                          const char *tools_json, bool add_assistant, char *buf, size_t cap,
                                          size_t *n_bytes) {
    if (!chat_args_ok(model, msgs, n_msgs, buf, cap, n_bytes) || !tools_json) return SDNPU_ERR_INVALID_ARG;
    if (!model->chat.tools_head) return SDNPU_ERR_UNSUPPORTED;
    enum sdnpu_status rc;
    char *lines = tool_lines(tools_json, &rc);
    /* No tools (an empty array) renders as the template's branch without them. */
    if (lines) rc = chat_format(model, msgs, n_msgs, *lines ? lines : NULL, add_assistant, buf, cap, n_bytes);
    sd_free(lines);
    return rc;
}

/* ------------------------------------------------------------ tools */

struct sd_rt *sd_tool_session_rt(struct sdnpu_session *s) { return s ? s->rt : NULL; }
int64_t sd_tool_model_chat_turn(const struct sdnpu_model *model, const char *system, const char *user,
                                char *buf, size_t cap) {
    return sd_chat_render_turn(&model->chat, system, user, buf, cap);
}
const float *sd_tool_session_logits(const struct sdnpu_session *s) { return s->logits; }

void sd_tool_session_rewind(struct sdnpu_session *s, int32_t n_past) {
    if (n_past < 0 || n_past > s->n_past) return;
    s->n_past = n_past;
    s->have_logits = false;
    s->has_pending = false;
    s->calib_valid = SD_MIN(s->calib_valid, n_past);
    sd_rt_kv_truncate(s->rt, n_past);
}
const int32_t *sd_tool_session_tokens(const struct sdnpu_session *s, int32_t *n) {
    *n = s->n_past + s->has_pending;
    return s->ctx_tokens;
}
int32_t sd_tool_session_eog(const struct sdnpu_session *s) { return s->eog_token; }
const struct sd_sam *sd_tool_session_calib(const struct sdnpu_session *s) {
    return s->calib_sam && sd_sam_n_tokens(s->calib_sam) ? s->calib_sam : NULL;
}
const struct sd_model *sd_tool_model_weights(const struct sdnpu_model *model) {
    return model && model->m->cfg.n_layer > 0 ? model->m : NULL;
}
const char *sd_tool_model_head(const struct sdnpu_model *model) {
    return model && sd_wstore_certified(model->weights) ? "certified" : "exact";
}
int32_t sd_tool_model_threads(const struct sdnpu_model *model) { return model ? model->n_threads : 0; }
