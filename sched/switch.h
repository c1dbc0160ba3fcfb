/*
 * sched/switch.h - when to load each block's decode graph during prefill
 * (progressive graph switching, paper section 3.2, equations 1-2).
 *
 * Prefill runs C chunks through N blocks: the compute units, in order,
 * are u = c * N + i (chunk c, block i); U = C * N is "after prefill". A
 * block's G2 graph is prepared ("loaded") on one loader thread, one load
 * at a time, in the plan's order, each queued at the start of a unit.
 * Block i switches to G2 (and gives back its G1) at the first of its units
 * that starts after its load has finished; from then on it runs each chunk
 * as L1/L2 passes of G2, d[i] instead of p[i]. The head's decode graph is
 * one more load with no compute units. The request's latency (makespan)
 * is the later of the end of the last unit and the end of the last load:
 * a load that does not finish under compute delays the first decoded
 * token by what is left of it.
 *
 * Three modes, all kept for evaluation:
 *   sync         every load after prefill, in block order, then the head;
 *   naive-async  each block's load queued after its own last unit, the
 *                head after prefill (the paper's Figure 8b 2);
 *   progressive  the paper's greedy: from a start unit, each load in turn
 *                is queued and the next k* units compute while it loads,
 *                k* the least k with T_load <= the sum of their compute
 *                times under their current graphs (eq. 1-2). The start unit
 *                and the order (blocks last first as in the paper, or first
 *                first; the head first or last) are those whose simulated
 *                makespan is least, and if sync or naive-async simulate
 *                faster the plan is theirs ("a schedule that cannot hide the
 *                load degrades to the best other mode"). Starting at unit 0
 *                as the paper does switches blocks early, and every chunk
 *                after that runs on G2, which costs more than G1 (L1/L2
 *                short passes instead of one long one; see README, "Graph
 *                switching"): the start unit is the one free choice added
 *                to eq. 2.
 *
 * The executor of these plans, which runs them on the runtime's blocks
 * during prefill, is sched/switch_run.c (private to sched/).
 *
 * A load is not free for the compute it overlaps where both share cores:
 * the simulation slows overlapped units by the measured slowdown, and sync
 * loads run on the session's threads at their own (faster) speed, so that
 * on a machine with no core to spare progressive degrades to sync.
 *
 * Finding the least makespan is NP-hard (a 2-Partition reduction, the
 * paper's Appendix A); tests/test_switch.c compares the greedy with a
 * brute-force search over every order and queue time on small instances.
 */
#ifndef SD_SWITCH_H
#define SD_SWITCH_H

#include <stdbool.h>
#include <stdint.h>

#include "sched/runtime.h"

#define SD_SWITCH_MAX_LOADS (SD_MAX_BLOCKS + 1)

/* The times the plan is made from (ms), from the profile or measured. */
struct sd_switch_costs {
    int32_t n_blocks;            /* N */
    int32_t n_chunks;            /* C >= 0 */
    double p[SD_MAX_BLOCKS];     /* block i, one chunk on G1 */
    double d[SD_MAX_BLOCKS];     /* block i, one chunk on G2 (L1/L2 passes) */
    double d_last;               /* the last chunk on G2 costs d[i] * d_last (a partial chunk runs fewer passes); 1 if full */
    double s[SD_MAX_BLOCKS];     /* block i's G2 load on the loader thread */
    double s_head;               /* the head's load */
    bool load[SD_MAX_BLOCKS];    /* block i needs its G2 loaded (false: it is on G2 already and runs d[i]) */
    bool load_head;
    /* How much a load slows the compute it overlaps: a unit runs at
     * 1 / (1 + slowdown) of its speed while the loader is busy (0 where the
     * loader has a core of its own, about 1 where the compute threads hold
     * every core: hiding a load then only moves it). */
    double slowdown;
    /* A load prepared on the session's thread (sync) takes sync_scale times
     * its time on the loader (the session's worker threads share it). */
    double sync_scale;
};

struct sd_switch_plan {
    enum sd_switch_mode mode;  /* the mode the plan follows (progressive may degrade to another) */
    int32_t n_loads;
    int32_t order[SD_SWITCH_MAX_LOADS]; /* load ids in the loader's order: block i is i, the head is N */
    int32_t start[SD_SWITCH_MAX_LOADS]; /* unit at whose start each is queued, nondecreasing; U = after prefill */
    int32_t start_unit;        /* progressive: the unit the greedy started at */
    double makespan_ms;        /* simulated: latency to the end of prefill and of every load */
    double prefill_ms;         /* simulated: the end of the last unit */
};

/* Simulate plan over costs: fills plan->makespan_ms and plan->prefill_ms
 * and returns the makespan. */
double sd_switch_simulate(const struct sd_switch_costs *c, struct sd_switch_plan *plan);

/* The plan of a mode (see above). mode SD_SWITCH_OFF plans no loads. */
void sd_switch_plan(const struct sd_switch_costs *c, enum sd_switch_mode mode, struct sd_switch_plan *plan);

/* The plan of the runtime's latest switching prefill. */
const struct sd_switch_plan *sd_rt_switch_plan(const struct sd_rt *rt);

/* "sync", "naive-async", "progressive", "off". */
const char *sd_switch_mode_name(enum sd_switch_mode mode);

#endif /* SD_SWITCH_H */
