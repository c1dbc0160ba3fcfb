/* sched/switch_run.c - the graph switch a prefill runs: its plan's costs,
 * its loads on the loader thread, and each block's move from G1 to G2
 * (sched/switch_run.h). */
#include "sched/switch_run.h"

#include <string.h>

#include "sched/rt_state.h"

/* The plan's times for a prefill of n tokens: what is profiled or
 * measured, and for what is not yet, rough shares of what is (a G2 chunk
 * 1.2 G1 chunks; a G2 load on the loader about a G1 prepare on the
 * session's threads; the head six blocks' loads). */
static void switch_costs(const struct sd_rt *rt, int32_t n, struct sd_switch_costs *c) {
    int32_t N = rt->n_blocks, L1 = rt->L[SD_SET_G1], L2 = rt->L[SD_SET_G2];
    memset(c, 0, sizeof *c);
    c->n_blocks = N;
    c->n_chunks = (n + L1 - 1) / L1;
    int32_t r = n - (c->n_chunks - 1) * L1;
    c->d_last = (double)((r + L2 - 1) / L2) / (double)(rt->x_rows / L2);
    double known = 0, sum_s = 0;
    int32_t n_known = 0;
    for (int32_t b = 0; b < N; b++)
        if (rt->run_ms[0][b] > 0) known += rt->run_ms[0][b], n_known++;
    for (int32_t b = 0; b < N; b++) {
        c->p[b] = rt->run_ms[0][b] > 0 ? rt->run_ms[0][b] : n_known ? known / n_known : 1.0;
        c->d[b] = rt->run_ms[1][b] > 0 ? rt->run_ms[1][b] : 1.2 * c->p[b];
        c->s[b] = rt->load_ms[b] > 0      ? rt->load_ms[b]
                  : rt->g1_prep_ms[b] > 0 ? rt->g1_prep_ms[b]
                                          : 0.5 * c->p[b];
        if (rt->g[SD_SET_G2][b].be) c->s[b] = 0; /* held already: switching it is free */
        c->load[b] = rt->block_set[b] == SD_SET_G1;
        sum_s += c->s[b];
    }
    c->s_head = rt->load_ms[N] > 0 ? rt->load_ms[N] : 6.0 * sum_s;
    c->load_head = !rt->h2.be;
    /* Until measured: a load steals a core where the compute threads hold
     * them all, and the session's threads prepare that many times faster. */
    int32_t threads = sd_pool_n_threads(rt->be->pool);
    c->slowdown = rt->slowdown >= 0 ? rt->slowdown : threads >= sd_n_cores() ? 1.0 : 0.0;
    c->sync_scale = rt->sync_scale > 0 ? rt->sync_scale : 1.0 / threads;
}

/* Load id (block, or the head at n_blocks) goes to the loader; a graph
 * held already is done at once. A job that cannot be queued stays idle:
 * the switch's end prepares that graph on this thread. */
static void queue_load(struct sd_rt *rt, int32_t id, struct sd_err *err) {
    struct sd_load_job *job = &rt->sw.job[id];
    bool head = id == rt->n_blocks;
    job->g = head ? &rt->h2 : &rt->g[SD_SET_G2][id];
    if (job->g->be) {
        job->state = SD_JOB_DONE;
        return;
    }
    struct sd_graph_shape shape = {head ? SD_GRAPH_HEAD : SD_GRAPH_BLOCK,
                                   head ? 0 : rt->b0[id],
                                   head ? 0 : rt->b1[id],
                                   rt->L[SD_SET_G2],
                                   rt->n_ctx,
                                   NULL,
                                   0};
    job->shape = shape;
    if (sd_loader_push(&rt->ld, job, err)) {
        SD_LOGW("%s; graph %d is prepared when the switch ends", err->msg, id);
        sd_err_clear(err);
    }
}

/* Block b moves to G2 (held by now) and gives back its G1. */
static void switch_block(struct sd_rt *rt, int32_t b) {
    struct sd_load_job *job = &rt->sw.job[b];
    if (job->ms > 0) sd_rt_note_ms(&rt->load_ms[b], job->ms);
    job->ms = 0;
    sd_loader_release(&rt->ld, &rt->g[SD_SET_G1][b]);
    rt->block_set[b] = SD_SET_G2;
}

/* Before unit u of the prefill: queue the loads the plan queues here, and
 * switch every block whose load has finished (eq. 1-2's rounds). */
static void tick(struct sd_rt *rt, int32_t u, struct sd_err *err) {
    struct sd_switch_run *w = &rt->sw;
    if (w->plan.mode == SD_SWITCH_SYNC) return;
    while (w->next < w->plan.n_loads && w->plan.start[w->next] <= u)
        queue_load(rt, w->plan.order[w->next++], err);
    for (int32_t b = 0; b < rt->n_blocks; b++)
        if (rt->block_set[b] == SD_SET_G1 && w->job[b].g &&
            sd_loader_poll(&rt->ld, &w->job[b]) == SD_JOB_DONE)
            switch_block(rt, b);
}

void sd_switch_tick(struct sd_rt *rt, int32_t u, struct sd_err *err) {
    if (rt->sw.active) tick(rt, u, err);
}

/* Wait for a load; the time counts as preparation the request waited for.
 * A job waited for once is done with (its g forgotten, its ms kept). */
static void wait_load(struct sd_rt *rt, struct sd_load_job *job) {
    if (!job->g) return;
    double t0 = sd_time_ms();
    if (sd_loader_wait(&rt->ld, job) == SD_JOB_FAILED)
        SD_LOGD("loader: %s; preparing it on the session's thread", job->err.msg);
    job->g = NULL;
    double ms = sd_time_ms() - t0;
    rt->wait_ms += ms;
    rt->prepare_ms += ms;
}

/* The end of a switch, when the last chunk's blocks have run: the head's
 * G1-era graph is given back, the loads not yet queued are queued (sync
 * mode prepares here instead), every load is waited for (failed or not:
 * no graph is left to the loader, and what it holds is counted), every
 * block gives back its G1, and only then does this thread prepare the G2
 * graphs the loader could not (sync mode, a memory limit, no loader), so
 * that they have all the room one graph set leaves. */
int sd_switch_finish(struct sd_rt *rt, struct sd_err *err) {
    struct sd_switch_run *w = &rt->sw;
    if (!w->active) return SDNPU_OK;
    w->active = false;
    sd_loader_release(&rt->ld, &rt->h1);
    if (w->plan.mode != SD_SWITCH_SYNC) tick(rt, INT32_MAX, err);
    int32_t N = rt->n_blocks;
    for (int32_t j = 0; j <= N; j++)
        wait_load(rt, &w->job[j]);
    for (int32_t b = 0; b < N; b++)
        if (rt->block_set[b] == SD_SET_G1) switch_block(rt, b);
    int rc = SDNPU_OK;
    for (int32_t b = 0; b < N && !rc; b++) {
        struct sd_graph *g = &rt->g[SD_SET_G2][b];
        bool fresh = !g->be;
        rc = sd_rt_prepare_graph(rt, g, SD_GRAPH_BLOCK, rt->b0[b], rt->b1[b], rt->L[SD_SET_G2], err);
        /* A prepare here, against the loader's time for the same graph. */
        if (!rc && fresh && rt->load_ms[b] > 0)
            sd_rt_note_ms(&rt->sync_scale, g->prepare_ms / rt->load_ms[b]);
    }
    if (w->job[N].ms > 0) sd_rt_note_ms(&rt->load_ms[N], w->job[N].ms);
    memset(w->job, 0, sizeof w->job);
    return rc ? rc : sd_rt_prepare_graph(rt, &rt->h2, SD_GRAPH_HEAD, 0, 0, rt->L[SD_SET_G2], err);
}

/* Blocks left on G2 by an earlier request go back to G1 for a prefill of
 * n tokens when its whole chunks save more on G1 than preparing G1 again
 * costs (a long document); a short one (a chat turn) runs on G2. A
 * switching request gives G2 back first, to stay within one set. */
static void restore_g1(struct sd_rt *rt, int32_t n) {
    int32_t full = n / rt->L[SD_SET_G1];
    double gain = 0, cost = 0;
    bool any = false;
    for (int32_t b = 0; b < rt->n_blocks; b++) {
        if (rt->block_set[b] != SD_SET_G2) continue;
        any = true;
        double p = rt->run_ms[0][b], d = rt->run_ms[1][b];
        gain += p > 0 && d > 0 ? full * (d - p) : full * 0.2 * (p > 0 ? p : 1.0);
        cost += rt->g1_prep_ms[b] > 0 ? rt->g1_prep_ms[b] : rt->load_ms[b];
    }
    if (!any || gain <= cost) return;
    for (int32_t b = 0; b < rt->n_blocks; b++) {
        if (rt->block_set[b] != SD_SET_G2) continue;
        if (rt->sw_mode != SD_SWITCH_OFF) sd_loader_release(&rt->ld, &rt->g[SD_SET_G2][b]);
        rt->block_set[b] = SD_SET_G1;
    }
}

/* The start of a switching prefill of n tokens: plan the loads, and in
 * progressive mode give back the one-row head now (the prefill's last
 * logits will come from H2, so the two heads are never held at once). */
static void plan_switch(struct sd_rt *rt, int32_t n) {
    struct sd_switch_run *w = &rt->sw;
    struct sd_switch_costs c;
    switch_costs(rt, n, &c);
    enum sd_switch_mode mode = sd_loader_can_load(&rt->ld) ? rt->sw_mode : SD_SWITCH_SYNC;
    sd_switch_plan(&c, mode, &w->plan);
    memset(w->job, 0, sizeof w->job);
    w->next = 0;
    w->active = true;
    if (w->plan.mode == SD_SWITCH_PROGRESSIVE) sd_loader_release(&rt->ld, &rt->h1);
    for (int32_t b = 0; b < rt->n_blocks; b++)
        sd_loader_release(&rt->ld, &rt->g[SD_SET_G0][b]);
    SD_LOGD("graph switch: %s plan, %d loads from unit %d of %d, simulated %.1f ms (prefill %.1f ms)",
            sd_switch_mode_name(w->plan.mode), w->plan.n_loads, w->plan.start_unit, c.n_chunks * c.n_blocks,
            w->plan.makespan_ms, w->plan.prefill_ms);
}

void sd_switch_begin(struct sd_rt *rt, int32_t n) {
    restore_g1(rt, n);
    if (rt->sw_mode != SD_SWITCH_OFF) plan_switch(rt, n);
}

/* A prefill that failed ends its switch too, so that no load is left in
 * flight for the next call; a second failure there changes nothing the
 * caller is told. */
void sd_switch_abandon(struct sd_rt *rt) {
    struct sd_err ignored = {0};
    if (rt->sw.active && sd_switch_finish(rt, &ignored)) SD_LOGD("after a failed prefill: %s", ignored.msg);
}

bool sd_switch_active(const struct sd_rt *rt) { return rt->sw.active; }

void sd_switch_wait_head(struct sd_rt *rt) {
    if (rt->sw.active) wait_load(rt, &rt->sw.job[rt->n_blocks]);
}

const struct sd_switch_plan *sd_rt_switch_plan(const struct sd_rt *rt) { return &rt->sw.plan; }
