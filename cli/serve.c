/* cli/serve.c - `sdnpu serve`: flags into struct sd_server_params, then
 * the server (server/server.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "server/server.h"

static void serve_usage(FILE *f) {
    fprintf(
        f,
        "usage: sdnpu serve [options]\n\n"
        "An OpenAI-compatible HTTP server: POST /v1/completions, POST /v1/chat/completions (stream: true\n"
        "for server-sent events), GET /v1/models, GET /health, GET /metrics (Prometheus text).\n"
        "sdnpu's own request fields go under \"sdnpu\": spec, documents, adaptive, stop_on_repeat.\n\n"
        "options:\n"
        "  -m, --model MODEL      a GGUF file, or an installed model by name (qwen2.5-coder-1.5b-instruct;\n"
        "                         scripts/setup --list-models); default: $SDNPU_MODEL or "
        "models/default.gguf\n"
        "      --host ADDR        IPv4 address to listen on (default 127.0.0.1)\n"
        "      --port N           port (default 8080; 0 picks a free one, printed)\n"
        "      --parallel N       sessions over the one model, each serving a request (default 1)\n"
        "      --queue N          requests that may wait for a session; beyond: 503 (default 16)\n"
        "      --max-connections N  open connections (default 1024)\n"
        "      --max-connections-per-ip N  open connections from one address (default 64; 0: no limit)\n"
        "      --io-threads N     threads polling the sockets (default 2)\n"
        "      --request-timeout S  seconds a client has to send a whole request, headers and body,\n"
        "                         from its connection's opening or its previous reply (default 10)\n"
        "      --send-timeout S   a reply the client does not read for S seconds is dropped and its\n"
        "                         generation cancelled (default 30)\n"
        "      --max-header-bytes SIZE  the header fields together (default 16K); beyond: 431\n"
        "      --max-headers N    header fields (default 100); beyond: 431\n"
        "      --max-url SIZE     the URL, query included (default 8K); beyond: 414\n"
        "      --max-body SIZE    largest request body, e.g. 1M (default 1M); beyond: 413\n"
        "      --max-tokens N     largest max_tokens a request may ask (default 2048)\n"
        "      --default-tokens N max_tokens when a request gives none (default 256)\n"
        "      --api-key KEY      require 'Authorization: Bearer KEY' (also $SDNPU_API_KEY)\n"
        "      --spec METHOD      default speculative method (default sam-tree)\n"
        "      --drain N          on SIGTERM, seconds the requests in flight may finish in (default 10)\n"
        "      --name NAME        the model's id in /v1/models and replies (default: the file name)\n"
        "      --prompt-cache-mem MIB  each session's prompt cache: KV snapshots of earlier\n"
        "                         prompts, so a document sent again is not prefilled again\n"
        "                         (default 256; 0: none, the session's live context is still\n"
        "                         reused). A request goes to the session that holds most of it\n"
        "  -c, --ctx-size N       context per session (default 4096)\n"
        "      --ctx-max N        a session grows its context, up to N tokens, for a request that does\n"
        "                         not fit it (default: the model's own context; -c's size: never)\n"
        "  -t, --threads N        threads per session (default: all cores)\n"
        "      --backend, --cl-device, --n-verify, --mem-limit, --prefill-policy, --kernels,\n"
        "      --weights, --weight-cache, --no-weight-cache, --head, --policy-estimator, --calib-lead,\n"
        "      --calib-min-match, --calib-params, --no-replies: as for run (each session drafts\n"
        "                         from its own earlier replies unless --no-replies: faster on\n"
        "                         recurring formats, and a timing side channel between its users)\n");
}

/* --prompt-cache-mem: a whole number of MiB into a byte count. */
static int parse_mib(const char *flag, const char *v, void *field) {
    char *end;
    errno = 0;
    unsigned long long mib = strtoull(v, &end, 10);
    if (errno || end == v || *end || *v == '-' || mib > (1ull << 24)) {
        fprintf(stderr, "sdnpu serve: %s expects MiB, a whole number from 0 to %llu, got '%s'\n", flag,
                1ull << 24, v);
        return -1;
    }
    size_t bytes = (size_t)mib << 20;
    memcpy(field, &bytes, sizeof bytes);
    return 0;
}

#define OPT(field) CLI_AT(struct sd_server_params, field)
static const struct cli_flag k_serve_flags[] = {
    {"-m", "--model", CLI_STR, OPT(model_path)},
    {"--host", NULL, CLI_STR, OPT(host)},
    {"--api-key", NULL, CLI_STR, OPT(api_key)},
    {"--spec", NULL, CLI_STR, OPT(spec)},
    {"--name", NULL, CLI_STR, OPT(model_name)},
    {"--max-body", NULL, CLI_SIZE, OPT(max_body)},
    {"--max-header-bytes", NULL, CLI_SIZE, OPT(max_header_bytes)},
    {"--max-url", NULL, CLI_SIZE, OPT(max_url)},
    {"--port", NULL, CLI_INT, OPT(port), .lo = 0, .hi = 65535},
    {"--parallel", NULL, CLI_INT, OPT(parallel), .lo = 1, .hi = 64},
    {"--queue", NULL, CLI_INT, OPT(queue), .lo = 0, .hi = 100000},
    {"--max-connections", NULL, CLI_INT, OPT(max_connections), .lo = 1, .hi = 100000},
    {"--max-connections-per-ip", NULL, CLI_INT, OPT(max_per_address), .lo = 0, .hi = 100000},
    {"--io-threads", NULL, CLI_INT, OPT(io_threads), .lo = 1, .hi = 64},
    {"--request-timeout", NULL, CLI_INT, OPT(request_timeout_s), .lo = 1, .hi = 3600},
    {"--send-timeout", NULL, CLI_INT, OPT(send_timeout_s), .lo = 1, .hi = 3600},
    {"--max-headers", NULL, CLI_INT, OPT(max_headers), .lo = 1, .hi = 10000},
    {"--max-tokens", NULL, CLI_INT, OPT(max_tokens), .lo = 1, .hi = 1 << 24},
    {"--default-tokens", NULL, CLI_INT, OPT(default_tokens), .lo = 1, .hi = 1 << 24},
    {"--drain", NULL, CLI_INT, OPT(drain_seconds), .lo = 0, .hi = 3600},
    {"-c", "--ctx-size", CLI_INT, OPT(session.n_ctx), .lo = 16, .hi = 1 << 24},
    {"--ctx-max", NULL, CLI_INT, OPT(ctx_max), .lo = 16, .hi = 1 << 24},
    {"-t", "--threads", CLI_INT, OPT(session.n_threads), .lo = 1, .hi = 512},
    {"--head", NULL, CLI_CHOICE, OPT(model.head), .choices = cli_head_choices},
    {"--prompt-cache-mem", NULL, CLI_FN, OPT(session.prompt_cache_bytes), .fn = parse_mib},
    {0},
};

int cli_serve(int argc, char **argv) {
    struct sd_server_params p = sd_server_default_params();
    p.model_path = cli_default_model();
    p.api_key = getenv("SDNPU_API_KEY");
    if (p.api_key && !*p.api_key) p.api_key = NULL;
    const struct cli_parser parser = {"sdnpu serve",
                                      serve_usage,
                                      {{k_serve_flags, &p}, {cli_session_flags, &p.session}, {cli_tuning_flags, &p.session}},
                                      .style = CLI_MISSING_LAST | CLI_SEE_HELP};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    p.model_path = cli_model(p.model_path);
    cli_weight_cache(&p.session, p.model_path);
    if (p.default_tokens > p.max_tokens) p.default_tokens = p.max_tokens;
    return sd_server_run(&p);
}
