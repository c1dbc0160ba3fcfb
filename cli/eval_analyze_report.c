/*
 * cli/eval_analyze_report.c - `sdnpu eval --analyze`'s report: the tables
 * of where the drafts die on stdout and their numbers in
 * OUT/analysis.json, from the replay's counts (cli/eval_analyze.c).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_analyze.h"

/* ------------------------------------------------------------ report */

static double per_call(int64_t tokens, int64_t steps) { return steps ? (double)tokens / (double)steps : 0.0; }

/* struct an_count and struct an_outcomes hold int64_t counts alone. */
static void add_counts(int64_t *dst, const int64_t *src, size_t n) {
    for (size_t k = 0; k < n; k++)
        dst[k] += src[k];
}

static void add_priced(struct an_priced *dst, const struct an_priced *src) {
    dst->steps += src->steps;
    dst->tokens += src->tokens;
    dst->ms += src->ms;
    add_counts(dst->by_L, src->by_L, SD_POLICY_MAX_OPTS);
}

static struct an_set total_of(const struct an *an) {
    struct an_set t = {.name = "all"};
    for (size_t d = 0; d < an->ev->n_sets; d++) {
        const struct an_set *s = &an->sets[d];
        t.samples += s->samples;
        t.n_out += s->n_out;
        t.oracle_tokens += s->oracle_tokens;
        for (int w = 0; w < OR_COUNT; w++)
            t.oracle_steps[w] += s->oracle_steps[w];
        add_counts((int64_t *)t.v, (const int64_t *)s->v, (sizeof t.v) / (sizeof(int64_t)));
        add_counts((int64_t *)&t.oc, (const int64_t *)&s->oc, (sizeof t.oc) / (sizeof(int64_t)));
        for (int oi = 0; oi < AN_OPTS; oi++)
            add_priced(&t.pr[oi], &s->pr[oi]);
        for (int p = 0; p < AN_BE_PAIRS; p++)
            for (int g = 0; g < AN_BE_GRID; g++)
                add_priced(&t.be[p][g], &s->be[p][g]);
        for (int vi = 0; vi < AN_DM; vi++) {
            t.dm[vi].steps += s->dm[vi].steps;
            t.dm[vi].tokens += s->dm[vi].tokens;
            t.dm[vi].passes += s->dm[vi].passes;
            t.dm[vi].drafted += s->dm[vi].drafted;
            t.dm[vi].from_dm += s->dm[vi].from_dm;
            t.dm[vi].from_ret += s->dm[vi].from_ret;
            t.dm[vi].ms += s->dm[vi].ms;
        }
        t.prefill_ms += s->prefill_ms;
        t.dm_prefill_ms += s->dm_prefill_ms;
    }
    return t;
}

static void header(const struct an *an, const char *first) {
    printf("| %s |", first);
    for (size_t d = 0; d < an->ev->n_sets; d++)
        printf(" %s |", an->sets[d].name);
    printf(" all |\n|---|");
    for (size_t d = 0; d <= an->ev->n_sets; d++)
        printf("---:|");
    printf("\n");
}

static const struct an_set *set_at(const struct an *an, const struct an_set *total, size_t d) {
    return d < an->ev->n_sets ? &an->sets[d] : total;
}

static void print_acceptance(const struct an *an, const struct an_set *total) {
    printf("\nTokens per model call, every draft verified (replayed over the greedy output):\n\n");
    header(an, "variant");
    for (int vi = 0; vi < AN_VARIANTS; vi++) {
        printf("| %s |", k_variants[vi].name);
        for (size_t d = 0; d <= an->ev->n_sets; d++) {
            const struct an_count *c = &set_at(an, total, d)->v[vi];
            printf(" %.2f |", per_call(c->tokens, c->steps));
        }
        printf("\n");
    }
    printf(
        "\nThe ceiling: tokens per call if each step's draft (at most %d tokens) were the longest prefix of\n"
        "the model's next words found in the stores:\n\n",
        AN_DEPTH);
    header(an, "stores");
    for (int w = 0; w < OR_COUNT; w++) {
        printf("| %s |", k_oracle_names[w]);
        for (size_t d = 0; d <= an->ev->n_sets; d++) {
            const struct an_set *s = set_at(an, total, d);
            printf(" %.2f |", per_call(s->oracle_tokens, s->oracle_steps[w]));
        }
        printf("\n");
    }
}

/* The priced replay: tokens per call, and the speed-up its modelled step
 * times give over plain decoding (one one-row step a token). */
static void print_priced(const struct an *an, const struct an_set *total) {
    printf("\nCost-aware drafting (sam-tree) replayed on graph options priced by %s\n(step ms at L:",
           an->ev->costs);
    static const int32_t Ls[] = {1, 2, 3, 4, 8, 16};
    for (size_t i = 0; i < SD_ARRAY_LEN(Ls); i++)
        printf("%s %d = %.2f", i ? "," : "", Ls[i], sd_profile_step_ms(&an->prof, Ls[i]));
    printf("); tokens per call / speed-up over\nplain decoding, and the share of steps on each graph (all "
           "datasets):\n\n");
    header(an, "graphs (rows)");
    for (int oi = 0; oi < AN_OPTS; oi++) {
        if (!an_priced(an, oi)) continue;
        printf("| %s |", k_opts[oi].name);
        for (size_t d = 0; d <= an->ev->n_sets; d++) {
            const struct an_priced *p = &set_at(an, total, d)->pr[oi];
            double x = p->ms > 0 ? (double)p->tokens * an->step_ms[oi][0] / p->ms : 0.0;
            printf(" %.2f / %.2fx |", per_call(p->tokens, p->steps), x);
        }
        printf(" steps:");
        for (int32_t i = 0; i < k_opts[oi].n; i++)
            printf(" %d rows %.0f%%", k_opts[oi].L[i],
                   total->pr[oi].steps ? 100.0 * (double)total->pr[oi].by_L[i] / (double)total->pr[oi].steps
                                       : 0.0);
        printf("\n");
    }
}

/* The ratio of break-even pair p in set s: where the larger set's modelled
 * speed-up, falling as its largest graph's step grows, meets the smaller
 * set's (interpolated on the grid); 0 where it is below already at 1.00,
 * INFINITY where it is above still at the grid's last ratio. */
static double break_even(const struct an *an, const struct an_set *s, int p) {
    const struct an_priced *small = &s->pr[k_be_pairs[p].small], *be = s->be[p];
    const double plain = an->step_ms[k_be_pairs[p].small][0];
    const double base = small->ms > 0 ? (double)small->tokens * plain / small->ms : 0.0;
    double prev = 0.0;
    for (int g = 0; g < AN_BE_GRID; g++) {
        const double su = be[g].ms > 0 ? (double)be[g].tokens * plain / be[g].ms : 0.0;
        if (su < base) return g == 0 ? 0.0 : an_be_ratio(g - 1) + AN_BE_STEP * (prev - base) / (prev - su);
        prev = su;
    }
    return INFINITY;
}

static void print_ratio(double r) {
    if (r == 0.0)
        printf(" < %.2f |", an_be_ratio(0));
    else if (isinf(r))
        printf(" > %.2f |", an_be_ratio(AN_BE_GRID - 1));
    else
        printf(" %.2f |", r);
}

/* Where the rows a larger graph adds stop paying, by dataset, beside the
 * profile's own ratio of the two graphs' steps. */
static void print_break_even(const struct an *an, const struct an_set *total) {
    printf("\nWhere more rows stop paying: the ratio of the larger graph's step to the smaller's at which\n"
           "the larger option set's modelled speed-up falls to the smaller's (replayed at %.2f-%.2f;\n"
           "the profile's own ratio last; the session's verification rows follow such ratios):\n\n",
           an_be_ratio(0), an_be_ratio(AN_BE_GRID - 1));
    printf("| rows added |");
    for (size_t d = 0; d <= an->ev->n_sets; d++)
        printf(" %s |", d < an->ev->n_sets ? an->sets[d].name : "all");
    printf(" the profile |\n|---|");
    for (size_t d = 0; d <= an->ev->n_sets + 1; d++)
        printf("---:|");
    printf("\n");
    for (int p = 0; p < AN_BE_PAIRS; p++) {
        if (!an_be_priced(an, p)) continue;
        const struct an_opts *a = &k_opts[k_be_pairs[p].small], *b = &k_opts[k_be_pairs[p].large];
        const int32_t la = a->L[a->n - 1], lb = b->L[b->n - 1];
        printf("| %d -> %d (graphs %s, then %s) |", la, lb, a->name, b->name);
        for (size_t d = 0; d <= an->ev->n_sets; d++)
            print_ratio(break_even(an, set_at(an, total, d), p));
        printf(" %.3f |\n", sd_profile_step_ms(&an->prof, lb) / sd_profile_step_ms(&an->prof, la));
    }
}

/* The draft model's replays: tokens per call, the modelled speed-up over
 * plain decoding where both profiles price the steps, and what the draft
 * model's own prefill adds. */
static void print_dm(const struct an *an, const struct an_set *total) {
    const bool costs = an->dprof.n_entries > 0 && an->prof.n_entries > 0;
    const double plain = costs ? sd_profile_step_ms(&an->prof, 1) : 0.0;
    printf("\nA draft model's greedy drafts (%s), replayed over the output: tokens per call%s;\n"
           "its passes per step, and the share of accepted tokens it drafted (all datasets):\n\n",
           an->ev->draft_model, costs ? " / modelled speed-up over plain decoding" : "");
    if (costs)
        printf("(the model's step ms at L = 1, 2, 4, 8: %.2f, %.2f, %.2f, %.2f; the draft model's pass %.2f "
               "ms, of it the\n"
               "head %.2f ms, a subset head that share of it)\n\n",
               plain, sd_profile_step_ms(&an->prof, 2), sd_profile_step_ms(&an->prof, 4),
               sd_profile_step_ms(&an->prof, 8), sd_profile_step_ms(&an->dprof, 1),
               sd_profile_step_ms(&an->dprof, 1) - sd_profile_pass_ms(&an->dprof, 1));
    header(an, "variant");
    for (int vi = 0; vi < AN_DM; vi++) {
        printf("| %s |", k_dm_variants[vi].name);
        for (size_t d = 0; d <= an->ev->n_sets; d++) {
            const struct an_dm_count *c = &set_at(an, total, d)->dm[vi];
            printf(" %.2f", per_call(c->tokens, c->steps));
            if (costs) printf(" / %.2fx", c->ms > 0 ? (double)c->tokens * plain / c->ms : 0.0);
            printf(" |");
        }
        const struct an_dm_count *c = &total->dm[vi];
        printf(" passes %.2f, drafted %.0f%%\n", per_call(c->passes, c->steps),
               c->from_dm + c->from_ret ? 100.0 * (double)c->from_dm / (double)(c->from_dm + c->from_ret)
                                        : 0.0);
    }
    printf("\nPrefill: the model %.0f ms, the draft model %.0f ms (%.2fx) over %lld prompts\n",
           total->prefill_ms, total->dm_prefill_ms,
           total->prefill_ms > 0 ? total->dm_prefill_ms / total->prefill_ms : 0.0, (long long)total->samples);
}

static void print_stores(const struct an_set *t) {
    static const char *const names[] = {"calibrated", "context",         "output",
                                        "history",    "earlier replies", "side branch"};
    printf("\nAccepted tokens by the store their path came from (all datasets):\n\n| variant |");
    for (int k = 0; k <= SD_DRAFT_STORE_COUNT; k++)
        printf(" %s |", names[k]);
    printf("\n|---|---:|---:|---:|---:|---:|---:|\n");
    for (int vi = 0; vi < AN_VARIANTS; vi++) {
        const struct an_count *c = &t->v[vi];
        printf("| %s |", k_variants[vi].name);
        for (int k = 0; k <= SD_DRAFT_STORE_COUNT; k++)
            printf(" %.1f%% |", c->accepted ? 100.0 * (double)c->by_store[k] / (double)c->accepted : 0.0);
        printf("\n");
    }
    const struct an_count *f = &t->v[AN_FOCUS];
    printf("\nAccepted tokens per step, %s (share of steps):\n\n| accepted |", k_variants[AN_FOCUS].name);
    for (int b = 0; b < RUN_BINS; b++)
        printf(" %s |", k_run_names[b]);
    printf("\n|---|---:|---:|---:|---:|---:|\n| steps |");
    for (int b = 0; b < RUN_BINS; b++)
        printf(" %.1f%% |", f->steps ? 100.0 * (double)f->runs[b] / (double)f->steps : 0);
    printf("\n");
}

static void print_outcomes(const struct an *an, const struct an_set *total) {
    printf("\nHow the steps of %s ended (share of steps):\n\n", k_variants[AN_FOCUS].name);
    header(an, "outcome");
    for (int o = 0; o < O_COUNT; o++) {
        printf("| %s |", k_outcome_names[o]);
        for (size_t d = 0; d <= an->ev->n_sets; d++) {
            const struct an_set *s = set_at(an, total, d);
            int64_t n = s->v[AN_FOCUS].steps;
            printf(" %.1f%% |", n ? 100.0 * (double)s->oc.outcome[o] / (double)n : 0.0);
        }
        printf("\n");
    }
    printf("\nWhere a draft was rejected, the model's token (share of rejections):\n\n");
    header(an, "the model's token is");
    for (int c = 0; c <= C_COUNT; c++) {
        printf("| %s |", c < C_COUNT ? k_class_names[c] : "absent from the context");
        for (size_t d = 0; d <= an->ev->n_sets; d++) {
            const struct an_set *s = set_at(an, total, d);
            int64_t n = s->oc.outcome[O_FIRST] + s->oc.outcome[O_LATER],
                    k = c < C_COUNT ? s->oc.cls[c] : s->oc.novel;
            printf(" %.1f%% |", n ? 100.0 * (double)k / (double)n : 0.0);
        }
        printf("\n");
    }
}

static int cmp_pair(const void *a, const void *b) {
    int64_t x = ((const struct an_pair *)a)->n, y = ((const struct an_pair *)b)->n;
    return (x < y) - (x > y);
}

static void escaped(const struct an *an, int32_t tok, char *out) {
    char p[AN_PIECE];
    size_t n;
    an_piece(an, tok, p, &n);
    size_t o = 0;
    for (size_t i = 0; i < n && o + 3 < AN_PIECE; i++) {
        if (p[i] == '\n')
            out[o++] = '\\', out[o++] = 'n';
        else if (p[i] == '|')
            out[o++] = '\\', out[o++] = '|';
        else
            out[o++] = p[i];
    }
    out[o] = '\0';
}

static void print_pairs(struct an *an) {
    qsort(an->pairs, AN_PAIRS, sizeof an->pairs[0], cmp_pair);
    printf(
        "\nThe commonest rejections (the draft's token, what the model wrote):\n\n| draft | model | times |\n"
        "|---|---|---:|\n");
    for (int i = 0; i < AN_TOP_PAIRS && an->pairs[i].n > 0; i++) {
        char d[AN_PIECE], m[AN_PIECE];
        escaped(an, an->pairs[i].draft, d);
        escaped(an, an->pairs[i].model, m);
        printf("| `%s` | `%s` | %lld |\n", d, m, (long long)an->pairs[i].n);
    }
}

/* Each priced pair's break-even ratio (a number; "below" or "above" the
 * grid) and the grid's replays. */
static json_t *be_json(const struct an *an, const struct an_set *s) {
    json_t *o = json_object();
    for (int p = 0; p < AN_BE_PAIRS; p++) {
        if (!an_be_priced(an, p)) continue;
        const struct an_opts *a = &k_opts[k_be_pairs[p].small], *b = &k_opts[k_be_pairs[p].large];
        char name[64];
        snprintf(name, sizeof name, "%s -> %s", a->name, b->name);
        const double r = break_even(an, s, p);
        json_t *grid = json_array();
        for (int g = 0; g < AN_BE_GRID; g++)
            json_array_append_new(grid,
                                  json_pack("{s:f, s:I, s:I, s:f}", "ratio", an_be_ratio(g), "steps",
                                            (json_int_t)s->be[p][g].steps, "tokens",
                                            (json_int_t)s->be[p][g].tokens, "modelled_ms", s->be[p][g].ms));
        json_object_set_new(o, name,
                            json_pack("{s:o, s:o}", "ratio",
                                      r == 0.0   ? json_string("below")
                                      : isinf(r) ? json_string("above")
                                                 : json_real(r),
                                      "grid", grid));
    }
    return o;
}

static json_t *set_json(const struct an *an, const struct an_set *s) {
    json_t *o = json_pack("{s:s, s:I, s:I}", "dataset", s->name, "samples", (json_int_t)s->samples,
                          "output_tokens", (json_int_t)s->n_out);
    json_t *vs = json_object(), *ce = json_object(), *oc = json_object();
    for (int vi = 0; vi < AN_VARIANTS; vi++) {
        const struct an_count *c = &s->v[vi];
        json_object_set_new(vs, k_variants[vi].name,
                            json_pack("{s:I, s:I, s:I, s:I, s:f}", "steps", (json_int_t)c->steps, "accepted",
                                      (json_int_t)c->accepted, "drafted", (json_int_t)c->drafted,
                                      "empty_drafts", (json_int_t)c->empty, "tokens_per_call",
                                      per_call(c->tokens, c->steps)));
    }
    for (int w = 0; w < OR_COUNT; w++)
        json_object_set_new(ce, k_oracle_names[w], json_real(per_call(s->oracle_tokens, s->oracle_steps[w])));
    for (int k = 0; k < O_COUNT; k++)
        json_object_set_new(oc, k_outcome_names[k], json_integer(s->oc.outcome[k]));
    for (int k = 0; k < C_COUNT; k++)
        json_object_set_new(oc, k_class_names[k], json_integer(s->oc.cls[k]));
    json_object_set_new(oc, "absent from the context", json_integer(s->oc.novel));
    json_t *pr = json_object();
    for (int oi = 0; oi < AN_OPTS; oi++) {
        const struct an_priced *q = &s->pr[oi];
        if (q->steps)
            json_object_set_new(pr, k_opts[oi].name,
                                json_pack("{s:I, s:I, s:f, s:f}", "steps", (json_int_t)q->steps, "tokens",
                                          (json_int_t)q->tokens, "modelled_ms", q->ms, "tokens_per_call",
                                          per_call(q->tokens, q->steps)));
    }
    json_object_set_new(o, "priced", pr);
    json_object_set_new(o, "break_even", be_json(an, s));
    if (s->dm[0].steps) {
        json_t *dm = json_object();
        for (int vi = 0; vi < AN_DM; vi++) {
            const struct an_dm_count *c = &s->dm[vi];
            json_object_set_new(dm, k_dm_variants[vi].name,
                                json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "steps",
                                          (json_int_t)c->steps, "tokens", (json_int_t)c->tokens,
                                          "draft_passes", (json_int_t)c->passes, "drafted",
                                          (json_int_t)c->drafted, "accepted_drafted", (json_int_t)c->from_dm,
                                          "accepted_retrieved", (json_int_t)c->from_ret, "modelled_ms", c->ms,
                                          "tokens_per_call", per_call(c->tokens, c->steps)));
        }
        json_object_set_new(o, "draft_model", dm);
        json_object_set_new(o, "prefill_ms", json_real(s->prefill_ms));
        json_object_set_new(o, "draft_prefill_ms", json_real(s->dm_prefill_ms));
    }
    json_object_set_new(o, "variants", vs);
    json_object_set_new(o, "ceiling", ce);
    json_object_set_new(o, "outcomes", oc);
    return o;
}

static int write_json(const struct an *an, const struct an_set *total) {
    char path[4200];
    snprintf(path, sizeof path, "%s/analysis.json", an->ev->out_dir);
    json_t *sets = json_array();
    for (size_t d = 0; d < an->ev->n_sets; d++)
        json_array_append_new(sets, set_json(an, &an->sets[d]));
    json_array_append_new(sets, set_json(an, total));
    json_t *root =
        json_pack("{s:s, s:s, s:i, s:i, s:o}", "format", "sdnpu-eval-analysis-1", "model", an->ev->model_path,
                  "n_predict", an->ev->n_predict, "focus", AN_FOCUS, "datasets", sets);
    int rc = root && json_dump_file(root, path, JSON_INDENT(1)) == 0 ? 0 : -1;
    json_decref(root);
    if (rc)
        fprintf(stderr, "sdnpu eval: cannot write %s\n", path);
    else
        fprintf(stderr, "sdnpu eval: wrote %s\n", path);
    return rc;
}

int an_report(struct an *an) {
    const struct eval *ev = an->ev;
    struct an_set t = total_of(an);
    printf("Where the drafts die: %s, %lld samples, %lld output tokens, greedy, at most %d tokens each\n",
           ev->model_path, (long long)t.samples, (long long)t.n_out, (int)ev->n_predict);
    print_acceptance(an, &t);
    if (an->prof.n_entries) {
        print_priced(an, &t);
        print_break_even(an, &t);
    }
    if (an->dm) print_dm(an, &t);
    print_stores(&t);
    print_outcomes(an, &t);
    print_pairs(an);
    return write_json(an, &t);
}
