/*
 * server/jobs.h - inside the server (server.h is the face): a request as a
 * job, the bounded queue, and the workers that run jobs on their sessions.
 *
 * A job is shared by the connection that made it, its streamed reply and
 * the worker that runs it, and freed by whichever lets go last (refs). The
 * worker writes the reply into job->out (the whole JSON body, or server-sent
 * events as they come) under job->mu and calls job->wake, which resumes the
 * connection waiting for it; the connection reads from it. Nothing on the
 * connection's side ever blocks on a job. A connection whose client went
 * away sets job->cancel, which stops the generation at the next token.
 *
 * The server's functions are linked into the sdnpu command beside the
 * command's own, so every one outside a file is named sd_srv_*.
 */
#ifndef SD_SERVER_JOBS_H
#define SD_SERVER_JOBS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdnpu.h"

#define JOB_MAX_STOPS 4

enum job_kind { JOB_COMPLETION, JOB_CHAT };

struct job {
    /* What to run (filled by the connection, read-only afterwards). */
    enum job_kind kind;
    char *prompt;          /* completion: documents then the prompt */
    char **roles, **texts; /* chat: n_msgs messages */
    size_t n_msgs;
    sdnpu_token *toks;     /* [n_toks] the whole prompt as the model reads it (the chat rendered), made
                              when the job is, so the pool can route it (sd_srv_openai_tokenize) */
    size_t n_toks;
    bool plain_chat;       /* chat in the plain script: the reply ends at the next "\nUser:" line */
    char *stops[JOB_MAX_STOPS];
    size_t n_stops;
    int32_t max_tokens;
    int32_t ctx_max; /* the largest context a session may grow to for it (sd_srv_openai_tokenize's n_ctx) */
    float temperature, top_p;
    uint64_t seed;
    struct sdnpu_spec spec;
    bool adaptive, stop_on_repeat, stream;
    bool json;    /* response_format "json_object": the reply is one JSON object */
    char *schema; /* response_format "json_schema", or a forced tool call's: the schema (JSON text) the
                     object satisfies, or NULL */
    char *tools;  /* chat "tools" (a JSON array) the model is told of, or NULL (server/tools.h) */
    bool tool_call; /* tool_choice "required" or a named function: the reply is one call */
    char id[48];
    long long created;
    const char *model_name;
    struct server_metrics *metrics;
    int skips;             /* under the pool's mutex: times a younger job was run before it */
    uint64_t order;        /* set under the pool's mutex: its place among the jobs sessions started, from 1 */

    /* What came of it (under mu). */
    pthread_mutex_t mu;
    void (*wake)(struct job *j); /* called under mu when started, done or out changes; may be NULL */
    void *conn;                  /* the waiting connection, the wake's own (NULL: none) */
    bool suspended;              /* the connection waits for a wake */
    char *out;          /* [cap] stream: events not yet sent start at sent; else the text */
    size_t n, cap, sent;
    bool started;       /* something was written, or it is done */
    bool done;
    int http_status;    /* 200, or the error's status (then out holds the error body) */
    bool oom;           /* out could not grow: the reply is cut */
    struct sdnpu_stats st;
    atomic_bool cancel;
    int refs;
};

struct job *sd_srv_job_new(void);
void sd_srv_job_ref(struct job *j);     /* takes a reference */
void sd_srv_job_release(struct job *j); /* drops a reference; the last frees */
/* Tell the connection that something changed (mu held). */
void sd_srv_job_wake(struct job *j);
/* Append n bytes to the NUL-terminated buffer *buf of *len bytes in *cap,
 * growing it. false when out of memory (the buffer is unchanged). */
bool sd_srv_text_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n);
/* Append bytes to j->out (mu held). false when out of memory. */
bool sd_srv_job_append(struct job *j, const char *s, size_t n);
/* A request's fault: its reason (printf's fmt) into msg[cap]; returns 400,
 * the status the request is answered with. */
int sd_srv_bad(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Why a request or a connection was refused or cut (/metrics:
 * sdnpu_rejected_total{reason}); server.c names them. */
enum reject_reason {
    REJ_QUEUE_FULL,      /* 503: every session busy and the queue full */
    REJ_PER_ADDRESS,     /* the connection: its address holds the most it may */
    REJ_REQUEST_TIMEOUT, /* the request did not arrive whole within its deadline */
    REJ_SEND_TIMEOUT,    /* the client stopped reading its reply */
    REJ_HEADER_BYTES,    /* 431 */
    REJ_HEADER_COUNT,    /* 431 */
    REJ_URL_LENGTH,      /* 414 */
    REJ_BODY_SIZE,       /* 413 */
    REJ_MALFORMED,       /* answered by libmicrohttpd itself: not HTTP, or headers past its memory */
    REJ_N
};

/* Metrics, for /metrics (all atomics). */
struct server_metrics {
    atomic_llong requests, ok, client_errors, server_errors, cancelled;
    atomic_llong rejected[REJ_N];
    atomic_llong prompt_tokens, generated_tokens, model_calls, accepted_drafts, graph_rows, pad_rows;
    atomic_llong repetition_stops;
    atomic_int queued, running;
    /* The sessions' prompt caches, summed (struct sdnpu_prompt_cache_stats): each worker adds what its
     * session's changed by after each job, under the pool's mutex, so no busy session is read. */
    atomic_llong pc_hits, pc_misses, pc_evictions, pc_entries, pc_bytes, pc_capacity;
    atomic_llong prompt_reused; /* prompt tokens not prefilled (struct sdnpu_stats.n_prompt_reused) */
    atomic_llong ctx_tokens;    /* the sessions' context sizes, summed: the KV cache slots they hold */
};

/*
 * The pool: n workers, each with its own session over the one model, and a
 * queue of at most cap jobs waiting for one.
 *
 * Routing. A session keeps what its last requests computed (its live
 * context and its prompt cache), and a prompt it holds costs a fraction of
 * one it must prefill, so a job goes where most of its prompt is held:
 *  - submitted while workers wait, to the waiting one whose session holds
 *    a substantial prefix of it (ROUTE_MIN_MATCH tokens, or half the
 *    prompt), the longest; else to the one waiting longest, unless a busy
 *    worker likely holds it and is worth waiting for (below): then it
 *    waits in the queue for that one;
 *  - a worker that finishes takes, of the queued jobs, the one its session
 *    holds most of if that is substantial; else the oldest that no busy
 *    worker likely holds; else the oldest worth taking from its holder;
 *    else none (it waits for the next job).
 * A busy worker's session cannot be read, so what it likely holds is
 * judged by the prompts of the last ROUTE_HISTORY jobs it took. A job it
 * holds is worth taking elsewhere when the work it has first (its running
 * job and those queued for it) and the job's own (each job's max_tokens,
 * a generated token weighed as ROUTE_DECODE_WEIGHT prefilled ones) reach
 * what the other worker would prefill. A job passed over ROUTE_MAX_SKIPS
 * times (a younger one taken first) is taken next whatever the matches,
 * so none starves: by the next worker that finishes, or, if a busy worker
 * holds it, by that one when it finishes.
 *
 * Threading: a session is touched by its worker while it runs a job, and
 * by the dispatcher (sd_srv_pool_submit, any thread) only under the pool's
 * mutex while the worker has nothing assigned and has let go of it (it
 * does so under that mutex when a generation ends, before the reply is
 * released); the worker takes a job under that mutex before it touches its
 * session again.
 */
#define ROUTE_MIN_MATCH 64
#define ROUTE_MAX_SKIPS 4
#define ROUTE_HISTORY 8
#define ROUTE_DECODE_WEIGHT 4

struct pool;

/* Load nothing: sessions over model, n workers, a queue of cap jobs. */
int sd_srv_pool_start(struct sdnpu_model *model, struct sdnpu_session_params sp, int n, int cap,
                      struct server_metrics *metrics, struct pool **out, char *err, size_t err_cap);
/* Queue a job (takes a reference). false when the queue is full or the
 * pool is closed. */
bool sd_srv_pool_submit(struct pool *p, struct job *j);
/* Take no more jobs (the server is stopping): the queued ones still run,
 * then the workers leave; sd_srv_pool_stop joins them. */
void sd_srv_pool_close(struct pool *p);
/* Cancel every queued and running job. */
void sd_srv_pool_cancel_all(struct pool *p);
/* Whether nothing is queued or running. */
bool sd_srv_pool_idle(struct pool *p);
/* Stop the workers (after their current job) and free the pool. */
void sd_srv_pool_stop(struct pool *p);

/* The worker's part of a job: run it on a session and write the reply
 * (server/openai.c). The session's context is kept as far as the job's
 * prompt shares it (generate's new_context). session_done(ud), if not
 * NULL, is called once the session is no longer used, before the reply is
 * released to the client: a follow-up the client sends on reading it may
 * then go to the same session. */
void sd_srv_job_run(struct job *j, struct sdnpu_session *s, void (*session_done)(void *ud), void *ud);

/* The OpenAI request body of kind into j (server/openai.c). Returns 0, or
 * an HTTP status with the reason in msg. */
struct sd_server_params;
int sd_srv_openai_parse(enum job_kind kind, const char *body, size_t len, const struct sd_server_params *sp,
                        struct job *j, char *msg, size_t cap);
/* The job's prompt as tokens (j->toks): the completion's text, or the chat
 * rendered in the model's format; n_ctx (0: none) is the largest context a
 * session may grow to, which the prompt and one token to generate must
 * fit. Returns 0, or an HTTP status with the reason in msg. Any thread. */
int sd_srv_openai_tokenize(struct job *j, const struct sdnpu_model *m, int32_t n_ctx, char *msg, size_t cap);
/* An OpenAI-style error body (malloc'd JSON). */
char *sd_srv_openai_error(const char *msg, int status);

#endif /* SD_SERVER_JOBS_H */
