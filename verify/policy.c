/* verify/policy.c - cost-aware drafting: which graph a step runs and how
 * much of its draft it verifies (verify.h explains the model). */
#include <string.h>

#include "verify/verify.h"

/* The acceptance model's constants. A bucket forgets with factor 0.95 an
 * observation (it remembers about twenty: a few steps of a long match,
 * twenty skipped drafts of a short one), the pooled rate with 0.97; a
 * bucket's rate leans on the pooled one as if it were one observation, so
 * a bucket that keeps failing gets near 1/20 of the pooled rate. Before
 * anything is seen, a level is taken to be accepted half the time: where
 * a drafted pass costs less than twice a plain one, that verifies full
 * drafts, so a request starts by trying and then learns. */
#define GAMMA_BUCKET 0.95
#define GAMMA_POOL 0.97
#define PRIOR_WEIGHT 1.0
#define PRIOR_RATE 0.5
#define CARRY_BUCKET 4.0 /* most observations a bucket carries into a new request */
#define CARRY_POOL 8.0
#define COST_ALPHA 0.25 /* weight of a new step time in the running cost */

/* Cost of a pass of L rows, in units of a row, when nothing is known: a
 * fixed overhead of about 8 rows plus the rows (the CPU backend's shape,
 * as the runtime's prefill policy assumes too). */
static double guess_cost(int32_t L) { return 8.0 + (double)L; }

static int32_t match_bucket(int32_t m) {
    int32_t b = 0;
    for (int32_t top = 1; m > top && b < SD_POLICY_BUCKETS - 1; top *= 2) b++;
    return b;
}

/* The bucket of a level predicted from a match of length m. */
static int32_t bucket_of(const struct sd_policy *p, int32_t store, int32_t m) {
    switch (p->estimator) {
    case SD_EST_GLOBAL:
        return 0;
    case SD_EST_STORE:
        return store >= 0 && store < SD_POLICY_BUCKETS ? store : 0;
    default:
        return match_bucket(m);
    }
}

static double pool_rate(const struct sd_policy *p) {
    return (p->succ_all + PRIOR_WEIGHT * PRIOR_RATE) / (p->succ_all + p->fail_all + PRIOR_WEIGHT);
}

static void refresh_rates(struct sd_policy *p) {
    double pool = pool_rate(p);
    for (int32_t b = 0; b < SD_POLICY_BUCKETS; b++)
        p->rate[b] = (p->succ[b] + PRIOR_WEIGHT * pool) / (p->succ[b] + p->fail[b] + PRIOR_WEIGHT);
}

void sd_policy_init(struct sd_policy *p, bool adaptive, const int32_t *L, const double *cost_ms, int32_t n) {
    memset(p, 0, sizeof *p);
    p->adaptive = adaptive;
    p->n_opts = SD_MIN(n, SD_POLICY_MAX_OPTS);
    /* Unknown costs are filled from a known one by the guessed shape, or
     * all stay in row units until the first measurement scales them. */
    int32_t known = -1;
    for (int32_t i = 0; i < p->n_opts; i++)
        if (cost_ms[i] > 0 && known < 0) known = i;
    for (int32_t i = 0; i < p->n_opts; i++) {
        p->L[i] = L[i];
        p->usable[i] = true;
        p->measured[i] = cost_ms[i] > 0;
        p->cost_ms[i] = cost_ms[i] > 0 ? cost_ms[i]
                        : known >= 0   ? cost_ms[known] * guess_cost(L[i]) / guess_cost(L[known])
                                       : guess_cost(L[i]);
    }
    memcpy(p->prior_ms, p->cost_ms, sizeof p->prior_ms);
    refresh_rates(p);
}

static void shrink(double *s, double *f, double most) {
    double w = *s + *f;
    if (w > most) {
        *s *= most / w;
        *f *= most / w;
    }
}

void sd_policy_new_request(struct sd_policy *p, bool reproducible) {
    p->reproducible = reproducible;
    if (reproducible) {
        memcpy(p->cost_ms, p->prior_ms, sizeof p->cost_ms);
        memset(p->succ, 0, sizeof p->succ);
        memset(p->fail, 0, sizeof p->fail);
        p->succ_all = p->fail_all = 0;
    }
    for (int32_t b = 0; b < SD_POLICY_BUCKETS; b++) shrink(&p->succ[b], &p->fail[b], CARRY_BUCKET);
    shrink(&p->succ_all, &p->fail_all, CARRY_POOL);
    p->n_choices = p->n_plain = 0;
    refresh_rates(p);
}

/* The deepest level among the first n nodes. */
static int32_t tree_depth(const struct sd_draft_tree *t, int32_t n) {
    int32_t d = 0;
    for (int32_t i = 0; i < n; i++) d = SD_MAX(d, t->depth[i]);
    return d;
}

double sd_policy_expected(const struct sd_policy *p, const struct sd_draft_tree *t, int32_t n_nodes) {
    int32_t depth = tree_depth(t, SD_MIN(n_nodes, t->n));
    int32_t m = SD_MAX(1, t->main_match);
    double reach = 1.0, e = 0.0;
    for (int32_t i = 0; i < depth; i++) {
        reach *= p->rate[bucket_of(p, t->main_store, m + i)];
        e += reach;
    }
    return e;
}

/* The first usable graph whose cost is a guess while another's is
 * measured (sd_policy_init says why it runs next), or -1. */
static int32_t to_measure(const struct sd_policy *p) {
    if (!p->adaptive || p->reproducible) return -1;
    int32_t first = -1;
    bool any = false;
    for (int32_t o = 0; o < p->n_opts; o++) {
        if (!p->usable[o]) continue;
        if (p->measured[o]) any = true;
        else if (first < 0) first = o;
    }
    return any ? first : -1;
}

int32_t sd_policy_choose(struct sd_policy *p, const struct sd_draft_tree *t, int32_t n_nodes, int32_t *n_verify) {
    n_nodes = SD_MIN(n_nodes, t->n);
    int32_t best = -1, best_nv = 0;
    double best_value = -1.0;
    const int32_t probe = n_nodes > 0 ? to_measure(p) : -1;
    for (int32_t o = 0; o < p->n_opts; o++) {
        if (!p->usable[o] || (probe >= 0 && o != probe)) continue;
        int32_t nv = SD_MAX(0, SD_MIN(n_nodes, p->L[o] - 1));
        double value;
        if (!p->adaptive) {
            /* The fixed rule, as before the policy: every step on the
             * largest graph, padded where the draft leaves rows. */
            value = (double)p->L[o];
        } else {
            value = (1.0 + (nv > 0 ? sd_policy_expected(p, t, nv) : 0.0)) / p->cost_ms[o];
        }
        if (value > best_value) {
            best = o;
            best_value = value;
            best_nv = nv;
        }
    }
    p->n_choices++;
    if (best_nv == 0 && n_nodes > 0) p->n_plain++;
    *n_verify = best_nv;
    return SD_MAX(best, 0);
}

static void count_level(struct sd_policy *p, int32_t bucket, bool accepted) {
    p->succ[bucket] *= GAMMA_BUCKET;
    p->fail[bucket] *= GAMMA_BUCKET;
    p->succ_all *= GAMMA_POOL;
    p->fail_all *= GAMMA_POOL;
    *(accepted ? &p->succ[bucket] : &p->fail[bucket]) += 1.0;
    *(accepted ? &p->succ_all : &p->fail_all) += 1.0;
}

static bool has_child(const struct sd_draft_tree *t, int32_t n_nodes, int32_t parent) {
    for (int32_t i = 0; i < n_nodes; i++)
        if (t->parent[i] == parent) return true;
    return false;
}

void sd_policy_observe(struct sd_policy *p, const struct sd_draft_tree *t, int32_t n_nodes, const int32_t *path,
                       int32_t n_acc) {
    if (n_nodes <= 0) return;
    int32_t m = SD_MAX(1, t->main_match);
    for (int32_t i = 0; i < n_acc; i++) count_level(p, bucket_of(p, t->main_store, m + i), true);
    /* A path that ran off the end of the draft was not rejected. */
    if (has_child(t, n_nodes, n_acc ? path[n_acc - 1] : -1))
        count_level(p, bucket_of(p, t->main_store, m + n_acc), false);
    refresh_rates(p);
}

void sd_policy_observe_skipped(struct sd_policy *p, const struct sd_draft_tree *t, int32_t n_nodes, int32_t next) {
    n_nodes = SD_MIN(n_nodes, t->n);
    if (n_nodes <= 0) return;
    bool hit = false;
    for (int32_t i = 0; i < n_nodes && !hit; i++) hit = t->parent[i] == -1 && t->tok[i] == next;
    count_level(p, bucket_of(p, t->main_store, SD_MAX(1, t->main_match)), hit);
    refresh_rates(p);
}

void sd_policy_observe_cost(struct sd_policy *p, int32_t opt, double ms) {
    if (opt < 0 || opt >= p->n_opts || !(ms > 0) || p->reproducible) return;
    bool guessed = true;
    for (int32_t o = 0; o < p->n_opts; o++) guessed = guessed && !p->measured[o];
    p->measured[opt] = true;
    if (guessed) {
        /* The first measurement turns the guessed row units into ms. */
        double scale = ms / p->cost_ms[opt];
        for (int32_t o = 0; o < p->n_opts; o++) p->cost_ms[o] *= scale;
        return;
    }
    p->cost_ms[opt] += COST_ALPHA * (ms - p->cost_ms[opt]);
}

void sd_policy_drop(struct sd_policy *p, int32_t opt) {
    if (opt >= 0 && opt < p->n_opts) p->usable[opt] = false;
}
