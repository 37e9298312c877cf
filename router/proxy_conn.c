/* proxy_conn.c — the router's client connections under hostile clients:
 *   - a request's whole header is due by a deadline (--header-timeout from
 *     the connection's start; --idle-timeout plus that from the previous
 *     response's end), kept by util/conn_guard.h, which shuts a late
 *     socket down: the client gets no answer, its header never came;
 *   - libmicrohttpd's own timeout (inactivity) is --header-timeout while a
 *     header comes, --idle-timeout after it (mid-body, between requests, a
 *     client not reading), and off while a request is forwarded (the
 *     forwarding decides: a long prefill sends nothing for a while);
 *   - one client address holds at most p->client_cap connections (429
 *     past it), and libmicrohttpd closes the few past the margin at accept;
 *   - a request being forwarded notices its client leaving (rp_client_gone),
 *     so the worker's transfer is closed and its slot freed at once. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "router/proxy_impl.h"
#include "engine/serve/mhd_conn.h"
#include "util/progress.h"

void rp_conn_event(void *cls, struct MHD_Connection *c, void **socket_ctx, enum MHD_ConnectionNotificationCode code)
{
    rproxy *p = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_ctx = fd ? rh_guard_open(p->guard, fd->connect_fd, mhd_client_ip(c), rh_now() + p->cfg.header_timeout_s)
                         : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        rh_guard_close(p->guard, *socket_ctx);
        *socket_ctx = NULL;
    }
}

uint64_t rp_conn_header_in(rproxy *p, struct MHD_Connection *c)
{
    rh_guard_deadline(p->guard, mhd_guard_of(c), 0);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)p->cfg.idle_timeout_s);
    uint32_t ip = mhd_client_ip(c);
    uint64_t mine = ip ? rh_guard_open_from(p->guard, ip) : 0;
    return mine > p->client_cap ? mine : 0;
}

void rp_conn_response_done(rproxy *p, struct MHD_Connection *c)
{
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)p->cfg.idle_timeout_s);
    rh_guard_deadline(p->guard, mhd_guard_of(c), rh_now() + p->cfg.idle_timeout_s + p->cfg.header_timeout_s);
}

bool rp_client_gone(int fd, bool *pending)
{
    if (fd < 0) return false;
    struct pollfd q = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&q, 1, 0) <= 0) return false;
    if (q.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (q.revents & POLLIN) *pending = true;
    return false;
}
