/* server/jobs.c - jobs, the bounded queue and the worker threads
 * (server/jobs.h). */
#include "server/jobs.h"

#include <stdarg.h>
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
    free(j->toks);
    for (size_t i = 0; i < j->n_stops; i++) free(j->stops[i]);
    free(j->schema);
    free(j->tools);
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

int sd_srv_bad(char *msg, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return 400;
}

bool sd_srv_job_append(struct job *j, const char *s, size_t n) {
    if (!sd_srv_text_append(&j->out, &j->n, &j->cap, s, n)) j->oom = true;
    return !j->oom;
}

struct worker {
    struct pool *pool;
    pthread_t th;
    struct sdnpu_session *s;
    pthread_cond_t cv;      /* signalled when a job is assigned to it or the pool closes */
    /* Under pool->mu: */
    struct job *cur;        /* assigned or running (NULL: none) */
    bool idle;              /* its session free, nothing assigned: the dispatcher may read s */
    uint64_t idle_since;    /* when it became idle (the pool's clock) */
    struct sdnpu_prompt_cache_stats seen; /* its session's cache stats as last added to the metrics */
    int32_t n_ctx0;                       /* its session's context as made (-c) */
    int32_t n_ctx_seen;                   /* ... and as last added to the metrics */
    /* The prompts of the last ROUTE_HISTORY jobs it took, copied, the newest at ran[(n_ran - 1) % ..]:
     * what its session likely holds (its context and prompt cache), for the routing of jobs while it
     * runs one and its session cannot be read. */
    struct ran {
        sdnpu_token *toks;
        size_t n;
    } ran[ROUTE_HISTORY];
    uint64_t n_ran;
};

struct pool {
    struct server_metrics *metrics;
    pthread_mutex_t mu;
    struct job **q; /* [cap] waiting jobs, oldest first */
    struct worker **hold; /* [cap] scratch: q[i]'s busy holder (find_holders) */
    int cap, len;
    bool stopping;  /* no more jobs; workers leave once the queue is empty */
    uint64_t clock; /* counts workers going idle: orders them by how long they have waited */
    uint64_t started; /* jobs given to a session so far (struct job's order) */
    int n_workers;  /* started */
    int n_cv;       /* workers whose cv is initialized */
    struct worker *w;
};

/* Whether a match of m tokens makes a job with n tokens worth taking out
 * of turn. */
static bool substantial(size_t m, size_t n) { return m > 0 && (m >= ROUTE_MIN_MATCH || 2 * m >= n); }

static size_t common_prefix(const sdnpu_token *a, size_t na, const sdnpu_token *b, size_t nb) {
    size_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* What w's session likely holds of j: the longest prefix j shares with a
 * prompt w ran lately. */
static size_t likely_match(const struct worker *w, const struct job *j) {
    size_t best = 0;
    for (int k = 0; k < ROUTE_HISTORY; k++) {
        size_t m = w->ran[k].toks ? common_prefix(w->ran[k].toks, w->ran[k].n, j->toks, j->n_toks) : 0;
        if (m > best) best = m;
    }
    return best;
}

/* The busy worker that likely holds most of j, if it holds a substantial
 * part; else NULL. */
static struct worker *busy_holder(struct pool *p, const struct job *j) {
    struct worker *h = NULL;
    size_t best = 0;
    for (int i = 0; i < p->n_workers; i++) {
        struct worker *v = &p->w[i];
        if (!v->cur) continue;
        size_t m = likely_match(v, j);
        if (substantial(m, j->n_toks) && m > best) best = m, h = v;
    }
    return h;
}

/* p->hold[i]: the busy holder of each queued job (p->mu held). */
static void find_holders(struct pool *p) {
    for (int i = 0; i < p->len; i++) p->hold[i] = busy_holder(p, p->q[i]);
}

/* Whether a job j that h holds, and another worker would have to prefill
 * pre tokens of, goes to that worker: when the work h has before j is
 * done (its running job, and the ones queued for it, as p->hold says) and
 * j's own outweigh the prefill; else j waits for h. A job's work is its
 * tokens to generate, each weighed as ROUTE_DECODE_WEIGHT prefilled ones
 * (its prompt is mostly held). */
static bool worth_taking(const struct pool *p, const struct job *j, const struct worker *h, size_t pre) {
    size_t work = ((size_t)j->max_tokens + (size_t)h->cur->max_tokens) * ROUTE_DECODE_WEIGHT;
    for (int i = 0; i < p->len; i++)
        if (p->hold[i] == h && p->q[i] != j) work += (size_t)p->q[i]->max_tokens * ROUTE_DECODE_WEIGHT;
    return work >= pre;
}

/* w took j (p->mu held): j gets its place in the start order, its prompt
 * joins w's history. */
static void ran(struct worker *w, struct job *j) {
    j->order = ++w->pool->started;
    struct ran *r = &w->ran[w->n_ran % ROUTE_HISTORY];
    sdnpu_token *t = malloc(j->n_toks * sizeof *t + 1);
    free(r->toks);
    r->toks = t;
    r->n = t ? j->n_toks : 0;
    if (t) memcpy(t, j->toks, j->n_toks * sizeof *t);
    w->n_ran++;
}

/* A queued job for w (p->mu held, p->len > 0), or NULL to leave them all
 * to busy workers that hold them: the oldest once it has been passed over
 * ROUTE_MAX_SKIPS times (unless a busy worker holds it and w does not: the
 * holder takes it when it finishes); else the one w's session matches
 * best, if that match is substantial; else the oldest that no busy worker
 * holds; else the oldest worth taking from its holder. Every job passed
 * over counts a skip (an older job is passed over whenever a younger one
 * is taken, so the oldest has the most). must: the pool is stopping, take
 * one. */
static struct job *take_queued(struct pool *p, struct worker *w, bool must) {
    int pick = 0;
    find_holders(p);
    bool overdue = p->q[0]->skips >= ROUTE_MAX_SKIPS &&
                   (!p->hold[0] || substantial(likely_match(w, p->q[0]), p->q[0]->n_toks));
    if (!must && !overdue) {
        int32_t best = 0;
        for (int i = 0; i < p->len; i++) {
            int32_t m = sdnpu_session_prefix_match(w->s, p->q[i]->toks, p->q[i]->n_toks);
            if (m > best) best = m, pick = i;
        }
        if (!substantial((size_t)best, p->q[pick]->n_toks)) {
            for (pick = 0; pick < p->len && p->hold[pick]; pick++) {
            }
            for (int i = 0; pick == p->len && i < p->len; i++) {
                struct job *j = p->q[i];
                size_t own = (size_t)sdnpu_session_prefix_match(w->s, j->toks, j->n_toks);
                if (worth_taking(p, j, p->hold[i], j->n_toks - own)) pick = i;
            }
            if (pick == p->len) return NULL;
        }
    }
    struct job *j = p->q[pick];
    for (int i = 0; i < pick; i++) p->q[i]->skips++;
    memmove(p->q + pick, p->q + pick + 1, (size_t)(p->len - pick - 1) * sizeof *p->q);
    p->len--;
    atomic_fetch_sub(&p->metrics->queued, 1);
    atomic_fetch_add(&p->metrics->running, 1);
    ran(w, j);
    return j;
}

/* Add what w's session's prompt cache did since last time to the metrics
 * (p->mu held; the session is not running). */
static void count_cache(struct pool *p, struct worker *w) {
    struct sdnpu_prompt_cache_stats now;
    if (sdnpu_session_prompt_cache_stats(w->s, &now) != SDNPU_OK) return;
    struct server_metrics *m = p->metrics;
    atomic_fetch_add(&m->pc_hits, now.hits - w->seen.hits);
    atomic_fetch_add(&m->pc_misses, now.misses - w->seen.misses);
    atomic_fetch_add(&m->pc_evictions, now.evictions - w->seen.evictions);
    atomic_fetch_add(&m->pc_entries, (long long)now.n_entries - w->seen.n_entries);
    atomic_fetch_add(&m->pc_bytes, (long long)now.bytes - (long long)w->seen.bytes);
    atomic_fetch_add(&m->pc_capacity, (long long)now.capacity - (long long)w->seen.capacity);
    w->seen = now;
    const int32_t n_ctx = sdnpu_session_n_ctx(w->s);
    atomic_fetch_add(&m->ctx_tokens, (long long)n_ctx - w->n_ctx_seen);
    w->n_ctx_seen = n_ctx;
}

/* A session that grew for a long request (sdnpu_session_reserve) goes back
 * to the context it was made with once what it holds fits there again,
 * after a request that needed no more: its KV cache is what a long document
 * took (12 KB a token on the 0.5B, 28 KB on the 1.5B), not to be kept for
 * one that may not come. After the long request itself it stays grown, for
 * the follow-ups on the same document. What it holds moves along and its
 * prompt cache stays; where the move fails (memory), it stays as it was. */
static void fit_back(struct worker *w) {
    if (sdnpu_session_n_ctx(w->s) > w->n_ctx0 && sdnpu_session_n_past(w->s) <= w->n_ctx0)
        (void)sdnpu_session_set_n_ctx(w->s, w->n_ctx0);
}

/* The job's generation is over (its reply not yet released): the session
 * is free. Its cache figures go to the metrics, and, if no job waits in
 * the queue (those it would take next), the worker counts as waiting from
 * now, so a follow-up its client sends on reading the reply may come to
 * it; the worker takes it once the reply is out. */
static void session_done(void *ud) {
    struct worker *w = ud;
    struct pool *p = w->pool;
    fit_back(w); /* still the worker's alone: the dispatcher reads it once idle */
    pthread_mutex_lock(&p->mu);
    w->cur = NULL;
    atomic_fetch_sub(&p->metrics->running, 1);
    count_cache(p, w);
    if (p->len == 0 && !p->stopping) {
        w->idle = true;
        w->idle_since = ++p->clock;
    }
    pthread_mutex_unlock(&p->mu);
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct pool *p = w->pool;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (!w->cur && p->len > 0) w->cur = take_queued(p, w, p->stopping);
        if (!w->cur && !p->stopping) {
            /* Nothing for it: wait, readable by the dispatcher, until a job
             * is assigned (sd_srv_pool_submit) or the pool closes. */
            if (!w->idle) {
                w->idle = true;
                w->idle_since = ++p->clock;
            }
            while (!w->cur && !p->stopping) pthread_cond_wait(&w->cv, &p->mu);
            w->idle = false;
            continue;
        }
        w->idle = false;
        if (!w->cur) break; /* stopping, and the queue is empty */
        struct job *j = w->cur;
        pthread_mutex_unlock(&p->mu);
        sd_srv_job_run(j, w->s, session_done, w);
        sd_srv_job_release(j);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int sd_srv_pool_start(struct sdnpu_model *model, struct sdnpu_session_params sp, int n, int cap,
                      struct server_metrics *metrics, struct pool **out, char *err, size_t err_cap) {
    *out = NULL;
    struct pool *p = calloc(1, sizeof *p);
    if (!p) return snprintf(err, err_cap, "out of memory"), -1;
    p->metrics = metrics;
    p->cap = cap > 0 ? cap : 1;
    p->q = calloc((size_t)p->cap, sizeof *p->q);
    p->hold = calloc((size_t)p->cap, sizeof *p->hold);
    p->w = calloc((size_t)n, sizeof *p->w);
    pthread_mutex_init(&p->mu, NULL);
    if (!p->q || !p->hold || !p->w) {
        snprintf(err, err_cap, "out of memory");
        sd_srv_pool_stop(p);
        return -1;
    }
    for (; p->n_cv < n; p->n_cv++) pthread_cond_init(&p->w[p->n_cv].cv, NULL);
    for (int i = 0; i < n; i++) {
        struct worker *w = &p->w[i];
        w->pool = p;
        enum sdnpu_status rc = sdnpu_session_create(model, sp, &w->s);
        if (rc != SDNPU_OK) {
            snprintf(err, err_cap, "session %d: %s: %s", i + 1, sdnpu_status_str(rc), sdnpu_model_last_error(model));
            sd_srv_pool_stop(p);
            return -1;
        }
        w->n_ctx0 = sdnpu_session_n_ctx(w->s);
        count_cache(p, w); /* its capacity and context; nothing runs yet */
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
    bool ok = !p->stopping;
    /* The waiting worker whose session holds the longest substantial
     * prefix of the job's prompt; else, of those waiting, the one waiting
     * longest, unless a busy worker holds the job and is worth waiting for
     * (then it is queued for that one). */
    struct worker *to = NULL;
    size_t best = 0;
    for (int i = 0; ok && i < p->n_workers; i++) {
        struct worker *w = &p->w[i];
        if (!w->idle || w->cur) continue;
        size_t m = (size_t)sdnpu_session_prefix_match(w->s, j->toks, j->n_toks);
        if (!substantial(m, j->n_toks)) m = 0;
        if (!to || m > best || (m == best && w->idle_since < to->idle_since)) best = m, to = w;
    }
    if (to && !best && p->len < p->cap) {
        struct worker *h = busy_holder(p, j);
        find_holders(p);
        if (h && !worth_taking(p, j, h, j->n_toks)) to = NULL;
    }
    if (to) {
        sd_srv_job_ref(j);
        to->cur = j;
        to->idle = false;
        ran(to, j);
        atomic_fetch_add(&p->metrics->running, 1);
        pthread_cond_signal(&to->cv);
    } else if (ok && p->len < p->cap) {
        sd_srv_job_ref(j);
        p->q[p->len++] = j;
        atomic_fetch_add(&p->metrics->queued, 1);
    } else {
        ok = false;
    }
    pthread_mutex_unlock(&p->mu);
    return ok;
}

void sd_srv_pool_close(struct pool *p) {
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    for (int i = 0; i < p->n_cv; i++) pthread_cond_signal(&p->w[i].cv);
    pthread_mutex_unlock(&p->mu);
}

void sd_srv_pool_cancel_all(struct pool *p) {
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->len; i++) atomic_store(&p->q[i]->cancel, true);
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
    for (int i = 0; i < p->n_cv; i++) {
        pthread_cond_destroy(&p->w[i].cv);
        for (int k = 0; k < ROUTE_HISTORY; k++) free(p->w[i].ran[k].toks);
    }
    /* Nothing is queued now: a worker leaves only when the queue is empty. */
    free(p->q);
    free(p->hold);
    free(p->w);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
