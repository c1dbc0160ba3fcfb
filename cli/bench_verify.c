/* cli/bench_verify.c - `sdnpu bench verify`: what a verification pass of L
 * rows costs against a one-row pass after documents of several lengths.
 *
 * Issue 31's ratio, pass(L) / pass(1), is measured by `sdnpu profile`
 * without context and by `sdnpu bench graphs` after one; after a document
 * attention over its tokens joins the matrix products, and L rows of it
 * cost L times one row's arithmetic where one row is bound by reading the
 * cache. This bench gives the curve: for each context length N it
 * prefills N tokens of real text (Debian's license texts), then runs
 * warm passes of 1 and L rows (a chain of draft rows, as greedy
 * decoding and verification run them: the head takes each row's greedy
 * token and keeps no logits; --head as the model's) in alternation for --seconds, so both see the same
 * moments of a machine whose speed wanders, and reports the median and
 * the best of each and their ratios. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/tools.h"

#define VB_MAX_AT 16
#define VB_MAX_PASSES 100000

struct vb_opts {
    const char *model_path, *json, *at, *kernels, *head;
    long threads, Lv;
    float seconds;
};

/* One context's passes: times of L=1 (k 0) and L=Lv (k 1). */
struct vb_result {
    int32_t at;
    double median[2], best[2];
    int n[2];
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: sdnpu bench verify [-m MODEL] [-t THREADS] [--n-verify L] [--at N,N,...] [--seconds S]\n"
            "                          [--kernels fast|ggml] [--head auto|exact|certified] [--json OUT]\n"
            "  warm verification passes of L rows (default 8) and of one row, alternating for S seconds\n"
            "  (default 10) after each context of N tokens (default 16,512,1024,2048): median and best ms\n"
            "  and their ratio, the cost of L rows against one after a document of that length; contexts\n"
            "  in any order, repeated if wanted (16,4000,16,4000: ratios taken at the same moments where\n"
            "  the machine's speed wanders), a longer one reached by prefilling only its new tokens\n");
}

/* "16,4000,16,4000" into at[], each in [16, 131072], in any order and
 * repeated if wanted: on a machine whose speed wanders, contexts visited in
 * turn give ratios measured at the same moments. */
static int parse_at(const char *s, int32_t *at, int *n) {
    return cli_parse_int_list(s, "--at", 16, 131072, at, VB_MAX_AT, n) ? -1 : 0;
}

/* The session holding the first `at` tokens of toks: the tokens after what
 * it holds where that is a prefix of them (contexts in ascending order
 * prefill the longest once), else from an empty session. */
static int reach_context(struct sdnpu_session *s, const int32_t *toks, int32_t at) {
    int32_t have = sdnpu_session_n_past(s);
    if (have > at) {
        sdnpu_session_reset(s);
        have = 0;
    }
    if (have < at && sdnpu_session_eval(s, toks + have, (size_t)(at - have), NULL, 0)) {
        fprintf(stderr, "sdnpu bench verify: %s\n", sdnpu_session_last_error(s));
        return -1;
    }
    return 0;
}

/* The passes after at tokens of toks. times[2][VB_MAX_PASSES] is scratch. */
static int run_context(struct sdnpu_session *s, const int32_t *toks, int32_t at, int32_t Lv, float seconds,
                       double (*times)[VB_MAX_PASSES], struct vb_result *r) {
    struct sd_rt *rt = sd_tool_session_rt(s);
    struct sd_err e = {0};
    if (reach_context(s, toks, at)) return -1;
    struct sd_row rows[64];
    int32_t am[64];
    memset(rows, 0, sizeof rows);
    for (int32_t i = 0; i < Lv; i++) {
        rows[i].token = toks[at + i];
        rows[i].pos = rows[i].slot = at + i;
        rows[i].n_prefix = at + i + 1;
    }
    memset(r, 0, sizeof *r);
    r->at = at;
    const double end = sd_time_ms() + (double)seconds * 1e3;
    /* Two warm-up passes of each first: their graphs' first touch is not a pass's cost. */
    for (int it = -4; (it < 0 || sd_time_ms() < end) && r->n[1] < VB_MAX_PASSES; it++) {
        const int k = (it + 4) % 2;
        double t0 = sd_time_ms();
        if (sd_rt_decode_greedy(rt, rows, k ? Lv : 1, at, k == 1, am, &e)) {
            fprintf(stderr, "sdnpu bench verify: %s\n", e.msg);
            return -1;
        }
        double t = sd_time_ms() - t0;
        sd_rt_kv_truncate(rt, at);
        if (it >= 0) times[k][r->n[k]++] = t;
    }
    for (int k = 0; k < 2; k++) {
        r->median[k] = cli_median(times[k], r->n[k]);
        r->best[k] = r->n[k] ? times[k][0] : 0.0;
    }
    return 0;
}

static void print_results(const struct vb_opts *o, const char *backend, const struct vb_result *r, int n) {
    printf("\nsdnpu bench verify: %s, %ld threads, backend %s, head %s, warm passes alternating %g s a context\n\n",
           o->model_path, o->threads, backend, o->head ? o->head : "auto", (double)o->seconds);
    printf("| context (tokens) | L=1 ms, median / best | L=%ld ms, median / best | L=%ld / L=1, median | best | passes |\n"
           "|---:|---:|---:|---:|---:|---:|\n",
           o->Lv, o->Lv);
    for (int i = 0; i < n; i++)
        printf("| %d | %.2f / %.2f | %.2f / %.2f | %.3f | %.3f | %d + %d |\n", r[i].at, r[i].median[0], r[i].best[0],
               r[i].median[1], r[i].best[1], r[i].median[1] / r[i].median[0], r[i].best[1] / r[i].best[0], r[i].n[0],
               r[i].n[1]);
}

static int write_json(const struct vb_opts *o, const char *backend, const struct vb_result *r, int n) {
    FILE *f = fopen(o->json, "w");
    if (!f) {
        fprintf(stderr, "sdnpu bench verify: cannot write %s\n", o->json);
        return -1;
    }
    fprintf(f, "{\"model\": \"%s\", \"threads\": %ld, \"backend\": \"%s\", \"head\": \"%s\", \"n_verify\": %ld, "
               "\"seconds\": %.1f, \"contexts\": [",
            o->model_path, o->threads, backend, o->head ? o->head : "auto", o->Lv, (double)o->seconds);
    for (int i = 0; i < n; i++)
        fprintf(f,
                "%s\n {\"at\": %d, \"L1_median_ms\": %.3f, \"L1_best_ms\": %.3f, \"L_median_ms\": %.3f, \"L_best_ms\": %.3f, "
                "\"ratio_median\": %.4f, \"ratio_best\": %.4f, \"passes\": [%d, %d]}",
                i ? "," : "", r[i].at, r[i].median[0], r[i].best[0], r[i].median[1], r[i].best[1],
                r[i].median[1] / r[i].median[0], r[i].best[1] / r[i].best[0], r[i].n[0], r[i].n[1]);
    fprintf(f, "\n]}\n");
    return fclose(f) ? -1 : 0;
}

#define OPT(field) CLI_AT(struct vb_opts, field)
static const struct cli_flag k_flags[] = {
    {"-m", NULL, CLI_STR, OPT(model_path)},
    {"-t", NULL, CLI_INT, OPT(threads), .lo = 1, .hi = 256},
    {"--n-verify", NULL, CLI_INT, OPT(Lv), .lo = 2, .hi = 64},
    {"--at", NULL, CLI_STR, OPT(at)},
    {"--seconds", NULL, CLI_FLOAT, OPT(seconds)},
    {"--kernels", NULL, CLI_CHOICE, OPT(kernels), .choices = (const char *const[]){"fast", "ggml", NULL}},
    {"--head", NULL, CLI_CHOICE, OPT(head), .choices = cli_head_choices},
    {"--json", NULL, CLI_STR, OPT(json)},
    {0},
};

int cli_bench_verify(int argc, char **argv) {
    struct vb_opts o = {.threads = 2, .Lv = 8, .seconds = 10.0, .at = "16,512,1024,2048", .kernels = "fast"};
    const struct cli_parser parser = {"sdnpu bench verify", usage, {{k_flags, &o}}, .style = CLI_STYLE_BENCH};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    int32_t at[VB_MAX_AT];
    int n_at = 0;
    if (parse_at(o.at, at, &n_at)) return 2;
    if (!(o.seconds > 0 && o.seconds <= 3600)) {
        fprintf(stderr, "sdnpu bench verify: --seconds takes a time in (0, 3600], got %g\n", (double)o.seconds);
        return 2;
    }
    o.model_path = cli_model(o.model_path);
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = (int32_t)o.threads;
    mp.head = o.head;
    struct sdnpu_model *model = NULL;
    struct sdnpu_session *s = NULL;
    char err[512];
    int ret = 1;
    if (sdnpu_model_load(o.model_path, mp, &model, err, sizeof err)) {
        fprintf(stderr, "sdnpu bench verify: %s\n", err);
        return 1;
    }
    int32_t most = 0;
    for (int i = 0; i < n_at; i++)
        most = SD_MAX(most, at[i]);
    int32_t *toks = cli_license_tokens(model, most + (int32_t)o.Lv);
    double (*times)[VB_MAX_PASSES] = malloc(2 * sizeof *times);
    struct vb_result r[VB_MAX_AT];
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = most + (int32_t)o.Lv + 16;
    sp.n_verify = (int32_t)o.Lv;
    sp.kernels = o.kernels;
    cli_weight_cache(&sp, o.model_path);
    if (!toks || !times) {
        fprintf(stderr, "sdnpu bench verify: out of memory, or no license texts to read (/usr/share/common-licenses)\n");
    } else if (sdnpu_session_create(model, sp, &s)) {
        fprintf(stderr, "sdnpu bench verify: %s\n", sdnpu_model_last_error(model));
    } else {
        int i = 0;
        for (; i < n_at; i++) {
            fprintf(stderr, "context %d tokens: passes of 1 and %ld rows for %g s...\n", at[i], o.Lv, (double)o.seconds);
            if (run_context(s, toks, at[i], (int32_t)o.Lv, o.seconds, times, &r[i])) break;
        }
        const char *backend = sd_rt_backend_desc(sd_tool_session_rt(s));
        if (i == n_at) {
            print_results(&o, backend, r, n_at);
            ret = o.json && write_json(&o, backend, r, n_at) ? 1 : 0;
        }
    }
    free(times);
    free(toks);
    sdnpu_session_free(s);
    sdnpu_model_free(model);
    return ret;
}
