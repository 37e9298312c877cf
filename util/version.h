/* version.h — the release, one place: `rehearse --version` prints it and
 * a server's /version answers it. */
#ifndef RH_VERSION_H
#define RH_VERSION_H

#define REHEARSE_VERSION "0.9.0"

#endif
