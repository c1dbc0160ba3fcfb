/* cli/bench_prefix.c - `sdnpu bench prefix`: time to the first token when
 * a request comes back to a document the session has seen (prefix reuse
 * and the prompt cache, engine/pcache.h), against prefilling it afresh.
 *
 *     sdnpu bench prefix [-m MODEL] [-t N] [--tokens N] [--repeat N] [--json OUT]
 *
 * Two documents of --tokens tokens of real text (Debian's license texts)
 * and short questions after them, greedy, 16 tokens a reply, each request
 * on a new context. In order, on one session with a prompt cache:
 *   first      document A and question 1 (nothing to reuse);
 *   follow-up  A and question 2 (the live context holds A);
 *   other      document B and question 1 (A's context goes to the cache);
 *   return     A and question 3 (A comes back from the cache);
 * and each request's prompt again on a reset session (a fresh prefill).
 * The time to the first token is from the call to the first streamed
 * text; the graphs are prepared before anything is timed. Every reply must
 * equal its fresh twin token for token (the "same" column). Medians of
 * --repeat rounds, each on a new session. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/base.h"
#include "cli.h"

static void usage(FILE *f) {
    fprintf(f, "usage: sdnpu bench prefix [-m MODEL] [-t N] [--tokens N] [--repeat N] [--json OUT]\n\n"
               "Time to the first token of follow-up requests on the same document (prefix reuse,\n"
               "the prompt cache) against prefilling the same prompt afresh.\n\n"
               "options:\n"
               "  -m MODEL        a GGUF model (default: $SDNPU_MODEL or models/default.gguf)\n"
               "  -t N            threads (default 2)\n"
               "      --tokens N  tokens of each document (default 1000)\n"
               "      --repeat N  rounds, medians kept (default 3)\n"
               "      --json OUT  also write the numbers as JSON\n");
}

struct prefix_opts {
    const char *model_path, *json;
    long threads, tokens, repeat;
};

#define OPT(field) CLI_AT(struct prefix_opts, field)
static const struct cli_flag k_flags[] = {
    {"-m", NULL, CLI_STR, OPT(model_path)},
    {"-t", NULL, CLI_INT, OPT(threads), .lo = 1, .hi = 256},
    {"--tokens", NULL, CLI_INT, OPT(tokens), .lo = 64, .hi = 16384},
    {"--repeat", NULL, CLI_INT, OPT(repeat), .lo = 1, .hi = 100},
    {"--json", NULL, CLI_STR, OPT(json)},
    {0},
};

enum { N_REQ = 4, N_PREDICT = 16 };
static const char *const k_req_names[N_REQ] = {"first", "follow-up", "other", "return"};
static const char *const k_questions[3] = {"\n\nQuestion: What may a user do with the software?\nAnswer:",
                                           "\n\nQuestion: Who holds the copyright?\nAnswer:",
                                           "\n\nQuestion: What must a copy include?\nAnswer:"};

/* One request's streaming: when its first text came, and its tokens. */
struct reply {
    double t0, first_ms;
    char text[4096];
    size_t n;
};

static bool on_text(const char *piece, size_t len, void *user) {
    struct reply *r = user;
    if (r->first_ms < 0) r->first_ms = sd_time_ms() - r->t0;
    size_t k = SD_MIN(len, sizeof r->text - 1 - r->n);
    memcpy(r->text + r->n, piece, k);
    r->n += k;
    return true;
}

/* A prompt: a document's tokens then a question's. */
struct prompt {
    sdnpu_token *tok;
    size_t n;
};

static int make_prompt(struct sdnpu_model *m, const int32_t *doc, int32_t n_doc, const char *q, struct prompt *p) {
    size_t nq = 0, ql = strlen(q);
    p->tok = malloc(((size_t)n_doc + ql + 8) * sizeof *p->tok); /* a token is at least a byte */
    if (!p->tok) return -1;
    memcpy(p->tok, doc, (size_t)n_doc * sizeof *doc);
    if (sdnpu_tokenize(m, q, ql, 0, p->tok + n_doc, ql + 8, &nq)) return -1;
    p->n = (size_t)n_doc + nq;
    return 0;
}

/* Run one prompt; reset first for a fresh prefill, else on a new context. */
static int request(struct sdnpu_session *s, const struct prompt *p, bool fresh, struct reply *r, struct sdnpu_stats *st) {
    struct sdnpu_generate_params gp = sdnpu_generate_default_params();
    gp.n_predict = N_PREDICT;
    gp.sampling.temperature = 0.0f;
    gp.prompt_tokens = p->tok;
    gp.n_prompt_tokens = p->n;
    gp.new_context = !fresh;
    gp.on_text = on_text;
    gp.user = r;
    memset(r, 0, sizeof *r);
    r->first_ms = -1;
    if (fresh) sdnpu_session_reset(s);
    r->t0 = sd_time_ms();
    enum sdnpu_status rc = sdnpu_session_generate(s, NULL, 0, &gp, st);
    if (r->first_ms < 0) r->first_ms = sd_time_ms() - r->t0;
    return rc == SDNPU_OK ? 0 : -1;
}

struct row {
    double ttft[100], fresh[100];
    int32_t n_prompt, reused;
    bool same;
};

/* One round on a new session: the four requests, each with its fresh twin
 * run right after on a second session (so both see the same moments). */
static int round_of(struct sdnpu_model *m, const struct sdnpu_session_params *sp, const struct prompt *pr, long k,
                    struct row *rows) {
    struct sdnpu_session *s = NULL, *f = NULL;
    struct sdnpu_session_params fp = *sp;
    fp.prompt_cache_bytes = 0;
    int rc = -1;
    if (sdnpu_session_create(m, *sp, &s) || sdnpu_session_create(m, fp, &f)) goto done;
    struct reply r, rf;
    struct sdnpu_stats st, stf;
    /* Warm-up: each session prepares its graphs on a short prompt. */
    struct prompt warm = {pr[0].tok, 64};
    if (request(s, &warm, true, &r, &st) || request(f, &warm, true, &r, &st)) goto done;
    sdnpu_session_reset(s);
    for (int i = 0; i < N_REQ; i++) {
        if (request(s, &pr[i], false, &r, &st) || request(f, &pr[i], true, &rf, &stf)) goto done;
        rows[i].ttft[k] = r.first_ms;
        rows[i].fresh[k] = rf.first_ms;
        rows[i].n_prompt = st.n_prompt_tokens;
        rows[i].reused = st.n_prompt_reused;
        rows[i].same = rows[i].same && r.n == rf.n && !memcmp(r.text, rf.text, r.n) && st.n_generated == stf.n_generated;
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "sdnpu bench prefix: %s\n", s ? sdnpu_session_last_error(s) : sdnpu_model_last_error(m));
    sdnpu_session_free(s);
    sdnpu_session_free(f);
    return rc;
}

static void print_rows(struct row *rows, long repeat, double med[N_REQ][2]) {
    printf("\n| request | prompt tokens | reused | TTFT ms | fresh prefill TTFT ms | ratio | same reply |\n"
           "|---|---:|---:|---:|---:|---:|---|\n");
    for (int i = 0; i < N_REQ; i++) {
        med[i][0] = cli_median(rows[i].ttft, repeat);
        med[i][1] = cli_median(rows[i].fresh, repeat);
        printf("| %s | %d | %d | %.1f | %.1f | %.3f | %s |\n", k_req_names[i], rows[i].n_prompt, rows[i].reused,
               med[i][0], med[i][1], med[i][0] / med[i][1], rows[i].same ? "yes" : "NO");
    }
}

static int write_json(const char *path, const struct prefix_opts *o, struct row *rows, double med[N_REQ][2]) {
    json_t *a = json_array();
    for (int i = 0; i < N_REQ; i++)
        json_array_append_new(a, json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:b}", "request", k_req_names[i], "prompt_tokens",
                                           rows[i].n_prompt, "reused_tokens", rows[i].reused, "ttft_ms", med[i][0],
                                           "fresh_ttft_ms", med[i][1], "ratio", med[i][0] / med[i][1], "same_reply",
                                           rows[i].same));
    json_t *root = json_pack("{s:s, s:i, s:i, s:i, s:o}", "bench", "prefix", "threads", (int)o->threads, "doc_tokens",
                             (int)o->tokens, "repeat", (int)o->repeat, "requests", a);
    int rc = json_dump_file(root, path, JSON_INDENT(2));
    json_decref(root);
    return rc;
}

int cli_bench_prefix(int argc, char **argv) {
    struct prefix_opts o = {.threads = 2, .tokens = 1000, .repeat = 3};
    const struct cli_parser parser = {"sdnpu bench prefix", usage, {{k_flags, &o}}, .style = CLI_STYLE_BENCH};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = (int32_t)o.threads;
    struct sdnpu_model *model = NULL;
    char err[512];
    if (sdnpu_model_load(cli_model(o.model_path), mp, &model, err, sizeof err)) {
        fprintf(stderr, "sdnpu bench prefix: %s\n", err);
        return 1;
    }
    int ret = 1;
    struct prompt pr[N_REQ] = {{0}};
    struct row *rows = calloc(N_REQ, sizeof *rows);
    int32_t n = (int32_t)o.tokens, *toks = cli_license_tokens(model, 2 * n);
    if (!toks || !rows) {
        fprintf(stderr, "sdnpu bench prefix: cannot make two %d-token documents from /usr/share/common-licenses\n", n);
        goto done;
    }
    const int32_t *doc[N_REQ] = {toks, toks, toks + n, toks};
    const int qi[N_REQ] = {0, 1, 0, 2};
    for (int i = 0; i < N_REQ; i++) {
        rows[i].same = true;
        if (make_prompt(model, doc[i], n, k_questions[qi[i]], &pr[i])) goto done;
    }
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 2 * n + 256;
    sp.prompt_cache_bytes = (size_t)256 << 20;
    for (long k = 0; k < o.repeat; k++) {
        fprintf(stderr, "round %ld of %ld...\n", k + 1, o.repeat);
        if (round_of(model, &sp, pr, k, rows)) goto done;
    }
    double med[N_REQ][2];
    printf("sdnpu bench prefix: %ld-token documents, %d tokens a reply, %ld threads, medians of %ld rounds\n", o.tokens,
           N_PREDICT, o.threads, o.repeat);
    print_rows(rows, o.repeat, med);
    if (o.json && write_json(o.json, &o, rows, med)) {
        fprintf(stderr, "sdnpu bench prefix: cannot write '%s'\n", o.json);
        goto done;
    }
    ret = 0;
done:
    for (int i = 0; i < N_REQ; i++) free(pr[i].tok);
    free(toks);
    free(rows);
    sdnpu_model_free(model);
    return ret;
}
