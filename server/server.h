/*
 * server/server.h - `sdnpu serve`: the engine behind an HTTP API that
 * OpenAI clients speak unchanged.
 *
 *   POST /v1/completions, POST /v1/chat/completions   (stream: true: server-sent events)
 *   GET  /v1/models, GET /health, GET /metrics         (Prometheus text)
 *
 * How it is put together:
 *
 *   libmicrohttpd (epoll, --io-threads)            workers (--parallel N)
 *   parse + check the body (jansson),          one session each over the
 *   tokenize the prompt -----> route, queue --->   one loaded model, its
 *   suspend; woken, answer or stream  <----------  context and prompt cache
 *   what the job wrote                   wake      kept; the job's text, stats
 *   guard: request deadlines, per-address limit, clients that left
 *
 * HTTP is libmicrohttpd's (GNU, in Debian, used in production for a decade;
 * it parses requests, keeps connections and does chunked replies, and it
 * needs no event loop of ours), JSON is jansson's (Debian's libjansson:
 * a complete, strict parser and writer, where the CLI's own reader only
 * reads). The server uses only the public API (include/sdnpu.h), as any
 * application would.
 *
 * Prompts are reused: a job goes to the session that already holds the
 * longest prefix of its tokens (server/jobs.h, "Routing"), which prefills
 * only the rest, with the output unchanged.
 *
 * No thread waits on a client or a model: an idle or slow connection costs
 * a socket and its libmicrohttpd memory, so the connection limit can be in
 * the thousands (server/guard.h has the policy).
 *
 * Limits, each answered with a status and an OpenAI-style error body and
 * counted in /metrics by reason: the URL (414), the header fields' count
 * and bytes (431), the body size (413), the queue (503 when full),
 * max_tokens (capped), the context (400 naming the sizes), an API key (401).
 * Cut without a reply, and counted: a request not whole within its
 * deadline, a connection past its address's limit, a reply its client
 * stops reading (its generation is cancelled). A client that goes away
 * cancels its request. SIGTERM and SIGINT stop taking connections, let the
 * requests in flight finish for --drain seconds, cancel what is left, and
 * exit 0.
 */
#ifndef SD_SERVER_H
#define SD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdnpu.h"

struct sd_server_params {
    const char *model_path;
    const char *model_name;   /* what /v1/models and responses call it (default: the file name) */
    const char *host;         /* default 127.0.0.1 */
    int port;                 /* default 8080; 0 picks a free one (printed) */
    int parallel;             /* sessions, each a worker thread (default 1) */
    int queue;                /* requests waiting beyond the running ones (default 16) */
    int max_connections;      /* open connections (default 1024) */
    int max_per_address;      /* open connections from one IPv4 address (default 64; 0: no limit) */
    int io_threads;           /* threads polling the sockets (default 2) */
    int request_timeout_s;    /* a request's headers and body, whole (default 10) */
    int send_timeout_s;       /* a reply the client does not read for this long is dropped (default 30) */
    size_t max_header_bytes;  /* the header fields together (default 16 KiB): 431 */
    int max_headers;          /* header fields (default 100): 431 */
    size_t max_url;           /* the request line's URI (default 8 KiB): 414 */
    size_t max_body;          /* bytes (default 1 MiB) */
    int32_t max_tokens;       /* cap on a request's max_tokens (default 2048) */
    int32_t default_tokens;   /* max_tokens when a request gives none (default 256) */
    int32_t ctx_max;          /* the largest context a session grows to for a request its context does not
                                 fit (default 0: the model's own; session.n_ctx's size: no growth) */
    const char *api_key;      /* NULL: no key */
    const char *spec;         /* default method (default "sam-tree") */
    int drain_seconds;        /* on SIGTERM (default 10) */
    struct sdnpu_model_params model;
    struct sdnpu_session_params session; /* each worker's; prompt_cache_bytes defaults to
                                            SD_SERVER_PROMPT_CACHE_MIB MiB here */
};

/* A session's prompt cache by default: 256 MiB holds about 21,000 tokens of
 * Qwen2.5-Coder-0.5B's KV (12 KiB a token) or 9,000 of the 1.5B's (28 KiB):
 * twenty or nine documents of a thousand tokens per session. */
#define SD_SERVER_PROMPT_CACHE_MIB 256

struct sd_server_params sd_server_default_params(void);

/* Load the model, start the workers and the HTTP daemon, print the address
 * on stderr ("sdnpu serve: listening on http://HOST:PORT"), and serve until
 * SIGTERM or SIGINT. Returns the process exit code: 0 after a clean stop,
 * 1 when it could not start (the reason on stderr). */
int sd_server_run(const struct sd_server_params *p);

#endif /* SD_SERVER_H */
