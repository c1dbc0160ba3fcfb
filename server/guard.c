/* server/guard.c - deadlines, the per-address limit and the watch over
 * waiting clients (server/guard.h). */
#include "server/guard.h"

#include <errno.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

struct guard_conn {
    struct guard_conn *prev, *next;
    int fd;
    uint32_t addr;   /* IPv4, network order; 0 for other families */
    bool counted;    /* within its address's limit (else shut at once) */
    bool reading;    /* waiting for a request or reading one: the deadline runs */
    bool begun;      /* its request line has arrived */
    bool shut;       /* the guard shut it down */
    double deadline; /* monotonic seconds */
    struct job *job; /* the job the reply waits for, or NULL */
    uint64_t acked;  /* bytes the client's side acknowledged, at the last look */
    double taken;    /* when the client last took some (or had nothing to take) */
};

struct guard {
    struct guard_params p;
    struct server_metrics *m;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct guard_conn *head;
    int n;
    bool stopping;
    pthread_t th;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Whether the client closed its side. The peek leaves a pipelined next
 * request where it is. */
static bool client_gone(int fd) {
    struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pf, 1, 0) <= 0) return false;
    if (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Whether the client of a reply has taken none of it for the send timeout:
 * bytes wait in the socket, and the count its side has acknowledged has not
 * grown since then. A client's kernel acknowledges until its receive
 * buffer is full, so that count stops exactly when the client stops
 * reading; a client that reads slower than the model writes still moves
 * it. (Linux has had the count since 4.1; without it only libmicrohttpd's
 * inactivity timer is left.) */
static bool stopped_reading(struct guard *g, struct guard_conn *c, double t) {
    int q = 0;
    struct tcp_info ti;
    socklen_t n = sizeof ti;
    if (ioctl(c->fd, SIOCOUTQ, &q) != 0 || getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0 ||
        n < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof ti.tcpi_bytes_acked)
        return false;
    if (q == 0 || ti.tcpi_bytes_acked != c->acked) c->taken = t;
    c->acked = ti.tcpi_bytes_acked;
    return t - c->taken > g->p.send_timeout_s;
}

/* Shut the connection down; why is counted unless it was idle. */
static void cut(struct guard *g, struct guard_conn *c, enum reject_reason why) {
    shutdown(c->fd, SHUT_RDWR);
    c->shut = true;
    if (c->job) atomic_store(&c->job->cancel, true);
    if (why != REJ_REQUEST_TIMEOUT || c->begun) atomic_fetch_add(&g->m->rejected[why], 1);
}

/* One look at every connection (mu held). */
static void sweep(struct guard *g) {
    double t = now_s();
    for (struct guard_conn *c = g->head; c; c = c->next) {
        if (c->shut) continue;
        if (c->reading && t > c->deadline) cut(g, c, REJ_REQUEST_TIMEOUT);
        else if (c->job && stopped_reading(g, c, t)) cut(g, c, REJ_SEND_TIMEOUT);
        else if (c->job && !atomic_load(&c->job->cancel) && client_gone(c->fd)) atomic_store(&c->job->cancel, true);
    }
}

static void *guard_main(void *arg) {
    struct guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stopping) {
        sweep(g);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int sd_srv_guard_start(struct guard_params gp, struct server_metrics *m, struct guard **out, char *err,
                       size_t cap) {
    struct guard *g = calloc(1, sizeof *g);
    *out = NULL;
    if (!g) return snprintf(err, cap, "out of memory"), -1;
    g->p = gp;
    g->m = m;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->th, NULL, guard_main, g) != 0) {
        snprintf(err, cap, "cannot start the connection guard: %s", strerror(errno));
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        free(g);
        return -1;
    }
    *out = g;
    return 0;
}

void sd_srv_guard_stop(struct guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stopping = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->th, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

/* Connections from addr within its limit (mu held). */
static int held_by(struct guard *g, uint32_t addr) {
    int k = 0;
    for (struct guard_conn *c = g->head; c; c = c->next) k += c->counted && c->addr == addr;
    return k;
}

/* A fixed send buffer for every connection. Left to autotuning, the
 * kernel grows a loopback socket's to 4 MiB even while its client takes
 * nothing (the window is closed, so nothing is in flight): a whole long
 * stream fits, the reply "completes", and a client that stopped reading is
 * never seen. A stream moves tokens a second, a few KiB of them; 32 KiB
 * (the kernel doubles it) loses nothing and bounds what a silent client
 * holds of the kernel's memory. */
enum { SEND_BUFFER = 32 << 10 };

struct guard_conn *sd_srv_guard_open(struct guard *g, int fd, const struct sockaddr *addr) {
    struct guard_conn *c = calloc(1, sizeof *c);
    if (!c) {
        shutdown(fd, SHUT_RDWR);
        return NULL;
    }
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &(int){SEND_BUFFER}, sizeof(int));
    c->fd = fd;
    if (addr && addr->sa_family == AF_INET) c->addr = ((const struct sockaddr_in *)addr)->sin_addr.s_addr;
    c->reading = true;
    c->deadline = now_s() + g->p.request_timeout_s;
    pthread_mutex_lock(&g->mu);
    c->counted = !g->p.max_per_address || held_by(g, c->addr) < g->p.max_per_address;
    if (!c->counted) {
        shutdown(fd, SHUT_RDWR);
        c->shut = true;
        atomic_fetch_add(&g->m->rejected[REJ_PER_ADDRESS], 1);
    }
    c->next = g->head;
    if (g->head) g->head->prev = c;
    g->head = c;
    g->n++;
    pthread_mutex_unlock(&g->mu);
    return c;
}

void sd_srv_guard_close(struct guard *g, struct guard_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (c->prev) c->prev->next = c->next;
    else g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    g->n--;
    pthread_mutex_unlock(&g->mu);
    free(c);
}

void sd_srv_guard_begun(struct guard *g, struct guard_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->begun = true;
    pthread_mutex_unlock(&g->mu);
}

void sd_srv_guard_working(struct guard *g, struct guard_conn *c, struct job *j) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->reading = false;
    c->job = j;
    c->acked = 0;
    c->taken = now_s();
    pthread_mutex_unlock(&g->mu);
}

void sd_srv_guard_idle(struct guard *g, struct guard_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->reading = true;
    c->begun = false;
    c->job = NULL;
    c->deadline = now_s() + g->p.request_timeout_s;
    pthread_mutex_unlock(&g->mu);
}

bool sd_srv_guard_was_shut(struct guard *g, struct guard_conn *c) {
    if (!c) return false;
    pthread_mutex_lock(&g->mu);
    bool shut = c->shut;
    pthread_mutex_unlock(&g->mu);
    return shut;
}

int sd_srv_guard_count(struct guard *g) {
    pthread_mutex_lock(&g->mu);
    int n = g->n;
    pthread_mutex_unlock(&g->mu);
    return n;
}
