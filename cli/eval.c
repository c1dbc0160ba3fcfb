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
 * and the tables on stdout; progress with an ETA on stderr.
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

#include <jansson.h>

#include "base/base.h"
#include "cli.h"
#include "dataset.h"
#include "engine/history.h"
#include "json.h"
#include "sdnpu.h"

#define EVAL_MAX_METHODS 24
#define EVAL_MAX_DATASETS 32
#define EVAL_DEFAULT_METHODS                                                                                      \
    "cpu-vanilla,npu-vanilla,pld,pld:fixed,pld+calib,sam,sam:fixed,sam-tree,sam-tree:fixed,sam+reuse,sam+reuse:fixed," \
    "sam+calib,sam-tree+calib,sam+calib+reuse,sdnpu"
/* A method named "X:fixed" runs X with cost-aware drafting off: every draft
 * is verified (the ablation); "X" alone is the engine's default. */
#define EVAL_FIXED_SUFFIX ":fixed"
/* A sample is "slower than cpu-vanilla" past this ratio of its ms/token:
 * below it, the difference is within what timing noise alone gives here. */
#define EVAL_SLOWER 1.03
/* ... on samples where both generated at least this many tokens: a reply
 * of one or two tokens is one step, its time mostly noise and set-up. */
#define EVAL_SLOWER_MIN_TOKENS 16

/* --------------------------------------------------------------- records */

enum rec_status { REC_OK = 0, REC_ERROR = 1 };

/* One run of one method on one sample. */
struct rec {
    char *dataset, *id, *task, *method;
    int status;
    char *msg; /* error text, "" when ok */
    int32_t n_prompt, n_generated, verify_steps, drafted, accepted;
    double prefill_ms, decode_ms, draft_ms, verify_ms, acceptance;
    int64_t graph_rows, pad_rows;
    bool have_tokens;  /* the generated token ids were read back (see read_output_tokens) */
    size_t n_out_tokens;
    uint64_t out_hash; /* FNV-1a of the generated token ids */
    int lossless;      /* 1 equal to cpu-vanilla, 0 different, -1 unknown */
    int stop_reason;   /* enum sdnpu_stop_reason; -1 unknown (a record from before it was kept) */
    char *output;
};

struct method {
    char name[64];
    struct sdnpu_spec spec; /* the name (without :fixed) parsed once, when the list is read */
    bool fixed;             /* METHOD:fixed: cost-aware drafting off */
    bool unavailable;
    bool no_history; /* the engine refused a history store for it: run without */
    char why[400];
};

struct eval {
    const char *model_path;
    const char *out_dir;
    const char *kernels; /* "fast" or "ggml" */
    int32_t n_predict, n_threads, n_verify, draft_max;
    long limit;
    uint64_t seed;
    bool strict;
    bool guard; /* the degeneration guard on every method (--guard) */
    struct method methods[EVAL_MAX_METHODS];
    size_t n_methods;
    struct ds_set sets[EVAL_MAX_DATASETS];
    size_t n_sets;
    struct rec *recs;
    size_t n_recs, cap_recs;
    struct sdnpu_model *model;
    struct sdnpu_session *session;
};

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

static char *xstrdup(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (!d) {
        fprintf(stderr, "sdnpu eval: out of memory\n");
        exit(1);
    }
    memcpy(d, s, n + 1);
    return d;
}

static void rec_free(struct rec *r) {
    free(r->dataset);
    free(r->id);
    free(r->task);
    free(r->method);
    free(r->msg);
    free(r->output);
}

static struct rec *rec_push(struct eval *ev) {
    if (ev->n_recs == ev->cap_recs) {
        size_t nc = ev->cap_recs ? ev->cap_recs * 2 : 256;
        struct rec *nr = realloc(ev->recs, nc * sizeof *nr);
        if (!nr) {
            fprintf(stderr, "sdnpu eval: out of memory\n");
            exit(1);
        }
        ev->recs = nr;
        ev->cap_recs = nc;
    }
    struct rec *r = &ev->recs[ev->n_recs++];
    memset(r, 0, sizeof *r);
    r->lossless = -1;
    r->stop_reason = -1;
    return r;
}

static const struct rec *rec_find(const struct eval *ev, const char *dataset, const char *id, const char *method) {
    for (size_t i = ev->n_recs; i-- > 0;) {
        const struct rec *r = &ev->recs[i];
        if (!strcmp(r->dataset, dataset) && !strcmp(r->id, id) && !strcmp(r->method, method)) return r;
    }
    return NULL;
}

/* ------------------------------------------------------------ results.json */

static int write_results(const struct eval *ev) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/results.json", ev->out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "sdnpu eval: cannot write '%s': %s\n", tmp, strerror(errno));
        return -1;
    }
    fprintf(f, "{\n\"format\": \"sdnpu-eval-1\",\n\"model\": ");
    cli_json_write_cstr(f, ev->model_path);
    fprintf(f, ",\n\"kernels\": ");
    cli_json_write_cstr(f, ev->kernels);
    fprintf(f, ",\n\"guard\": %s", ev->guard ? "true" : "false");
    fprintf(f, ",\n\"n_predict\": %d,\n\"n_verify\": %d,\n\"draft_max\": %d,\n\"limit\": %ld,\n\"seed\": %llu,\n\"methods\": [",
            ev->n_predict, ev->n_verify, ev->draft_max, ev->limit, (unsigned long long)ev->seed);
    for (size_t i = 0; i < ev->n_methods; i++) {
        if (i) fputs(", ", f);
        cli_json_write_cstr(f, ev->methods[i].name);
    }
    fputs("],\n\"unavailable\": {", f);
    bool first = true;
    for (size_t i = 0; i < ev->n_methods; i++) {
        if (!ev->methods[i].unavailable) continue;
        fputs(first ? "" : ", ", f);
        first = false;
        cli_json_write_cstr(f, ev->methods[i].name);
        fputs(": ", f);
        cli_json_write_cstr(f, ev->methods[i].why);
    }
    fputs("},\n\"records\": [\n", f);
    for (size_t i = 0; i < ev->n_recs; i++) {
        const struct rec *r = &ev->recs[i];
        fputs("{\"dataset\": ", f);
        cli_json_write_cstr(f, r->dataset);
        fputs(", \"id\": ", f);
        cli_json_write_cstr(f, r->id);
        fputs(", \"task\": ", f);
        cli_json_write_cstr(f, r->task);
        fputs(", \"method\": ", f);
        cli_json_write_cstr(f, r->method);
        fprintf(f, ", \"status\": \"%s\", \"message\": ", r->status == REC_OK ? "ok" : "error");
        cli_json_write_cstr(f, r->msg);
        fprintf(f,
                ", \"prompt_tokens\": %d, \"generated\": %d, \"prefill_ms\": %.3f, \"decode_ms\": %.3f, "
                "\"verify_steps\": %d, \"acceptance\": %.4f, \"drafted\": %d, \"accepted\": %d, \"draft_ms\": %.3f, "
                "\"verify_ms\": %.3f, \"graph_rows\": %lld, \"pad_rows\": %lld, \"stop_reason\": %d, "
                "\"out_tokens\": %zu, \"out_hash\": ",
                r->n_prompt, r->n_generated, r->prefill_ms, r->decode_ms, r->verify_steps, r->acceptance, r->drafted,
                r->accepted, r->draft_ms, r->verify_ms, (long long)r->graph_rows, (long long)r->pad_rows,
                r->stop_reason, r->n_out_tokens);
        if (r->have_tokens) fprintf(f, "\"%016llx\"", (unsigned long long)r->out_hash);
        else fputs("null", f);
        fprintf(f, ", \"lossless\": %s, \"output\": ", r->lossless < 0 ? "null" : r->lossless ? "true" : "false");
        cli_json_write_cstr(f, r->output);
        fprintf(f, "}%s\n", i + 1 < ev->n_recs ? "," : "");
    }
    fputs("]\n}\n", f);
    int bad = ferror(f);
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        fprintf(stderr, "sdnpu eval: cannot write '%s': %s\n", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* A member's number, 0 when it is missing or no number. */
static double num_of(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

/* A member's string, NULL when it is missing or no string. */
static const char *str_of(const json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

/* The file as eval_write_results writes it: duplicate keys refused, every
 * number a double (as the old reader held them). */
#define EVAL_JSON_FLAGS (JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL)

/* Load an earlier run's records. Returns 0 (records loaded, or no file),
 * -1 when the file is unreadable or was made with other settings. */
static int load_results(struct eval *ev) {
    char path[4096];
    snprintf(path, sizeof path, "%s/results.json", ev->out_dir);
    if (access(path, F_OK) != 0) return 0;
    size_t len;
    char *text = cli_read_file(path, &len);
    if (!text) return -1;
    json_error_t je;
    int rc = -1;
    json_t *v = json_loadb(text, len, EVAL_JSON_FLAGS, &je);
    free(text);
    if (!v) {
        fprintf(stderr,
                "sdnpu eval: %s:%d: column %d: %s; move it away or use another --out to start afresh\n", path,
                je.line, je.column, je.text);
        return -1;
    }
    const char *model = str_of(v, "model"), *format = str_of(v, "format");
    const json_t *recs = json_object_get(v, "records");
    if (!format || strcmp(format, "sdnpu-eval-1") || !json_is_array(recs)) {
        fprintf(stderr, "sdnpu eval: %s is not an sdnpu eval result file; use another --out\n", path);
        goto done;
    }
    char diff[512] = "";
    if (!model || strcmp(model, ev->model_path))
        snprintf(diff, sizeof diff, "model %.200s there, %.200s here", model ? model : "?", ev->model_path);
    else if ((int32_t)num_of(v, "n_predict") != ev->n_predict)
        snprintf(diff, sizeof diff, "n_predict %.0f there, %d here", num_of(v, "n_predict"), ev->n_predict);
    else if ((int32_t)num_of(v, "n_verify") != ev->n_verify)
        snprintf(diff, sizeof diff, "n_verify %.0f there, %d here", num_of(v, "n_verify"), ev->n_verify);
    else if (strcmp(str_of(v, "kernels") ? str_of(v, "kernels") : "fast", ev->kernels))
        snprintf(diff, sizeof diff, "kernels %.20s there, %s here",
                 str_of(v, "kernels") ? str_of(v, "kernels") : "fast", ev->kernels);
    else if ((int32_t)num_of(v, "draft_max") != ev->draft_max)
        snprintf(diff, sizeof diff, "draft_max %.0f there, %d here", num_of(v, "draft_max"), ev->draft_max);
    else if (json_is_true(json_object_get(v, "guard")) != ev->guard)
        snprintf(diff, sizeof diff, "guard %s there, %s here", ev->guard ? "off" : "on",
                 ev->guard ? "on" : "off");
    if (diff[0]) {
        fprintf(stderr,
                "sdnpu eval: %s was made with other settings (%s); use the same settings to resume, or "
                "--no-resume to start afresh\n",
                path, diff);
        goto done;
    }
    /* Methods the engine refused last time are left out again (start
     * afresh with --no-resume after an engine update). */
    const char *name;
    json_t *why;
    json_object_foreach(json_object_get(v, "unavailable"), name, why) {
        for (size_t m = 0; m < ev->n_methods; m++) {
            if (strcmp(ev->methods[m].name, name) || !json_is_string(why)) continue;
            ev->methods[m].unavailable = true;
            snprintf(ev->methods[m].why, sizeof ev->methods[m].why, "%s", json_string_value(why));
        }
    }
    for (size_t i = 0; i < json_array_size(recs); i++) {
        const json_t *o = json_array_get(recs, i);
        const char *ds = str_of(o, "dataset"), *id = str_of(o, "id"), *task = str_of(o, "task"),
                   *method = str_of(o, "method"), *status = str_of(o, "status"),
                   *hash = str_of(o, "out_hash");
        if (!ds || !id || !task || !method || !status) {
            fprintf(stderr, "sdnpu eval: %s: record %zu lacks dataset, id, task, method or status; skipped\n",
                    path, i + 1);
            continue;
        }
        struct rec *r = rec_push(ev);
        r->dataset = xstrdup(ds);
        r->id = xstrdup(id);
        r->task = xstrdup(task);
        r->method = xstrdup(method);
        r->status = strcmp(status, "ok") ? REC_ERROR : REC_OK;
        r->msg = xstrdup(str_of(o, "message") ? str_of(o, "message") : "");
        r->output = xstrdup(str_of(o, "output") ? str_of(o, "output") : "");
        r->n_prompt = (int32_t)num_of(o, "prompt_tokens");
        r->n_generated = (int32_t)num_of(o, "generated");
        r->prefill_ms = num_of(o, "prefill_ms");
        r->decode_ms = num_of(o, "decode_ms");
        r->verify_steps = (int32_t)num_of(o, "verify_steps");
        r->acceptance = num_of(o, "acceptance");
        r->drafted = (int32_t)num_of(o, "drafted");
        r->accepted = (int32_t)num_of(o, "accepted");
        r->draft_ms = num_of(o, "draft_ms");
        r->verify_ms = num_of(o, "verify_ms");
        r->graph_rows = (int64_t)num_of(o, "graph_rows");
        r->pad_rows = (int64_t)num_of(o, "pad_rows");
        r->stop_reason = json_object_get(o, "stop_reason") ? (int)num_of(o, "stop_reason") : -1;
        r->n_out_tokens = (size_t)num_of(o, "out_tokens");
        r->have_tokens = hash != NULL;
        r->out_hash = hash ? strtoull(hash, NULL, 16) : 0;
        const json_t *l = json_object_get(o, "lossless");
        r->lossless = json_is_boolean(l) ? json_is_true(l) : -1;
    }
    rc = 0;
done:
    json_decref(v);
    return rc;
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
    sdnpu_token *tok = NULL;
    for (size_t i = 0; i < s->n_history && !rc; i++) {
        const char *text = s->history[i];
        size_t len = strlen(text), n = 0;
        int st = sdnpu_tokenize(ev->model, text, len, 0, NULL, 0, &n);
        if (st != SDNPU_OK && st != SDNPU_ERR_BUFFER_TOO_SMALL) {
            snprintf(err, err_size, "history item %zu: %s: %s", i + 1, sdnpu_status_str(st),
                     sdnpu_model_last_error(ev->model));
            rc = -1;
            break;
        }
        sdnpu_token *nt = realloc(tok, (n + 1) * sizeof *tok);
        if (!nt) {
            snprintf(err, err_size, "out of memory");
            rc = -1;
            break;
        }
        tok = nt;
        if ((st = sdnpu_tokenize(ev->model, text, len, 0, tok, n + 1, &n)) ||
            sd_history_append(h, tok, n, text, len, &e)) {
            snprintf(err, err_size, "history item %zu: %s", i + 1, st ? sdnpu_model_last_error(ev->model) : e.msg);
            rc = -1;
        }
    }
    free(tok);
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

/* A sample's prompt as the methods get it: for a model with a chat template
 * a system turn and a user turn (ds_build_chat; the engine renders them),
 * for a base model the text it continues (ds_build_prompt). */
struct prompt {
    char *text; /* the user turn, or the whole base-model prompt */
    size_t len;
    const char *system; /* the system turn (chat), else NULL */
    const char *stops[DS_MAX_STOPS];
    size_t n_stops;
};

static int sample_prompt(const struct eval *ev, const struct ds_sample *s, struct prompt *p) {
    memset(p, 0, sizeof *p);
    if (sdnpu_model_has_chat_template(ev->model))
        return ds_build_chat(s, &p->system, &p->text, &p->len, p->stops, &p->n_stops);
    return ds_build_prompt(s, &p->text, &p->len, p->stops, &p->n_stops);
}

/* Run one method on one sample. Returns the status of generate; fills r. */
static int run_one(struct eval *ev, const struct ds_set *set, const struct ds_sample *s, struct method *me,
                   const struct prompt *pr, struct rec *r) {
    const char *method = me->name;
    char hist[4200], err[600];
    snprintf(hist, sizeof hist, "%s/tmp-history.sdh", ev->out_dir);
    r->dataset = xstrdup(set->name);
    r->id = xstrdup(s->id);
    r->task = xstrdup(s->task);
    r->method = xstrdup(method);
    r->status = REC_ERROR;
    int rc;
    for (;;) {
        sdnpu_session_reset(ev->session);
        bool use_history = !me->no_history;
        if (use_history && write_history(ev, hist, s, err, sizeof err)) {
            r->msg = xstrdup(err);
            unlink(hist);
            return SDNPU_ERR_IO;
        }
        if (use_history && (rc = sdnpu_session_set_history(ev->session, hist)) != SDNPU_OK) {
            snprintf(err, sizeof err, "history: %s: %s", sdnpu_status_str(rc), sdnpu_session_last_error(ev->session));
            r->msg = xstrdup(err);
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
            r->msg = xstrdup("");
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
            r->msg = xstrdup(err);
        }
        r->output = c.buf ? c.buf : xstrdup("");
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
    for (size_t i = (size_t)limit; i < set->n; i++) ds_sample_free(&set->samples[i]);
    set->n = (size_t)limit;
    qsort(set->samples, set->n, sizeof *set->samples, cmp_line);
}

/* ------------------------------------------------------------- reports */

struct agg {
    size_t n_ok, n_err, n_lossy, n_known;
    double decode_ms, prefill_ms;
    int64_t generated, verify_steps, accepted, graph_rows, pad_rows;
    size_t n_slower, n_compared; /* samples slower than cpu-vanilla's by EVAL_SLOWER, of those both ran */
    size_t n_guard_stops;        /* outputs the degeneration guard stopped */
    size_t n_repeating;          /* outputs that hold a sentence twice */
};

static bool selected(const struct eval *ev, const char *dataset, const char *id) {
    for (size_t d = 0; d < ev->n_sets; d++) {
        if (strcmp(ev->sets[d].name, dataset)) continue;
        for (size_t i = 0; i < ev->sets[d].n; i++)
            if (!strcmp(ev->sets[d].samples[i].id, id)) return true;
    }
    return false;
}

/* Whether text holds one sentence twice: sentences end at a newline or
 * at '.', '!' or '?' before whitespace, are compared with whitespace
 * collapsed, and count from 12 characters (the degeneration guard's rule,
 * written again here on the text so the report does not trust the engine). */
static bool repeats_a_sentence(const char *text) {
    enum { MAX_SENT = 256, MIN_LEN = 12 };
    static char norm[1 << 16];
    size_t start[MAX_SENT], len[MAX_SENT], n_sent = 0, n = 0, cur = 0;
    for (const char *p = text;; p++) {
        bool space = *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r';
        bool end = !*p || *p == '\n' || (space && p > text && strchr(".!?", p[-1]));
        if (end) {
            while (n > cur && norm[n - 1] == ' ') n--;
            if (n - cur >= MIN_LEN) {
                for (size_t k = 0; k < n_sent; k++)
                    if (len[k] == n - cur && !memcmp(norm + start[k], norm + cur, n - cur)) return true;
                if (n_sent < MAX_SENT) start[n_sent] = cur, len[n_sent++] = n - cur;
            }
            /* A kept sentence stays in norm; a short one is dropped. */
            if (n - cur < MIN_LEN) n = cur;
            cur = n;
            if (!*p || n + 2 >= sizeof norm) return false;
            continue;
        }
        if (space) {
            if (n > cur && norm[n - 1] != ' ') norm[n++] = ' ';
        } else {
            norm[n++] = *p;
        }
    }
}

/* Totals over the samples this run selected (a resumed file may hold more:
 * records are kept per sample, so --limit and --seed may change between
 * runs into one folder). */
static struct agg aggregate(const struct eval *ev, const char *dataset, const char *method) {
    struct agg a;
    memset(&a, 0, sizeof a);
    for (size_t i = 0; i < ev->n_recs; i++) {
        const struct rec *r = &ev->recs[i];
        if (strcmp(r->dataset, dataset) || strcmp(r->method, method) || !selected(ev, dataset, r->id)) continue;
        if (r->status != REC_OK) {
            a.n_err++;
            continue;
        }
        a.n_ok++;
        a.decode_ms += r->decode_ms;
        a.prefill_ms += r->prefill_ms;
        a.generated += r->n_generated;
        a.verify_steps += r->verify_steps;
        a.accepted += r->accepted;
        a.graph_rows += r->graph_rows;
        a.pad_rows += r->pad_rows;
        if (r->lossless >= 0) a.n_known++;
        if (r->lossless == 0) a.n_lossy++;
        a.n_guard_stops += r->stop_reason == SDNPU_STOP_REPETITION;
        a.n_repeating += repeats_a_sentence(r->output);
        const struct rec *cpu = rec_find(ev, dataset, r->id, "cpu-vanilla");
        if (cpu && cpu->status == REC_OK && cpu->n_generated >= EVAL_SLOWER_MIN_TOKENS &&
            r->n_generated >= EVAL_SLOWER_MIN_TOKENS) {
            a.n_compared++;
            a.n_slower += r->decode_ms / r->n_generated > EVAL_SLOWER * cpu->decode_ms / cpu->n_generated;
        }
    }
    return a;
}

/* Tokens produced per verification, pooled over the samples. */
static double agg_acceptance(const struct agg *a) {
    return a->verify_steps ? (double)(a->verify_steps + a->accepted) / (double)a->verify_steps : NAN;
}
static double agg_ms_per_token(const struct agg *a) {
    return a->generated ? a->decode_ms / (double)a->generated : NAN;
}
static double agg_padding(const struct agg *a) {
    return a->graph_rows ? (double)a->pad_rows / (double)a->graph_rows : NAN;
}

static void fmt_num(char *buf, size_t n, const char *fmt, double v) {
    if (isnan(v) || isinf(v)) snprintf(buf, n, "-");
    else snprintf(buf, n, fmt, v);
}

static const char *lossless_word(const struct agg *a, char *buf, size_t n) {
    if (a->n_ok == 0) return "-";
    if (a->n_lossy) {
        snprintf(buf, n, "NO (%zu/%zu differ)", a->n_lossy, a->n_ok);
        return buf;
    }
    return "yes";
}

/* "k/n": of n samples both ran with EVAL_SLOWER_MIN_TOKENS or more, k were
 * slower than cpu-vanilla by more than EVAL_SLOWER ("-" when none compare). */
static void slower_word(const struct agg *a, char *buf, size_t n) {
    if (a->n_compared == 0) snprintf(buf, n, "-");
    else snprintf(buf, n, "%zu/%zu", a->n_slower, a->n_compared);
}

static void print_tables(const struct eval *ev) {
    for (size_t d = 0; d < ev->n_sets; d++) {
        const struct ds_set *set = &ev->sets[d];
        struct agg cpu = aggregate(ev, set->name, "cpu-vanilla"), npu = aggregate(ev, set->name, "npu-vanilla");
        double cpu_ms = agg_ms_per_token(&cpu), npu_ms = agg_ms_per_token(&npu);
        printf("\n%s: %zu samples", set->name, set->n);
        if (set->n_bad) printf(", %zu malformed line%s skipped", set->n_bad, set->n_bad == 1 ? "" : "s");
        printf(" (%s)\n", set->path);
        printf("%-18s %7s %8s %8s %8s %8s %8s %7s %6s %7s  %s\n", "method", "accept", "ms/tok", "vs cpu", "vs npu",
               "verify", "padding", "slower", "guard", "repeats", "lossless");
        for (size_t m = 0; m < ev->n_methods; m++) {
            const struct method *me = &ev->methods[m];
            struct agg a = aggregate(ev, set->name, me->name);
            if (a.n_ok == 0 && me->unavailable) {
                printf("%-18s not available: %s\n", me->name, me->why);
                continue;
            }
            char acc[32], ms[32], vc[32], vn[32], ver[32], pad[32], lw[64], slow[32], gs[32], rp[32];
            double mt = agg_ms_per_token(&a);
            fmt_num(acc, sizeof acc, "%.2f", agg_acceptance(&a));
            fmt_num(ms, sizeof ms, "%.2f", mt);
            fmt_num(vc, sizeof vc, "%.2fx", cpu_ms / mt);
            fmt_num(vn, sizeof vn, "%.2fx", npu_ms / mt);
            fmt_num(ver, sizeof ver, "%.1f", a.n_ok ? (double)a.verify_steps / (double)a.n_ok : NAN);
            fmt_num(pad, sizeof pad, "%.1f%%", 100.0 * agg_padding(&a));
            slower_word(&a, slow, sizeof slow);
            fmt_num(gs, sizeof gs, "%.0f%%", a.n_ok ? 100.0 * (double)a.n_guard_stops / (double)a.n_ok : NAN);
            fmt_num(rp, sizeof rp, "%.0f%%", a.n_ok ? 100.0 * (double)a.n_repeating / (double)a.n_ok : NAN);
            printf("%-18s %7s %8s %8s %8s %8s %8s %7s %6s %7s  %s", me->name, acc, ms, vc, vn, ver, pad, slow, gs, rp,
                   lossless_word(&a, lw, sizeof lw));
            if (a.n_err) printf("  (%zu sample%s failed)", a.n_err, a.n_err == 1 ? "" : "s");
            printf("\n");
        }
    }
    /* The paper's ablation layout: datasets down, methods across. */
    const char *titles[3] = {"Acceptance ratio (tokens per verification; paper Table 4 layout)",
                             "Decode latency, ms per output token (paper Table 3 layout)",
                             "Speed-up over cpu-vanilla (its ms/token over the method's; below 1: slower)"};
    for (int t = 0; t < 3; t++) {
        printf("\n%s\n%-10s", titles[t], "dataset");
        for (size_t m = 0; m < ev->n_methods; m++)
            if (!ev->methods[m].unavailable) printf(" %12s", ev->methods[m].name);
        printf("\n");
        for (size_t d = 0; d < ev->n_sets; d++) {
            printf("%-10s", ev->sets[d].name);
            struct agg cpu = aggregate(ev, ev->sets[d].name, "cpu-vanilla");
            for (size_t m = 0; m < ev->n_methods; m++) {
                if (ev->methods[m].unavailable) continue;
                struct agg a = aggregate(ev, ev->sets[d].name, ev->methods[m].name);
                char b[32];
                double v = t == 0   ? agg_acceptance(&a)
                           : t == 1 ? agg_ms_per_token(&a)
                                    : agg_ms_per_token(&cpu) / agg_ms_per_token(&a);
                fmt_num(b, sizeof b, "%.2f", v);
                printf(" %12s", b);
            }
            printf("\n");
        }
    }
    bool any_unavailable = false;
    for (size_t m = 0; m < ev->n_methods; m++) any_unavailable |= ev->methods[m].unavailable;
    if (any_unavailable) {
        printf("\nnot available in this engine:\n");
        for (size_t m = 0; m < ev->n_methods; m++)
            if (ev->methods[m].unavailable) printf("  %s: %s\n", ev->methods[m].name, ev->methods[m].why);
    }
    fflush(stdout);
}

static void csv_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static FILE *open_out(const struct eval *ev, const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/%s", ev->out_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "sdnpu eval: cannot write '%s': %s\n", path, strerror(errno));
    return f;
}

static int close_out(FILE *f, const char *path) {
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad) fprintf(stderr, "sdnpu eval: cannot write '%s'\n", path);
    return bad ? -1 : 0;
}

static int write_csvs(const struct eval *ev) {
    char path[4200];
    FILE *f = open_out(ev, "samples.csv", path, sizeof path);
    if (!f) return -1;
    fprintf(f, "dataset,id,task,method,status,prompt_tokens,generated,prefill_ms,decode_ms,ms_per_token,"
               "verify_steps,acceptance,drafted,accepted,draft_ms,verify_ms,graph_rows,pad_rows,lossless,message\n");
    for (size_t i = 0; i < ev->n_recs; i++) {
        const struct rec *r = &ev->recs[i];
        csv_str(f, r->dataset);
        fputc(',', f);
        csv_str(f, r->id);
        fputc(',', f);
        csv_str(f, r->task);
        fputc(',', f);
        csv_str(f, r->method);
        fprintf(f, ",%s,%d,%d,%.3f,%.3f,%.3f,%d,%.4f,%d,%d,%.3f,%.3f,%lld,%lld,%s,", r->status ? "error" : "ok",
                r->n_prompt, r->n_generated, r->prefill_ms, r->decode_ms,
                r->n_generated ? r->decode_ms / r->n_generated : 0.0, r->verify_steps, r->acceptance, r->drafted,
                r->accepted, r->draft_ms, r->verify_ms, (long long)r->graph_rows, (long long)r->pad_rows,
                r->lossless < 0 ? "" : r->lossless ? "yes" : "no");
        csv_str(f, r->msg);
        fputc('\n', f);
    }
    if (close_out(f, path)) return -1;

    if (!(f = open_out(ev, "summary.csv", path, sizeof path))) return -1;
    fprintf(f, "dataset,method,status,samples,failed,acceptance,ms_per_token,speedup_vs_cpu_vanilla,"
               "speedup_vs_npu_vanilla,verify_steps_per_sample,padding_share,samples_slower_than_cpu_vanilla,guard_stopped_share,repeating_share,lossless,message\n");
    for (size_t d = 0; d < ev->n_sets; d++) {
        const char *ds = ev->sets[d].name;
        struct agg cpu = aggregate(ev, ds, "cpu-vanilla"), npu = aggregate(ev, ds, "npu-vanilla");
        for (size_t m = 0; m < ev->n_methods; m++) {
            const struct method *me = &ev->methods[m];
            struct agg a = aggregate(ev, ds, me->name);
            csv_str(f, ds);
            fputc(',', f);
            csv_str(f, me->name);
            if (a.n_ok == 0 && me->unavailable) {
                fprintf(f, ",unavailable,0,0,,,,,,,,,,,");
                csv_str(f, me->why);
                fputc('\n', f);
                continue;
            }
            char b[6][32];
            double mt = agg_ms_per_token(&a);
            fmt_num(b[0], 32, "%.4f", agg_acceptance(&a));
            fmt_num(b[1], 32, "%.4f", mt);
            fmt_num(b[2], 32, "%.4f", agg_ms_per_token(&cpu) / mt);
            fmt_num(b[3], 32, "%.4f", agg_ms_per_token(&npu) / mt);
            fmt_num(b[4], 32, "%.2f", a.n_ok ? (double)a.verify_steps / (double)a.n_ok : NAN);
            fmt_num(b[5], 32, "%.4f", agg_padding(&a));
            for (int k = 0; k < 6; k++)
                if (!strcmp(b[k], "-")) b[k][0] = '\0';
            char slow[32] = "";
            if (a.n_compared) snprintf(slow, sizeof slow, "%zu", a.n_slower);
            fprintf(f, ",ok,%zu,%zu,%s,%s,%s,%s,%s,%s,%s,%.4f,%.4f,%s,\n", a.n_ok, a.n_err, b[0], b[1], b[2], b[3], b[4],
                    b[5], slow, a.n_ok ? (double)a.n_guard_stops / (double)a.n_ok : 0.0,
                    a.n_ok ? (double)a.n_repeating / (double)a.n_ok : 0.0, a.n_ok == 0 ? "" : a.n_lossy ? "no" : "yes");
        }
    }
    return close_out(f, path);
}

static void svg_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

/* Grouped bars: one group per dataset, one bar per available method, the
 * height its acceptance ratio. Plain SVG 1.1, no script, opens anywhere. */
static int write_svg(const struct eval *ev) {
    static const char *colors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                   "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
    const char *ms[EVAL_MAX_METHODS];
    size_t nm = 0;
    for (size_t m = 0; m < ev->n_methods; m++)
        if (!ev->methods[m].unavailable) ms[nm++] = ev->methods[m].name;
    double vmax = 1.0;
    for (size_t d = 0; d < ev->n_sets; d++)
        for (size_t m = 0; m < nm; m++) {
            struct agg a = aggregate(ev, ev->sets[d].name, ms[m]);
            double v = agg_acceptance(&a);
            if (!isnan(v) && v > vmax) vmax = v;
        }
    double top = ceil(vmax * 2.0) / 2.0; /* the axis ends at the next half */
    if (top < vmax + 0.25) top += 0.5;
    const double left = 70, right = 190, plot_top = 50, plot_h = 300;
    const double bar_w = 18, gap = 30;
    double group_w = (double)(nm ? nm : 1) * bar_w + gap;
    double plot_w = (double)(ev->n_sets ? ev->n_sets : 1) * group_w + gap;
    double width = left + plot_w + right, height = plot_top + plot_h + 70;
    char path[4200];
    FILE *f = open_out(ev, "chart.svg", path, sizeof path);
    if (!f) return -1;
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%.0f\" y=\"24\" font-size=\"15\" font-weight=\"bold\">Acceptance ratio per method and dataset"
            "</text>\n",
            width, height, width, height, left);
    fprintf(f, "<text x=\"%.0f\" y=\"40\" fill=\"#555\">model: ", left);
    svg_text(f, ev->model_path);
    fprintf(f, ", greedy, n_predict %d</text>\n", ev->n_predict);
    /* y axis with a tick every 0.5 */
    for (double t = 0; t <= top + 1e-9; t += 0.5) {
        double y = plot_top + plot_h - t / top * plot_h;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.1f</text>\n",
                left, y, left + plot_w, y, left - 6, y + 4, t);
    }
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
            left, plot_top, left, plot_top + plot_h, left, plot_top + plot_h, left + plot_w, plot_top + plot_h);
    fprintf(f,
            "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\">acceptance ratio "
            "(tokens per verification)</text>\n",
            left - 45, plot_top + plot_h / 2);
    for (size_t d = 0; d < ev->n_sets; d++) {
        double gx = left + gap + (double)d * group_w;
        for (size_t m = 0; m < nm; m++) {
            struct agg a = aggregate(ev, ev->sets[d].name, ms[m]);
            double v = agg_acceptance(&a);
            if (isnan(v)) continue;
            double h = v / top * plot_h, x = gx + (double)m * bar_w;
            fprintf(f,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>",
                    x, plot_top + plot_h - h, bar_w - 2, h, colors[m % 10]);
            svg_text(f, ev->sets[d].name);
            fputs(" / ", f);
            svg_text(f, ms[m]);
            fprintf(f, ": %.2f</title></rect>\n", v);
            fprintf(f,
                    "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\">%.2f</text>\n",
                    x + (bar_w - 2) / 2, plot_top + plot_h - h - 3, v);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", gx + (double)nm * bar_w / 2,
                plot_top + plot_h + 18);
        svg_text(f, ev->sets[d].name);
        fputs("</text>\n", f);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">dataset</text>\n", left + plot_w / 2,
            plot_top + plot_h + 42);
    /* legend */
    for (size_t m = 0; m < nm; m++) {
        double x = left + plot_w + 20, y = plot_top + 10 + (double)m * 20;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", x, y, colors[m % 10]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", x + 18, y + 10);
        svg_text(f, ms[m]);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
    return close_out(f, path);
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
            "      --guard          the degeneration guard on every method: stop where the output repeats itself\n"
            "                       (the tables show the share it stopped and the share holding a repeated sentence)\n"
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
    if (ds_load(path, ev->strict, stderr, set)) {
        if (ev->strict) fprintf(stderr, "sdnpu eval: %s: stopped at a malformed line (--strict)\n", path);
        return -1;
    }
    for (size_t i = 0; i < ev->n_sets; i++) {
        if (!strcmp(ev->sets[i].name, set->name)) {
            fprintf(stderr, "sdnpu eval: two datasets are named '%s' (%s and %s)\n", set->name, ev->sets[i].path,
                    path);
            ds_set_free(set);
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
        if (l > 6 && !strcmp(e->d_name + l - 6, ".jsonl") && e->d_name[0] != '.') names[n++] = xstrdup(e->d_name);
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
    for (size_t i = 0; i < ev->n_recs; i++) rec_free(&ev->recs[i]);
    free(ev->recs);
    for (size_t i = 0; i < ev->n_sets; i++) ds_set_free(&ev->sets[i]);
    sdnpu_session_free(ev->session);
    sdnpu_model_free(ev->model);
}

/* Whether every method still in the running has a record for the sample
 * (from this run or the one being resumed). */
static bool sample_done(const struct eval *ev, const struct ds_set *set, const struct ds_sample *s) {
    for (size_t m = 0; m < ev->n_methods; m++) {
        if (ev->methods[m].unavailable) continue;
        if (!rec_find(ev, set->name, s->id, ev->methods[m].name)) return false;
    }
    return true;
}

/* The prompt as the model reads it (chat: rendered in its format), malloc'd. */
static char *rendered_prompt(const struct eval *ev, const struct prompt *p, size_t *len) {
    if (!p->system) {
        *len = p->len;
        return strdup(p->text);
    }
    const struct sdnpu_chat_message msgs[2] = {{"system", p->system}, {"user", p->text}};
    size_t need = 0;
    sdnpu_chat_format(ev->model, msgs, 2, true, NULL, 0, &need);
    char *out = malloc(need ? need : 1);
    if (out && sdnpu_chat_format(ev->model, msgs, 2, true, out, need, len) != SDNPU_OK) {
        free(out);
        out = NULL;
    }
    return out;
}

/* DIR/prompts.jsonl: every selected sample's prompt as the methods get it,
 * with its stop strings and the token budget, so that a peer engine can be
 * run on the very same prompts (bench/bench_eval_peer.py). Rewritten each
 * run. */
static int write_prompts(const struct eval *ev) {
    char path[1200];
    snprintf(path, sizeof path, "%s/prompts.jsonl", ev->out_dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "sdnpu eval: cannot write '%s': %s\n", path, strerror(errno));
        return 1;
    }
    int rc = 0;
    for (size_t d = 0; d < ev->n_sets && !rc; d++)
        for (size_t i = 0; i < ev->sets[d].n && !rc; i++) {
            const struct ds_sample *sm = &ev->sets[d].samples[i];
            struct prompt pr;
            size_t plen = 0;
            char *prompt = NULL;
            if (sample_prompt(ev, sm, &pr) || !(prompt = rendered_prompt(ev, &pr, &plen))) {
                free(pr.text);
                fprintf(stderr, "sdnpu eval: out of memory\n");
                rc = 1;
                break;
            }
            fputs("{\"dataset\": ", f);
            cli_json_write_cstr(f, ev->sets[d].name);
            fputs(", \"id\": ", f);
            cli_json_write_cstr(f, sm->id);
            fprintf(f, ", \"n_predict\": %d, \"chat\": %s, \"prompt\": ", ev->n_predict,
                    pr.system ? "true" : "false");
            cli_json_write_string(f, prompt, plen);
            fputs(", \"stops\": [", f);
            for (size_t k = 0; k < pr.n_stops; k++) {
                if (k) fputs(", ", f);
                cli_json_write_cstr(f, pr.stops[k]);
            }
            fputs("]}\n", f);
            free(prompt);
            free(pr.text);
        }
    if (fclose(f) != 0 && !rc) {
        fprintf(stderr, "sdnpu eval: cannot write '%s': %s\n", path, strerror(errno));
        rc = 1;
    }
    return rc;
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
    struct eval_args args = {.methods = EVAL_DEFAULT_METHODS,
                             .datasets = {dataset_files, 0, EVAL_MAX_DATASETS, "datasets"},
                             .resume = -1};
    const struct cli_parser parser = {
        "sdnpu eval",
        usage,
        {{cli_model_flags, &args.m}, {k_eval_flags, &ev}, {k_eval_arg_flags, &args}},
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
    for (size_t i = 0; i < n_dataset_files; i++)
        if (add_dataset(&ev, dataset_files[i])) goto out;
    if (!n_dataset_files && add_dataset_dir(&ev, dataset_dir ? dataset_dir : default_dataset_dir())) goto out;

    if (mkdir(ev.out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "sdnpu eval: cannot make folder '%s': %s\n", ev.out_dir, strerror(errno));
        goto out;
    }
    if (resume != 0 && load_results(&ev)) goto out;
    if (ev.n_recs) fprintf(stderr, "sdnpu eval: resuming: %zu records from %s/results.json\n", ev.n_recs, ev.out_dir);

    sdnpu_log_set(eval_log, NULL);
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = ev.n_threads;
    char err[512];
    int rc = sdnpu_model_load(ev.model_path, mp, &ev.model, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sdnpu eval: cannot load model: %s: %s\n", sdnpu_status_str(rc), err);
        cli_model_hint("sdnpu eval", args.m.model, ev.model_path);
        goto out;
    }
    if (write_prompts(&ev)) goto out; /* after the load: the model's chat template shapes them */
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    if (ev.n_verify) sp.n_verify = ev.n_verify;
    sp.kernels = ev.kernels;
    cli_weight_cache(&sp, ev.model_path);
    if ((rc = sdnpu_session_create(ev.model, sp, &ev.session))) {
        fprintf(stderr, "sdnpu eval: cannot make a session: %s: %s\n", sdnpu_status_str(rc),
                sdnpu_model_last_error(ev.model));
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
            if (sample_prompt(&ev, s, &pr)) {
                fprintf(stderr, "sdnpu eval: out of memory\n");
                goto out;
            }
            size_t first_new = ev.n_recs;
            const struct rec *ref = rec_find(&ev, set->name, s->id, "cpu-vanilla");
            bool aborted = false;
            for (size_t m = 0; m < ev.n_methods && !aborted; m++) {
                struct method *me = &ev.methods[m];
                if (me->unavailable || rec_find(&ev, set->name, s->id, me->name)) continue;
                char what[200];
                snprintf(what, sizeof what, "%.60s/%.60s %.60s", set->name, s->id, me->name);
                if (pg.tty) progress_show(&pg, what);
                struct rec *r = rec_push(&ev);
                size_t ri = ev.n_recs - 1;
                rc = run_one(&ev, set, s, me, &pr, r);
                r = &ev.recs[ri];
                if (rc == SDNPU_ABORTED || g_interrupted) {
                    aborted = true;
                    break;
                }
                /* A method the engine does not know: say so once, drop its
                 * record, and leave it out from here on. The reference ran
                 * fine on this very prompt, so the method is what failed. */
                if ((rc == SDNPU_ERR_INVALID_ARG || rc == SDNPU_ERR_UNSUPPORTED) && strcmp(me->name, "cpu-vanilla") &&
                    (ref = rec_find(&ev, set->name, s->id, "cpu-vanilla")) && ref->status == REC_OK) {
                    me->unavailable = true;
                    snprintf(me->why, sizeof me->why, "%s", r->msg);
                    if (pg.tty) fputc('\n', stderr);
                    fprintf(stderr, "sdnpu eval: %s: not available: %s\n", me->name, me->why);
                    rec_free(r);
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
                        struct rec *o = rec_push(&ev);
                        r = &ev.recs[ri];
                        o->dataset = xstrdup(set->name);
                        o->id = xstrdup(s->id);
                        o->task = xstrdup(s->task);
                        o->method = xstrdup(ev.methods[k].name);
                        o->status = REC_ERROR;
                        o->msg = xstrdup("not run: the cpu-vanilla reference failed on this sample");
                        o->output = xstrdup("");
                    }
                    break;
                }
            }
            free(pr.text);
            if (aborted) {
                /* A sample is recorded whole or not at all. */
                while (ev.n_recs > first_new) rec_free(&ev.recs[--ev.n_recs]);
                break;
            }
            /* Token-for-token check against the reference. */
            ref = rec_find(&ev, set->name, s->id, "cpu-vanilla");
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
            if (write_results(&ev)) goto out;
        }
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    g_eval_session = NULL;
    if (pg.tty) fputc('\n', stderr);
    if (write_results(&ev)) goto out;
    if (g_interrupted) {
        fprintf(stderr, "sdnpu eval: interrupted; %zu of %zu samples done; run the same command again to resume\n",
                pg.done, pg.total);
        code = 130;
        goto out;
    }
    print_tables(&ev);
    if (write_csvs(&ev) || write_svg(&ev)) goto out;
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
