/* server/server.c - the HTTP side of `sdnpu serve` (server.h): routes,
 * limits, the API key, metrics, waiting for or streaming a job's reply,
 * and the graceful stop. */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/jobs.h"

struct server {
    struct sd_server_params p;
    struct sdnpu_model *model;
    char model_name[256];
    struct pool *pool;
    struct server_metrics m;
    atomic_bool draining;
    atomic_ullong next_id;
};

/* Per connection: the request body as it arrives. */
struct conn {
    char *body;
    size_t n, cap;
    bool too_large;
};

struct sd_server_params sd_server_default_params(void) {
    struct sd_server_params p = {0};
    p.host = "127.0.0.1";
    p.port = 8080;
    p.parallel = 1;
    p.queue = 16;
    p.max_connections = 64;
    p.max_body = 1 << 20;
    p.max_tokens = 2048;
    p.default_tokens = 256;
    p.spec = "sam-tree";
    p.drain_seconds = 10;
    p.model = sdnpu_model_default_params();
    p.session = sdnpu_session_default_params();
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
    return reply(sv, c, status, "application/json", openai_error(msg, status));
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

/* Whether the client closed its side while we worked. */
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd pf = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pf, 1, 0) <= 0) return false;
    if (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    char b;
    return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Wait (mu held) until the job has started (stream) or is done, watching
 * the client. */
static void wait_job(struct job *j, struct MHD_Connection *c, bool for_start) {
    while (!(for_start ? j->started : j->done)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (!(for_start ? j->started : j->done) && client_gone(c)) atomic_store(&j->cancel, true);
    }
}

/* ------------------------------------------------------------- streaming */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct job *j = cls;
    pthread_mutex_lock(&j->mu);
    while (j->sent == j->n && !j->done) pthread_cond_wait(&j->cv, &j->mu);
    ssize_t got;
    if (j->sent < j->n) {
        size_t k = j->n - j->sent < max ? j->n - j->sent : max;
        memcpy(buf, j->out + j->sent, k);
        j->sent += k;
        got = (ssize_t)k;
    } else {
        got = MHD_CONTENT_READER_END_OF_STREAM;
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
    job_release(j);
}

/* -------------------------------------------------------------- routes */

static enum MHD_Result run_job(struct server *sv, struct MHD_Connection *c, enum job_kind kind, struct conn *cn) {
    if (atomic_load(&sv->draining)) return reply_error(sv, c, 503, "the server is shutting down");
    struct job *j = job_new();
    if (!j) return reply_error(sv, c, 503, "out of memory");
    char msg[512];
    int st = openai_parse(kind, cn->body ? cn->body : "", cn->n, &sv->p, j, msg, sizeof msg);
    if (st) {
        job_release(j);
        return reply_error(sv, c, st, msg);
    }
    snprintf(j->id, sizeof j->id, "%s-%llu", kind == JOB_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&sv->next_id, 1));
    j->created = (long long)time(NULL);
    j->model_name = sv->model_name;
    j->metrics = &sv->m;
    if (!pool_submit(sv->pool, j)) {
        job_release(j);
        atomic_fetch_add(&sv->m.rejected, 1);
        return reply_error(sv, c, 503, "the server is busy: every session is working and the queue is full; retry");
    }
    pthread_mutex_lock(&j->mu);
    wait_job(j, c, j->stream);
    bool stream_ok = j->stream && j->http_status == 200;
    if (!stream_ok) {
        if (j->stream) wait_job(j, c, false);
        int status = j->http_status;
        char *body = j->out ? strdup(j->out) : strdup("");
        pthread_mutex_unlock(&j->mu);
        job_release(j);
        return reply(sv, c, status, "application/json", body);
    }
    pthread_mutex_unlock(&j->mu);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, j, stream_free);
    if (!r) {
        atomic_store(&j->cancel, true);
        job_release(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&sv->m.ok, 1);
    return rc;
}

static char *models_body(struct server *sv) {
    char *b = malloc(strlen(sv->model_name) * 2 + 200);
    if (b)
        sprintf(b, "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\",\"created\":0,\"owned_by\":\"sdnpu\"}]}",
                sv->model_name);
    return b;
}

static char *metrics_body(struct server *sv) {
    struct server_metrics *m = &sv->m;
    long long calls = atomic_load(&m->model_calls), rows = atomic_load(&m->graph_rows);
    char *b = malloc(4096);
    if (!b) return NULL;
    snprintf(b, 4096,
             "# HELP sdnpu_requests_total HTTP requests answered, by class.\n# TYPE sdnpu_requests_total counter\n"
             "sdnpu_requests_total{class=\"2xx\"} %lld\nsdnpu_requests_total{class=\"4xx\"} %lld\n"
             "sdnpu_requests_total{class=\"5xx\"} %lld\n"
             "# HELP sdnpu_rejected_total Requests refused because the queue was full.\n"
             "# TYPE sdnpu_rejected_total counter\nsdnpu_rejected_total %lld\n"
             "# HELP sdnpu_cancelled_total Generations stopped because the client went away or shutdown.\n"
             "# TYPE sdnpu_cancelled_total counter\nsdnpu_cancelled_total %lld\n"
             "# HELP sdnpu_prompt_tokens_total Prompt tokens evaluated.\n# TYPE sdnpu_prompt_tokens_total counter\n"
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
             "# HELP sdnpu_running Requests being generated.\n# TYPE sdnpu_running gauge\nsdnpu_running %d\n",
             (long long)atomic_load(&m->ok), (long long)atomic_load(&m->client_errors),
             (long long)atomic_load(&m->server_errors), (long long)atomic_load(&m->rejected),
             (long long)atomic_load(&m->cancelled), (long long)atomic_load(&m->prompt_tokens),
             (long long)atomic_load(&m->generated_tokens), calls,
             calls ? (double)(calls + atomic_load(&m->accepted_drafts)) / (double)calls : 0.0,
             rows ? (double)atomic_load(&m->pad_rows) / (double)rows : 0.0,
             (long long)atomic_load(&m->repetition_stops), atomic_load(&m->queued), atomic_load(&m->running));
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
            return reply_error(sv, c, 413, msg);
        }
        return run_job(sv, c, chat ? JOB_CHAT : JOB_COMPLETION, cn);
    }
    return reply_error(sv, c, 404, "no such endpoint");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    struct server *sv = cls;
    struct conn *cn = *con_cls;
    if (!cn) {
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t k = *upload_size;
        *upload_size = 0;
        if (cn->too_large || cn->n + k > sv->p.max_body) {
            cn->too_large = true; /* read on and drop, so the client gets the 413 */
            return MHD_YES;
        }
        return text_append(&cn->body, &cn->n, &cn->cap, upload, k) ? MHD_YES : MHD_NO;
    }
    return route(sv, c, url, method, cn);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    (void)cls, (void)c, (void)why;
    struct conn *cn = *con_cls;
    if (cn) {
        free(cn->body);
        free(cn);
    }
    *con_cls = NULL;
}

/* ------------------------------------------------------------ lifecycle */

static int g_stop_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    (void)sig;
    char b = 1;
    if (write(g_stop_pipe[1], &b, 1) < 0) { /* nothing to do in a handler */
    }
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

static struct MHD_Daemon *start_daemon(struct server *sv, char *err, size_t cap) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sv->p.port)};
    if (inet_pton(AF_INET, sv->p.host, &a.sin_addr) != 1) {
        snprintf(err, cap, "--host %s is not an IPv4 address", sv->p.host);
        return NULL;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG, 0, NULL,
        NULL,
        on_request, sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)sv->p.max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, sv, MHD_OPTION_END);
    if (!d) snprintf(err, cap, "cannot listen on %s:%d: %s", sv->p.host, sv->p.port, strerror(errno));
    return d;
}

/* SIGTERM/SIGINT: no new connections or requests, the running ones finish
 * for up to drain seconds, the rest are cancelled. */
static void drain(struct server *sv, struct MHD_Daemon *d) {
    atomic_store(&sv->draining, true);
    fprintf(stderr, "sdnpu serve: stopping; letting the requests in flight finish (up to %d s)\n",
            sv->p.drain_seconds);
    MHD_quiesce_daemon(d);
    for (int i = 0; i < sv->p.drain_seconds * 10 && !pool_idle(sv->pool); i++) usleep(100000);
    if (!pool_idle(sv->pool)) {
        fprintf(stderr, "sdnpu serve: cancelling what is left\n");
        pool_cancel_all(sv->pool);
    }
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
    if (pool_start(sv->model, p->session, p->parallel, p->queue, &sv->m, &sv->pool, err, sizeof err)) {
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
    pool_stop(sv->pool);
    sdnpu_model_free(sv->model);
    if (g_stop_pipe[0] >= 0) close(g_stop_pipe[0]), close(g_stop_pipe[1]);
    free(sv);
    return code;
}
