/*
 * sched/rt_state.h - the runtime's state, struct sd_rt, shared by the
 * runtime (runtime.c) and the graph switch's executor (switch_run.c),
 * which moves the runtime's blocks from one graph to the other (private
 * to sched/).
 *
 * Threads. All of it is the session's thread's; the loader thread touches
 * only a job's graph, between sd_loader_push and the poll or wait that
 * reports it finished (sched/loader.h).
 */
#ifndef SD_RT_STATE_H
#define SD_RT_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "graphs/graph.h"
#include "sched/loader.h"
#include "sched/runtime.h"
#include "sched/switch_run.h"

struct sd_rt {
    const struct sd_model *m;
    struct sd_backend *be;
    struct sd_kv_cache kv;
    int32_t n_ctx;
    int32_t L[SD_SET_N];
    int32_t n_blocks;
    int32_t b0[SD_MAX_BLOCKS], b1[SD_MAX_BLOCKS];
    struct sd_graph g[SD_SET_N][SD_MAX_BLOCKS];
    enum sd_graph_set block_set[SD_MAX_BLOCKS]; /* the graph each block runs prefill chunks on */
    int32_t x_rows;         /* rows of x and rows: L1 rounded up to whole L2 passes, at least L2 */
    struct sd_graph h1, h2; /* heads of 1 and L2 rows */
    struct sd_loader ld;    /* the memory account of every graph, and the loader thread */
    double prepare_ms;      /* preparing on the session's thread, and waiting for the loader */
    double wait_ms;         /* of which waiting for the loader */
    enum sd_switch_mode sw_mode;
    struct sd_switch_run sw; /* the prefill's graph switch (sched/switch_run.h) */
    /* The switch plan's times (ms): block b's run of one L1 chunk on G1 and
     * on G2 (as L2 passes), its G2 load on the loader, the head's (at
     * n_blocks), and the last session-thread prepare of each block's G1.
     * Profiled (sd_rt_set_block_costs) or measured; 0 unknown. */
    double run_ms[2][SD_MAX_BLOCKS];
    double load_ms[SD_MAX_BLOCKS + 1];
    double g1_prep_ms[SD_MAX_BLOCKS];
    double slowdown;   /* of compute while the loader prepares (sched/switch.h), measured; < 0 unknown */
    double sync_scale; /* a G2 prepare on the session's threads over one on the loader; 0 unknown */
    enum sd_prefill_policy policy;
    float *x;                 /* [x_rows][d] the residual stream crossing graphs */
    float *xh;                /* [L2][d] head input */
    float *hl;                /* [L2][n_vocab] head output when not every row is wanted */
    int32_t *am;              /* [L2] the head's greedy tokens (sd_graph_run_argmax) */
    struct sd_row *rows;      /* [x_rows] a graph's rows, padding included */
    double cost_ms[SD_SET_N]; /* one pass of a set over all blocks: profiled or measured; 0 unknown */
    bool cost_fixed[SD_SET_N];
    struct sd_rt_counts counts;
};

/* Prepare graph g (kind, layers [l0, l1), L rows) through the memory
 * account unless it is held already; the time counts in rt->prepare_ms. */
int sd_rt_prepare_graph(struct sd_rt *rt, struct sd_graph *g, enum sd_graph_kind kind, int32_t l0, int32_t l1,
                        int32_t L, struct sd_err *err);

/* A measured time into an estimate: the first sample, then a running mean. */
static inline void sd_rt_note_ms(double *est, double ms) { *est = *est > 0 ? 0.5 * *est + 0.5 * ms : ms; }

#endif /* SD_RT_STATE_H */
