/* sched/loader.c - the loader thread and the shared memory account
 * (sched/loader.h). */
#include "sched/loader.h"

#include <string.h>

int sd_loader_init(struct sd_loader *l, struct sd_backend *be, size_t limit, struct sd_err *err) {
    memset(l, 0, sizeof *l);
    l->be = be;
    l->limit = limit;
    if (pthread_mutex_init(&l->mu, NULL)) return sd_err_set(err, SDNPU_ERR_OOM, "cannot make the loader's lock");
    if (pthread_cond_init(&l->cv, NULL)) {
        pthread_mutex_destroy(&l->mu);
        return sd_err_set(err, SDNPU_ERR_OOM, "cannot make the loader's condition variable");
    }
    return SDNPU_OK;
}

void sd_loader_fini(struct sd_loader *l) {
    if (!l->be) return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    for (int i = l->head; i < l->tail; i++) l->queue[i]->state = SD_JOB_IDLE;
    l->head = l->tail = 0;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (l->started) pthread_join(l->thread, NULL);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    l->be = NULL;
}

/* Under the lock: the graphs' own bytes and the backend's shared buffers,
 * read again after each prepare and release (either may make or free one). */
static void recount_locked(struct sd_loader *l) {
    l->prepared = l->own + sd_backend_shared_bytes(l->be);
    l->peak = SD_MAX(l->peak, l->prepared + l->reserved);
}

static size_t left_locked(const struct sd_loader *l) {
    if (!l->limit) return SIZE_MAX;
    size_t used = l->prepared + l->reserved;
    return used >= l->limit ? 0 : l->limit - used;
}

/* Reserve shape's estimate if it fits; *left gets what the limit left. */
static bool reserve(struct sd_loader *l, const struct sd_graph_shape *shape, unsigned flags, size_t *est,
                    size_t *left) {
    pthread_mutex_lock(&l->mu);
    *left = left_locked(l);
    *est = l->be->i->estimate(l->be, shape, flags);
    bool fits = *est <= *left;
    if (fits) {
        l->reserved += *est;
        l->peak = SD_MAX(l->peak, l->prepared + l->reserved);
    }
    pthread_mutex_unlock(&l->mu);
    return fits;
}

/* Prepare through the account: reserve, prepare outside the lock, then
 * turn the reservation into the graph's own bytes. A shape that does not
 * fit is handed to prepare with the space left, so that it fails with the
 * message naming both sizes. */
static int account_prepare(struct sd_loader *l, const struct sd_graph_shape *shape, struct sd_graph *g, bool loader,
                           struct sd_err *err) {
    size_t est, left;
    bool fits = reserve(l, shape, loader ? SD_PREPARE_LOADER : 0, &est, &left);
    size_t lim = fits ? SIZE_MAX : left;
    int rc = loader ? sd_graph_prepare_on_loader(l->be, shape, lim, g, err) : sd_graph_prepare(l->be, shape, lim, g, err);
    pthread_mutex_lock(&l->mu);
    if (fits) l->reserved -= est;
    if (!rc) l->own += g->prepared_bytes;
    recount_locked(l);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int sd_loader_prepare(struct sd_loader *l, const struct sd_graph_shape *shape, struct sd_graph *g, struct sd_err *err) {
    return account_prepare(l, shape, g, false, err);
}

void sd_loader_release(struct sd_loader *l, struct sd_graph *g) {
    if (!g->be) return;
    pthread_mutex_lock(&l->mu);
    l->own -= g->prepared_bytes;
    pthread_mutex_unlock(&l->mu);
    sd_graph_release(g);
    pthread_mutex_lock(&l->mu);
    recount_locked(l);
    pthread_mutex_unlock(&l->mu);
}

bool sd_loader_can_load(const struct sd_loader *l) { return l->be->i->loader_prepare; }

/* The thread: take jobs in order and prepare each through the account. */
static void *loader_main(void *arg) {
    struct sd_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && l->head == l->tail) pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) break;
        struct sd_load_job *job = l->queue[l->head++];
        if (l->head == l->tail) l->head = l->tail = 0;
        job->state = SD_JOB_RUNNING;
        l->running = true;
        pthread_mutex_unlock(&l->mu);
        double t0 = sd_time_ms();
        sd_err_clear(&job->err);
        int rc = account_prepare(l, &job->shape, job->g, true, &job->err);
        double ms = sd_time_ms() - t0;
        SD_LOGD("loader: %s [%d,%d) L=%d %s in %.1f ms", job->shape.kind == SD_GRAPH_HEAD ? "head" : "block",
                job->shape.l0, job->shape.l1, job->shape.n_rows, rc ? "failed" : "prepared", ms);
        pthread_mutex_lock(&l->mu);
        job->ms = ms;
        l->busy_ms += ms;
        job->state = rc ? SD_JOB_FAILED : SD_JOB_DONE;
        l->running = false;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int sd_loader_push(struct sd_loader *l, struct sd_load_job *job, struct sd_err *err) {
    pthread_mutex_lock(&l->mu);
    if (l->tail == SD_LOADER_QUEUE) {
        pthread_mutex_unlock(&l->mu);
        return sd_err_set(err, SDNPU_ERR_STATE, "the loader's queue is full (%d jobs)", SD_LOADER_QUEUE);
    }
    if (!l->started) {
        if (pthread_create(&l->thread, NULL, loader_main, l)) {
            pthread_mutex_unlock(&l->mu);
            return sd_err_set(err, SDNPU_ERR_OOM, "cannot start the loader thread");
        }
        l->started = true;
    }
    job->state = SD_JOB_QUEUED;
    l->queue[l->tail++] = job;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return SDNPU_OK;
}

enum sd_job_state sd_loader_poll(struct sd_loader *l, struct sd_load_job *job) {
    pthread_mutex_lock(&l->mu);
    enum sd_job_state s = job->state;
    pthread_mutex_unlock(&l->mu);
    return s;
}

enum sd_job_state sd_loader_wait(struct sd_loader *l, struct sd_load_job *job) {
    pthread_mutex_lock(&l->mu);
    while (job->state == SD_JOB_QUEUED || job->state == SD_JOB_RUNNING) pthread_cond_wait(&l->cv, &l->mu);
    enum sd_job_state s = job->state;
    pthread_mutex_unlock(&l->mu);
    return s;
}

bool sd_loader_busy(struct sd_loader *l) {
    pthread_mutex_lock(&l->mu);
    bool busy = l->head < l->tail || l->running;
    pthread_mutex_unlock(&l->mu);
    return busy;
}

size_t sd_loader_prepared(struct sd_loader *l) {
    pthread_mutex_lock(&l->mu);
    size_t n = l->prepared;
    pthread_mutex_unlock(&l->mu);
    return n;
}

size_t sd_loader_peak(struct sd_loader *l) {
    pthread_mutex_lock(&l->mu);
    size_t n = l->peak;
    pthread_mutex_unlock(&l->mu);
    return n;
}

void sd_loader_reset_peak(struct sd_loader *l) {
    pthread_mutex_lock(&l->mu);
    l->peak = l->prepared + l->reserved;
    pthread_mutex_unlock(&l->mu);
}
