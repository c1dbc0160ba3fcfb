/* graphs/pool.c - persistent workers: spin, then sleep on a condvar. */
#include "graphs/pool.h"

#include <assert.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define SPIN_ROUNDS 20000

struct sd_pool;

struct worker {
    struct sd_pool *pool;
    int ith;
    pthread_t thread;
};

struct sd_pool {
    int n_threads;
    struct worker *workers;     /* [n_threads - 1] */
    _Atomic unsigned generation; /* bumped once per run */
    _Atomic int pending;        /* workers still busy in this run */
    _Atomic int stop;
    sd_pool_fn fn;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct sd_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (atomic_load(&p->stop)) return NULL;
            if (++spins < SPIN_ROUNDS) {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
                continue;
            }
            if (spins < 2 * SPIN_ROUNDS) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = gen;
        p->fn(p->ctx, w->ith, p->n_threads);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

int sd_pool_create(int n_threads, struct sd_pool **out, struct sd_err *err) {
    *out = NULL;
    if (n_threads <= 0) n_threads = sd_n_cores();
    if (n_threads > 256) n_threads = 256;
    struct sd_pool *p = sd_calloc(1, sizeof *p);
    if (!p) return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for the thread pool");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->workers = sd_calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) goto fail_alloc;
        for (int i = 0; i < n_threads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].ith = i + 1;
            if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
                p->n_threads = i + 1; /* join the ones that started */
                sd_pool_free(p);
                return sd_err_set(err, SDNPU_ERR_BACKEND, "could not start worker thread %d of %d", i + 1, n_threads);
            }
        }
    }
    *out = p;
    return SDNPU_OK;
fail_alloc:
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    sd_free(p);
    return sd_err_set(err, SDNPU_ERR_OOM, "out of memory for %d workers", n_threads);
}

void sd_pool_free(struct sd_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads - 1; i++) pthread_join(p->workers[i].thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    sd_free(p->workers);
    sd_free(p);
}

int sd_pool_n_threads(const struct sd_pool *p) { return p->n_threads; }

void sd_pool_run(struct sd_pool *p, sd_pool_fn fn, void *ctx) {
    if (p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n_threads);
    /* Spin briefly, then yield: when other processes hold the cores, a
     * worker may be descheduled, and spinning through our own time slice
     * would only delay it further. */
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
        if (++spins < SPIN_ROUNDS) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
            sched_yield();
        }
    }
}

static uint64_t span_of(int64_t begin, int64_t end) { return (uint64_t)begin | (uint64_t)end << 32; }

void sd_ranges_init(struct sd_ranges *r, int nth, int64_t n) {
    assert(n >= 0 && n < ((int64_t)1 << 32));
    for (int t = 0; t < nth; t++) {
        int64_t b, e;
        sd_split(n, t, nth, &b, &e);
        atomic_store_explicit(&r[t].span, span_of(b, e), memory_order_relaxed);
    }
}

/* A chunk from the front (or back) of range t. */
static bool take_from(struct sd_ranges *r, int t, int64_t chunk, bool front, int64_t *begin, int64_t *end) {
    uint64_t s = atomic_load_explicit(&r[t].span, memory_order_relaxed);
    for (;;) {
        const int64_t b = (int64_t)(uint32_t)s, e = (int64_t)(s >> 32);
        if (b >= e) return false;
        const int64_t cut = front ? SD_MIN(b + chunk, e) : SD_MAX(e - chunk, b);
        const uint64_t next = front ? span_of(cut, e) : span_of(b, cut);
        if (atomic_compare_exchange_weak_explicit(&r[t].span, &s, next, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *begin = front ? b : cut;
            *end = front ? cut : e;
            return true;
        }
    }
}

bool sd_ranges_take(struct sd_ranges *r, int ith, int nth, int64_t chunk, int64_t *begin, int64_t *end) {
    if (take_from(r, ith, chunk, true, begin, end)) return true;
    for (int k = 1; k < nth; k++)
        if (take_from(r, (ith + k) % nth, chunk, false, begin, end)) return true;
    return false;
}
