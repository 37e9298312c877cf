/* mhd_conn.h — what libmicrohttpd knows of a connection, for the servers
 * that guard their connections (util/conn_guard.h): `rehearse serve` and
 * `rehearse router`. */
#ifndef RH_SERVE_MHD_CONN_H
#define RH_SERVE_MHD_CONN_H

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdint.h>

#include "util/conn_guard.h"

/* The client's IPv4 address, host order (0: not IPv4). */
static inline uint32_t mhd_client_ip(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr || ci->client_addr->sa_family != AF_INET) return 0;
    return ntohl(((const struct sockaddr_in *)ci->client_addr)->sin_addr.s_addr);
}

/* The connection's entry in the guard, its socket context (NULL: unguarded). */
static inline rh_guard_conn *mhd_guard_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

#endif
