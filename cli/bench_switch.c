/* cli/bench_switch.c - `sdnpu bench switch`: what moving from the prefill
 * graphs to the decode graphs costs the first decoded token, in each
 * graph-switching mode (sched/switch.h), and the memory each holds.
 *
 *     sdnpu bench switch [-m MODEL] [-t N] [--backend cpu|opencl|all] [--lengths 256,1024,4096]
 *                        [--repeat N] [--json OUT]
 *
 * Each run starts where a session that has just loaded its model stands:
 * the prefill graphs G1 and the one-row head prepared, nothing else. It
 * prefills the prompt (license texts) and runs one decoding step on G2
 * (one row, as the first verification pass would): time to the first
 * decoded token (TTFT). The baseline has G2 and its head prepared
 * beforehand as well (no switch at all: two graph sets held); a mode's
 * switch overhead is its TTFT minus the baseline's. Hidden: the share of
 * sync's overhead that a mode does not pay. Peak: the most prepared and
 * reserved bytes at any moment of the run (both threads), against one
 * graph set of each kind. Best of --repeat runs, after one warm-up run of
 * each mode that measures the times the plans are made from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli.h"
#include "engine/tools.h"
#include "sched/runtime.h"
#include "sched/switch.h"

static void usage(FILE *f) {
    fprintf(f, "usage: sdnpu bench switch [-m MODEL] [-t N] [--backend cpu|opencl|all] [--lengths LIST]\n"
               "                          [--repeat N] [--json OUT]\n\n"
               "Time to the first decoded token and peak prepared memory with each graph-switching mode\n"
               "(sync, naive-async, progressive) against both graph sets held, per prompt length.\n\n"
               "options:\n"
               "  -m MODEL          a GGUF model (default: $SDNPU_MODEL or models/default.gguf)\n"
               "  -t N              threads (default 2)\n"
               "      --backend B   cpu, opencl or all (default all: opencl where a device exists)\n"
               "      --lengths L   prompt lengths in tokens (default 256,1024,4096)\n"
               "      --repeat N    runs per figure, best kept (default 3)\n"
               "      --json OUT    also write the numbers as JSON\n");
}

struct switch_opts {
    const char *model_path, *json, *backend, *lengths;
    long threads, repeat;
};

#define OPT(field) CLI_AT(struct switch_opts, field)
static const struct cli_flag k_flags[] = {
    {"-m", NULL, CLI_STR, OPT(model_path)},
    {"-t", NULL, CLI_INT, OPT(threads), .lo = 1, .hi = 256},
    {"--backend", NULL, CLI_STR, OPT(backend)},
    {"--lengths", NULL, CLI_STR, OPT(lengths)},
    {"--repeat", NULL, CLI_INT, OPT(repeat), .lo = 1, .hi = 100},
    {"--json", NULL, CLI_STR, OPT(json)},
    {0},
};

#define N_MODES 4 /* the baseline (both sets held), then sync, naive-async, progressive */
static const enum sd_switch_mode k_modes[N_MODES] = {SD_SWITCH_OFF, SD_SWITCH_SYNC, SD_SWITCH_NAIVE,
                                                     SD_SWITCH_PROGRESSIVE};
#define MAX_LENGTHS 8

/* One run's figures. */
struct result {
    double ttft_ms, prefill_ms, waited_ms, sync_prep_ms, loader_ms, plan_ms;
    size_t peak;
    const char *plan; /* the mode the plan followed */
    int32_t start_unit, n_units;
    bool same;        /* the decoded logits bit-identical to the baseline's */
};

struct cell {
    char backend[16];
    int32_t n;
    struct result r[N_MODES];
};

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The state a run starts from: G1 and the one-row head (and, for the
 * baseline, the decode set too), an empty cache, the peak reset. */
static int start_state(struct sd_rt *rt, enum sd_switch_mode mode, struct sd_err *e) {
    sd_rt_set_switch(rt, SD_SWITCH_OFF);
    sd_rt_release_graphs(rt);
    sd_rt_kv_truncate(rt, 0);
    int rc = sd_rt_prepare_set(rt, SD_SET_G1, e);
    if (!rc && mode == SD_SWITCH_OFF) rc = sd_rt_prepare_set(rt, SD_SET_G2, e);
    sd_rt_set_switch(rt, mode);
    sd_rt_reset_peak(rt);
    return rc;
}

/* Prefill toks[0..n), then one decoding step on G2: logits [n_vocab] of
 * that step. */
static int run_once(struct sd_rt *rt, const int32_t *toks, int32_t n, enum sd_switch_mode mode, int32_t nv,
                    float *last, float *logits, struct result *r, struct sd_err *e) {
    int rc = start_state(rt, mode, e);
    if (rc) return rc;
    struct sd_rt_counts c0 = sd_rt_counts(rt);
    double p0 = sd_rt_prepare_ms(rt), t0 = sd_time_ms();
    if ((rc = sd_rt_prefill(rt, toks, n, 0, NULL, NULL, NULL, last, e))) return rc;
    double t1 = sd_time_ms();
    struct sd_row row = {.token = argmax(last, nv), .pos = n, .slot = n, .n_prefix = n + 1};
    if ((rc = sd_rt_decode(rt, &row, 1, n, true, logits, NULL, e))) return rc;
    double t2 = sd_time_ms();
    struct sd_rt_counts c1 = sd_rt_counts(rt);
    const struct sd_switch_plan *plan = sd_rt_switch_plan(rt);
    memset(r, 0, sizeof *r);
    r->ttft_ms = t2 - t0;
    r->prefill_ms = t1 - t0;
    r->waited_ms = c1.switch_wait_ms - c0.switch_wait_ms;
    r->sync_prep_ms = sd_rt_prepare_ms(rt) - p0 - r->waited_ms;
    r->loader_ms = c1.loader_ms - c0.loader_ms;
    r->peak = sd_rt_peak_bytes(rt);
    r->plan = mode == SD_SWITCH_OFF ? "-" : sd_switch_mode_name(plan->mode);
    r->plan_ms = mode == SD_SWITCH_OFF ? 0 : plan->makespan_ms;
    r->start_unit = plan->start_unit;
    r->n_units = (n + sd_rt_n_prefill(rt) - 1) / sd_rt_n_prefill(rt) * sd_rt_n_blocks(rt);
    sd_rt_set_switch(rt, SD_SWITCH_OFF);
    return SDNPU_OK;
}

/* Every mode at one length, best TTFT of repeat runs each. */
static int measure(struct sd_rt *rt, const int32_t *toks, int32_t n, int32_t nv, long repeat, struct cell *cell,
                   float *buf, struct sd_err *e) {
    float *last = buf, *base = buf + nv, *lg = buf + 2 * (size_t)nv;
    for (int m = 0; m < N_MODES; m++) {
        cell->r[m].ttft_ms = 1e300;
        for (long k = 0; k < repeat; k++) {
            struct result r;
            int rc = run_once(rt, toks, n, k_modes[m], nv, last, m == 0 ? base : lg, &r, e);
            if (rc) return rc;
            r.same = m == 0 || !memcmp(base, lg, (size_t)nv * sizeof *lg);
            if (r.ttft_ms < cell->r[m].ttft_ms) cell->r[m] = r;
            if (!r.same) cell->r[m].same = false;
        }
    }
    return SDNPU_OK;
}

static double hidden(const struct cell *c, int m) {
    double sync = c->r[1].ttft_ms - c->r[0].ttft_ms, ovh = c->r[m].ttft_ms - c->r[0].ttft_ms;
    return sync > 0 ? 1.0 - ovh / sync : 0;
}

static void print_cells(const struct cell *cells, int n_cells, size_t set1, size_t set2, long repeat) {
    static const char *names[N_MODES] = {"both sets held", "sync", "naive-async", "progressive"};
    printf("graph switching: best of %ld; one graph set = G1 %.1f MiB (prefill blocks + one-row head), "
           "G2 %.1f MiB (decode blocks + L2-row head)\n\n",
           repeat, (double)set1 / 1048576.0, (double)set2 / 1048576.0);
    printf("| backend | prompt tokens | mode | plan | TTFT ms | prefill ms | switch overhead ms | hidden (of sync's) |"
           " waited for loader ms | prepared on session thread ms | loader ms | simulated ms | peak MiB | peak / G1 set |"
           " peak / G2 set | logits as baseline |\n");
    printf("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
    for (int i = 0; i < n_cells; i++)
        for (int m = 0; m < N_MODES; m++) {
            const struct result *r = &cells[i].r[m];
            char plan[48], hid[16] = "-";
            if (m == 3) snprintf(plan, sizeof plan, "%s from unit %d/%d", r->plan, r->start_unit, r->n_units);
            else snprintf(plan, sizeof plan, "%s", r->plan);
            if (m > 0) snprintf(hid, sizeof hid, "%.0f%%", 100.0 * hidden(&cells[i], m));
            printf("| %s | %d | %s | %s | %.1f | %.1f | %.1f | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %s |\n",
                   cells[i].backend, cells[i].n, names[m], plan, r->ttft_ms, r->prefill_ms,
                   r->ttft_ms - cells[i].r[0].ttft_ms, hid,
                   r->waited_ms, r->sync_prep_ms, r->loader_ms, r->plan_ms, (double)r->peak / 1048576.0,
                   (double)r->peak / (double)set1, (double)r->peak / (double)set2, r->same ? "bit-identical" : "DIFFERENT");
        }
}

static int write_json(const char *path, const struct cell *cells, int n_cells, size_t set1, size_t set2, long threads) {
    static const char *keys[N_MODES] = {"baseline", "sync", "naive-async", "progressive"};
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"threads\": %ld, \"g1_set_bytes\": %zu, \"g2_set_bytes\": %zu, \"runs\": [", threads, set1, set2);
    for (int i = 0; i < n_cells; i++)
        for (int m = 0; m < N_MODES; m++) {
            const struct result *r = &cells[i].r[m];
            fprintf(f,
                    "%s{\"backend\": \"%s\", \"tokens\": %d, \"mode\": \"%s\", \"plan\": \"%s\", \"start_unit\": %d, "
                    "\"ttft_ms\": %.3f, \"prefill_ms\": %.3f, \"overhead_ms\": %.3f, \"hidden\": %.4f, "
                    "\"waited_ms\": %.3f, \"sync_prepare_ms\": %.3f, \"loader_ms\": %.3f, \"simulated_ms\": %.3f, "
                    "\"peak_bytes\": %zu, \"identical\": %s}",
                    i || m ? ", " : "", cells[i].backend, cells[i].n, keys[m], r->plan, r->start_unit, r->ttft_ms,
                    r->prefill_ms, r->ttft_ms - cells[i].r[0].ttft_ms, m ? hidden(&cells[i], m) : 0.0, r->waited_ms,
                    r->sync_prep_ms, r->loader_ms, r->plan_ms, r->peak, r->same ? "true" : "false");
        }
    fprintf(f, "]}\n");
    return fclose(f);
}

/* One graph set's bytes: its blocks and its head, prepared alone. */
static size_t set_bytes(struct sd_rt *rt, enum sd_graph_set set, struct sd_err *e) {
    sd_rt_release_graphs(rt);
    size_t b = sd_rt_prepare_set(rt, set, e) ? 0 : sd_rt_prepared_bytes(rt);
    sd_rt_release_graphs(rt);
    return b;
}

/* Every length and mode on one backend; cells appended at *n_cells. */
static int bench_backend(struct sdnpu_model *model, const char *backend, const struct switch_opts *o,
                         const int32_t *lens, int n_lens, const int32_t *toks, struct cell *cells, int *n_cells,
                         size_t *set1, size_t *set2) {
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.n_ctx = 64;
    for (int i = 0; i < n_lens; i++) sp.n_ctx = SD_MAX(sp.n_ctx, lens[i] + 64);
    sp.backend = backend;
    sp.weights = "private"; /* graph switching moves real copies only where each graph owns its weights */
    struct sdnpu_session *s = NULL;
    if (sdnpu_session_create(model, sp, &s)) {
        fprintf(stderr, "sdnpu bench switch: %s\n", sdnpu_model_last_error(model));
        return -1;
    }
    struct sd_rt *rt = sd_tool_session_rt(s);
    const char *desc = sd_rt_backend_desc(rt);
    if (strncmp(desc, backend, strlen(backend))) {
        fprintf(stderr, "sdnpu bench switch: no %s device (%s); skipped\n", backend, desc);
        sdnpu_session_free(s);
        return 0;
    }
    int32_t nv = sdnpu_model_n_vocab(model);
    float *buf = malloc(3 * (size_t)nv * sizeof *buf);
    struct sd_err e = {0};
    int ret = -1;
    *set1 = set_bytes(rt, SD_SET_G1, &e);
    *set2 = set_bytes(rt, SD_SET_G2, &e);
    fprintf(stderr, "%s: warm-up (measures the times plans are made from)...\n", desc);
    struct cell warm = {0};
    if (!buf || measure(rt, toks, lens[0], nv, 1, &warm, buf, &e)) goto done;
    for (int i = 0; i < n_lens; i++) {
        struct cell *c = &cells[(*n_cells)++];
        snprintf(c->backend, sizeof c->backend, "%s", backend);
        c->n = lens[i];
        fprintf(stderr, "%s: %d tokens, every mode...\n", backend, lens[i]);
        if (measure(rt, toks, lens[i], nv, o->repeat, c, buf, &e)) goto done;
    }
    ret = 0;
done:
    if (ret && e.msg[0]) fprintf(stderr, "sdnpu bench switch: %s\n", e.msg);
    free(buf);
    sdnpu_session_free(s);
    return ret;
}

int cli_bench_switch(int argc, char **argv) {
    struct switch_opts o = {.threads = 2, .repeat = 3, .backend = "all", .lengths = "256,1024,4096"};
    const struct cli_parser parser = {"sdnpu bench switch", usage, {{k_flags, &o}}, .style = CLI_STYLE_BENCH};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    int32_t lens[MAX_LENGTHS];
    int n_lens = 0;
    bool all = !strcmp(o.backend, "all");
    if (cli_parse_int_list(o.lengths, "--lengths", 1, 32768, lens, MAX_LENGTHS, &n_lens) ||
        (!all && strcmp(o.backend, "cpu") && strcmp(o.backend, "opencl"))) {
        usage(stderr);
        return 2;
    }
    int32_t max_len = 0;
    for (int i = 0; i < n_lens; i++) max_len = SD_MAX(max_len, lens[i]);
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = (int32_t)o.threads;
    struct sdnpu_model *model = NULL;
    char err[512];
    if (sdnpu_model_load(cli_model(o.model_path), mp, &model, err, sizeof err)) {
        fprintf(stderr, "sdnpu bench switch: %s\n", err);
        return 1;
    }
    int ret = 1, n_cells = 0;
    struct cell cells[2 * MAX_LENGTHS];
    size_t set1 = 0, set2 = 0, s1, s2;
    int32_t *toks = cli_license_tokens(model, max_len);
    if (!toks) {
        fprintf(stderr, "sdnpu bench switch: cannot make a %d-token prompt from /usr/share/common-licenses\n", max_len);
        goto done;
    }
    const char *backends[2] = {"cpu", "opencl"};
    for (int b = 0; b < 2; b++) {
        if (!all && strcmp(o.backend, backends[b])) continue;
        int before = n_cells;
        if (bench_backend(model, backends[b], &o, lens, n_lens, toks, cells, &n_cells, &s1, &s2)) goto done;
        if (n_cells > before && !set1) set1 = s1, set2 = s2;
    }
    print_cells(cells, n_cells, set1, set2, o.repeat);
    if (o.json && write_json(o.json, cells, n_cells, set1, set2, o.threads)) {
        fprintf(stderr, "sdnpu bench switch: cannot write %s\n", o.json);
        goto done;
    }
    ret = 0;
done:
    free(toks);
    sdnpu_model_free(model);
    return ret;
}
