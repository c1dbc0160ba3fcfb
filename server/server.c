/* server/server.c - the HTTP side of `sdnpu serve` (server.h): routes,
 * limits, the API key, metrics, suspending a connection until its job
 * answers, streaming, and the graceful stop. */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/guard.h"
#include "server/jobs.h"

struct server {
    struct sd_server_params p;
    struct sdnpu_model *model;
    char model_name[256];
    struct pool *pool;
    struct guard *guard;
    struct server_metrics m;
    atomic_bool draining;
    atomic_ullong next_id;
    atomic_int replying; /* requests with a job whose reply is not yet sent */
    int32_t ctx_max;     /* the largest context a session grows to (ctx_of) */
};

/* Per request: its body as it arrives, and the job its reply waits for. */
struct conn {
    char *body;
    size_t n, cap;
    size_t url_len;        /* the request line's URI, query included */
    bool too_large;
    bool seen;             /* the handler has checked the headers */
    bool handled;          /* it reached a route or a limit: answered by us */
    struct job *job;       /* a reference, or NULL */
    struct guard_conn *gc; /* its connection's record */
};

struct sd_server_params sd_server_default_params(void) {
    struct sd_server_params p = {0};
    p.host = "127.0.0.1";
    p.port = 8080;
    p.parallel = 1;
    p.queue = 16;
    p.max_connections = 1024;
    p.max_per_address = 64;
    p.io_threads = 2;
    p.request_timeout_s = 10;
    p.send_timeout_s = 30;
    p.max_header_bytes = 16 << 10;
    p.max_headers = 100;
    p.max_url = 8 << 10;
    p.max_body = 1 << 20;
    p.max_tokens = 2048;
    p.default_tokens = 256;
    p.spec = "sam-tree";
    p.drain_seconds = 10;
    p.model = sdnpu_model_default_params();
    p.session = sdnpu_session_default_params();
    p.session.prompt_cache_bytes = (size_t)SD_SERVER_PROMPT_CACHE_MIB << 20;
    return p;
}

/* ------------------------------------------------------------- replies */

static enum MHD_Result reply(struct server *sv, struct MHD_Connection *c, int status, const char *type,
                             char *body /* malloc'd, taken */) {
    if (!body) {
        status = 500;
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"code\":500}}");
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    atomic_fetch_add(status < 400 ? &sv->m.ok : status < 500 ? &sv->m.client_errors : &sv->m.server_errors, 1);
    return rc;
}

static enum MHD_Result reply_error(struct server *sv, struct MHD_Connection *c, int status, const char *msg) {
    return reply(sv, c, status, "application/json", sd_srv_openai_error(msg, status));
}

/* ---------------------------------------------------------------- checks */

/* Equal strings, in time that depends on the lengths only. */
static bool same_secret(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++) diff |= (unsigned char)a[i] ^ (unsigned char)b[i % (lb ? lb : 1)];
    return diff == 0;
}

static bool authorized(struct server *sv, struct MHD_Connection *c) {
    if (!sv->p.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    return h && !strncmp(h, "Bearer ", 7) && same_secret(h + 7, sv->p.api_key);
}

/* ------------------------------------------------ waiting for a job */

/* The job's wake (mu held): a connection suspended for it goes on. Called
 * on the worker's thread; resuming from there is what libmicrohttpd's
 * suspend/resume is for. */
static void wake_conn(struct job *j) {
    if (!j->suspended) return;
    j->suspended = false;
    MHD_resume_connection(j->conn);
}

/* The next piece of a streamed reply. With nothing to send yet, the
 * connection sleeps until the worker writes more (returning 0 with the
 * connection suspended, as libmicrohttpd asks): an I/O thread never waits
 * for a model. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct job *j = cls;
    pthread_mutex_lock(&j->mu);
    ssize_t got = 0;
    if (j->sent < j->n) {
        size_t k = j->n - j->sent < max ? j->n - j->sent : max;
        memcpy(buf, j->out + j->sent, k);
        j->sent += k;
        got = (ssize_t)k;
    } else if (j->done) {
        got = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        j->suspended = true;
        MHD_suspend_connection(j->conn);
    }
    pthread_mutex_unlock(&j->mu);
    return got;
}

/* The response is gone: if the job still runs, nobody reads it. */
static void stream_free(void *cls) {
    struct job *j = cls;
    pthread_mutex_lock(&j->mu);
    bool running = !j->done;
    pthread_mutex_unlock(&j->mu);
    if (running) atomic_store(&j->cancel, true);
    sd_srv_job_release(j);
}

static enum MHD_Result stream_reply(struct server *sv, struct MHD_Connection *c, struct job *j) {
    sd_srv_job_ref(j); /* the response's */
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, j, stream_free);
    if (!r) {
        atomic_store(&j->cancel, true);
        sd_srv_job_release(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&sv->m.ok, 1);
    return rc;
}

/* Answer the request whose job is cn->job if it can be answered now (the
 * whole reply, or a stream that has begun); else suspend the connection
 * until the worker wakes it, when libmicrohttpd calls on_request again. */
static enum MHD_Result answer_job(struct server *sv, struct MHD_Connection *c, struct conn *cn) {
    struct job *j = cn->job;
    pthread_mutex_lock(&j->mu);
    if (!(j->stream ? j->started : j->done)) {
        j->suspended = true;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&j->mu);
        return MHD_YES;
    }
    if (j->stream && j->http_status == 200) {
        pthread_mutex_unlock(&j->mu);
        return stream_reply(sv, c, j);
    }
    /* Done (an error before any event is a whole reply too). */
    int status = j->http_status;
    char *body = j->out ? strdup(j->out) : strdup("");
    pthread_mutex_unlock(&j->mu);
    return reply(sv, c, status, "application/json", body);
}

/* -------------------------------------------------------------- routes */

static enum MHD_Result run_job(struct server *sv, struct MHD_Connection *c, enum job_kind kind, struct conn *cn) {
    if (atomic_load(&sv->draining)) return reply_error(sv, c, 503, "the server is shutting down");
    struct job *j = sd_srv_job_new();
    if (!j) return reply_error(sv, c, 503, "out of memory");
    char msg[512];
    int st = sd_srv_openai_parse(kind, cn->body ? cn->body : "", cn->n, &sv->p, j, msg, sizeof msg);
    /* Tokenized here, once: the pool routes the job by its tokens. */
    if (!st) st = sd_srv_openai_tokenize(j, sv->model, sv->ctx_max, msg, sizeof msg);
    if (st) {
        sd_srv_job_release(j);
        return reply_error(sv, c, st, msg);
    }
    snprintf(j->id, sizeof j->id, "%s-%llu", kind == JOB_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&sv->next_id, 1));
    j->created = (long long)time(NULL);
    j->model_name = sv->model_name;
    j->metrics = &sv->m;
    j->wake = wake_conn;
    j->conn = c;
    if (!sd_srv_pool_submit(sv->pool, j)) {
        sd_srv_job_release(j);
        atomic_fetch_add(&sv->m.rejected[REJ_QUEUE_FULL], 1);
        return reply_error(sv, c, 503, "the server is busy: every session is working and the queue is full; retry");
    }
    cn->job = j; /* the connection's reference, dropped when the request completes */
    atomic_fetch_add(&sv->replying, 1);
    sd_srv_guard_working(sv->guard, cn->gc, j);
    return answer_job(sv, c, cn);
}

static char *models_body(struct server *sv) {
    char *b = malloc(strlen(sv->model_name) * 2 + 200);
    if (b)
        sprintf(b, "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\",\"created\":0,\"owned_by\":\"sdnpu\"}]}",
                sv->model_name);
    return b;
}

static const char *const k_reject_names[REJ_N] = {
    [REJ_QUEUE_FULL] = "queue_full",           [REJ_PER_ADDRESS] = "per_address",
    [REJ_REQUEST_TIMEOUT] = "request_timeout", [REJ_SEND_TIMEOUT] = "send_timeout",
    [REJ_HEADER_BYTES] = "header_bytes",       [REJ_HEADER_COUNT] = "header_count",
    [REJ_URL_LENGTH] = "url_length",           [REJ_BODY_SIZE] = "body_size",
    [REJ_MALFORMED] = "malformed",
};

/* The process's resident high-water mark (Linux reports KiB). */
static long long peak_rss_bytes(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) ? 0 : (long long)ru.ru_maxrss * 1024;
}

static char *metrics_body(struct server *sv) {
    struct server_metrics *m = &sv->m;
    long long calls = atomic_load(&m->model_calls), rows = atomic_load(&m->graph_rows);
    size_t cap = 16384;
    char *b = malloc(cap);
    if (!b) return NULL;
    int k = snprintf(b, cap,
             "# HELP sdnpu_requests_total HTTP requests answered, by class.\n# TYPE sdnpu_requests_total counter\n"
             "sdnpu_requests_total{class=\"2xx\"} %lld\nsdnpu_requests_total{class=\"4xx\"} %lld\n"
             "sdnpu_requests_total{class=\"5xx\"} %lld\n"
             "# HELP sdnpu_rejected_total Requests and connections refused or cut, by reason.\n"
             "# TYPE sdnpu_rejected_total counter\n",
             (long long)atomic_load(&m->ok), (long long)atomic_load(&m->client_errors),
             (long long)atomic_load(&m->server_errors));
    for (int r = 0; r < REJ_N; r++)
        k += snprintf(b + k, cap - (size_t)k, "sdnpu_rejected_total{reason=\"%s\"} %lld\n", k_reject_names[r],
                      (long long)atomic_load(&m->rejected[r]));
    k += snprintf(b + k, cap - (size_t)k,
             "# HELP sdnpu_cancelled_total Generations stopped because the client went away or shutdown.\n"
             "# TYPE sdnpu_cancelled_total counter\nsdnpu_cancelled_total %lld\n"
             "# HELP sdnpu_prompt_tokens_total Prompt tokens of the requests, reused or prefilled.\n"
             "# TYPE sdnpu_prompt_tokens_total counter\n"
             "sdnpu_prompt_tokens_total %lld\n"
             "# HELP sdnpu_tokens_generated_total Tokens generated.\n# TYPE sdnpu_tokens_generated_total counter\n"
             "sdnpu_tokens_generated_total %lld\n"
             "# HELP sdnpu_model_calls_total Model calls during decoding.\n# TYPE sdnpu_model_calls_total counter\n"
             "sdnpu_model_calls_total %lld\n"
             "# HELP sdnpu_acceptance_ratio Tokens per model call during decoding, over all requests.\n"
             "# TYPE sdnpu_acceptance_ratio gauge\nsdnpu_acceptance_ratio %.4f\n"
             "# HELP sdnpu_padding_share Padding rows over rows computed by decoding graphs.\n"
             "# TYPE sdnpu_padding_share gauge\nsdnpu_padding_share %.4f\n"
             "# HELP sdnpu_repetition_stops_total Generations the degeneration guard stopped.\n"
             "# TYPE sdnpu_repetition_stops_total counter\nsdnpu_repetition_stops_total %lld\n"
             "# HELP sdnpu_queue_depth Requests waiting for a session.\n# TYPE sdnpu_queue_depth gauge\n"
             "sdnpu_queue_depth %d\n"
             "# HELP sdnpu_running Requests being generated.\n# TYPE sdnpu_running gauge\nsdnpu_running %d\n"
             "# HELP sdnpu_connections Open HTTP connections.\n# TYPE sdnpu_connections gauge\n"
             "sdnpu_connections %d\n"
             "# HELP sdnpu_shared_weight_bytes The model's prepared weights, one copy every session reads.\n"
             "# TYPE sdnpu_shared_weight_bytes gauge\nsdnpu_shared_weight_bytes %zu\n"
             "# HELP sdnpu_peak_rss_bytes The server process's peak resident memory.\n"
             "# TYPE sdnpu_peak_rss_bytes gauge\nsdnpu_peak_rss_bytes %lld\n",
             (long long)atomic_load(&m->cancelled), (long long)atomic_load(&m->prompt_tokens),
             (long long)atomic_load(&m->generated_tokens), calls,
             calls ? (double)(calls + atomic_load(&m->accepted_drafts)) / (double)calls : 0.0,
             rows ? (double)atomic_load(&m->pad_rows) / (double)rows : 0.0,
             (long long)atomic_load(&m->repetition_stops), atomic_load(&m->queued), atomic_load(&m->running),
             sd_srv_guard_count(sv->guard), sdnpu_model_shared_weight_bytes(sv->model), peak_rss_bytes());
    snprintf(
        b + k, cap - (size_t)k,
        "# HELP sdnpu_prompt_cache_hits_total Requests that took their prefix from a prompt cache.\n"
        "# TYPE sdnpu_prompt_cache_hits_total counter\nsdnpu_prompt_cache_hits_total %lld\n"
        "# HELP sdnpu_prompt_cache_misses_total Requests that found no cached prefix longer than the live "
        "context's.\n# TYPE sdnpu_prompt_cache_misses_total counter\nsdnpu_prompt_cache_misses_total %lld\n"
        "# HELP sdnpu_prompt_cache_reused_tokens_total Prompt tokens not prefilled: kept from a session's "
        "live context or its prompt cache.\n# TYPE sdnpu_prompt_cache_reused_tokens_total counter\n"
        "sdnpu_prompt_cache_reused_tokens_total %lld\n"
        "# HELP sdnpu_prompt_cache_evictions_total Snapshots dropped from the prompt caches for room.\n"
        "# TYPE sdnpu_prompt_cache_evictions_total counter\nsdnpu_prompt_cache_evictions_total %lld\n"
        "# HELP sdnpu_prompt_cache_bytes Bytes the sessions' prompt caches hold.\n"
        "# TYPE sdnpu_prompt_cache_bytes gauge\nsdnpu_prompt_cache_bytes %lld\n"
        "# HELP sdnpu_prompt_cache_capacity_bytes Bytes the prompt caches may hold (--prompt-cache-mem "
        "each).\n# TYPE sdnpu_prompt_cache_capacity_bytes gauge\nsdnpu_prompt_cache_capacity_bytes %lld\n"
        "# HELP sdnpu_prompt_cache_entries Snapshots the sessions' prompt caches hold.\n"
        "# TYPE sdnpu_prompt_cache_entries gauge\nsdnpu_prompt_cache_entries %lld\n"
        "# HELP sdnpu_context_tokens The sessions' contexts summed: the KV cache slots they hold.\n"
        "# TYPE sdnpu_context_tokens gauge\nsdnpu_context_tokens %lld\n",
        (long long)atomic_load(&m->pc_hits), (long long)atomic_load(&m->pc_misses),
        (long long)atomic_load(&m->prompt_reused), (long long)atomic_load(&m->pc_evictions),
        (long long)atomic_load(&m->pc_bytes), (long long)atomic_load(&m->pc_capacity),
        (long long)atomic_load(&m->pc_entries), (long long)atomic_load(&m->ctx_tokens));
    return b;
}

static enum MHD_Result route(struct server *sv, struct MHD_Connection *c, const char *url, const char *method,
                             struct conn *cn) {
    atomic_fetch_add(&sv->m.requests, 1);
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) {
        if (!get) return reply_error(sv, c, 405, "use GET");
        bool draining = atomic_load(&sv->draining);
        return reply(sv, c, draining ? 503 : 200, "application/json",
                     strdup(draining ? "{\"status\":\"shutting down\"}" : "{\"status\":\"ok\"}"));
    }
    if (!authorized(sv, c)) return reply_error(sv, c, 401, "a valid API key is needed (Authorization: Bearer KEY)");
    if (!strcmp(url, "/metrics")) {
        if (!get) return reply_error(sv, c, 405, "use GET");
        return reply(sv, c, 200, "text/plain; version=0.0.4", metrics_body(sv));
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get) return reply_error(sv, c, 405, "use GET");
        return reply(sv, c, 200, "application/json", models_body(sv));
    }
    bool chat = !strcmp(url, "/v1/chat/completions");
    if (chat || !strcmp(url, "/v1/completions")) {
        if (!post) return reply_error(sv, c, 405, "use POST");
        if (cn->too_large) {
            char msg[128];
            snprintf(msg, sizeof msg, "the body is larger than this server's limit of %zu bytes", sv->p.max_body);
            atomic_fetch_add(&sv->m.rejected[REJ_BODY_SIZE], 1);
            return reply_error(sv, c, 413, msg);
        }
        return run_job(sv, c, chat ? JOB_CHAT : JOB_COMPLETION, cn);
    }
    return reply_error(sv, c, 404, "no such endpoint");
}

/* ------------------------------------------------- request callbacks */

struct header_tally {
    size_t n, bytes;
};

static enum MHD_Result tally_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    struct header_tally *t = cls;
    t->n++;
    t->bytes += strlen(key) + (value ? strlen(value) : 0) + 4; /* "K: V\r\n" */
    return MHD_YES;
}

/* The limits on the request line and headers, checked once they are in:
 * true when one is past (and the 414 or 431 is queued in *rc). */
static bool past_limits(struct server *sv, struct MHD_Connection *c, struct conn *cn, enum MHD_Result *rc) {
    char msg[160];
    enum reject_reason why = REJ_N;
    struct header_tally t = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, tally_header, &t);
    if (cn->url_len > sv->p.max_url) {
        why = REJ_URL_LENGTH;
        snprintf(msg, sizeof msg, "the URL is %zu bytes; this server's limit is %zu", cn->url_len, sv->p.max_url);
    } else if (t.n > (size_t)sv->p.max_headers) {
        why = REJ_HEADER_COUNT;
        snprintf(msg, sizeof msg, "the request has %zu header fields; this server's limit is %d", t.n,
                 sv->p.max_headers);
    } else if (t.bytes > sv->p.max_header_bytes) {
        why = REJ_HEADER_BYTES;
        snprintf(msg, sizeof msg, "the header fields are %zu bytes; this server's limit is %zu", t.bytes,
                 sv->p.max_header_bytes);
    }
    if (why == REJ_N) return false;
    atomic_fetch_add(&sv->m.rejected[why], 1);
    cn->handled = true;
    sd_srv_guard_working(sv->guard, cn->gc, NULL);
    *rc = reply_error(sv, c, why == REJ_URL_LENGTH ? 414 : 431, msg);
    return true;
}

static struct guard_conn *guard_conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* A request line arrived: the request's record begins (libmicrohttpd calls
 * this once per request, before the headers). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    struct server *sv = cls;
    struct guard_conn *gc = guard_conn_of(c);
    sd_srv_guard_begun(sv->guard, gc);
    struct conn *cn = calloc(1, sizeof *cn);
    if (!cn) return NULL;
    cn->url_len = strlen(uri);
    cn->gc = gc;
    return cn;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    struct server *sv = cls;
    struct conn *cn = *con_cls;
    if (!cn) return MHD_NO; /* on_uri was out of memory */
    if (!cn->seen) {
        cn->seen = true;
        enum MHD_Result rc;
        return past_limits(sv, c, cn, &rc) ? rc : MHD_YES;
    }
    if (*upload_size) {
        size_t k = *upload_size;
        *upload_size = 0;
        if (cn->too_large || cn->n + k > sv->p.max_body) {
            cn->too_large = true; /* read on and drop, so the client gets the 413 */
            return MHD_YES;
        }
        return sd_srv_text_append(&cn->body, &cn->n, &cn->cap, upload, k) ? MHD_YES : MHD_NO;
    }
    if (cn->job) return answer_job(sv, c, cn); /* woken: the job has something */
    cn->handled = true;
    sd_srv_guard_working(sv->guard, cn->gc, NULL);
    return route(sv, c, url, method, cn);
}

/* The request is over (answered, or its connection closed). A request
 * that never reached us was refused by libmicrohttpd itself, or timed out;
 * one that did and timed out had a client that stopped reading. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    (void)c;
    struct server *sv = cls;
    struct conn *cn = *con_cls;
    *con_cls = NULL;
    if (!cn) return;
    if (!sd_srv_guard_was_shut(sv->guard, cn->gc)) { /* the guard counts what it cuts */
        if (why == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED)
            atomic_fetch_add(&sv->m.rejected[cn->handled ? REJ_SEND_TIMEOUT : REJ_REQUEST_TIMEOUT], 1);
        else if (why == MHD_REQUEST_TERMINATED_WITH_ERROR && !cn->handled)
            atomic_fetch_add(&sv->m.rejected[REJ_MALFORMED], 1);
    }
    sd_srv_guard_idle(sv->guard, cn->gc);
    if (cn->job) {
        if (why != MHD_REQUEST_TERMINATED_COMPLETED_OK) atomic_store(&cn->job->cancel, true);
        sd_srv_job_release(cn->job);
        atomic_fetch_sub(&sv->replying, 1);
    }
    free(cn->body);
    free(cn);
}

/* A connection opened or closed: the guard's record of it. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    struct server *sv = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        sd_srv_guard_close(sv->guard, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *addr = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    *socket_context = fd ? sd_srv_guard_open(sv->guard, fd->connect_fd, addr ? addr->client_addr : NULL) : NULL;
}

/* ------------------------------------------------------------ lifecycle */

static int g_stop_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    (void)sig;
    char b = 1;
    if (write(g_stop_pipe[1], &b, 1) < 0) { /* nothing to do in a handler */
    }
}

/* The largest context a session grows to: --ctx-max, else the model's own,
 * never below the sessions' own (-c, 4,096 by default) and never above the
 * model's. */
static int32_t ctx_of(const struct sd_server_params *p, const struct sdnpu_model *m) {
    const int32_t model = sdnpu_model_n_ctx_train(m), own = p->session.n_ctx > 0 ? p->session.n_ctx : 4096;
    int32_t most = p->ctx_max > 0 ? p->ctx_max : model;
    if (most < own) most = own;
    return most < model ? most : model;
}

static void model_name_of(struct server *sv) {
    const char *n = sv->p.model_name;
    if (!n) {
        n = strrchr(sv->p.model_path, '/');
        n = n ? n + 1 : sv->p.model_path;
    }
    snprintf(sv->model_name, sizeof sv->model_name, "%s", n);
    for (char *s = sv->model_name; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20) *s = '_';
}

/* Each connection is a descriptor: make room for the limit, or lower the
 * limit to the room there is (said on stderr). */
static void fit_descriptors(struct server *sv) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    rlim_t want = (rlim_t)sv->p.max_connections + 64; /* the model, logs, the listener, the guard */
    if (rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < want) {
        int fit = rl.rlim_cur > 128 ? (int)(rl.rlim_cur - 64) : 64;
        fprintf(stderr, "sdnpu serve: only %llu descriptors may be open (ulimit -n): --max-connections %d, not %d\n",
                (unsigned long long)rl.rlim_cur, fit, sv->p.max_connections);
        sv->p.max_connections = fit;
    }
}

/* libmicrohttpd polls with epoll on --io-threads threads; connections wait
 * for jobs suspended, not on a thread. Its own memory per connection holds
 * the request line and headers: room for the limits past_limits checks,
 * so a request near them gets our 414/431 rather than its own refusal. */
static struct MHD_Daemon *start_daemon(struct server *sv, char *err, size_t cap) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sv->p.port)};
    if (inet_pton(AF_INET, sv->p.host, &a.sin_addr) != 1) {
        snprintf(err, cap, "--host %s is not an IPv4 address", sv->p.host);
        return NULL;
    }
    size_t pool = 2 * (sv->p.max_header_bytes + sv->p.max_url) + (16 << 10);
    /* The guard keeps both deadlines; libmicrohttpd's inactivity timer only
     * backs it up, past either, so it never cuts sooner than the flags say. */
    unsigned backstop = (unsigned)(sv->p.request_timeout_s > sv->p.send_timeout_s ? sv->p.request_timeout_s
                                                                                   : sv->p.send_timeout_s) + 5;
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, sv,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)sv->p.io_threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)sv->p.max_connections, MHD_OPTION_CONNECTION_TIMEOUT, backstop,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool, MHD_OPTION_URI_LOG_CALLBACK,
        on_uri, sv, MHD_OPTION_NOTIFY_COMPLETED, on_completed, sv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, sv,
        MHD_OPTION_END);
    if (!d) snprintf(err, cap, "cannot listen on %s:%d: %s", sv->p.host, sv->p.port, strerror(errno));
    return d;
}

/* Wait up to ms for cond(sv). */
static bool wait_for(struct server *sv, bool (*cond)(struct server *), int ms) {
    for (int t = 0; t < ms && !cond(sv); t += 50) usleep(50000);
    return cond(sv);
}

static bool pool_is_idle(struct server *sv) { return sd_srv_pool_idle(sv->pool); }
static bool all_replied(struct server *sv) { return sd_srv_pool_idle(sv->pool) && atomic_load(&sv->replying) == 0; }

/* SIGTERM/SIGINT: no new connections or requests, the running ones finish
 * for up to drain seconds, the rest are cancelled. Every job ends before
 * the daemon stops, so no connection is left suspended (stopping a daemon
 * with one is undefined in libmicrohttpd). */
static void drain(struct server *sv, struct MHD_Daemon *d) {
    atomic_store(&sv->draining, true);
    sd_srv_pool_close(sv->pool);
    fprintf(stderr, "sdnpu serve: stopping; letting the requests in flight finish (up to %d s)\n",
            sv->p.drain_seconds);
    MHD_quiesce_daemon(d);
    if (!wait_for(sv, all_replied, sv->p.drain_seconds * 1000) && !sd_srv_pool_idle(sv->pool)) {
        fprintf(stderr, "sdnpu serve: cancelling what is left\n");
        sd_srv_pool_cancel_all(sv->pool);
        while (!wait_for(sv, pool_is_idle, 1000)) sd_srv_pool_cancel_all(sv->pool);
    }
    wait_for(sv, all_replied, 2000); /* the last replies leave */
}

int sd_server_run(const struct sd_server_params *p) {
    struct server *sv = calloc(1, sizeof *sv);
    if (!sv) return 1;
    sv->p = *p;
    char err[600];
    model_name_of(sv);
    int code = 1;
    struct sdnpu_spec spec;
    if (sdnpu_spec_parse(p->spec, &spec, err, sizeof err) || sdnpu_spec_check(spec, err, sizeof err)) {
        fprintf(stderr, "sdnpu serve: --spec: %s\n", err);
        goto done;
    }
    if (sdnpu_model_load(p->model_path, p->model, &sv->model, err, sizeof err) != SDNPU_OK) {
        fprintf(stderr, "sdnpu serve: %s\n", err);
        goto done;
    }
    sv->ctx_max = ctx_of(p, sv->model);
    if (sd_srv_pool_start(sv->model, p->session, p->parallel, p->queue, &sv->m, &sv->pool, err, sizeof err) ||
        sd_srv_guard_start((struct guard_params){p->request_timeout_s, p->send_timeout_s, p->max_per_address},
                           &sv->m, &sv->guard, err, sizeof err)) {
        fprintf(stderr, "sdnpu serve: %s\n", err);
        goto done;
    }
    if (pipe(g_stop_pipe) != 0) {
        fprintf(stderr, "sdnpu serve: pipe: %s\n", strerror(errno));
        goto done;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    fit_descriptors(sv);
    struct MHD_Daemon *d = start_daemon(sv, err, sizeof err);
    if (!d) {
        fprintf(stderr, "sdnpu serve: %s\n", err);
        goto done;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "sdnpu serve: %s, %d session%s, listening on http://%s:%u\n", sv->model_name, p->parallel,
            p->parallel == 1 ? "" : "s", p->host, di ? (unsigned)di->port : (unsigned)p->port);
    char b;
    while (read(g_stop_pipe[0], &b, 1) < 0 && errno == EINTR) {
    }
    drain(sv, d);
    MHD_stop_daemon(d);
    fprintf(stderr, "sdnpu serve: stopped\n");
    code = 0;
done:
    sd_srv_guard_stop(sv->guard);
    sd_srv_pool_stop(sv->pool);
    sdnpu_model_free(sv->model);
    if (g_stop_pipe[0] >= 0) close(g_stop_pipe[0]), close(g_stop_pipe[1]);
    free(sv);
    return code;
}
