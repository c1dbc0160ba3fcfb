/* server/jobs.c - jobs, the bounded queue and the worker threads
 * (server/jobs.h). */
#include "server/jobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct job *sd_srv_job_new(void) {
    struct job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 1;
    j->http_status = 200;
    return j;
}

void sd_srv_job_ref(struct job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void sd_srv_job_wake(struct job *j) {
    if (j->wake) j->wake(j);
}

void sd_srv_job_release(struct job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    free(j->prompt);
    for (size_t i = 0; i < j->n_msgs; i++) {
        free(j->roles[i]);
        free(j->texts[i]);
    }
    free(j->roles);
    free(j->texts);
    for (size_t i = 0; i < j->n_stops; i++) free(j->stops[i]);
    free(j->out);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

bool sd_srv_text_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *b = realloc(*buf, c);
        if (!b) return false;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

bool sd_srv_job_append(struct job *j, const char *s, size_t n) {
    if (!sd_srv_text_append(&j->out, &j->n, &j->cap, s, n)) j->oom = true;
    return !j->oom;
}

struct worker {
    struct pool *pool;
    pthread_t th;
    struct sdnpu_session *s;
    struct job *cur; /* under pool->mu */
};

struct pool {
    struct sdnpu_model *model;
    struct server_metrics *metrics;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job **q; /* [cap] ring */
    int cap, head, len;
    bool stopping; /* no more jobs; workers leave once the queue is empty */
    int n_workers;
    struct worker *w;
};

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct pool *p = w->pool;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->len == 0 && !p->stopping) pthread_cond_wait(&p->cv, &p->mu);
        if (p->len == 0) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        struct job *j = p->q[p->head];
        p->head = (p->head + 1) % p->cap;
        p->len--;
        w->cur = j;
        atomic_fetch_sub(&p->metrics->queued, 1);
        atomic_fetch_add(&p->metrics->running, 1);
        pthread_mutex_unlock(&p->mu);
        sd_srv_job_run(j, w->s, p->model);
        pthread_mutex_lock(&p->mu);
        w->cur = NULL;
        atomic_fetch_sub(&p->metrics->running, 1);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        sd_srv_job_release(j);
    }
}

int sd_srv_pool_start(struct sdnpu_model *model, struct sdnpu_session_params sp, int n, int cap,
                      struct server_metrics *metrics, struct pool **out, char *err, size_t err_cap) {
    *out = NULL;
    struct pool *p = calloc(1, sizeof *p);
    if (!p) return snprintf(err, err_cap, "out of memory"), -1;
    p->model = model;
    p->metrics = metrics;
    p->cap = cap > 0 ? cap : 1;
    p->q = calloc((size_t)p->cap, sizeof *p->q);
    p->w = calloc((size_t)n, sizeof *p->w);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (!p->q || !p->w) {
        snprintf(err, err_cap, "out of memory");
        sd_srv_pool_stop(p);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        struct worker *w = &p->w[i];
        w->pool = p;
        enum sdnpu_status rc = sdnpu_session_create(model, sp, &w->s);
        if (rc != SDNPU_OK) {
            snprintf(err, err_cap, "session %d: %s: %s", i + 1, sdnpu_status_str(rc), sdnpu_model_last_error(model));
            sd_srv_pool_stop(p);
            return -1;
        }
        if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
            sdnpu_session_free(w->s);
            w->s = NULL;
            snprintf(err, err_cap, "cannot start worker %d", i + 1);
            sd_srv_pool_stop(p);
            return -1;
        }
        p->n_workers = i + 1;
    }
    *out = p;
    return 0;
}

bool sd_srv_pool_submit(struct pool *p, struct job *j) {
    pthread_mutex_lock(&p->mu);
    bool ok = !p->stopping && p->len < p->cap;
    if (ok) {
        sd_srv_job_ref(j);
        p->q[(p->head + p->len) % p->cap] = j;
        p->len++;
        atomic_fetch_add(&p->metrics->queued, 1);
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return ok;
}

void sd_srv_pool_close(struct pool *p) {
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void sd_srv_pool_cancel_all(struct pool *p) {
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->len; i++) atomic_store(&p->q[(p->head + i) % p->cap]->cancel, true);
    for (int i = 0; i < p->n_workers; i++)
        if (p->w[i].cur) {
            atomic_store(&p->w[i].cur->cancel, true);
            sdnpu_session_cancel(p->w[i].s);
        }
    pthread_mutex_unlock(&p->mu);
}

bool sd_srv_pool_idle(struct pool *p) {
    pthread_mutex_lock(&p->mu);
    bool idle = p->len == 0;
    for (int i = 0; i < p->n_workers; i++) idle = idle && !p->w[i].cur;
    pthread_mutex_unlock(&p->mu);
    return idle;
}

void sd_srv_pool_stop(struct pool *p) {
    if (!p) return;
    sd_srv_pool_close(p);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->w[i].th, NULL);
    if (p->w)
        for (int i = 0; i < p->n_workers; i++) sdnpu_session_free(p->w[i].s);
    /* Nothing is queued now: a worker leaves only when the queue is empty. */
    free(p->q);
    free(p->w);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}
