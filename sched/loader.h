/*
 * sched/loader.h - the runtime's loader thread and the memory account it
 * shares with the session's thread (private to sched/).
 *
 * Every graph the runtime holds is prepared through this account, on the
 * session's thread (sd_loader_prepare) or on the loader thread (a job):
 * each prepare first reserves the backend's estimate under the lock, so
 * that prepared + reserved never passes the memory limit, at any moment,
 * whichever thread prepares. Prepared counts the graphs' own bytes and the
 * buffers the backend shares among them (forward scratch); a job's
 * estimate counts the shared buffers it would use as new, since the
 * session's thread may free them before the job takes them. A job that does not fit fails at once with
 * SDNPU_ERR_OOM (it never waits for memory: the session's thread may hold
 * what it would wait for); the session's thread then prepares that graph
 * itself once it has released what it can.
 *
 * Threads. A job's graph belongs to the loader from sd_loader_push until
 * sd_loader_poll or sd_loader_wait reports it finished; the session's
 * thread must not read or write it in between. Everything else is the
 * session's thread's.
 */
#ifndef SD_LOADER_H
#define SD_LOADER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "graphs/graph.h"

enum sd_job_state { SD_JOB_IDLE = 0, SD_JOB_QUEUED, SD_JOB_RUNNING, SD_JOB_DONE, SD_JOB_FAILED };

struct sd_load_job {
    struct sd_graph *g;          /* where the prepared graph goes */
    struct sd_graph_shape shape;
    enum sd_job_state state;     /* under the loader's lock */
    struct sd_err err;           /* why it failed */
    double ms;                   /* the prepare's time on the loader */
};

#define SD_LOADER_QUEUE 80

struct sd_loader {
    struct sd_backend *be;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool started, stop, running;
    struct sd_load_job *queue[SD_LOADER_QUEUE]; /* FIFO [head, tail) */
    int head, tail;
    size_t limit;                /* 0 = none */
    size_t own;                  /* the graphs' own prepared bytes */
    size_t prepared;             /* own + the backend's shared buffers */
    size_t reserved, peak;
    double busy_ms;              /* time spent preparing on the loader */
};

int sd_loader_init(struct sd_loader *l, struct sd_backend *be, size_t limit, struct sd_err *err);
/* Stop the thread (a running job finishes; queued ones are dropped, their
 * state back to idle) and free the lock. The graphs are the caller's. */
void sd_loader_fini(struct sd_loader *l);

/* On the session's thread: prepare shape into g through the account. */
int sd_loader_prepare(struct sd_loader *l, const struct sd_graph_shape *shape, struct sd_graph *g, struct sd_err *err);
void sd_loader_release(struct sd_loader *l, struct sd_graph *g);

/* Whether the backend can prepare on a loader thread at all. */
bool sd_loader_can_load(const struct sd_loader *l);
/* Queue a job (its g and shape set); starts the thread on first use.
 * Fails with SDNPU_ERR_STATE when the queue is full. */
int sd_loader_push(struct sd_loader *l, struct sd_load_job *job, struct sd_err *err);
/* The job's state now, without waiting. */
enum sd_job_state sd_loader_poll(struct sd_loader *l, struct sd_load_job *job);
/* Wait until the job has finished (returns its state: done, failed, or
 * idle if it was never queued). */
enum sd_job_state sd_loader_wait(struct sd_loader *l, struct sd_load_job *job);

/* Whether a job is queued or being prepared now. */
bool sd_loader_busy(struct sd_loader *l);

/* The account, read under the lock. */
size_t sd_loader_prepared(struct sd_loader *l);
/* The most prepared + reserved since the last reset. */
size_t sd_loader_peak(struct sd_loader *l);
void sd_loader_reset_peak(struct sd_loader *l);

#endif /* SD_LOADER_H */
