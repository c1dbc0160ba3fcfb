/*
 * server/guard.h - inside the server (server.h is the face): the guard over
 * the open connections.
 *
 * libmicrohttpd polls the sockets on a few I/O threads and never waits on
 * one client, so idle sockets cost little memory and no thread. What it
 * does not do is the policy that keeps one client from holding many of
 * them; the guard does:
 *  - a deadline for a whole request, headers and body, counted from the
 *    connection's opening or from the end of its previous reply. An
 *    inactivity timer would let a client that trickles a byte a second keep
 *    a connection for ever; a deadline does not.
 *  - a limit on the connections one client address holds.
 *  - the clients of requests that wait for a job: libmicrohttpd stops polling
 *    a suspended connection, so the guard looks at its socket and cancels
 *    the job of a client that went away.
 *  - a send deadline. The kernel takes a reply into the socket's buffer
 *    whether or not the client reads it, so libmicrohttpd's inactivity
 *    timer never sees a client that stopped reading. The guard watches the
 *    bytes the client's side has acknowledged (TCP_INFO): when bytes wait
 *    and that count has not grown for the send timeout, the connection is
 *    shut and its job cancelled. Each connection's send buffer is fixed at
 *    64 KiB: autotuning grows it to MiBs for a client that takes nothing,
 *    and a whole stream would vanish into it.
 * A guard thread looks at every connection ten times a second. It closes a
 * connection by shutting its socket down: libmicrohttpd then reads the end
 * and frees the connection itself, on its own thread, as for any client
 * that leaves. That is safe because libmicrohttpd reports a connection
 * closed (sd_srv_guard_close) before it closes the descriptor, and the guard
 * shuts sockets down only under the lock sd_srv_guard_close takes.
 *
 * Every function may be called from any thread.
 */
#ifndef SD_SERVER_GUARD_H
#define SD_SERVER_GUARD_H

#include <stdbool.h>
#include <sys/socket.h>

#include "server/jobs.h"

struct guard;
struct guard_conn;

struct guard_params {
    int request_timeout_s; /* the deadline of a whole request */
    int send_timeout_s;    /* the longest a reply may wait on a client that takes none of it */
    int max_per_address;   /* connections one IPv4 address may hold; 0: no limit */
};

/* Start the guard thread. Returns 0, or -1 with the reason in err. */
int sd_srv_guard_start(struct guard_params gp, struct server_metrics *m, struct guard **out, char *err,
                       size_t cap);
/* Stop the thread and free the guard (every connection closed first). */
void sd_srv_guard_stop(struct guard *g);

/* A connection opened on socket fd from addr: its record (NULL when out of
 * memory: then it is shut at once). Over the per-address limit it is shut at
 * once too, and counted. Pair with sd_srv_guard_close. */
struct guard_conn *sd_srv_guard_open(struct guard *g, int fd, const struct sockaddr *addr);
void sd_srv_guard_close(struct guard *g, struct guard_conn *gc);
/* A request line arrived: a connection cut at its deadline from now on is
 * counted as refused (before it, an idle connection is closed quietly). */
void sd_srv_guard_begun(struct guard *g, struct guard_conn *gc);
/* The request is in: its deadline stops. j, when not NULL, is the job its
 * reply waits for: cancelled if the client goes away. j must stay alive
 * until sd_srv_guard_idle or sd_srv_guard_close. */
void sd_srv_guard_working(struct guard *g, struct guard_conn *gc, struct job *j);
/* The request was answered: the next request's deadline starts now. */
void sd_srv_guard_idle(struct guard *g, struct guard_conn *gc);
/* Whether the guard shut this connection down (its deadline passed). */
bool sd_srv_guard_was_shut(struct guard *g, struct guard_conn *gc);
/* Connections open now. */
int sd_srv_guard_count(struct guard *g);

#endif /* SD_SERVER_GUARD_H */
