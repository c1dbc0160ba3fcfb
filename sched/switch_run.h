/*
 * sched/switch_run.h - the graph switch a prefill runs: the executor of
 * sched/switch.h's plans on the runtime's blocks (private to sched/).
 *
 * A prefill of n > 0 tokens calls, on the session's thread:
 *   sd_switch_begin    before its first chunk: blocks an earlier switch
 *                      left on G2 go back to G1 where that pays (in every
 *                      mode), and with switching on the loads are planned
 *                      and the switch is active;
 *   sd_switch_tick     before each compute unit u = c * N + i (chunk c,
 *                      block i): the loads the plan queues at u go to the
 *                      loader, and the blocks whose load is done move to G2;
 *   sd_switch_finish   once the last chunk's blocks have run, before the
 *                      last logits: every load is waited for, the blocks
 *                      left move to G2, and what the loader could not
 *                      prepare is prepared on the session's thread;
 *   sd_switch_abandon  in place of finish when the prefill fails.
 * A prefill ends its switch before it returns, either way, so none is
 * active between calls: decoding runs its graphs and never asks.
 *
 * Each call but begin does nothing where no switch is active.
 */
#ifndef SD_SWITCH_RUN_H
#define SD_SWITCH_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "sched/loader.h"
#include "sched/runtime.h"
#include "sched/switch.h"

/* A prefill's graph switch in progress: the plan, how far its loads are
 * queued, and one loader job per load. */
struct sd_switch_run {
    bool active; /* blocks are being switched and the switch has not finished */
    struct sd_switch_plan plan;
    int32_t next;                                /* the plan's next load to queue */
    struct sd_load_job job[SD_SWITCH_MAX_LOADS]; /* G2 of block b at b, the head's H2 at n_blocks */
};

void sd_switch_begin(struct sd_rt *rt, int32_t n);
/* err is scratch, left clear: a load the loader cannot take is logged and
 * its graph left to sd_switch_finish. */
void sd_switch_tick(struct sd_rt *rt, int32_t u, struct sd_err *err);
/* SDNPU_OK, or the failure of a prepare on this thread (SDNPU_ERR_OOM past
 * the memory limit); the switch has ended either way. */
int sd_switch_finish(struct sd_rt *rt, struct sd_err *err);
void sd_switch_abandon(struct sd_rt *rt);

/* Whether a switch is active (a switching prefill is running). */
bool sd_switch_active(const struct sd_rt *rt);
/* Before the L2-row head runs during a switch: wait for its load, if it
 * is on the loader, so that this thread may use it. */
void sd_switch_wait_head(struct sd_rt *rt);

#endif /* SD_SWITCH_RUN_H */
