/* cli/eval_report.c - what `sdnpu eval` reports from its records
 * (cli/eval.h): the tables on stdout, samples.csv and summary.csv, the
 * acceptance chart (chart.svg), and prompts.jsonl, the prompts as the
 * methods get them, for a peer engine. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tools.h"
#include "eval.h"
#include "json.h"
#include "sdnpu.h"

/* A sample is "slower than cpu-vanilla" past this ratio of its ms/token:
 * below it, the difference is within what timing noise alone gives here. */
#define EVAL_SLOWER 1.03
/* ... on samples where both generated at least this many tokens: a reply
 * of one or two tokens is one step, its time mostly noise and set-up. */
#define EVAL_SLOWER_MIN_TOKENS 16

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
        const struct rec *cpu = eval_rec_find(ev, dataset, r->id, "cpu-vanilla");
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

void eval_print_tables(const struct eval *ev) {
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

int eval_write_csvs(const struct eval *ev) {
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
int eval_write_svg(const struct eval *ev) {
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

/* The prompt as the model reads it (chat: rendered in its format), malloc'd. */
static char *rendered_prompt(const struct eval *ev, const struct prompt *p, size_t *len) {
    if (!p->system) {
        *len = p->len;
        return strdup(p->text);
    }
    /* As the generation renders it: "" is no system turn at all, which
     * sdnpu_chat_format (the template's rendering) cannot express. */
    int64_t need = -sd_tool_model_chat_turn(ev->model, p->system, p->text, NULL, 0);
    char *out = need > 0 ? malloc((size_t)need) : NULL;
    if (out) *len = (size_t)sd_tool_model_chat_turn(ev->model, p->system, p->text, out, (size_t)need);
    return out;
}

/* DIR/prompts.jsonl: every selected sample's prompt as the methods get it,
 * with its stop strings and the token budget, so that a peer engine can be
 * run on the very same prompts (bench/bench_eval_peer.py). Rewritten each
 * run. */
int eval_write_prompts(const struct eval *ev) {
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
            if (eval_sample_prompt(ev, sm, &pr) || !(prompt = rendered_prompt(ev, &pr, &plen))) {
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

