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
 * and the tables on stdout; progress with an ETA on stderr. This file runs
 * the samples; the records and results.json are cli/eval_results.c, the
 * tables, CSV files, chart and prompts.jsonl cli/eval_report.c.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "base/base.h"
#include "cli.h"
#include "dataset.h"
#include "engine/history.h"
#include "engine/tools.h"
#include "eval.h"
#include "sdnpu.h"

#define EVAL_DEFAULT_METHODS                                                                                      \
    "cpu-vanilla,npu-vanilla,pld,pld:fixed,pld+calib,sam,sam:fixed,sam-tree,sam-tree:fixed,sam+reuse,sam+reuse:fixed," \
    "sam+calib,sam-tree+calib,sam+calib+reuse,sdnpu"
/* A method named "X:fixed" runs X with cost-aware drafting off: every draft
 * is verified (the ablation); "X" alone is the engine's default. */
#define EVAL_FIXED_SUFFIX ":fixed"
static volatile sig_atomic_t g_interrupted;
static struct sdnpu_session *g_eval_session;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
    if (g_eval_session) sdnpu_session_cancel(g_eval_session);
}

/* Failures come back as statuses and are reported by the harness with the
 * sample they belong to, so the library's own error lines would only repeat
 * them; warnings (a damaged file, a fallback) still show. */
static void eval_log(enum sdnpu_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == SDNPU_LOG_WARN) fprintf(stderr, "sdnpu: warning: %s\n", msg);
}

/* ------------------------------------------------------------- one run */

struct collect {
    char *buf;
    size_t n, cap;
};

static bool collect_piece(const char *piece, size_t len, void *user) {
    struct collect *c = user;
    if (c->n + len + 1 > c->cap) {
        size_t nc = (c->n + len + 1) * 2;
        char *nb = realloc(c->buf, nc);
        if (!nb) return false;
        c->buf = nb;
        c->cap = nc;
    }
    memcpy(c->buf + c->n, piece, len);
    c->n += len;
    c->buf[c->n] = '\0';
    return true;
}

static uint64_t fnv1a(const int32_t *t, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)t[i];
        for (int b = 0; b < 4; b++) {
            h ^= (v >> (8 * b)) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

int eval_tokenize(struct sdnpu_model *model, const char *text, int32_t **tok, size_t *n) {
    size_t need = 0;
    *tok = NULL;
    int st = sdnpu_tokenize(model, text, strlen(text), 0, NULL, 0, &need);
    if (st != SDNPU_OK && st != SDNPU_ERR_BUFFER_TOO_SMALL) return st;
    if (!(*tok = malloc((need + 1) * sizeof **tok))) return SDNPU_ERR_OOM;
    return sdnpu_tokenize(model, text, strlen(text), 0, *tok, need + 1, n);
}

/* Write the sample's history list as a fresh history file (one record per
 * earlier output, tokenized as the model reads it). */
static int write_history(struct eval *ev, const char *path, const struct ds_sample *s, char *err, size_t err_size) {
    unlink(path);
    struct sd_history_params hp = sd_history_default_params();
    hp.fsync = false; /* a scratch file */
    hp.max_bytes = 0;
    struct sd_err e = {0};
    struct sd_history *h = NULL;
    if (sd_history_open(path, &hp, &h, &e)) {
        snprintf(err, err_size, "history file %.300s: %.250s", path, e.msg);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < s->n_history && !rc; i++) {
        const char *text = s->history[i];
        int32_t *tok = NULL;
        size_t n = 0;
        int st = eval_tokenize(ev->model, text, &tok, &n);
        if (st) {
            snprintf(err, err_size, "history item %zu: %s: %s", i + 1, sdnpu_status_str(st),
                     st == SDNPU_ERR_OOM ? "out of memory" : sdnpu_model_last_error(ev->model));
            rc = -1;
        } else if (sd_history_append(h, tok, n, text, strlen(text), &e)) {
            snprintf(err, err_size, "history item %zu: %s", i + 1, e.msg);
            rc = -1;
        }
        free(tok);
    }
    sd_history_close(h);
    return rc;
}

/* The tokens the session appended to the history file after n_before
 * records: the generated output, exactly as the model produced it. */
static void read_output_tokens(const char *path, size_t n_before, struct rec *r) {
    struct sd_history_params hp = sd_history_default_params();
    hp.fsync = false;
    hp.max_bytes = 0;
    struct sd_err e = {0};
    struct sd_history *h = NULL;
    r->have_tokens = false;
    r->n_out_tokens = 0;
    r->out_hash = 0;
    if (sd_history_open(path, &hp, &h, &e)) return;
    struct sd_history_record hr;
    r->have_tokens = true; /* an empty output appends no record */
    r->out_hash = fnv1a(NULL, 0);
    if (sd_history_n_records(h) > n_before && !sd_history_record(h, sd_history_n_records(h) - 1, &hr)) {
        r->n_out_tokens = hr.n_tok;
        r->out_hash = fnv1a(hr.tok, hr.n_tok);
    }
    sd_history_close(h);
}

int eval_sample_prompt(const struct eval *ev, const struct ds_sample *s, struct prompt *p) {
    memset(p, 0, sizeof *p);
    if (sdnpu_model_has_chat_template(ev->model))
        return cli_ds_build_chat(s, &p->system, &p->text, &p->len, p->stops, &p->n_stops);
    return cli_ds_build_prompt(s, &p->text, &p->len, p->stops, &p->n_stops);
}

/* Run one method on one sample. Returns the status of generate; fills r. */
static int run_one(struct eval *ev, const struct ds_set *set, const struct ds_sample *s, struct method *me,
                   const struct prompt *pr, bool remember, struct rec *r) {
    const char *method = me->name;
    char hist[4200], err[600];
    snprintf(hist, sizeof hist, "%s/tmp-history.sdh", ev->out_dir);
    r->dataset = eval_strdup(set->name);
    r->id = eval_strdup(s->id);
    r->task = eval_strdup(s->task);
    r->method = eval_strdup(method);
    r->status = REC_ERROR;
    int rc;
    for (;;) {
        sdnpu_session_reset(ev->session);
        bool use_history = !me->no_history;
        if (use_history && write_history(ev, hist, s, err, sizeof err)) {
            r->msg = eval_strdup(err);
            unlink(hist);
            return SDNPU_ERR_IO;
        }
        if (use_history && (rc = sdnpu_session_set_history(ev->session, hist)) != SDNPU_OK) {
            snprintf(err, sizeof err, "history: %s: %s", sdnpu_status_str(rc), sdnpu_session_last_error(ev->session));
            r->msg = eval_strdup(err);
            unlink(hist);
            return rc;
        }
        struct sdnpu_generate_params gp = sdnpu_generate_default_params();
        gp.n_predict = ev->n_predict;
        gp.sampling.temperature = 0.0f;
        gp.sampling.seed = ev->seed;
        gp.stop = pr->stops;
        gp.n_stop = pr->n_stops;
        gp.chat = pr->system != NULL;
        gp.system = pr->system;
        gp.spec = me->spec;
        gp.adaptive = !me->fixed;
        gp.stop_on_repeat = ev->guard;
        gp.forget = !remember;
        if (ev->draft_max > 0) gp.draft_max = ev->draft_max;
        struct collect c = {0};
        gp.on_text = collect_piece;
        gp.user = &c;
        struct sdnpu_stats st;
        memset(&st, 0, sizeof st);
        rc = sdnpu_session_generate(ev->session, pr->text, pr->len, &gp, &st);
        snprintf(err, sizeof err, "%s: %s", sdnpu_status_str(rc), sdnpu_session_last_error(ev->session));
        sdnpu_session_set_history(ev->session, NULL);
        if (rc == SDNPU_OK && use_history) read_output_tokens(hist, s->n_history, r);
        if (use_history) unlink(hist);
        /* A drafter that takes no history store (prompt lookup drafts from
         * the request alone, as in the paper) runs without the file; its
         * output is then checked by text and token count only. */
        if (use_history && rc == SDNPU_ERR_UNSUPPORTED && strcmp(method, "cpu-vanilla")) {
            free(c.buf);
            me->no_history = true;
            fprintf(stderr, "sdnpu eval: %s takes no history store (%s); it runs without one\n", method, err);
            continue;
        }
        if (rc == SDNPU_OK) {
            r->status = REC_OK;
            r->msg = eval_strdup("");
            r->n_prompt = st.n_prompt_tokens;
            r->n_generated = st.n_generated;
            r->prefill_ms = st.prefill_ms;
            r->decode_ms = st.decode_ms;
            r->verify_steps = st.n_verify_steps;
            r->acceptance = st.acceptance;
            r->drafted = st.n_drafted;
            r->accepted = st.n_accepted;
            r->draft_ms = st.draft_ms;
            r->verify_ms = st.verify_ms;
            r->graph_rows = st.n_graph_rows;
            r->pad_rows = st.n_pad_rows;
            r->stop_reason = st.stop_reason;
        } else {
            r->msg = eval_strdup(err);
        }
        r->output = c.buf ? c.buf : eval_strdup("");
        return rc;
    }
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

/* ------------------------------------------------------------ progress */

struct progress {
    size_t total, done, done_here;
    double t0;
    bool tty;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fmt_dur(char *b, size_t n, double s) {
    if (s < 0 || isnan(s)) snprintf(b, n, "?");
    else if (s < 60) snprintf(b, n, "%.0fs", s);
    else if (s < 3600) snprintf(b, n, "%.0fm%02.0fs", floor(s / 60), fmod(s, 60));
    else snprintf(b, n, "%.0fh%02.0fm", floor(s / 3600), fmod(s / 60, 60));
}

static void progress_show(struct progress *p, const char *what) {
    double el = now_s() - p->t0;
    double eta = p->done_here ? el / (double)p->done_here * (double)(p->total - p->done) : NAN;
    char e1[32], e2[32];
    fmt_dur(e1, sizeof e1, el);
    fmt_dur(e2, sizeof e2, eta);
    int width = 24, fill = p->total ? (int)((double)width * (double)p->done / (double)p->total) : width;
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    if (p->tty) {
        fprintf(stderr, "\r\033[K[%s] %zu/%zu %-40.40s elapsed %s ETA %s", bar, p->done, p->total, what, e1, e2);
    } else {
        fprintf(stderr, "[%s] %zu/%zu %s elapsed %s ETA %s\n", bar, p->done, p->total, what, e1, e2);
    }
    fflush(stderr);
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

/* Whether every method still in the running has a record for the sample
 * (from this run or the one being resumed). */
static bool sample_done(const struct eval *ev, const struct ds_set *set, const struct ds_sample *s) {
    for (size_t m = 0; m < ev->n_methods; m++) {
        if (ev->methods[m].unavailable) continue;
        if (!eval_rec_find(ev, set->name, s->id, ev->methods[m].name)) return false;
    }
    return true;
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
    ev.model_path = args.m.model;
    ev.n_threads = args.m.n_threads;
    const char *methods = args.methods, *dataset_dir = args.dataset_dir;
    size_t n_dataset_files = args.datasets.n;
    int resume = args.resume;
    ev.model_path = cli_model(ev.model_path);
    if (parse_methods(&ev, methods)) return 2;

    /* Datasets first: a malformed file fails before minutes of model work. */
    int code = 1;
    if (n_dataset_files && dataset_dir) {
        fprintf(stderr, "sdnpu eval: give --dataset files or one --datasets folder, not both\n");
        return 2;
    }
    if ((ev.draft_model || ev.draft_costs || ev.draft_window) && !ev.analyze) {
        fprintf(stderr, "sdnpu eval: --draft-model, --draft-costs and --draft-window go with --analyze\n");
        return 2;
    }
    if (ev.draft_window && !ev.draft_model) {
        fprintf(stderr, "sdnpu eval: --draft-window is the draft model's: give --draft-model too\n");
        return 2;
    }
    if (ev.draft_costs && !(ev.draft_model && ev.costs)) {
        fprintf(stderr, "sdnpu eval: --draft-costs prices the draft model's passes against --costs: give --draft-model and --costs too\n");
        return 2;
    }
    for (size_t i = 0; i < n_dataset_files; i++)
        if (add_dataset(&ev, dataset_files[i])) goto out;
    if (!n_dataset_files && add_dataset_dir(&ev, dataset_dir ? dataset_dir : default_dataset_dir())) goto out;

    if (mkdir(ev.out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "sdnpu eval: cannot make folder '%s': %s\n", ev.out_dir, strerror(errno));
        goto out;
    }
    if (ev.analyze) resume = 0; /* nothing of a methods run to resume */
    if (resume != 0 && eval_load_results(&ev)) goto out;
    if (ev.n_recs) fprintf(stderr, "sdnpu eval: resuming: %zu records from %s/results.json\n", ev.n_recs, ev.out_dir);

    sdnpu_log_set(eval_log, NULL);
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = ev.n_threads;
    mp.head = args.m.head;
    char err[512];
    int rc = sdnpu_model_load(ev.model_path, mp, &ev.model, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sdnpu eval: cannot load model: %s: %s\n", sdnpu_status_str(rc), err);
        cli_model_hint("sdnpu eval", args.m.model, ev.model_path);
        goto out;
    }
    if (eval_write_prompts(&ev)) goto out; /* after the load: the model's chat template shapes them */
    if (ev.n_verify) sp.n_verify = ev.n_verify;
    sp.kernels = ev.kernels;
    cli_weight_cache(&sp, ev.model_path);
    if ((rc = sdnpu_session_create(ev.model, sp, &ev.session))) {
        fprintf(stderr, "sdnpu eval: cannot make a session: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_model_last_error(ev.model));
        goto out;
    }
    ev.l2 = sd_rt_n_verify(sd_tool_session_rt(ev.session));
    if (!ev.n_verify)
        fprintf(stderr, "sdnpu eval: verification graph of %d rows (the saved profile's choice, else 4)\n",
                ev.l2);

    if (ev.analyze) {
        code = eval_analyze(&ev) ? 1 : 0;
        goto out;
    }

    struct progress pg = {0};
    pg.tty = isatty(STDERR_FILENO);
    pg.t0 = now_s();
    for (size_t d = 0; d < ev.n_sets; d++) pg.total += ev.sets[d].n;
    for (size_t d = 0; d < ev.n_sets; d++)
        for (size_t i = 0; i < ev.sets[d].n; i++)
            if (sample_done(&ev, &ev.sets[d], &ev.sets[d].samples[i])) pg.done++;

    g_eval_session = ev.session;
    g_interrupted = 0;
    signal(SIGINT, on_sigint);
    signal(SIGTERM, on_sigint);
    /* Sample i of every dataset before sample i + 1 of any, so a run cut
     * short still covers every dataset evenly. */
    size_t n_max = 0;
    for (size_t d = 0; d < ev.n_sets; d++) n_max = ev.sets[d].n > n_max ? ev.sets[d].n : n_max;
    for (size_t i = 0; i < n_max && !g_interrupted; i++) {
        for (size_t d = 0; d < ev.n_sets && !g_interrupted; d++) {
            struct ds_set *set = &ev.sets[d];
            if (i >= set->n) continue;
            const struct ds_sample *s = &set->samples[i];
            if (sample_done(&ev, set, s)) continue;
            struct prompt pr;
            if (eval_sample_prompt(&ev, s, &pr)) {
                fprintf(stderr, "sdnpu eval: out of memory\n");
                goto out;
            }
            size_t first_new = ev.n_recs;
            const struct rec *ref = eval_rec_find(&ev, set->name, s->id, "cpu-vanilla");
            bool aborted = false;
            /* The sample's reply joins the session's replies store once,
             * with its last method: no method drafts from its own answer. */
            size_t last = 0;
            for (size_t m = 0; m < ev.n_methods; m++)
                if (!ev.methods[m].unavailable && !eval_rec_find(&ev, set->name, s->id, ev.methods[m].name)) last = m;
            for (size_t m = 0; m < ev.n_methods && !aborted; m++) {
                struct method *me = &ev.methods[m];
                if (me->unavailable || eval_rec_find(&ev, set->name, s->id, me->name)) continue;
                char what[200];
                snprintf(what, sizeof what, "%.60s/%.60s %.60s", set->name, s->id, me->name);
                if (pg.tty) progress_show(&pg, what);
                struct rec *r = eval_rec_push(&ev);
                size_t ri = ev.n_recs - 1;
                rc = run_one(&ev, set, s, me, &pr, m == last, r);
                r = &ev.recs[ri];
                if (rc == SDNPU_ABORTED || g_interrupted) {
                    aborted = true;
                    break;
                }
                /* A method the engine does not know: say so once, drop its
                 * record, and leave it out from here on. The reference ran
                 * fine on this very prompt, so the method is what failed. */
                if ((rc == SDNPU_ERR_INVALID_ARG || rc == SDNPU_ERR_UNSUPPORTED) &&
                    strcmp(me->name, "cpu-vanilla") &&
                    (ref = eval_rec_find(&ev, set->name, s->id, "cpu-vanilla")) && ref->status == REC_OK) {
                    me->unavailable = true;
                    snprintf(me->why, sizeof me->why, "%s", r->msg);
                    if (pg.tty) fputc('\n', stderr);
                    fprintf(stderr, "sdnpu eval: %s: not available: %s\n", me->name, me->why);
                    eval_rec_free(r);
                    ev.n_recs--;
                    continue;
                }
                if (rc != SDNPU_OK) {
                    if (pg.tty) fputc('\n', stderr);
                    fprintf(stderr, "sdnpu eval: %s:%zu (%s) %s: %s\n", set->path, s->line, s->id, me->name, r->msg);
                }
                if (!strcmp(me->name, "cpu-vanilla") && rc != SDNPU_OK) {
                    /* Without a reference the other methods cannot be
                     * checked: record them as failed for this sample. */
                    for (size_t k = 0; k < ev.n_methods; k++) {
                        if (k == m || ev.methods[k].unavailable) continue;
                        struct rec *o = eval_rec_push(&ev);
                        r = &ev.recs[ri];
                        o->dataset = eval_strdup(set->name);
                        o->id = eval_strdup(s->id);
                        o->task = eval_strdup(s->task);
                        o->method = eval_strdup(ev.methods[k].name);
                        o->status = REC_ERROR;
                        o->msg = eval_strdup("not run: the cpu-vanilla reference failed on this sample");
                        o->output = eval_strdup("");
                    }
                    break;
                }
            }
            free(pr.text);
            if (aborted) {
                /* A sample is recorded whole or not at all. */
                while (ev.n_recs > first_new) eval_rec_free(&ev.recs[--ev.n_recs]);
                break;
            }
            /* Token-for-token check against the reference. */
            ref = eval_rec_find(&ev, set->name, s->id, "cpu-vanilla");
            for (size_t k = first_new; k < ev.n_recs; k++) {
                struct rec *r = &ev.recs[k];
                if (r->status != REC_OK || !ref || ref->status != REC_OK) continue;
                bool same_tokens = !r->have_tokens || !ref->have_tokens ||
                                   (r->n_out_tokens == ref->n_out_tokens && r->out_hash == ref->out_hash);
                r->lossless = same_tokens && r->n_generated == ref->n_generated && !strcmp(r->output, ref->output);
                if (!r->lossless) {
                    if (pg.tty) fputc('\n', stderr);
                    fprintf(stderr, "sdnpu eval: %s/%s: %s output differs from cpu-vanilla's\n", set->name, s->id,
                            r->method);
                }
            }
            pg.done++;
            pg.done_here++;
            char what[200];
            snprintf(what, sizeof what, "%.60s/%.60s", set->name, s->id);
            progress_show(&pg, what);
            if (eval_write_results(&ev)) goto out;
        }
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    g_eval_session = NULL;
    if (pg.tty) fputc('\n', stderr);
    if (eval_write_results(&ev)) goto out;
    if (g_interrupted) {
        fprintf(stderr, "sdnpu eval: interrupted; %zu of %zu samples done; run the same command again to resume\n",
                pg.done, pg.total);
        code = 130;
        goto out;
    }
    eval_print_tables(&ev);
    if (eval_write_csvs(&ev) || eval_write_svg(&ev)) goto out;
    fprintf(stderr, "sdnpu eval: wrote %s/results.json, samples.csv, summary.csv, chart.svg, prompts.jsonl\n", ev.out_dir);
    code = 0;
    for (size_t i = 0; i < ev.n_recs; i++)
        if (ev.recs[i].lossless == 0) code = 3; /* a lossy method is a failure of the engine */
out:
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    g_eval_session = NULL;
    eval_free(&ev);
    sdnpu_log_set(NULL, NULL);
    return code;
}
