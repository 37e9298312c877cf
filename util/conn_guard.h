/* conn_guard.h — a server's open connections held to what libmicrohttpd's
 * own timeout cannot say: a deadline for a request's whole header, and the
 * count of connections per client address (for a per-client cap).
 *
 * libmicrohttpd's connection timeout measures inactivity, so a client that
 * sends one header byte every few seconds keeps a socket for ever; nginx's
 * client_header_timeout is a deadline instead, and so is this. The server
 * registers each connection's socket when it opens (rh_guard_open, with the
 * deadline for its first header), clears the deadline once a header is in
 * (what follows is the request's business), and sets a new one when a
 * response ended and the connection waits for its next request. It takes
 * the connection off (rh_guard_close) before the socket is closed:
 * libmicrohttpd's MHD_CONNECTION_NOTIFY_CLOSED comes before its close(), so
 * the guard never touches a descriptor that another socket may reuse.
 *
 * A thread of the guard's own wakes at the earliest deadline and shuts
 * every socket past its own down, both ways (shutdown(2)): the server's next
 * read on it sees the end and closes it as it closes one whose client left,
 * so no server state is touched from the guard's thread. Such a client gets
 * no answer: its header never came.
 *
 * Every call is thread-safe; one mutex, held only for list and count work. */
#ifndef RH_UTIL_CONN_GUARD_H
#define RH_UTIL_CONN_GUARD_H

#include <stdint.h>

#include "util/err.h"

typedef struct rh_guard rh_guard;
typedef struct rh_guard_conn rh_guard_conn;

/* Starts the guard's thread. NULL with e filled when it cannot. */
rh_guard *rh_guard_new(rh_err *e);
/* Stops the thread and frees the guard; connections still registered are
 * freed with it (their sockets are left alone). NULL is a no-op. */
void rh_guard_free(rh_guard *g);

/* A new connection: its socket, its client's IPv4 address (host order; 0
 * when not IPv4: counted nowhere) and the deadline of its first header
 * (rh_now() seconds; 0: none). NULL when out of memory: that connection
 * goes unguarded and uncounted, and the calls below take NULL. */
rh_guard_conn *rh_guard_open(rh_guard *g, int fd, uint32_t ip, double deadline);
/* A new deadline (0: none) for a connection not yet cut. */
void rh_guard_deadline(rh_guard *g, rh_guard_conn *c, double deadline);
/* Before its socket is closed: off the list, its client's count down, freed. */
void rh_guard_close(rh_guard *g, rh_guard_conn *c);

/* Connections open now: all of them, and those of one client. */
uint64_t rh_guard_open_total(rh_guard *g);
uint64_t rh_guard_open_from(rh_guard *g, uint32_t ip);
/* Connections shut down so far because a header missed its deadline. */
uint64_t rh_guard_cut_total(rh_guard *g);

/* A server's per-client cap and the margin past it that is still accepted
 * (to be told 429 or 503 rather than closed at accept): a cap of 0 means
 * half of max_total (rounded up); the margin is half of what the cap leaves
 * the others, at most 64 (64 when the cap leaves nothing). So a flood from
 * one address never takes the slots everyone else needs. */
uint32_t rh_guard_client_cap(uint32_t max_total, uint32_t per_client);
uint32_t rh_guard_client_margin(uint32_t max_total, uint32_t cap);

#endif
