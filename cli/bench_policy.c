/* cli/bench_policy.c - `sdnpu bench policy`: what the cost-aware drafting
 * policy (verify/verify.h) costs a decoding step, against its budget of
 * 5 microseconds.
 *
 *     sdnpu bench policy [--steps N] [--repeat N] [--json OUT]
 *
 * Each step chooses for a 7-node draft (a chain, and a tree with side
 * branches, as sam-tree drafts them) and learns from the outcome: verified
 * or skipped as chosen, the acceptance drawn from a stream whose rate
 * drifts between 0.1 and 0.9 so both choices occur, plus the step's cost.
 * Best of --repeat runs of --steps steps, one thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli.h"
#include "verify/verify.h"

static void policy_usage(FILE *f) {
    fprintf(f, "usage: sdnpu bench policy [--steps N] [--repeat N] [--json OUT]\n\n"
               "Time the cost-aware drafting decision and its learning per decoding step.\n\n"
               "options:\n"
               "      --steps N    steps per run (default 1000000)\n"
               "      --repeat N   runs, best kept (default 5)\n"
               "      --json OUT   also write the numbers as JSON\n");
}

/* Seven draft nodes: a chain, or (tree) a main path of four with three
 * side branches near the root, as sam-tree spends a budget of 7. */
static void make_draft(struct sd_draft_tree *t, bool tree) {
    struct sd_draft_params dp = sd_draft_default_params();
    dp.budget = 7;
    sd_draft_tree_clear(t);
    const int32_t main_path[] = {11, 12, 13, 14, 15, 16, 17};
    t->n_main = sd_draft_tree_add_chain(t, -1, main_path, tree ? 4 : 7, &dp);
    if (tree) {
        sd_draft_tree_add(t, -1, 21, &dp);
        sd_draft_tree_add(t, 0, 22, &dp);
        sd_draft_tree_add(t, 1, 23, &dp);
    }
    t->main_store = SD_DRAFT_STORE_CONTEXT;
    t->main_match = 6;
}

struct split {
    double choose_ns, learn_ns;
    int64_t verified;
};

/* One run: n steps on draft t; times the choice and the learning apart. */
static struct split run_steps(const struct sd_draft_tree *t, int64_t n) {
    struct sd_policy p;
    const int32_t L[2] = {1, 8};
    const double c[2] = {9.0, 15.0};
    sd_policy_init(&p, true, L, c, 2);
    uint64_t rng = 0x5D17;
    struct split s = {0};
    double t_choose = 0, t_learn = 0;
    for (int64_t i = 0; i < n; i++) {
        /* The acceptance rate drifts: 0.9 for 64 steps, then 0.1. */
        double rate = (i >> 6) & 1 ? 0.1 : 0.9;
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int32_t good = 0;
        for (uint64_t r = rng; good < t->n && (double)((r >> 40) & 0xFF) / 256.0 < rate; r >>= 8) good++;
        double t0 = sd_time_ms();
        int32_t nv;
        int32_t opt = sd_policy_choose(&p, t, t->n, &nv);
        double t1 = sd_time_ms();
        if (nv > 0) {
            int32_t path[8];
            int32_t acc = SD_MIN(good, t->n_main);
            for (int32_t k = 0; k < acc; k++) path[k] = k;
            sd_policy_observe(&p, t, nv, path, acc);
            s.verified++;
        } else {
            sd_policy_observe_skipped(&p, t, t->n, good ? t->tok[0] : 3);
        }
        sd_policy_observe_cost(&p, opt, nv ? 15.0 : 9.0);
        double t2 = sd_time_ms();
        t_choose += t1 - t0;
        t_learn += t2 - t1;
    }
    s.choose_ns = t_choose * 1e6 / (double)n;
    s.learn_ns = t_learn * 1e6 / (double)n;
    return s;
}

struct policy_opts {
    long steps, repeat;
    const char *json;
};

static const struct cli_flag k_flags[] = {
    {"--steps", NULL, CLI_INT, CLI_AT(struct policy_opts, steps), .lo = 1000, .hi = 1L << 30},
    {"--repeat", NULL, CLI_INT, CLI_AT(struct policy_opts, repeat), .lo = 1, .hi = 100},
    {"--json", NULL, CLI_STR, CLI_AT(struct policy_opts, json)},
    {0},
};

int cli_bench_policy(int argc, char **argv) {
    struct policy_opts o = {.steps = 1000000, .repeat = 5};
    const struct cli_parser parser = {
        "sdnpu bench policy", policy_usage, {{k_flags, &o}}, .style = CLI_MISSING_LAST};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    const long steps = o.steps, repeat = o.repeat;
    const char *json = o.json;
    struct sd_draft_tree t;
    struct sd_err err = {0};
    if (sd_draft_tree_init(&t, 8, &err)) {
        fprintf(stderr, "sdnpu bench policy: %s\n", err.msg);
        return 1;
    }
    const char *names[2] = {"chain of 7", "tree of 7"};
    struct split best[2];
    for (int k = 0; k < 2; k++) {
        make_draft(&t, k == 1);
        for (long r = 0; r < repeat; r++) {
            struct split s = run_steps(&t, steps);
            if (r == 0 || s.choose_ns + s.learn_ns < best[k].choose_ns + best[k].learn_ns) best[k] = s;
        }
    }
    sd_draft_tree_free(&t);
    /* The clock read around each call is part of what is measured: say
     * what it costs, so the figures can be read net of it. */
    double c0 = sd_time_ms(), c1 = c0;
    for (int i = 0; i < 1000000; i++) c1 = sd_time_ms();
    double clock_ns = (c1 - c0) * 1e6 / 1e6;
    printf("cost-aware drafting, per decoding step (best of %ld runs of %ld steps; one thread)\n\n", repeat, steps);
    printf("| draft | choose (ns) | learn (ns) | whole step (ns) | steps verified | target |\n");
    printf("| --- | ---: | ---: | ---: | ---: | --- |\n");
    for (int k = 0; k < 2; k++) {
        double whole = best[k].choose_ns + best[k].learn_ns;
        printf("| %s | %.0f | %.0f | %.0f | %.0f%% | < 5000 ns: %s |\n", names[k], best[k].choose_ns,
               best[k].learn_ns, whole, 100.0 * (double)best[k].verified / (double)steps,
               whole < 5000 ? "met" : "missed");
    }
    printf("\n(each figure includes reading the clock, about %.0f ns a read)\n", clock_ns);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "sdnpu bench policy: cannot write '%s'\n", json);
            return 1;
        }
        fprintf(f, "{\"steps\": %ld, \"repeat\": %ld, \"clock_read_ns\": %.1f, \"drafts\": [", steps, repeat, clock_ns);
        for (int k = 0; k < 2; k++)
            fprintf(f, "%s{\"draft\": \"%s\", \"choose_ns\": %.1f, \"learn_ns\": %.1f, \"step_ns\": %.1f, "
                       "\"verified_share\": %.4f}",
                    k ? ", " : "", names[k], best[k].choose_ns, best[k].learn_ns,
                    best[k].choose_ns + best[k].learn_ns, (double)best[k].verified / (double)steps);
        fprintf(f, "]}\n");
        if (fclose(f)) {
            fprintf(stderr, "sdnpu bench policy: cannot write '%s'\n", json);
            return 1;
        }
    }
    return 0;
}
