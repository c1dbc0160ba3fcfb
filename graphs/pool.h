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

#endif
