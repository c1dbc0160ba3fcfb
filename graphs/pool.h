/*
 * graphs/pool.h - a persistent thread pool for the CPU backend.
 *
 * The calling thread is worker 0; n_threads-1 workers wait for work. A run
 * hands the same function to every worker with its index and returns when
 * all have finished. Workers spin briefly before sleeping, because a decode
 * step issues a few hundred short runs and a condition-variable wake-up per
 * run would cost more than the work on small models.
 */
#ifndef SD_POOL_H
#define SD_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

struct sd_pool;

typedef void (*sd_pool_fn)(void *ctx, int ith, int nth);

int sd_pool_create(int n_threads, struct sd_pool **out, struct sd_err *err);
void sd_pool_free(struct sd_pool *p);
int sd_pool_n_threads(const struct sd_pool *p);
/* Run fn on every thread (the caller included); not reentrant. */
void sd_pool_run(struct sd_pool *p, sd_pool_fn fn, void *ctx);

/* Split [0, n) evenly: thread ith gets [*begin, *end). */
static inline void sd_split(int64_t n, int ith, int nth, int64_t *begin, int64_t *end) {
    int64_t per = n / nth, rem = n % nth;
    *begin = ith * per + (ith < rem ? ith : rem);
    *end = *begin + per + (ith < rem ? 1 : 0);
}

/* Units [0, n) of a job dealt as one contiguous range per thread: each
 * thread takes its own range from the front, a chunk at a time, and once
 * it is done takes chunks from the back of the others' ranges. Why: a
 * thread that streams weights asks for the bytes it will read next well
 * ahead (graphs/packed.h), which pays only where its next chunk follows
 * the one it is in; chunks dealt from one shared counter alternate between
 * the threads, so each chunk's last stretch and next start came in cold
 * (a one-row pass 3.6-5.2% slower on the Zen 4 guest, docs/benchmarks.md).
 * Taking from the others' backs keeps what a shared counter gave: a faster
 * core does more.
 * One slot a thread, on a cache line of its own; n < 2^32. */
struct sd_ranges {
    _Alignas(64) _Atomic uint64_t span; /* begin in the low half, end in the high */
};
void sd_ranges_init(struct sd_ranges *r, int nth, int64_t n);
/* The next chunk of at most `chunk` units for thread ith into [*begin,
 * *end); false once every unit is taken. Chunks from the thread's own range
 * come in ascending order; those taken from another's come from its back. */
bool sd_ranges_take(struct sd_ranges *r, int ith, int nth, int64_t chunk, int64_t *begin, int64_t *end);

#endif
