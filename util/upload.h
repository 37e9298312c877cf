/* upload.h — an HTTP request body taken piece by piece, as a server's
 * upload callback gets it, under a size cap: past the cap the bytes read so
 * far are dropped and too_big is set, so the server reads on and answers
 * 413 rather than holding a client's gigabytes. */
#ifndef RH_UPLOAD_H
#define RH_UPLOAD_H

#include <stdbool.h>
#include <stddef.h>

typedef struct rh_upload {
    char *body;         /* NUL-terminated; NULL until the first byte, and once too big */
    size_t n, cap;
    bool too_big;
} rh_upload;

/* Appends size bytes unless the body would pass max. 0, or -1 when out of memory. */
int rh_upload_feed(rh_upload *u, const char *data, size_t size, size_t max);
void rh_upload_free(rh_upload *u);

#endif
