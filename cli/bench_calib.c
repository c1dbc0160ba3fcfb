/* cli/bench_calib.c - `sdnpu bench calib`: what in-context calibration
 * (calib/calib.h) costs prefill, and what its subset head gives up.
 *
 *     sdnpu bench calib [-m MODEL] [-t N] [--repeat N] [--no-accuracy] [--json OUT]
 *
 * On prompts of 1,024 and 4,096 tokens of real text (Debian's license
 * texts), best of --repeat runs each, on the session's own graphs (G1
 * prepared before timing):
 *   plain        prefill with the last token's logits only (what sdnpu does
 *                without calibration);
 *   calibrated   the same prefill with the subset sink: the subset head's
 *                preparation and runs, the sink's normalising and top-k, and
 *                then building the store; its extra time over plain is
 *                calibration's cost, against the 10% target.
 * Memory: the subset head's prepared bytes and calibration's own.
 * Accuracy (1,024 tokens): the full head is run for every position once,
 * so that the subset's approximation can be put in numbers: how often the
 * model's top token lies outside the subset, how often the subset's top
 * token is the model's, the probability mass outside the subset, and the
 * error of the top token's probability. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "calib/calib.h"
#include "cli.h"
#include "engine/tools.h"
#include "sched/runtime.h"

static void usage(FILE *f) {
    fprintf(f, "usage: sdnpu bench calib [-m MODEL] [-t N] [--repeat N] [--no-accuracy] [--json OUT]\n\n"
               "Time prefill with and without in-context calibration on 1,024 and 4,096 tokens of text,\n"
               "and measure what the subset head gives up against the full head.\n\n"
               "options:\n"
               "  -m MODEL        a GGUF model (default: $SDNPU_MODEL or models/default.gguf)\n"
               "  -t N            threads (default 2)\n"
               "      --repeat N  runs per figure, best kept (default 3)\n"
               "      --no-accuracy  skip the full-head comparison (it runs the whole head per token)\n"
               "      --json OUT  also write the numbers as JSON\n");
}

struct calib_opts {
    const char *model_path, *json;
    long threads, repeat;
    bool accuracy;
};

#define OPT(field) CLI_AT(struct calib_opts, field)
static const struct cli_flag k_flags[] = {
    {"-m", NULL, CLI_STR, OPT(model_path)},
    {"-t", NULL, CLI_INT, OPT(threads), .lo = 1, .hi = 256},
    {"--repeat", NULL, CLI_INT, OPT(repeat), .lo = 1, .hi = 100},
    {"--no-accuracy", NULL, CLI_CONST, OPT(accuracy), .lo = false},
    {"--json", NULL, CLI_STR, OPT(json)},
    {0},
};

/* One prompt length's figures. */
struct row {
    int32_t n;
    double plain_ms, calib_ms; /* best prefill without and with the subset sink */
    double prepare_ms, head_ms, collect_ms, build_ms;
    int32_t n_subset, n_roots, n_records;
    int64_t n_store;
    size_t head_bytes, calib_bytes;
};

/* The subset sink, watching the prepared bytes while the subset head is held. */
struct watch {
    struct sd_calib *c;
    struct sd_rt *rt;
    size_t peak;
};

static bool watch_collect(void *ud, int32_t pos0, int32_t n, const float *lg) {
    struct watch *w = ud;
    w->peak = SD_MAX(w->peak, sd_rt_prepared_bytes(w->rt));
    return sd_calib_collect(w->c, pos0, n, lg);
}

static int measure(struct sd_rt *rt, struct sd_calib *c, struct sd_sam *store, const int32_t *toks, int32_t n,
                   long repeat, struct row *r, struct sd_err *e) {
    memset(r, 0, sizeof *r);
    r->n = n;
    r->plain_ms = r->calib_ms = 1e300;
    size_t base = sd_rt_prepared_bytes(rt);
    for (long k = 0; k < repeat; k++) {
        sd_rt_kv_truncate(rt, 0);
        double t0 = sd_time_ms();
        int rc = sd_rt_prefill(rt, toks, n, 0, NULL, NULL, NULL, NULL, e);
        if (rc) return rc;
        r->plain_ms = SD_MIN(r->plain_ms, sd_time_ms() - t0);
    }
    for (long k = 0; k < repeat; k++) {
        sd_rt_kv_truncate(rt, 0);
        int rc = sd_calib_begin(c, NULL, 0, toks, n, e);
        if (rc) return rc;
        struct watch w = {c, rt, 0};
        struct sd_subset_sink sink = {NULL, 0, watch_collect, &w};
        sink.tok = sd_calib_subset(c, &sink.n_tok);
        double p0 = sd_rt_prepare_ms(rt), h0 = sd_rt_counts(rt).subset_ms, t0 = sd_time_ms();
        if ((rc = sd_rt_prefill(rt, toks, n, 0, NULL, &sink, NULL, NULL, e)) || (rc = sd_calib_build(c, store, e))) return rc;
        double total = sd_time_ms() - t0;
        if (total >= r->calib_ms) continue;
        struct sd_calib_stats st = sd_calib_stats(c);
        r->calib_ms = total;
        r->prepare_ms = sd_rt_prepare_ms(rt) - p0;
        r->head_ms = sd_rt_counts(rt).subset_ms - h0;
        r->collect_ms = st.collect_ms;
        r->build_ms = st.build_ms;
        r->n_subset = st.n_subset;
        r->n_roots = st.n_roots;
        r->n_records = st.n_records;
        r->n_store = st.n_tokens;
        r->head_bytes = w.peak - base;
        r->calib_bytes = st.bytes;
    }
    return SDNPU_OK;
}

/* What the subset gives up, per position, against the full head. */
struct accuracy {
    struct sd_calib *c;
    const int32_t *subset;
    int32_t n_subset, nv, n;
    int64_t top_outside, top_same;
    double mass_outside, top_prob_err;
    uint8_t *in_subset; /* [nv] */
};

static bool compare_full(void *ud, int32_t pos0, int32_t n, const float *lg) {
    struct accuracy *a = ud;
    for (int32_t r = 0; r < n; r++) {
        const float *row = lg + (size_t)r * (size_t)a->nv;
        int32_t best = 0;
        for (int32_t v = 1; v < a->nv; v++)
            if (row[v] > row[best]) best = v;
        double z = 0, zs = 0;
        for (int32_t v = 0; v < a->nv; v++) {
            double p = exp((double)(row[v] - row[best]));
            z += p;
            if (a->in_subset[v]) zs += p;
        }
        int32_t tok[SD_CALIB_MAX_K];
        float prob[SD_CALIB_MAX_K];
        int32_t k = sd_calib_get(a->c, pos0 + r, tok, prob);
        a->top_outside += !a->in_subset[best];
        a->mass_outside += 1.0 - zs / z;
        if (k > 0) {
            a->top_same += tok[0] == best;
            a->top_prob_err += fabs((double)prob[0] - exp((double)(row[tok[0]] - row[best])) / z);
        }
        a->n++;
    }
    return true;
}

static int measure_accuracy(struct sd_rt *rt, struct sd_calib *c, const int32_t *toks, int32_t n, int32_t nv,
                            struct accuracy *a, struct sd_err *e) {
    memset(a, 0, sizeof *a);
    int rc = sd_calib_begin(c, NULL, 0, toks, n, e);
    if (rc) return rc;
    a->c = c;
    a->nv = nv;
    a->subset = sd_calib_subset(c, &a->n_subset);
    a->in_subset = calloc((size_t)nv, 1);
    if (!a->in_subset) return sd_err_set(e, SDNPU_ERR_OOM, "out of memory");
    for (int32_t i = 0; i < a->n_subset; i++) a->in_subset[a->subset[i]] = 1;
    struct sd_subset_sink sub = {a->subset, a->n_subset, sd_calib_collect, c};
    struct sd_logit_sink full = {compare_full, a};
    sd_rt_kv_truncate(rt, 0);
    /* The full sink sees each chunk's rows after the subset sink has. */
    rc = sd_rt_prefill(rt, toks, n, 0, NULL, &sub, NULL, NULL, e);
    sd_rt_kv_truncate(rt, 0);
    if (!rc) rc = sd_rt_prefill(rt, toks, n, 0, &full, NULL, NULL, NULL, e);
    free(a->in_subset);
    a->in_subset = NULL;
    return rc;
}

static void print_rows(const struct row *rows, int n_rows, const char *desc, long repeat) {
    printf("in-context calibration, %s, best of %ld\n"
           "(calibration ms: the calibrated prefill's time over the plain one's, timing noise included; its\n"
           "parts: the subset head's preparation and runs, the sink and the build, each timed)\n\n",
           desc, repeat);
    printf("| prompt tokens | prefill ms | with calibration ms | calibration ms | share of prefill | its parts' share | target |"
           " subset head: prepare / runs ms | sink ms | build ms | subset tokens | roots | records |"
           " store tokens | subset head MiB | calibration MiB |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < n_rows; i++) {
        const struct row *r = &rows[i];
        double extra = r->calib_ms - r->plain_ms, parts = r->prepare_ms + r->head_ms + r->collect_ms + r->build_ms;
        printf("| %d | %.1f | %.1f | %.1f | %.1f%% | %.1f%% | < 10%%: %s | %.1f / %.1f | %.1f | %.1f | %d | %d | %d | %lld |"
               " %.2f | %.2f |\n",
               r->n, r->plain_ms, r->calib_ms, extra, 100.0 * extra / r->plain_ms, 100.0 * parts / r->plain_ms,
               extra < 0.1 * r->plain_ms ? "met" : "missed", r->prepare_ms, r->head_ms, r->collect_ms, r->build_ms,
               r->n_subset, r->n_roots, r->n_records, (long long)r->n_store, (double)r->head_bytes / 1048576.0,
               (double)r->calib_bytes / 1048576.0);
    }
}

static void print_accuracy(const struct accuracy *a) {
    double n = a->n ? (double)a->n : 1.0;
    printf("\nwhat the subset head gives up (%d positions of %d subset tokens, against the full head):\n",
           a->n, a->n_subset);
    printf("  the model's top token outside the subset: %.1f%% of positions\n", 100.0 * (double)a->top_outside / n);
    printf("  the subset's top token is the model's:    %.1f%%\n", 100.0 * (double)a->top_same / n);
    printf("  probability mass outside the subset:      %.3f on average\n", a->mass_outside / n);
    printf("  error of the top token's probability:     %.3f on average (the subset's is an upper bound)\n",
           a->top_prob_err / n);
}

static int write_json(const char *path, const struct row *rows, int n_rows, const struct accuracy *a, long threads,
                      const char *desc) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"backend\": \"%s\", \"threads\": %ld, \"prompts\": [", desc, threads);
    for (int i = 0; i < n_rows; i++) {
        const struct row *r = &rows[i];
        fprintf(f,
                "%s{\"tokens\": %d, \"prefill_ms\": %.3f, \"calibrated_prefill_ms\": %.3f, \"share\": %.5f, "
                "\"subset_prepare_ms\": %.3f, \"subset_head_ms\": %.3f, \"sink_ms\": %.3f, \"build_ms\": %.3f, "
                "\"subset_tokens\": %d, \"roots\": %d, \"records\": %d, \"store_tokens\": %lld, "
                "\"subset_head_bytes\": %zu, \"calib_bytes\": %zu}",
                i ? ", " : "", r->n, r->plain_ms, r->calib_ms, (r->calib_ms - r->plain_ms) / r->plain_ms, r->prepare_ms,
                r->head_ms, r->collect_ms, r->build_ms, r->n_subset, r->n_roots, r->n_records, (long long)r->n_store,
                r->head_bytes, r->calib_bytes);
    }
    fprintf(f, "]");
    if (a && a->n)
        fprintf(f,
                ", \"accuracy\": {\"positions\": %d, \"subset_tokens\": %d, \"top_outside\": %.5f, \"top_same\": %.5f, "
                "\"mass_outside\": %.5f, \"top_prob_err\": %.5f}",
                a->n, a->n_subset, (double)a->top_outside / a->n, (double)a->top_same / a->n, a->mass_outside / a->n,
                a->top_prob_err / a->n);
    fprintf(f, "}\n");
    return fclose(f);
}

int cli_bench_calib(int argc, char **argv) {
    struct calib_opts o = {.threads = 2, .repeat = 3, .accuracy = true};
    const struct cli_parser parser = {"sdnpu bench calib", usage, {{k_flags, &o}}, .style = CLI_STYLE_BENCH};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    const char *model_path = cli_model(o.model_path);
    enum { N_SHORT = 1024, N_LONG = 4096 };
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = (int32_t)o.threads;
    struct sdnpu_model *model = NULL;
    struct sdnpu_session *s = NULL;
    struct sd_calib *c = NULL;
    struct sd_sam *store = NULL;
    int32_t *toks = NULL;
    struct sd_err e = {0};
    char err[512];
    int ret = 1;
    if (sdnpu_model_load(model_path, mp, &model, err, sizeof err)) {
        fprintf(stderr, "sdnpu bench calib: %s\n", err);
        return 1;
    }
    if (!(toks = cli_license_tokens(model, N_LONG))) {
        fprintf(stderr, "sdnpu bench calib: cannot make a 4,096-token prompt from /usr/share/common-licenses\n");
        goto done;
    }
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = N_LONG + 64;
    if (sdnpu_session_create(model, sp, &s)) {
        fprintf(stderr, "sdnpu bench calib: %s\n", sdnpu_model_last_error(model));
        goto done;
    }
    struct sd_rt *rt = sd_tool_session_rt(s);
    if (sd_rt_prepare_set(rt, SD_SET_G1, &e) || sd_calib_create(NULL, &c, &e) || sd_sam_create(0, &store, &e))
        goto fail;
    struct row rows[2];
    const int32_t lens[2] = {N_SHORT, N_LONG};
    for (int i = 0; i < 2; i++) {
        fprintf(stderr, "prefill of %d tokens, plain and calibrated...\n", lens[i]);
        if (measure(rt, c, store, toks, lens[i], o.repeat, &rows[i], &e)) goto fail;
    }
    struct accuracy a = {0};
    if (o.accuracy) {
        fprintf(stderr, "the full head for every one of %d positions...\n", N_SHORT);
        if (measure_accuracy(rt, c, toks, N_SHORT, sdnpu_model_n_vocab(model), &a, &e)) goto fail;
    }
    print_rows(rows, 2, sd_rt_backend_desc(rt), o.repeat);
    if (o.accuracy) print_accuracy(&a);
    if (o.json && write_json(o.json, rows, 2, &a, o.threads, sd_rt_backend_desc(rt))) {
        fprintf(stderr, "sdnpu bench calib: cannot write '%s'\n", o.json);
        goto done;
    }
    ret = 0;
    goto done;
fail:
    fprintf(stderr, "sdnpu bench calib: %s\n", e.msg);
done:
    sd_sam_free(store);
    sd_calib_free(c);
    sdnpu_session_free(s);
    sdnpu_model_free(model);
    free(toks);
    return ret;
}
