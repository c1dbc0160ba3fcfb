/* cli/serve.c - `sdnpu serve`: flags into struct sd_server_params, then
 * the server (server/server.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "server/server.h"

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: sdnpu serve [options]\n\n"
            "An OpenAI-compatible HTTP server: POST /v1/completions, POST /v1/chat/completions (stream: true\n"
            "for server-sent events), GET /v1/models, GET /health, GET /metrics (Prometheus text).\n"
            "sdnpu's own request fields go under \"sdnpu\": spec, documents, adaptive, stop_on_repeat.\n\n"
            "options:\n"
            "  -m, --model FILE       GGUF model (default: $SDNPU_MODEL or models/default.gguf)\n"
            "      --host ADDR        IPv4 address to listen on (default 127.0.0.1)\n"
            "      --port N           port (default 8080; 0 picks a free one, printed)\n"
            "      --parallel N       sessions over the one model, each serving a request (default 1)\n"
            "      --queue N          requests that may wait for a session; beyond: 503 (default 16)\n"
            "      --max-connections N  open connections (default 64)\n"
            "      --max-body SIZE    largest request body, e.g. 1M (default 1M); beyond: 413\n"
            "      --max-tokens N     largest max_tokens a request may ask (default 2048)\n"
            "      --default-tokens N max_tokens when a request gives none (default 256)\n"
            "      --api-key KEY      require 'Authorization: Bearer KEY' (also $SDNPU_API_KEY)\n"
            "      --spec METHOD      default speculative method (default sam-tree)\n"
            "      --drain N          on SIGTERM, seconds the requests in flight may finish in (default 10)\n"
            "      --name NAME        the model's id in /v1/models and replies (default: the file name)\n"
            "  -c, --ctx-size N       context per session (default 4096)\n"
            "  -t, --threads N        threads per session (default: all cores)\n"
            "      --backend, --cl-device, --n-verify, --mem-limit, --prefill-policy, --kernels: as for run\n");
}

/* A flag of serve's own that takes a value; 1 taken, 0 not ours, -1 bad. */
static int serve_flag(const char *a, const char *v, struct sd_server_params *p) {
    long n;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) p->model_path = v;
    else if (!strcmp(a, "--host")) p->host = v;
    else if (!strcmp(a, "--api-key")) p->api_key = v;
    else if (!strcmp(a, "--spec")) p->spec = v;
    else if (!strcmp(a, "--name")) p->model_name = v;
    else if (!strcmp(a, "--max-body")) return cli_parse_size(v, a, &p->max_body) ? -1 : 1;
    else if (!strcmp(a, "--port")) return cli_parse_int(v, a, 0, 65535, &n) ? -1 : (p->port = (int)n, 1);
    else if (!strcmp(a, "--parallel")) return cli_parse_int(v, a, 1, 64, &n) ? -1 : (p->parallel = (int)n, 1);
    else if (!strcmp(a, "--queue")) return cli_parse_int(v, a, 0, 100000, &n) ? -1 : (p->queue = (int)n, 1);
    else if (!strcmp(a, "--max-connections"))
        return cli_parse_int(v, a, 1, 10000, &n) ? -1 : (p->max_connections = (int)n, 1);
    else if (!strcmp(a, "--max-tokens")) return cli_parse_int(v, a, 1, 1 << 24, &n) ? -1 : (p->max_tokens = (int32_t)n, 1);
    else if (!strcmp(a, "--default-tokens"))
        return cli_parse_int(v, a, 1, 1 << 24, &n) ? -1 : (p->default_tokens = (int32_t)n, 1);
    else if (!strcmp(a, "--drain")) return cli_parse_int(v, a, 0, 3600, &n) ? -1 : (p->drain_seconds = (int)n, 1);
    else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
        return cli_parse_int(v, a, 16, 1 << 24, &n) ? -1 : (p->session.n_ctx = (int32_t)n, 1);
    else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
        return cli_parse_int(v, a, 1, 512, &n) ? -1 : (p->session.n_threads = (int32_t)n, 1);
    else return cli_session_flag(a, v, &p->session);
    return 1;
}

int cli_serve(int argc, char **argv) {
    struct sd_server_params p = sd_server_default_params();
    p.model_path = cli_default_model();
    p.api_key = getenv("SDNPU_API_KEY");
    if (p.api_key && !*p.api_key) p.api_key = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "sdnpu serve: unknown option or missing value '%s' (see sdnpu serve -h)\n", a);
            return 2;
        }
        int r = serve_flag(a, v, &p);
        if (r < 0) return 2;
        if (r == 0) {
            fprintf(stderr, "sdnpu serve: unknown option '%s' (see sdnpu serve -h)\n", a);
            return 2;
        }
        i++;
    }
    if (p.default_tokens > p.max_tokens) p.default_tokens = p.max_tokens;
    return sd_server_run(&p);
}
