/* bench/bench_draft.c - drafting cost per decoding step for pld, sam and
 * sam-tree.
 *
 * Workload (synthetic, deterministic): Zipfian tokens (s = 1.1 over a
 * 262,144-token vocabulary) with copied spans, so matches of all lengths
 * exist:
 *   - a 4,000-token context (30% of it copied from itself);
 *   - a 100,000-token history of 200 records of 500 tokens, built through
 *     the history store (in memory) and fed to one suffix automaton;
 *   - a "true" output stream that copies spans from the context (40%), the
 *     history (30%) and itself (10%), and is fresh Zipf tokens otherwise.
 * Each of 10,000 steps: draft (timed), accept the longest tree path that
 * agrees with the true stream plus one bonus token (as verification would),
 * and observe those tokens (timed per token). Acceptance here only shows
 * that the drafts are sane; real acceptance needs the model.
 *
 * Build (not part of CMake; from the repository root):
 *   gcc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -I include -I . base/base.c \
 *       draft/sam.c draft/tree.c draft/pld.c draft/drafter.c engine/history.c \
 *       bench/bench_draft.c -lm -o /tmp/bench_draft
 *   /tmp/bench_draft [--json out.json] [--steps N]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "draft/draft.h"
#include "engine/history.h"

#define VOCAB 262144
#define N_CTX 4000
#define N_HIST_REC 200
#define REC_LEN 500
#define N_TRUTH 400000

static uint64_t g_rng = 0x5eed;
static uint64_t rnd(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rnd01(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }

static double *g_cdf;  /* [VOCAB] Zipf CDF over ranks */
static int32_t *g_ids; /* [VOCAB] rank -> token id (a permutation) */

static void zipf_init(double s) {
    g_cdf = malloc(VOCAB * sizeof *g_cdf);
    g_ids = malloc(VOCAB * sizeof *g_ids);
    double sum = 0;
    for (int r = 0; r < VOCAB; r++)
        sum += 1.0 / pow(r + 1, s);
    double acc = 0;
    for (int r = 0; r < VOCAB; r++) {
        acc += 1.0 / pow(r + 1, s) / sum;
        g_cdf[r] = acc;
        g_ids[r] = r;
    }
    for (int r = VOCAB - 1; r > 0; r--) {
        int j = (int)(rnd() % (uint64_t)(r + 1));
        int32_t t = g_ids[r];
        g_ids[r] = g_ids[j];
        g_ids[j] = t;
    }
}

static int32_t zipf(void) {
    double u = rnd01();
    int lo = 0, hi = VOCAB - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (g_cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return g_ids[lo];
}

/* Fill t[0..n): fresh Zipf tokens, or with probability p_copy a span of
 * 4..40 tokens copied from src[0..n_src) (or from t itself when src is
 * NULL). */
static void gen(int32_t *t, size_t n, const int32_t *src, size_t n_src, double p_copy) {
    for (size_t i = 0; i < n;) {
        const int32_t *from = src ? src : t;
        size_t avail = src ? n_src : i;
        if (avail > 50 && rnd01() < p_copy) {
            size_t len = 4 + rnd() % 37, at = rnd() % (avail - 40);
            for (size_t k = 0; k < len && i < n; k++)
                t[i++] = from[at + k];
        } else {
            t[i++] = zipf();
        }
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct result {
    const char *name;
    double draft_mean, draft_p99, obs_mean, step_mean, step_p99, nodes, accepted;
};

static void die(const char *what, const struct sd_err *err) {
    fprintf(stderr, "bench_draft: %s: %s\n", what, err->msg);
    exit(1);
}

int main(int argc, char **argv) {
    const char *json = NULL;
    int steps = 10000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
    }
    struct sd_err err = {0};
    zipf_init(1.1);

    /* Context, history, true output. */
    static int32_t ctx[N_CTX], hist[N_HIST_REC * REC_LEN];
    gen(ctx, N_CTX, NULL, 0, 0.3);
    for (int r = 0; r < N_HIST_REC; r++) {
        /* Half the records reuse the context (similar tasks), half earlier
         * history. */
        int32_t *rec = hist + (size_t)r * REC_LEN;
        if (r % 2 || r == 0)
            gen(rec, REC_LEN, ctx, N_CTX, 0.5);
        else
            gen(rec, REC_LEN, hist, (size_t)r * REC_LEN, 0.5);
    }
    int32_t *truth = malloc(N_TRUTH * sizeof *truth);
    for (size_t i = 0; i < N_TRUTH;) {
        double u = rnd01();
        size_t len = 4 + rnd() % 29;
        if (u < 0.4 || (u < 0.8 && i < 100)) {
            size_t at = rnd() % (N_CTX - 40);
            for (size_t k = 0; k < len && i < N_TRUTH; k++)
                truth[i++] = ctx[at + k];
        } else if (u < 0.7) {
            size_t at = rnd() % (N_HIST_REC * REC_LEN - 40);
            for (size_t k = 0; k < len && i < N_TRUTH; k++)
                truth[i++] = hist[at + k];
        } else if (u < 0.8) {
            size_t at = rnd() % (i - 40);
            for (size_t k = 0; k < len && i < N_TRUTH; k++)
                truth[i++] = truth[at + k];
        } else {
            for (size_t k = 0; k < len && i < N_TRUTH; k++)
                truth[i++] = zipf();
        }
    }

    /* The history store and its automaton. */
    double t0 = sd_time_ms();
    struct sd_history *h = NULL;
    struct sd_history_params hp = sd_history_default_params();
    hp.max_bytes = 0;
    if (sd_history_open(NULL, &hp, &h, &err)) die("history", &err);
    for (int r = 0; r < N_HIST_REC; r++)
        if (sd_history_append(h, hist + (size_t)r * REC_LEN, REC_LEN, NULL, 0, &err))
            die("history append", &err);
    struct sd_sam *hs = NULL;
    if (sd_sam_create(0, &hs, &err)) die("sam", &err);
    if (sd_history_to_sam(h, hs, &err)) die("history to sam", &err);
    double t_hist = sd_time_ms() - t0;

    const char *names[3] = {"pld", "sam", "sam-tree"};
    struct result res[3];
    double *dt = malloc((size_t)steps * sizeof *dt), *st = malloc((size_t)steps * sizeof *st);
    double t_ctx[3] = {0};
    struct sd_draft_params p = sd_draft_default_params();
    struct sd_draft_tree tree;
    if (sd_draft_tree_init(&tree, 64, &err)) die("tree", &err);

    for (int m = 0; m < 3; m++) {
        struct sd_drafter *d = NULL;
        if (sd_drafter_create(names[m], N_CTX + 65536, &d, &err)) die("drafter", &err);
        if (m > 0 && sd_drafter_attach(d, SD_DRAFT_STORE_HISTORY, hs, &err)) die("attach", &err);
        t0 = sd_time_ms();
        if (sd_drafter_observe_context(d, ctx, N_CTX, &err)) die("context", &err);
        t_ctx[m] = sd_time_ms() - t0;
        size_t pos = 0;
        double obs_total = 0, nodes = 0;
        long n_obs = 0;
        for (int s = 0; s < steps && pos + 64 < N_TRUTH; s++) {
            double a = sd_time_ms();
            if (sd_drafter_draft(d, &p, &tree, &err)) die("draft", &err);
            double b = sd_time_ms();
            dt[s] = (b - a) * 1e3;
            nodes += tree.n;
            /* Verification stand-in: follow the tree along the truth. */
            int32_t node = -1;
            size_t acc = 0;
            for (;;) {
                int32_t c = sd_draft_tree_child(&tree, node, truth[pos + acc]);
                if (c < 0) break;
                node = c;
                acc++;
            }
            acc++; /* the model's own token */
            double c0 = sd_time_ms();
            for (size_t k = 0; k < acc; k++)
                if (sd_drafter_observe_output(d, truth[pos + k], &err)) die("observe", &err);
            double c1 = sd_time_ms();
            obs_total += (c1 - c0) * 1e3;
            n_obs += (long)acc;
            st[s] = dt[s] + (c1 - c0) * 1e3;
            pos += acc;
        }
        struct result *r = &res[m];
        r->name = names[m];
        double sum = 0, ssum = 0;
        for (int s = 0; s < steps; s++) {
            sum += dt[s];
            ssum += st[s];
        }
        r->draft_mean = sum / steps;
        r->step_mean = ssum / steps;
        r->obs_mean = obs_total / (double)n_obs;
        r->nodes = nodes / steps;
        r->accepted = (double)n_obs / steps;
        qsort(dt, (size_t)steps, sizeof *dt, cmp_double);
        qsort(st, (size_t)steps, sizeof *st, cmp_double);
        r->draft_p99 = dt[(size_t)(0.99 * (steps - 1))];
        r->step_p99 = st[(size_t)(0.99 * (steps - 1))];
        sd_drafter_free(d);
    }

    printf(
        "bench_draft: context %d tokens, history %d tokens (%d records), %d steps, params depth %d branch %d "
        "budget %d\n",
        N_CTX, N_HIST_REC * REC_LEN, N_HIST_REC, steps, (int)p.max_depth, (int)p.max_branch, (int)p.budget);
    printf("history automaton: %zu states, %zu edges, %.1f MiB, built in %.1f ms (incl. freeze)\n",
           sd_sam_n_states(hs), sd_sam_n_edges(hs), sd_sam_memory(hs) / 1048576.0, t_hist);
    printf("\n%-9s | %10s %10s | %12s | %10s %10s | %6s | %9s | %8s\n", "method", "draft us", "p99 us",
           "observe us/t", "step us", "p99 us", "nodes", "accepted", "ctx ms");
    printf("----------+-----------------------+--------------+-----------------------+--------+-----------+--"
           "-------\n");
    for (int m = 0; m < 3; m++) {
        const struct result *r = &res[m];
        printf("%-9s | %10.2f %10.2f | %12.3f | %10.2f %10.2f | %6.1f | %9.2f | %8.2f\n", r->name,
               r->draft_mean, r->draft_p99, r->obs_mean, r->step_mean, r->step_p99, r->nodes, r->accepted,
               t_ctx[m]);
    }
    printf("\n(draft: one draft() call; step: draft plus observing the accepted tokens; accepted: tokens per "
           "step\n"
           " on this synthetic stream, bonus token included; ctx: observe_context of the %d-token context)\n",
           N_CTX);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            perror(json);
            return 1;
        }
        fprintf(
            f,
            "{\"context_tokens\": %d, \"history_tokens\": %d, \"steps\": %d, \"history_build_ms\": %.3f,\n",
            N_CTX, N_HIST_REC * REC_LEN, steps, t_hist);
        fprintf(f, " \"methods\": [\n");
        for (int m = 0; m < 3; m++) {
            const struct result *r = &res[m];
            fprintf(f,
                    "  {\"name\": \"%s\", \"draft_us_mean\": %.3f, \"draft_us_p99\": %.3f, "
                    "\"observe_us_per_token\": "
                    "%.4f, \"step_us_mean\": %.3f, \"step_us_p99\": %.3f, \"nodes_mean\": %.2f, "
                    "\"accepted_per_step\": %.3f}%s\n",
                    r->name, r->draft_mean, r->draft_p99, r->obs_mean, r->step_mean, r->step_p99, r->nodes,
                    r->accepted, m < 2 ? "," : "");
        }
        fprintf(f, " ]}\n");
        fclose(f);
    }
    sd_draft_tree_free(&tree);
    sd_sam_free(hs);
    sd_history_close(h);
    free(dt);
    free(st);
    free(truth);
    free(g_cdf);
    free(g_ids);
    return 0;
}
