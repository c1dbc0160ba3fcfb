/*
 * cli/eval.c - `sdnpu eval`: the acceptance-ratio evaluation harness.
 *
 *     sdnpu eval [-m MODEL] [--dataset FILE ...|--datasets DIR] [--methods LIST]
 *                [--limit N] [--seed S] [--out DIR] [--n-predict N] [-t N]
 *                [--strict] [--resume|--no-resume]
 *
 * Every sample of every dataset (JSONL, see datasets/README.md) is run with
 * every method, greedily, on one session that is reset in between. The
 * sample's history list becomes the session's history file (the drafting
 * store of earlier outputs), written fresh for each run so no method sees
 * another's output. cpu-vanilla runs first on each sample: it is the
 * reference that every other method's output must equal token for token.
 *
 * Methods the engine does not know yet are marked "not available: <the
 * engine's message>" and the run goes on. A sample whose prompt does not
 * fit, or that fails otherwise, is recorded as an error for that sample.
 *
 * Outputs under --out (default eval-out):
 *   results.json  every record, rewritten atomically (temp + rename) after
 *                 each sample; an interrupted run resumes from it
 *   samples.csv   one row per sample and method
 *   summary.csv   one row per dataset and method (the tables below)
 *   chart.svg     grouped bars: acceptance ratio per method per dataset
 *   prompts.jsonl each selected sample's prompt, stop strings and token
 *                 budget, for running a peer engine on the same prompts
 * and the tables on stdout; progress with an ETA on stderr. This file is
 * the command (flags, methods, datasets, the model); cli/eval_run.c runs
 * the samples; the records and results.json are cli/eval_results.c, the
 * tables, CSV files, chart and prompts.jsonl cli/eval_report.c.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "base/base.h"
#include "cli.h"
#include "dataset.h"
#include "engine/tools.h"
#include "eval.h"
#include "sdnpu.h"

#define EVAL_DEFAULT_METHODS                                                                                      \
    "cpu-vanilla,npu-vanilla,pld,pld:fixed,pld+calib,sam,sam:fixed,sam-tree,sam-tree:fixed,sam+reuse,sam+reuse:fixed," \
    "sam+calib,sam-tree+calib,sam+calib+reuse,sdnpu"
/* A method named "X:fixed" runs X with cost-aware drafting off: every draft
 * is verified (the ablation); "X" alone is the engine's default. */
#define EVAL_FIXED_SUFFIX ":fixed"
/* Failures come back as statuses and are reported by the harness with the
 * sample they belong to, so the library's own error lines would only repeat
 * them; warnings (a damaged file, a fallback) still show. */
static void eval_log(enum sdnpu_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == SDNPU_LOG_WARN) fprintf(stderr, "sdnpu: warning: %s\n", msg);
}

/* ----------------------------------------------------------- selection */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_line(const void *a, const void *b) {
    size_t x = ((const struct ds_sample *)a)->line, y = ((const struct ds_sample *)b)->line;
    return (x > y) - (x < y);
}

/* Keep --limit samples of a set: the first ones, or with a non-zero seed a
 * random subset (kept in file order). */
static void select_samples(struct ds_set *set, long limit, uint64_t seed) {
    if (limit <= 0 || (size_t)limit >= set->n) return;
    if (seed) {
        uint64_t st = seed;
        for (size_t i = set->n - 1; i > 0; i--) {
            size_t j = (size_t)(splitmix(&st) % (i + 1));
            struct ds_sample t = set->samples[i];
            set->samples[i] = set->samples[j];
            set->samples[j] = t;
        }
    }
    for (size_t i = (size_t)limit; i < set->n; i++) cli_ds_sample_free(&set->samples[i]);
    set->n = (size_t)limit;
    qsort(set->samples, set->n, sizeof *set->samples, cmp_line);
}

/* ---------------------------------------------------------------- main */

static void usage(FILE *f) {
    fprintf(f,
            "usage: sdnpu eval [options]\n\n"
            "Run evaluation datasets (JSONL, see datasets/README.md) with a list of speculative decoding\n"
            "methods and report acceptance ratio, ms per token, speedups, padding and losslessness.\n\n"
            "options:\n"
            "  -m, --model MODEL    a GGUF file or an installed model by name (default: $SDNPU_MODEL or models/default.gguf)\n"
            "      --dataset FILE   a dataset (repeatable)\n"
            "      --datasets DIR   every *.jsonl in DIR (default: datasets/ here or in the source tree)\n"
            "      --methods LIST   comma-separated (default: %s);\n"
            "                       cpu-vanilla always runs first: it is the reference output;\n"
            "                       METHOD:fixed runs METHOD with cost-aware drafting off (every draft verified)\n"
            "      --limit N        at most N samples per dataset (default: all)\n"
            "      --seed S         with --limit, pick a random subset with seed S (0: the first N); default 0\n"
            "      --out DIR        output folder (default: eval-out)\n"
            "  -n, --n-predict N    most tokens per answer (default 64)\n"
            "  -t, --threads N      threads (default: all cores)\n"
            "      --n-verify N     rows of the verification graph (default: the engine's)\n"
            "      --draft-max N    most draft tokens per verification (default: the engine's)\n"
            "      --kernels K      cpu summation order: fast (default) or ggml (llama.cpp's bits)\n"
            "      --policy-estimator, --calib-lead, --calib-min-match, --calib-params, --no-replies: as for run\n"
            "                       (ablations). The session keeps each sample's reply for the samples after\n"
            "                       it (its replies store), once: the methods of one sample do not see it\n"
            "      --guard          the degeneration guard on every method: stop where the output repeats itself\n"
            "                       (the tables show the share it stopped and the share holding a repeated sentence)\n"
            "      --analyze        where the drafts die: no methods run; one greedy generation per sample and\n"
            "                       a replay of every drafting variant over it (tokens per call with every\n"
            "                       draft verified, the stores' ceiling, which store each accepted token\n"
            "                       came from, how drafts end); tables and OUT/analysis.json\n"
            "      --costs PROFILE  with --analyze, also replay cost-aware drafting over graph options of\n"
            "                       1, 2, 3, 4, 8 and 16 rows priced by a saved profile (sdnpu profile --out):\n"
            "                       each option set's modelled decode ms per token against plain decoding,\n"
            "                       and the step-cost ratio at which 3 rows stop paying over 2, 4 over 3\n"
            "                       and 8 over 4 (the session's verification-row bounds)\n"
            "      --draft-model PATH  with --analyze, also replay a draft model's greedy drafts (alone, and\n"
            "                       where retrieval finds no match): a model sharing the vocabulary, read once\n"
            "                       along each output; --draft-costs PROFILE (its saved profile) prices its passes;\n"
            "                       --draft-window N: it reads only the prompt's last N tokens\n"
            "      --strict         fail on the first malformed dataset line (default: report and skip)\n"
            "      --resume         continue the run in DIR/results.json (the default when it exists)\n"
            "      --no-resume      start afresh, replacing DIR/results.json\n",
            EVAL_DEFAULT_METHODS);
}

/* The method's spec, from its name: a name that does not parse is a typo
 * (the run stops before it starts); one this engine cannot run yet (a
 * stage not built) is reported unavailable and left out. */
static int method_spec(struct method *m) {
    char base[64], err[256];
    size_t bl = strlen(m->name), fl = strlen(EVAL_FIXED_SUFFIX);
    snprintf(base, sizeof base, "%s", m->name);
    m->fixed = bl > fl && !strcmp(base + bl - fl, EVAL_FIXED_SUFFIX);
    if (m->fixed) base[bl - fl] = '\0';
    enum sdnpu_status rc = sdnpu_spec_parse(base, &m->spec, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sdnpu eval: method '%s': %s\n", m->name, err);
        return -1;
    }
    if ((rc = sdnpu_spec_check(m->spec, err, sizeof err))) {
        m->unavailable = true;
        snprintf(m->why, sizeof m->why, "%s: %s", sdnpu_status_str(rc), err);
        fprintf(stderr, "sdnpu eval: %s: not available: %s\n", m->name, m->why);
    }
    return 0;
}

static int add_method(struct eval *ev, const char *name, size_t len) {
    if (len == 0) return 0;
    if (len >= sizeof ev->methods[0].name) {
        fprintf(stderr, "sdnpu eval: method name too long: '%.*s'\n", (int)len, name);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '+' ||
              c == '_' || c == '.' || c == ':')) {
            fprintf(stderr, "sdnpu eval: bad character '%c' in method '%.*s'\n", c, (int)len, name);
            return -1;
        }
    }
    for (size_t i = 0; i < ev->n_methods; i++)
        if (strlen(ev->methods[i].name) == len && !memcmp(ev->methods[i].name, name, len)) return 0;
    if (ev->n_methods == EVAL_MAX_METHODS) {
        fprintf(stderr, "sdnpu eval: at most %d methods\n", EVAL_MAX_METHODS);
        return -1;
    }
    struct method *m = &ev->methods[ev->n_methods++];
    memset(m, 0, sizeof *m);
    memcpy(m->name, name, len);
    return method_spec(m);
}

static int parse_methods(struct eval *ev, const char *list) {
    /* cpu-vanilla first: every other output is checked against it. */
    if (add_method(ev, "cpu-vanilla", strlen("cpu-vanilla"))) return -1;
    const char *p = list;
    while (*p) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        while (n && *p == ' ') p++, n--;
        while (n && p[n - 1] == ' ') n--;
        if (!strncmp(p, "none", n) && n == 4) p = "cpu-vanilla", n = 11;
        if (add_method(ev, p, n)) return -1;
        if (!c) break;
        p = c + 1;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int add_dataset(struct eval *ev, const char *path) {
    if (ev->n_sets == EVAL_MAX_DATASETS) {
        fprintf(stderr, "sdnpu eval: at most %d datasets\n", EVAL_MAX_DATASETS);
        return -1;
    }
    struct ds_set *set = &ev->sets[ev->n_sets];
    if (cli_ds_load(path, ev->strict, stderr, set)) {
        if (ev->strict) fprintf(stderr, "sdnpu eval: %s: stopped at a malformed line (--strict)\n", path);
        return -1;
    }
    for (size_t i = 0; i < ev->n_sets; i++) {
        if (!strcmp(ev->sets[i].name, set->name)) {
            fprintf(stderr, "sdnpu eval: two datasets are named '%s' (%s and %s)\n", set->name, ev->sets[i].path,
                    path);
            cli_ds_set_free(set);
            return -1;
        }
    }
    if (set->n == 0) fprintf(stderr, "sdnpu eval: %s: no valid samples\n", path);
    select_samples(set, ev->limit, ev->seed);
    ev->n_sets++;
    return 0;
}

static int add_dataset_dir(struct eval *ev, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "sdnpu eval: cannot open folder '%s': %s\n", dir, strerror(errno));
        return -1;
    }
    char *names[256];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t l = strlen(e->d_name);
        if (l > 6 && !strcmp(e->d_name + l - 6, ".jsonl") && e->d_name[0] != '.')
            names[n++] = eval_strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int rc = 0;
    if (n == 0) {
        fprintf(stderr, "sdnpu eval: no *.jsonl files in '%s'\n", dir);
        rc = -1;
    }
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        int pl = snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (!rc && (pl < 0 || (size_t)pl >= sizeof path)) {
            fprintf(stderr, "sdnpu eval: path too long in '%s'\n", dir);
            rc = -1;
        }
        if (!rc) rc = add_dataset(ev, path);
        free(names[i]);
    }
    return rc;
}

static const char *default_dataset_dir(void) {
    if (access("datasets", R_OK) == 0) return "datasets";
#ifdef SDNPU_SOURCE_DIR
    static char path[4096];
    snprintf(path, sizeof path, "%s/datasets", SDNPU_SOURCE_DIR);
    return path;
#else
    return "datasets";
#endif
}

static void eval_free(struct eval *ev) {
    for (size_t i = 0; i < ev->n_recs; i++) eval_rec_free(&ev->recs[i]);
    free(ev->recs);
    for (size_t i = 0; i < ev->n_sets; i++) cli_ds_set_free(&ev->sets[i]);
    sdnpu_session_free(ev->session);
    sdnpu_model_free(ev->model);
}

/* The flags of eval that are not settings of struct eval. */
struct eval_args {
    struct cli_model_opts m;
    const char *methods, *dataset_dir;
    struct cli_list datasets;
    int resume; /* -1: when results.json exists */
};

#define EV(field) CLI_AT(struct eval, field)
static const struct cli_flag k_eval_flags[] = {
    {"--limit", NULL, CLI_INT, EV(limit), .lo = 1, .hi = 1L << 30},
    {"--seed", NULL, CLI_U64, EV(seed)},
    {"--out", NULL, CLI_STR, EV(out_dir)},
    {"-n", "--n-predict", CLI_INT, EV(n_predict), .lo = 1, .hi = 1 << 16},
    {"--n-verify", NULL, CLI_INT, EV(n_verify), .lo = 1, .hi = 256},
    {"--kernels", NULL, CLI_CHOICE, EV(kernels), .choices = (const char *const[]){"fast", "ggml", NULL}},
    {"--draft-max", NULL, CLI_INT, EV(draft_max), .lo = 1, .hi = 255},
    {"--strict", NULL, CLI_CONST, EV(strict), .lo = true},
    {"--guard", NULL, CLI_CONST, EV(guard), .lo = true},
    {"--analyze", NULL, CLI_CONST, EV(analyze), .lo = true},
    {"--costs", NULL, CLI_STR, EV(costs)},
    {"--draft-model", NULL, CLI_STR, EV(draft_model)},
    {"--draft-costs", NULL, CLI_STR, EV(draft_costs)},
    {"--draft-window", NULL, CLI_INT, EV(draft_window), .lo = 1, .hi = 1 << 24},
    {0},
};

#define ARG(field) CLI_AT(struct eval_args, field)
static const struct cli_flag k_eval_arg_flags[] = {
    {"--dataset", NULL, CLI_LIST, ARG(datasets)},
    {"--datasets", NULL, CLI_STR, ARG(dataset_dir)},
    {"--methods", NULL, CLI_STR, ARG(methods)},
    {"--resume", NULL, CLI_CONST, ARG(resume), .lo = 1},
    {"--no-resume", NULL, CLI_CONST, ARG(resume), .lo = 0},
    {0},
};

/* The flag combinations --analyze's options need; 2 (a usage error) or 0. */
static int check_flags(const struct eval *ev, size_t n_dataset_files, const char *dataset_dir) {
    const char *bad = NULL;
    if (n_dataset_files && dataset_dir)
        bad = "give --dataset files or one --datasets folder, not both";
    else if ((ev->draft_model || ev->draft_costs || ev->draft_window) && !ev->analyze)
        bad = "--draft-model, --draft-costs and --draft-window go with --analyze";
    else if (ev->draft_window && !ev->draft_model)
        bad = "--draft-window is the draft model's: give --draft-model too";
    else if (ev->draft_costs && !(ev->draft_model && ev->costs))
        bad = "--draft-costs prices the draft model's passes against --costs: give --draft-model and --costs "
              "too";
    if (bad) fprintf(stderr, "sdnpu eval: %s\n", bad);
    return bad ? 2 : 0;
}

/* The model, the prompts file (its chat template shapes them) and the
 * session every sample runs on; 0, or 1 having said why. */
static int open_session(struct eval *ev, const struct eval_args *args, struct sdnpu_session_params sp) {
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = ev->n_threads;
    mp.head = args->m.head;
    char err[512];
    int rc = sdnpu_model_load(ev->model_path, mp, &ev->model, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sdnpu eval: cannot load model: %s: %s\n", sdnpu_status_str(rc), err);
        cli_model_hint("sdnpu eval", args->m.model, ev->model_path);
        return 1;
    }
    if (eval_write_prompts(ev)) return 1;
    if (ev->n_verify) sp.n_verify = ev->n_verify;
    sp.kernels = ev->kernels;
    cli_weight_cache(&sp, ev->model_path);
    if ((rc = sdnpu_session_create(ev->model, sp, &ev->session))) {
        fprintf(stderr, "sdnpu eval: cannot make a session: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_model_last_error(ev->model));
        return 1;
    }
    ev->l2 = sd_rt_n_verify(sd_tool_session_rt(ev->session));
    if (!ev->n_verify)
        fprintf(stderr, "sdnpu eval: verification graph of %d rows (the saved profile's choice, else 4)\n",
                ev->l2);
    return 0;
}

int cli_eval(int argc, char **argv) {
    struct eval ev;
    memset(&ev, 0, sizeof ev);
    ev.out_dir = "eval-out";
    ev.kernels = "fast";
    ev.n_predict = 64;
    const char *dataset_files[EVAL_MAX_DATASETS];
    struct sdnpu_session_params sp = sdnpu_session_default_params(); /* the tuning flags set it */
    struct eval_args args = {.methods = EVAL_DEFAULT_METHODS,
                             .datasets = {dataset_files, 0, EVAL_MAX_DATASETS, "datasets"},
                             .resume = -1};
    const struct cli_parser parser = {
        "sdnpu eval",
        usage,
        {{cli_model_flags, &args.m}, {k_eval_flags, &ev}, {k_eval_arg_flags, &args}, {cli_tuning_flags, &sp}},
        .style = CLI_SEE_HELP,
        .value_name = "sdnpu eval"};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    ev.n_threads = args.m.n_threads;
    ev.model_path = cli_model(args.m.model);
    if (parse_methods(&ev, args.methods) || check_flags(&ev, args.datasets.n, args.dataset_dir)) return 2;

    /* Datasets first: a malformed file fails before minutes of model work. */
    int code = 1;
    for (size_t i = 0; i < args.datasets.n; i++)
        if (add_dataset(&ev, dataset_files[i])) goto out;
    if (!args.datasets.n && add_dataset_dir(&ev, args.dataset_dir ? args.dataset_dir : default_dataset_dir()))
        goto out;
    if (mkdir(ev.out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "sdnpu eval: cannot make folder '%s': %s\n", ev.out_dir, strerror(errno));
        goto out;
    }
    if (!ev.analyze && args.resume != 0 && eval_load_results(&ev)) goto out; /* --analyze resumes nothing */
    if (ev.n_recs)
        fprintf(stderr, "sdnpu eval: resuming: %zu records from %s/results.json\n", ev.n_recs, ev.out_dir);
    sdnpu_log_set(eval_log, NULL);
    if (!open_session(&ev, &args, sp)) code = ev.analyze ? (eval_analyze(&ev) ? 1 : 0) : eval_run(&ev);
out:
    eval_free(&ev);
    sdnpu_log_set(NULL, NULL);
    return code;
}
