/*
 * cli/eval_run.c - `sdnpu eval`'s runs: every selected sample with every
 * method on one session (cpu-vanilla first, the reference every other
 * method's output must equal token for token), a sample recorded whole or
 * not at all, results.json rewritten after each, progress with an ETA on
 * stderr, Ctrl-C cancelling the run in flight (the same command resumes);
 * then the tables and files of cli/eval_report.c. cli/eval.c is the
 * command: its flags, methods and datasets.
 */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cli.h"
#include "dataset.h"
#include "engine/history.h"
#include "eval.h"
#include "sdnpu.h"

static volatile sig_atomic_t g_interrupted;
static struct sdnpu_session *g_eval_session;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
    if (g_eval_session) sdnpu_session_cancel(g_eval_session);
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
static int write_history(struct eval *ev, const char *path, const struct ds_sample *s, char *err,
                         size_t err_size) {
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
            snprintf(err, sizeof err, "history: %s: %s", sdnpu_status_str(rc),
                     sdnpu_session_last_error(ev->session));
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

/* ------------------------------------------------------------ progress */

struct progress {
    size_t total, done, done_here;
    double t0;
    bool tty;
};

static double now_s(void) { return sd_time_ms() * 1e-3; }

static void fmt_dur(char *b, size_t n, double s) {
    if (s < 0 || isnan(s))
        snprintf(b, n, "?");
    else if (s < 60)
        snprintf(b, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(b, n, "%.0fm%02.0fs", floor(s / 60), fmod(s, 60));
    else
        snprintf(b, n, "%.0fh%02.0fm", floor(s / 3600), fmod(s / 60, 60));
}

static void progress_show(const struct progress *p, const char *what) {
    double el = now_s() - p->t0;
    double eta = p->done_here ? el / (double)p->done_here * (double)(p->total - p->done) : NAN;
    char e1[32], e2[32];
    fmt_dur(e1, sizeof e1, el);
    fmt_dur(e2, sizeof e2, eta);
    int width = 24, fill = p->total ? (int)((double)width * (double)p->done / (double)p->total) : width;
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    if (p->tty) {
        fprintf(stderr, "\r\033[K[%s] %zu/%zu %-40.40s elapsed %s ETA %s", bar, p->done, p->total, what, e1,
                e2);
    } else {
        fprintf(stderr, "[%s] %zu/%zu %s elapsed %s ETA %s\n", bar, p->done, p->total, what, e1, e2);
    }
    fflush(stderr);
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

/* ---------------------------------------------------------- the samples */

/* Method m's records of the sample's other methods, failed: without the
 * reference the other methods cannot be checked. */
static void fail_others(struct eval *ev, const struct ds_set *set, const struct ds_sample *s, size_t m) {
    for (size_t k = 0; k < ev->n_methods; k++) {
        if (k == m || ev->methods[k].unavailable) continue;
        struct rec *o = eval_rec_push(ev);
        o->dataset = eval_strdup(set->name);
        o->id = eval_strdup(s->id);
        o->task = eval_strdup(s->task);
        o->method = eval_strdup(ev->methods[k].name);
        o->status = REC_ERROR;
        o->msg = eval_strdup("not run: the cpu-vanilla reference failed on this sample");
        o->output = eval_strdup("");
    }
}

/* After record ri of method m failed with rc: a method the engine does not
 * know is said once, its record dropped and the method left out from here
 * on (the reference ran fine on this very prompt, so the method is what
 * failed); true where so. */
static bool drop_unavailable(struct eval *ev, const struct ds_set *set, const struct ds_sample *s, size_t m,
                             size_t ri, int rc, bool tty) {
    struct method *me = &ev->methods[m];
    const struct rec *ref = eval_rec_find(ev, set->name, s->id, "cpu-vanilla");
    if ((rc != SDNPU_ERR_INVALID_ARG && rc != SDNPU_ERR_UNSUPPORTED) || !strcmp(me->name, "cpu-vanilla") ||
        !ref || ref->status != REC_OK)
        return false;
    me->unavailable = true;
    snprintf(me->why, sizeof me->why, "%s", ev->recs[ri].msg);
    if (tty) fputc('\n', stderr);
    fprintf(stderr, "sdnpu eval: %s: not available: %s\n", me->name, me->why);
    eval_rec_free(&ev->recs[ri]);
    ev->n_recs--;
    return true;
}

/* Every method the sample lacks a record of, in order. The sample's reply
 * joins the session's replies store once, with its last method: no method
 * drafts from its own answer. False where the run was cut short. */
static bool run_methods(struct eval *ev, const struct ds_set *set, const struct ds_sample *s,
                        const struct prompt *pr, const struct progress *pg) {
    size_t last = 0;
    for (size_t m = 0; m < ev->n_methods; m++)
        if (!ev->methods[m].unavailable && !eval_rec_find(ev, set->name, s->id, ev->methods[m].name))
            last = m;
    for (size_t m = 0; m < ev->n_methods; m++) {
        struct method *me = &ev->methods[m];
        if (me->unavailable || eval_rec_find(ev, set->name, s->id, me->name)) continue;
        char what[200];
        snprintf(what, sizeof what, "%.60s/%.60s %.60s", set->name, s->id, me->name);
        if (pg->tty) progress_show(pg, what);
        eval_rec_push(ev);
        const size_t ri = ev->n_recs - 1;
        int rc = run_one(ev, set, s, me, pr, m == last, &ev->recs[ri]);
        if (rc == SDNPU_ABORTED || g_interrupted) return false;
        if (drop_unavailable(ev, set, s, m, ri, rc, pg->tty)) continue;
        if (rc != SDNPU_OK) {
            if (pg->tty) fputc('\n', stderr);
            fprintf(stderr, "sdnpu eval: %s:%zu (%s) %s: %s\n", set->path, s->line, s->id, me->name,
                    ev->recs[ri].msg);
        }
        if (!strcmp(me->name, "cpu-vanilla") && rc != SDNPU_OK) {
            fail_others(ev, set, s, m);
            break;
        }
    }
    return true;
}

/* Records [first, n_recs) against the sample's reference, token for token. */
static void check_lossless(struct eval *ev, const struct ds_set *set, const struct ds_sample *s, size_t first,
                           bool tty) {
    const struct rec *ref = eval_rec_find(ev, set->name, s->id, "cpu-vanilla");
    for (size_t k = first; k < ev->n_recs; k++) {
        struct rec *r = &ev->recs[k];
        if (r->status != REC_OK || !ref || ref->status != REC_OK) continue;
        bool same_tokens = !r->have_tokens || !ref->have_tokens ||
                           (r->n_out_tokens == ref->n_out_tokens && r->out_hash == ref->out_hash);
        r->lossless = same_tokens && r->n_generated == ref->n_generated && !strcmp(r->output, ref->output);
        if (!r->lossless) {
            if (tty) fputc('\n', stderr);
            fprintf(stderr, "sdnpu eval: %s/%s: %s output differs from cpu-vanilla's\n", set->name, s->id,
                    r->method);
        }
    }
}

/* One sample with every method it lacks, recorded whole or not at all,
 * then results.json rewritten. 0; 1 on a failure to go on; 2 cut short. */
static int run_sample(struct eval *ev, const struct ds_set *set, const struct ds_sample *s,
                      struct progress *pg) {
    struct prompt pr;
    if (eval_sample_prompt(ev, s, &pr)) {
        fprintf(stderr, "sdnpu eval: out of memory\n");
        return 1;
    }
    const size_t first = ev->n_recs;
    const bool whole = run_methods(ev, set, s, &pr, pg);
    free(pr.text);
    if (!whole) {
        while (ev->n_recs > first)
            eval_rec_free(&ev->recs[--ev->n_recs]);
        return 2;
    }
    check_lossless(ev, set, s, first, pg->tty);
    pg->done++;
    pg->done_here++;
    char what[200];
    snprintf(what, sizeof what, "%.60s/%.60s", set->name, s->id);
    progress_show(pg, what);
    return eval_write_results(ev) ? 1 : 0;
}

/* Sample i of every dataset before sample i + 1 of any, so a run cut
 * short still covers every dataset evenly. 0; 1 on a failure; 2 cut
 * short. */
static int run_all(struct eval *ev, struct progress *pg) {
    size_t n_max = 0;
    for (size_t d = 0; d < ev->n_sets; d++)
        n_max = SD_MAX(n_max, ev->sets[d].n);
    for (size_t i = 0; i < n_max; i++)
        for (size_t d = 0; d < ev->n_sets; d++) {
            if (g_interrupted) return 2;
            const struct ds_set *set = &ev->sets[d];
            if (i >= set->n || sample_done(ev, set, &set->samples[i])) continue;
            int rc = run_sample(ev, set, &set->samples[i], pg);
            if (rc) return rc;
        }
    return g_interrupted ? 2 : 0;
}

int eval_run(struct eval *ev) {
    struct progress pg = {.tty = isatty(STDERR_FILENO), .t0 = now_s()};
    for (size_t d = 0; d < ev->n_sets; d++) {
        pg.total += ev->sets[d].n;
        for (size_t i = 0; i < ev->sets[d].n; i++)
            pg.done += sample_done(ev, &ev->sets[d], &ev->sets[d].samples[i]);
    }
    g_eval_session = ev->session;
    g_interrupted = 0;
    signal(SIGINT, on_sigint);
    signal(SIGTERM, on_sigint);
    const int rc = run_all(ev, &pg);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    g_eval_session = NULL;
    if (pg.tty) fputc('\n', stderr);
    if (rc == 1 || eval_write_results(ev)) return 1;
    if (rc == 2) {
        fprintf(stderr,
                "sdnpu eval: interrupted; %zu of %zu samples done; run the same command again to resume\n",
                pg.done, pg.total);
        return 130;
    }
    eval_print_tables(ev);
    if (eval_write_csvs(ev) || eval_write_svg(ev)) return 1;
    fprintf(stderr, "sdnpu eval: wrote %s/results.json, samples.csv, summary.csv, chart.svg, prompts.jsonl\n",
            ev->out_dir);
    for (size_t i = 0; i < ev->n_recs; i++)
        if (ev->recs[i].lossless == 0) return 3; /* a lossy method is a failure of the engine */
    return 0;
}
