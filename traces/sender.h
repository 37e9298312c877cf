/* sender.h — when each request of a trace reaches the server.
 *
 * One rule for the simulator and the engine's replay, so a simulation and a
 * recording of the same trace see the same arrivals: requests go in arrival
 * order (trace order among ties); open loop, a request is sent at its
 * arrival / rate_scale; closed loop with N clients, at that time or when a
 * client frees up, whichever is later (a client frees up when its request
 * finishes, and clients are reused oldest-freed first). A client that
 * sends a session's first request (session_id != 0) keeps the session: it
 * sends each later turn once the turn before it finished, as a chat client
 * does, and takes a new session only after the last turn. */
#ifndef RH_TRACES_SENDER_H
#define RH_TRACES_SENDER_H

#include <stdint.h>

#include "traces/trace.h"

typedef struct tr_sender tr_sender;

/* clients 0: open loop. rate_scale > 0. NULL (with a message) when out of memory. */
tr_sender *tr_sender_new(const tr_trace *t, double rate_scale, uint32_t clients, rh_err *e);
/* The next request due by `now`: returns 1 with its trace index and the time
 * it was sent; 0 when none is due, with *next the time the next one will be
 * (INFINITY when none is left or every client is busy). */
int tr_sender_next(tr_sender *s, double now, uint32_t *index, double *sent, double *next);
/* Request `index` finished (or was refused) at `t`: its client sends its
 * session's next turn from then, or is free from then. */
void tr_sender_done(tr_sender *s, uint32_t index, double t);
/* Requests not sent yet. */
uint64_t tr_sender_left(const tr_sender *s);
void tr_sender_free(tr_sender *s);

#endif
