/* server/openai.c - the OpenAI request and reply shapes: a body checked
 * field by field into a job, and a job run on a session into a reply (a
 * JSON body, or server-sent events as the text comes). */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "server/jobs.h"
#include "server/server.h"
#include "server/tools.h"

#define DEFAULT_SEED 0xC0FFEEull

/* ------------------------------------------------------------- requests */

static json_t *json_text(const char *text, size_t len);

/* A number field in [lo, hi], if present. */
static int get_number(json_t *o, const char *key, double lo, double hi, double *out, char *msg, size_t cap) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return sd_srv_bad(msg, cap, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return sd_srv_bad(msg, cap, "'%s' is %g; it must be between %g and %g", key, d, lo, hi);
    *out = d;
    return 0;
}

static int get_bool(json_t *o, const char *key, bool *out, char *msg, size_t cap) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return sd_srv_bad(msg, cap, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static int parse_stops(json_t *root, struct job *j, char *msg, size_t cap) {
    json_t *v = json_object_get(root, "stop");
    if (!v || json_is_null(v)) return 0;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > JOB_MAX_STOPS)
            return sd_srv_bad(msg, cap, "'stop' holds %zu strings; at most %d", n, JOB_MAX_STOPS);
        items = NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(v, i);
        if (!json_is_string(s) || json_string_length(s) == 0)
            return sd_srv_bad(msg, cap, "'stop' must be a non-empty string or an array of them");
        if (!(j->stops[j->n_stops] = strndup(json_string_value(s), json_string_length(s))))
            return sd_srv_bad(msg, cap, "out of memory");
        j->n_stops++;
    }
    return 0;
}

/* {"type": "json_schema", "json_schema": {"name": ..., "schema": {...},
 * "strict": ...}}: the schema, checked now (a 400 names what the subset
 * lacks: a schema not enforced would mislead the client). The reply is
 * held to it whatever "strict" says. */
static int parse_schema(json_t *f, struct job *j, char *msg, size_t cap) {
    json_t *js = json_object_get(f, "json_schema"), *sch = json_object_get(js, "schema");
    if (!json_is_object(js) || !json_is_object(sch))
        return sd_srv_bad(msg, cap, "'response_format.json_schema' must be an object with a 'schema' object");
    if (!(j->schema = json_dumps(sch, JSON_COMPACT)))
        return sd_srv_bad(msg, cap, "out of memory for the json schema");
    char err[512];
    if (sdnpu_json_schema_check(j->schema, err, sizeof err))
        return sd_srv_bad(msg, cap, "'response_format.json_schema.schema': %s", err);
    return 0;
}

/* OpenAI's response_format: {"type": "text"}, {"type": "json_object"} or
 * {"type": "json_schema", ...}. */
static int parse_format(json_t *root, struct job *j, char *msg, size_t cap) {
    j->json = false;
    json_t *f = json_object_get(root, "response_format");
    if (!f || json_is_null(f)) return 0;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!json_is_object(f) || !type)
        return sd_srv_bad(msg, cap, "'response_format' must be an object with a string 'type'");
    if (!strcmp(type, "json_object"))
        j->json = true;
    else if (!strcmp(type, "json_schema"))
        return parse_schema(f, j, msg, cap);
    else if (strcmp(type, "text"))
        return sd_srv_bad(
            msg, cap,
            "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", not \"%s\"", type);
    return 0;
}

/* sdnpu's own fields, under "sdnpu": spec, adaptive, stop_on_repeat, and
 * documents (returned in *docs for the prompt). */
static int parse_extension(json_t *root, struct job *j, json_t **docs, char *msg, size_t cap) {
    *docs = NULL;
    json_t *x = json_object_get(root, "sdnpu");
    if (!x || json_is_null(x)) return 0;
    if (!json_is_object(x)) return sd_srv_bad(msg, cap, "'sdnpu' must be an object");
    json_t *spec = json_object_get(x, "spec");
    if (spec) {
        char e[200];
        if (!json_is_string(spec))
            return sd_srv_bad(msg, cap, "'sdnpu.spec' must be a string such as \"sam-tree+reuse\"");
        if (sdnpu_spec_parse(json_string_value(spec), &j->spec, e, sizeof e) || sdnpu_spec_check(j->spec, e, sizeof e))
            return sd_srv_bad(msg, cap, "'sdnpu.spec': %s", e);
    }
    int rc;
    if ((rc = get_bool(x, "adaptive", &j->adaptive, msg, cap)) ||
        (rc = get_bool(x, "stop_on_repeat", &j->stop_on_repeat, msg, cap)))
        return rc;
    json_t *d = json_object_get(x, "documents");
    if (d && !json_is_null(d)) {
        if (!json_is_array(d)) return sd_srv_bad(msg, cap, "'sdnpu.documents' must be an array of strings");
        for (size_t i = 0; i < json_array_size(d); i++)
            if (!json_is_string(json_array_get(d, i)))
                return sd_srv_bad(msg, cap, "'sdnpu.documents[%zu]' must be a string", i);
        *docs = d;
    }
    return 0;
}

/* The documents, each followed by a blank line, then text: a completion
 * continues text, as the request API's prompt for a base model. */
static char *with_documents(json_t *docs, const char *text, size_t len) {
    size_t total = len + 1;
    for (size_t i = 0; docs && i < json_array_size(docs); i++) total += json_string_length(json_array_get(docs, i)) + 2;
    char *out = malloc(total);
    if (!out) return NULL;
    size_t n = 0;
    for (size_t i = 0; docs && i < json_array_size(docs); i++) {
        json_t *s = json_array_get(docs, i);
        memcpy(out + n, json_string_value(s), json_string_length(s));
        n += json_string_length(s);
        memcpy(out + n, "\n\n", 2);
        n += 2;
    }
    memcpy(out + n, text, len);
    out[n + len] = '\0';
    return out;
}

/* The documents and a chat's last user message, laid out as every
 * surface gives an instruction-tuned model its documents
 * (sdnpu_documents_format: each between tags). */
static char *tagged_documents(json_t *docs, const char *text) {
    size_t n_docs = json_array_size(docs), need = 0;
    const char **d = malloc((n_docs ? n_docs : 1) * sizeof *d);
    if (!d) return NULL;
    for (size_t i = 0; i < n_docs; i++)
        d[i] = json_string_value(json_array_get(docs, i));
    char *out = NULL;
    if (sdnpu_documents_format(d, n_docs, text, NULL, 0, &need) == SDNPU_ERR_BUFFER_TOO_SMALL &&
        (out = malloc(need)) && sdnpu_documents_format(d, n_docs, text, out, need, &need) != SDNPU_OK) {
        free(out);
        out = NULL;
    }
    free(d);
    return out;
}

static int parse_prompt(json_t *root, json_t *docs, struct job *j, char *msg, size_t cap) {
    json_t *v = json_object_get(root, "prompt");
    if (json_is_array(v) && json_array_size(v) == 1) v = json_array_get(v, 0);
    if (!v) return sd_srv_bad(msg, cap, "'prompt' is missing");
    if (!json_is_string(v))
        return sd_srv_bad(msg, cap, "'prompt' must be a string (or an array of one string)");
    j->prompt = with_documents(docs, json_string_value(v), json_string_length(v));
    return j->prompt ? 0 : sd_srv_bad(msg, cap, "out of memory");
}

/* A message's content: a string, or an array of {"type": "text", "text"}
 * parts, joined; null for an assistant turn is "". */
static char *message_text(json_t *c) {
    if (!c || json_is_null(c)) return strdup("");
    if (json_is_string(c)) return strndup(json_string_value(c), json_string_length(c));
    if (!json_is_array(c)) return NULL;
    size_t total = 1;
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *t = json_object_get(json_array_get(c, i), "text");
        if (!json_is_string(t)) return NULL;
        total += json_string_length(t);
    }
    char *out = malloc(total);
    if (!out) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *t = json_object_get(json_array_get(c, i), "text");
        memcpy(out + n, json_string_value(t), json_string_length(t));
        n += json_string_length(t);
    }
    out[n] = '\0';
    return out;
}

static int parse_messages(json_t *root, json_t *docs, struct job *j, char *msg, size_t cap) {
    json_t *v = json_object_get(root, "messages");
    if (!json_is_array(v) || json_array_size(v) == 0)
        return sd_srv_bad(msg, cap, "'messages' must be a non-empty array");
    size_t n = json_array_size(v);
    j->roles = calloc(n, sizeof *j->roles);
    j->texts = calloc(n, sizeof *j->texts);
    if (!j->roles || !j->texts) return sd_srv_bad(msg, cap, "out of memory");
    size_t last_user = n;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i);
        json_t *role = json_object_get(m, "role");
        const char *r = json_is_string(role) ? json_string_value(role) : "";
        if (!strcmp(r, "developer")) r = "system";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
            return sd_srv_bad(msg, cap, "messages[%zu].role must be system, user, assistant or tool", i);
        if (!strcmp(r, "user")) last_user = i;
        /* A tool's result, or an assistant's calls: as the model reads them. */
        const bool calls = !strcmp(r, "tool") || json_is_array(json_object_get(m, "tool_calls"));
        j->texts[i] =
            calls ? sd_srv_tools_message(m, i, &r, msg, cap) : message_text(json_object_get(m, "content"));
        j->roles[i] = strdup(r);
        j->n_msgs = i + 1;
        if (calls && !j->texts[i]) return 400;
        if (!j->roles[i] || !j->texts[i])
            return sd_srv_bad(msg, cap, "messages[%zu].content must be a string or an array of text parts",
                              i);
    }
    if (docs && last_user < n) {
        char *t = tagged_documents(docs, j->texts[last_user]);
        if (!t) return sd_srv_bad(msg, cap, "out of memory");
        free(j->texts[last_user]);
        j->texts[last_user] = t;
    }
    return 0;
}

static int parse_limits(json_t *root, const struct sd_server_params *sp, struct job *j, char *msg, size_t cap) {
    json_t *mt = json_object_get(root, "max_tokens");
    if (!mt || json_is_null(mt)) mt = json_object_get(root, "max_completion_tokens");
    j->max_tokens = sp->default_tokens;
    if (mt && !json_is_null(mt)) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 1)
            return sd_srv_bad(msg, cap, "'max_tokens' must be a positive integer");
        if (json_integer_value(mt) > sp->max_tokens)
            return sd_srv_bad(msg, cap,
                              "'max_tokens' is %" JSON_INTEGER_FORMAT "; this server allows at most %d",
                              json_integer_value(mt), (int)sp->max_tokens);
        j->max_tokens = (int32_t)json_integer_value(mt);
    }
    json_t *n = json_object_get(root, "n");
    if (n && !json_is_null(n) && (!json_is_integer(n) || json_integer_value(n) != 1))
        return sd_srv_bad(msg, cap, "'n' must be 1: one choice per request");
    json_t *seed = json_object_get(root, "seed");
    j->seed = DEFAULT_SEED;
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) return sd_srv_bad(msg, cap, "'seed' must be an integer");
        j->seed = (uint64_t)json_integer_value(seed);
    }
    double t = 1.0, p = 1.0;
    int rc;
    if ((rc = get_number(root, "temperature", 0.0, 2.0, &t, msg, cap)) ||
        (rc = get_number(root, "top_p", 0.0, 1.0, &p, msg, cap)))
        return rc;
    j->temperature = (float)t;
    j->top_p = (float)p;
    return get_bool(root, "stream", &j->stream, msg, cap);
}

int sd_srv_openai_parse(enum job_kind kind, const char *body, size_t len, const struct sd_server_params *sp,
                        struct job *j, char *msg, size_t cap) {
    json_error_t e;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);
    if (!root)
        return sd_srv_bad(msg, cap, "the body is not valid JSON: %s (line %d, column %d)", e.text, e.line,
                          e.column);
    int rc = 0;
    json_t *docs = NULL;
    j->kind = kind;
    j->adaptive = true;
    j->stop_on_repeat = false;
    sdnpu_spec_parse(sp->spec, &j->spec, NULL, 0); /* checked when the server started */
    if (!json_is_object(root))
        rc = sd_srv_bad(msg, cap, "the body must be a JSON object");
    else if (json_object_get(root, "model") && !json_is_string(json_object_get(root, "model")))
        rc = sd_srv_bad(msg, cap, "'model' must be a string");
    if (!rc) rc = parse_limits(root, sp, j, msg, cap);
    if (!rc) rc = parse_stops(root, j, msg, cap);
    if (!rc) rc = parse_format(root, j, msg, cap);
    if (!rc && kind == JOB_CHAT) rc = sd_srv_tools_parse(root, j, msg, cap);
    if (!rc) rc = parse_extension(root, j, &docs, msg, cap);
    if (!rc) rc = kind == JOB_COMPLETION ? parse_prompt(root, docs, j, msg, cap) : parse_messages(root, docs, j, msg, cap);
    json_decref(root);
    return rc;
}

char *sd_srv_openai_error(const char *msg, int status) {
    const char *type = status == 401   ? "authentication_error"
                       : status == 503 ? "server_busy"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    /* The message may quote the body's bytes, which need not be UTF-8. */
    json_t *o = json_pack("{s:{s:o, s:s, s:i}}", "error", "message", json_text(msg, strlen(msg)), "type", type,
                          "code", status);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* ---------------------------------------------------------------- replies */

/* The chunk object every streamed event and the final body share. */
static json_t *reply_head(const struct job *j, bool chunk) {
    const char *object = j->kind == JOB_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return json_pack("{s:s, s:s, s:I, s:s}", "id", j->id, "object", object, "created", (json_int_t)j->created, "model",
                     j->model_name);
}

/* A JSON string of text, each ill-formed UTF-8 subpart given as U+FFFD
 * (a model's byte tokens can make such text; JSON strings cannot hold it). */
static json_t *json_text(const char *text, size_t len) {
    json_t *v = json_stringn(text, len);
    if (v) return v;
    size_t n;
    char *t = sd_utf8_clean(text, len, &n);
    if (!t) return NULL;
    v = json_stringn(t, n);
    sd_free(t);
    return v;
}

/* One choice: text (completions) or a message / delta (chat). */
static json_t *choice(const struct job *j, const char *text, size_t len, const char *finish, bool chunk, bool role) {
    json_t *c = json_pack("{s:i}", "index", 0);
    if (j->kind == JOB_CHAT) {
        json_t *m = json_object();
        if (role || !chunk) json_object_set_new(m, "role", json_string("assistant"));
        if (len || !chunk || role) json_object_set_new(m, "content", json_text(text, len));
        json_object_set_new(c, chunk ? "delta" : "message", m);
    } else {
        json_object_set_new(c, "text", json_text(text, len));
        json_object_set_new(c, "logprobs", json_null());
    }
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    return c;
}

static void send_event(struct job *j, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) {
        j->oom = true;
        return;
    }
    sd_srv_job_append(j, "data: ", 6);
    sd_srv_job_append(j, s, strlen(s));
    sd_srv_job_append(j, "\n\n", 2);
    free(s);
}

struct run_state {
    struct job *j;
    char *text; /* with tools: the reply so far (NUL-terminated), read for calls at the end */
    size_t n, cap;
    size_t sent;  /* ... of it, the bytes streamed as content */
    bool calling; /* ... a call has begun: no more content */
    bool any;     /* a piece was streamed */
};

/* A client gone (or the server stopping) stops a long prompt's prefill
 * too, between its chunks, not only the reply. */
static bool on_prefill_chunk(int32_t done, int32_t total, void *user) {
    const struct run_state *r = user;
    (void)done;
    (void)total;
    return !atomic_load(&r->j->cancel);
}

/* One streamed piece of content (mu held). */
static void stream_text(struct run_state *r, const char *text, size_t len) {
    struct job *j = r->j;
    json_t *o = reply_head(j, true);
    json_object_set_new(o, "choices", json_pack("[o]", choice(j, text, len, NULL, true, !r->any)));
    send_event(j, o);
    j->started = true;
    sd_srv_job_wake(j);
    r->any = true;
}

/* With tools the reply is kept whole for its calls, and a stream sends
 * only what cannot be the start of one (server/tools.h); a forced call
 * streams nothing until it is read. */
static void on_tool_piece(struct run_state *r, const char *piece, size_t len) {
    struct job *j = r->j;
    if (!sd_srv_text_append(&r->text, &r->n, &r->cap, piece, len)) {
        j->oom = true;
        return;
    }
    if (!j->stream || j->tool_call || r->calling) return;
    const size_t k =
        sd_srv_tools_sendable(j, r->text, r->n, r->sent, &r->calling); /* the sent part is decided */
    if (k > r->sent) stream_text(r, r->text + r->sent, k - r->sent);
    r->sent = k > r->sent ? k : r->sent;
}

static bool on_piece(const char *piece, size_t len, void *user) {
    struct run_state *r = user;
    struct job *j = r->j;
    if (atomic_load(&j->cancel)) return false;
    pthread_mutex_lock(&j->mu);
    if (j->tools)
        on_tool_piece(r, piece, len);
    else if (j->stream)
        stream_text(r, piece, len);
    else
        sd_srv_job_append(j, piece, len);
    pthread_mutex_unlock(&j->mu);
    return !j->oom;
}

static const char *stop_name(int32_t why) {
    static const char *names[] = {"length", "eog", "stop", "callback", "context_full", "repetition", "prefill"};
    return why >= 0 && why < 7 ? names[why] : "unknown";
}

static json_t *usage(const struct sdnpu_stats *st) {
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", st->n_prompt_tokens, "completion_tokens", st->n_generated,
                     "total_tokens", st->n_prompt_tokens + st->n_generated);
}

/* sdnpu's statistics of the request, an extension clients ignore. */
static json_t *stats_json(const struct job *j, const struct sdnpu_stats *st) {
    char spec[64];
    size_t n_spec;
    if (sdnpu_spec_str(j->spec, spec, sizeof spec, &n_spec)) spec[0] = '\0'; /* 64 bytes hold every spec */
    return json_pack("{s:s, s:b, s:f, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:s, s:f, s:i, s:i, s:I}", "spec",
                     spec, "adaptive",
                     j->adaptive, "acceptance", st->acceptance, "model_calls", st->n_verify_steps, "drafted",
                     st->n_drafted, "accepted", st->n_accepted, "plain_steps", st->n_plain_steps, "prefill_ms",
                     st->prefill_ms, "decode_ms", st->decode_ms, "tokens_per_s", st->gen_tokens_per_s,
                     "padding_share", st->n_graph_rows ? (double)st->n_pad_rows / (double)st->n_graph_rows : 0.0,
                     "stop_reason", stop_name(st->stop_reason), "calib_ms", st->calib_ms, "calib_records",
                     st->n_calib_records, "prompt_reused", st->n_prompt_reused, "order", (json_int_t)j->order);
}

/* A session whose context the job does not fit (its prompt and max_tokens,
 * or as much of them as ctx_max holds: the prompt always fits it) grows
 * (sdnpu_session_reserve): a long document is answered, not refused. What
 * the session holds moves along (its prompt cache's snapshots stay too). */
static enum sdnpu_status fit_context(const struct job *j, struct sdnpu_session *s) {
    const int64_t need = (int64_t)j->n_toks + j->max_tokens;
    return sdnpu_session_reserve(s, need < j->ctx_max ? need : j->ctx_max, j->ctx_max);
}

/* Generate for the job on its tokens, as a new context: what the session
 * already holds of them (its context, its prompt cache) is kept, the rest
 * prefilled, with the output what a fresh session would give. Returns the
 * status of generate. */
static enum sdnpu_status generate(struct job *j, struct sdnpu_session *s, struct run_state *r,
                                  struct sdnpu_stats *st) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    const char *stops[JOB_MAX_STOPS + 1];
    size_t n_stops = 0;
    for (size_t i = 0; i < j->n_stops; i++) stops[n_stops++] = j->stops[i];
    /* The plain script: the reply ends where the model starts the next
     * user line. */
    if (j->plain_chat) stops[n_stops++] = "\nUser:";
    gp.n_predict = j->max_tokens;
    gp.sampling.temperature = j->temperature;
    gp.sampling.top_p = j->top_p;
    gp.sampling.top_k = 0; /* OpenAI's sampling: temperature and top_p only */
    gp.sampling.min_p = 0;
    gp.sampling.seed = j->seed;
    gp.spec = j->spec;
    gp.adaptive = j->adaptive;
    gp.stop_on_repeat = j->stop_on_repeat;
    gp.format = j->schema ? SDNPU_FORMAT_JSON_SCHEMA : j->json ? SDNPU_FORMAT_JSON : SDNPU_FORMAT_TEXT;
    gp.json_schema = j->schema;
    gp.stop = stops;
    gp.n_stop = n_stops;
    gp.on_text = on_piece;
    gp.on_prefill = on_prefill_chunk;
    gp.user = r;
    gp.prompt_tokens = j->toks;
    gp.n_prompt_tokens = j->n_toks;
    gp.new_context = true;
    enum sdnpu_status rc = fit_context(j, s);
    if (rc == SDNPU_OK) rc = sdnpu_session_generate(s, NULL, 0, &gp, st);
    if (rc >= 0) st->n_prompt_tokens = (int32_t)j->n_toks; /* usage counts the whole prompt, reused or not */
    return rc;
}

/* The chat as the model reads it (malloc'd, NUL-terminated), or NULL with
 * *rc the reason. */
static char *render_chat(const struct job *j, const struct sdnpu_model *m, size_t *len,
                         enum sdnpu_status *rc) {
    struct sdnpu_chat_message *msgs = calloc(j->n_msgs, sizeof *msgs);
    if (!msgs) return *rc = SDNPU_ERR_OOM, NULL;
    for (size_t i = 0; i < j->n_msgs; i++) msgs[i] = (struct sdnpu_chat_message){j->roles[i], j->texts[i]};
    /* A forced call: the assistant's turn opens with the call's tag. */
    const size_t extra = j->tool_call ? strlen(TOOL_CALL_OPEN) : 0;
    size_t need = 0;
    *rc = j->tools ? sdnpu_chat_format_tools(m, msgs, j->n_msgs, j->tools, true, NULL, 0, &need)
                   : sdnpu_chat_format(m, msgs, j->n_msgs, true, NULL, 0, &need);
    char *text = (*rc == SDNPU_OK || *rc == SDNPU_ERR_BUFFER_TOO_SMALL) ? malloc(need + extra + 1) : NULL;
    if (text)
        *rc = j->tools ? sdnpu_chat_format_tools(m, msgs, j->n_msgs, j->tools, true, text, need + 1, &need)
                       : sdnpu_chat_format(m, msgs, j->n_msgs, true, text, need + 1, &need);
    else if (*rc == SDNPU_OK || *rc == SDNPU_ERR_BUFFER_TOO_SMALL)
        *rc = SDNPU_ERR_OOM;
    free(msgs);
    if (*rc != SDNPU_OK) {
        free(text);
        return NULL;
    }
    if (extra) memcpy(text + need, TOOL_CALL_OPEN, extra + 1);
    *len = need + extra;
    return text;
}

/* Tools, or a tool's result, for a model whose template calls none: a 400
 * (its chat format would render them as text it was not tuned on). */
static bool tools_unsupported(const struct job *j, const struct sdnpu_model *m) {
    bool tool_msgs = j->tools != NULL;
    for (size_t i = 0; i < j->n_msgs; i++)
        tool_msgs |= !strcmp(j->roles[i], "tool");
    return tool_msgs && !sdnpu_model_chat_tools(m);
}

int sd_srv_openai_tokenize(struct job *j, const struct sdnpu_model *m, int32_t n_ctx, char *msg, size_t cap) {
    enum sdnpu_status rc = SDNPU_OK;
    const char *text = j->prompt;
    char *rendered = NULL;
    size_t len = j->prompt ? strlen(j->prompt) : 0;
    /* A completion's text is read as text, with the BOS the vocabulary
     * asks for, as sdnpu_session_generate reads a prompt on an empty
     * context. A chat template's turn markers are special tokens; the
     * plain script has none, and is read as text. */
    uint32_t fl = SDNPU_TOKENIZE_ADD_SPECIAL;
    if (j->kind == JOB_CHAT) {
        if (tools_unsupported(j, m))
            return sd_srv_bad(
                msg, cap,
                "'tools': this model's chat template calls no tools (sdnpu reads Qwen2.5's layout, "
                "<tool_call>; docs/server.md)");
        if (!(text = rendered = render_chat(j, m, &len, &rc))) {
            if (rc == SDNPU_ERR_OOM) return snprintf(msg, cap, "out of memory for the prompt"), 503;
            return sd_srv_bad(msg, cap, "the chat cannot be rendered: %s", sdnpu_status_str(rc));
        }
        j->plain_chat = !sdnpu_model_has_chat_template(m);
        if (!j->plain_chat) fl |= SDNPU_TOKENIZE_PARSE_SPECIAL;
    }
    size_t n = 0;
    rc = sdnpu_tokenize(m, text, len, fl, NULL, 0, &n);
    if (rc == SDNPU_OK || rc == SDNPU_ERR_BUFFER_TOO_SMALL) {
        j->toks = malloc((n + 1) * sizeof *j->toks);
        rc = j->toks ? sdnpu_tokenize(m, text, len, fl, j->toks, n, &n) : SDNPU_ERR_OOM;
    }
    free(rendered);
    if (rc == SDNPU_ERR_OOM) return snprintf(msg, cap, "out of memory for the prompt"), 503;
    if (rc != SDNPU_OK)
        return sd_srv_bad(msg, cap, "the prompt cannot be tokenized: %s", sdnpu_status_str(rc));
    j->n_toks = n;
    j->ctx_max = n_ctx;
    if (n == 0) return sd_srv_bad(msg, cap, "the prompt is empty");
    if (n_ctx > 0 && n + 1 > (size_t)n_ctx)
        return sd_srv_bad(msg, cap,
                          "the prompt has %zu tokens; a session's context holds at most %d: the prompt and "
                          "one token to generate",
                          n, (int)n_ctx);
    return 0;
}

static int status_of(enum sdnpu_status rc) {
    switch (rc) {
    case SDNPU_ERR_CONTEXT_FULL:
    case SDNPU_ERR_INVALID_ARG:
    case SDNPU_ERR_UNSUPPORTED:
        return 400;
    case SDNPU_ERR_OOM:
    case SDNPU_ABORTED:
        return 503;
    default:
        return 500;
    }
}

/* A stream's calls: one chunk whose delta holds them all, each with its
 * index (mu held; takes calls). */
static void stream_calls(struct run_state *r, json_t *calls) {
    struct job *j = r->j;
    for (size_t i = 0; i < json_array_size(calls); i++)
        json_object_set_new(json_array_get(calls, i), "index", json_integer((json_int_t)i));
    json_t *c = choice(j, "", 0, NULL, true, !r->any);
    json_object_set_new(json_object_get(c, "delta"), "tool_calls", calls);
    json_t *o = reply_head(j, true);
    json_object_set_new(o, "choices", json_pack("[o]", c));
    send_event(j, o);
    r->any = true;
}

/* What a finished reply says: its text and the bytes of it that are
 * content, its calls (with tools; NULL where none) and finish_reason. */
struct ending {
    const char *text;
    size_t content;
    json_t *calls;
    const char *reason;
};

/* With tools, the calls in the reply and the text before them as its
 * content (all of it where it calls nothing). */
static struct ending ending_of(const struct job *j, const struct run_state *r, const struct sdnpu_stats *st) {
    const bool cut = st->stop_reason == SDNPU_STOP_LENGTH || st->stop_reason == SDNPU_STOP_CONTEXT_FULL;
    struct ending e = {j->out ? j->out : "", j->n, NULL, cut ? "length" : "stop"};
    if (!j->tools) return e;
    e.text = r->text ? r->text : "";
    e.calls = sd_srv_tools_calls(j, e.text, r->n, j->tool_call, &e.content);
    if (e.calls) e.reason = "tool_calls";
    return e;
}

/* A stream's last events: what was held back, the calls, the chunk with
 * finish_reason and the figures (or the error that cut it), [DONE]. */
static void finish_stream(struct run_state *r, enum sdnpu_status rc, const char *why,
                          const struct sdnpu_stats *st) {
    struct job *j = r->j;
    json_t *o;
    if (rc != SDNPU_OK) {
        o = json_pack("{s:{s:o, s:i}}", "error", "message", json_text(why, strlen(why)), "code",
                      status_of(rc));
    } else {
        struct ending e = ending_of(j, r, st);
        if (j->tools && !e.calls && r->n > r->sent) stream_text(r, e.text + r->sent, r->n - r->sent);
        if (e.calls) stream_calls(r, e.calls);
        o = reply_head(j, true);
        json_object_set_new(o, "choices", json_pack("[o]", choice(j, "", 0, e.reason, true, !r->any)));
        json_object_set_new(o, "usage", usage(st));
        json_object_set_new(o, "sdnpu", stats_json(j, st));
    }
    send_event(j, o);
    sd_srv_job_append(j, "data: [DONE]\n\n", 14);
}

/* The whole reply's body. */
static void finish_body(struct job *j, const struct run_state *r, const struct sdnpu_stats *st) {
    struct ending e = ending_of(j, r, st);
    json_t *o = reply_head(j, false), *c = choice(j, e.text, e.content, e.reason, false, true);
    if (e.calls) {
        json_t *m = json_object_get(c, "message");
        if (e.content == 0) json_object_set_new(m, "content", json_null());
        json_object_set_new(m, "tool_calls", e.calls);
    }
    json_object_set_new(o, "choices", json_pack("[o]", c));
    json_object_set_new(o, "usage", usage(st));
    json_object_set_new(o, "sdnpu", stats_json(j, st));
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    j->n = 0;
    if (!body) {
        j->http_status = 503;
        body = sd_srv_openai_error("out of memory for the reply", 503);
    }
    if (body) sd_srv_job_append(j, body, strlen(body));
    free(body);
}

/* The reply of a finished job (mu held). */
static void finish(struct job *j, struct run_state *r, enum sdnpu_status rc, const char *why,
                   const struct sdnpu_stats *st) {
    if (rc != SDNPU_OK && !(j->stream && r->any)) {
        /* Nothing sent yet: the error is the reply. */
        j->n = 0;
        j->http_status = status_of(rc);
        char *e = sd_srv_openai_error(why, j->http_status);
        if (e) sd_srv_job_append(j, e, strlen(e));
        free(e);
    } else if (j->stream) {
        finish_stream(r, rc, why, st);
    } else {
        finish_body(j, r, st);
    }
}

/* The request's figures in the server's metrics (before its reply is
 * released: a client that reads /metrics after its reply finds it). */
static void count(struct server_metrics *mx, enum sdnpu_status rc, const struct sdnpu_stats *st) {
    if (!mx) return;
    if (rc == SDNPU_ABORTED) atomic_fetch_add(&mx->cancelled, 1);
    atomic_fetch_add(&mx->prompt_tokens, st->n_prompt_tokens);
    atomic_fetch_add(&mx->prompt_reused, st->n_prompt_reused);
    atomic_fetch_add(&mx->generated_tokens, st->n_generated);
    atomic_fetch_add(&mx->model_calls, st->n_verify_steps);
    atomic_fetch_add(&mx->accepted_drafts, st->n_accepted);
    atomic_fetch_add(&mx->graph_rows, st->n_graph_rows);
    atomic_fetch_add(&mx->pad_rows, st->n_pad_rows);
    atomic_fetch_add(&mx->repetition_stops, st->stop_reason == SDNPU_STOP_REPETITION);
}

void sd_srv_job_run(struct job *j, struct sdnpu_session *s, void (*session_done)(void *ud), void *ud) {
    struct run_state r = {.j = j};
    struct sdnpu_stats st;
    memset(&st, 0, sizeof st);
    enum sdnpu_status rc = SDNPU_ABORTED;
    char why[600] = "cancelled";
    if (!atomic_load(&j->cancel)) {
        rc = generate(j, s, &r, &st);
        if (rc < 0) snprintf(why, sizeof why, "%s: %s", sdnpu_status_str(rc), sdnpu_session_last_error(s));
    }
    if (session_done) session_done(ud); /* s is not touched again */
    if (rc == SDNPU_ABORTED && !atomic_load(&j->cancel)) rc = SDNPU_OK; /* a stop string, not the client */
    pthread_mutex_lock(&j->mu);
    if (j->oom) {
        rc = SDNPU_ERR_OOM;
        snprintf(why, sizeof why, "out of memory for the reply");
    }
    if (rc == SDNPU_ABORTED) snprintf(why, sizeof why, "cancelled: the client went away or the server is stopping");
    count(j->metrics, rc, &st);
    finish(j, &r, rc, why, &st);
    free(r.text);
    j->st = st;
    j->done = j->started = true;
    sd_srv_job_wake(j);
    pthread_mutex_unlock(&j->mu);
}
