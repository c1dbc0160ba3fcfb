/* sched/switch.c - plans of the graph switch: the simulation they are
 * compared by, and the sync, naive-async and greedy progressive plans
 * (sched/switch.h). */
#include "sched/switch.h"

#include <math.h>
#include <string.h>

const char *sd_switch_mode_name(enum sd_switch_mode mode) {
    switch (mode) {
    case SD_SWITCH_SYNC: return "sync";
    case SD_SWITCH_NAIVE: return "naive-async";
    case SD_SWITCH_PROGRESSIVE: return "progressive";
    default: return "off";
    }
}

static int32_t n_units(const struct sd_switch_costs *c) { return c->n_chunks * c->n_blocks; }

static double load_ms(const struct sd_switch_costs *c, int32_t id) { return id == c->n_blocks ? c->s_head : c->s[id]; }

/* Unit u's compute time, on G2 or G1. */
static double unit_ms(const struct sd_switch_costs *c, int32_t u, bool on_g2) {
    int32_t i = u % c->n_blocks;
    if (!on_g2) return c->p[i];
    return u / c->n_blocks == c->n_chunks - 1 ? c->d[i] * c->d_last : c->d[i];
}

/* A unit of ms that starts with the loader busy for `busy` more ms runs
 * slower by `slowdown` while they overlap. */
static double stretched(double ms, double busy, double slowdown) {
    if (busy <= 0 || slowdown <= 0) return ms;
    double slow = ms * (1.0 + slowdown);
    return slow <= busy ? slow : busy + (ms - busy / (1.0 + slowdown));
}

double sd_switch_simulate(const struct sd_switch_costs *c, struct sd_switch_plan *plan) {
    int32_t N = c->n_blocks, U = n_units(c), q = 0;
    double done[SD_SWITCH_MAX_LOADS], t = 0, free_at = 0;
    for (int32_t j = 0; j <= N; j++) done[j] = INFINITY;
    double scale = plan->mode == SD_SWITCH_SYNC && c->sync_scale > 0 ? c->sync_scale : 1.0;
    for (int32_t u = 0; u <= U; u++) {
        /* Loads queued at this unit start when the loader is free. */
        for (; q < plan->n_loads && (plan->start[q] <= u || u == U); q++) {
            int32_t id = plan->order[q];
            free_at = fmax(t, free_at) + scale * load_ms(c, id);
            done[id] = free_at;
        }
        if (u == U) break;
        int32_t i = u % N;
        t += stretched(unit_ms(c, u, !c->load[i] || done[i] <= t), free_at - t, c->slowdown);
    }
    plan->prefill_ms = t;
    plan->makespan_ms = fmax(t, free_at);
    return plan->makespan_ms;
}

static void plan_init(struct sd_switch_plan *plan, enum sd_switch_mode mode) {
    memset(plan, 0, sizeof *plan);
    plan->mode = mode;
}

static void add_load(struct sd_switch_plan *plan, int32_t id, int32_t start) {
    plan->order[plan->n_loads] = id;
    plan->start[plan->n_loads++] = start;
}

/* sync: everything after prefill, blocks in order, then the head. */
static void plan_sync(const struct sd_switch_costs *c, struct sd_switch_plan *plan) {
    plan_init(plan, SD_SWITCH_SYNC);
    for (int32_t i = 0; i < c->n_blocks; i++)
        if (c->load[i]) add_load(plan, i, n_units(c));
    if (c->load_head) add_load(plan, c->n_blocks, n_units(c));
    sd_switch_simulate(c, plan);
}

/* naive-async: block i's load is queued once its last unit is done. */
static void plan_naive(const struct sd_switch_costs *c, struct sd_switch_plan *plan) {
    plan_init(plan, SD_SWITCH_NAIVE);
    int32_t last0 = (c->n_chunks - 1) * c->n_blocks;
    for (int32_t i = 0; i < c->n_blocks; i++)
        if (c->load[i]) add_load(plan, i, c->n_chunks > 0 ? last0 + i + 1 : 0);
    if (c->load_head) add_load(plan, c->n_blocks, n_units(c));
    sd_switch_simulate(c, plan);
}

/* Equation 2: the least k >= 1 such that load <= the compute time of
 * units [u, u + k) under the graphs on_g2 says, or 0 if the units left
 * do not cover it. */
static int32_t least_k(const struct sd_switch_costs *c, int32_t u, const bool *on_g2, double load) {
    double sum = 0;
    for (int32_t k = 1; u + k <= n_units(c); k++) {
        sum += unit_ms(c, u + k - 1, on_g2[(u + k - 1) % c->n_blocks]);
        if (load <= sum) return k;
    }
    return 0;
}

/* The greedy of eq. 1-2 from unit u0 over the loads in order[0..n): each
 * load is queued at the current unit, and the next k* units, computed
 * under the graphs the earlier rounds switched, cover it. Where no k
 * covers it, it and the loads after it are queued together there. */
static void greedy(const struct sd_switch_costs *c, const int32_t *order, int32_t n, int32_t u0,
                   struct sd_switch_plan *plan) {
    int32_t N = c->n_blocks, u = u0;
    bool on_g2[SD_MAX_BLOCKS];
    for (int32_t i = 0; i < N; i++) on_g2[i] = !c->load[i];
    plan_init(plan, SD_SWITCH_PROGRESSIVE);
    plan->start_unit = u0;
    for (int32_t q = 0; q < n; q++) {
        add_load(plan, order[q], u);
        int32_t k = least_k(c, u, on_g2, load_ms(c, order[q]));
        if (k == 0) {
            for (q++; q < n; q++) add_load(plan, order[q], u);
            break;
        }
        u += k;
        if (order[q] < N) on_g2[order[q]] = true;
    }
    sd_switch_simulate(c, plan);
}

/* The candidate orders: blocks last first (the paper's) or first first,
 * the head after the blocks or before them. */
static int32_t make_order(const struct sd_switch_costs *c, int variant, int32_t *order) {
    int32_t n = 0, N = c->n_blocks;
    bool head_first = variant & 2, last_first = !(variant & 1);
    if (c->load_head && head_first) order[n++] = N;
    for (int32_t k = 0; k < N; k++) {
        int32_t i = last_first ? N - 1 - k : k;
        if (c->load[i]) order[n++] = i;
    }
    if (c->load_head && !head_first) order[n++] = N;
    return n;
}

static void keep_best(struct sd_switch_plan *best, const struct sd_switch_plan *p) {
    if (p->makespan_ms < best->makespan_ms) *best = *p;
}

void sd_switch_plan(const struct sd_switch_costs *c, enum sd_switch_mode mode, struct sd_switch_plan *plan) {
    if (mode == SD_SWITCH_SYNC) return plan_sync(c, plan);
    if (mode == SD_SWITCH_NAIVE) return plan_naive(c, plan);
    if (mode != SD_SWITCH_PROGRESSIVE) {
        plan_init(plan, SD_SWITCH_OFF);
        sd_switch_simulate(c, plan);
        return;
    }
    struct sd_switch_plan p;
    plan_sync(c, plan);
    plan_naive(c, &p);
    keep_best(plan, &p);
    int32_t order[SD_SWITCH_MAX_LOADS];
    for (int variant = 0; variant < 4; variant++) {
        int32_t n = make_order(c, variant, order);
        /* Start units: 0 (the paper's) and every unit of the last 16
         * chunks, which is where any load of this model can hide. */
        int32_t U = n_units(c), from = SD_MAX(0, U - 16 * c->n_blocks);
        for (int32_t u0 = 0; u0 <= U; u0 = u0 < from ? from : u0 + 1) {
            greedy(c, order, n, u0, &p);
            keep_best(plan, &p);
        }
    }
}
