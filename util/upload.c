/* upload.c — see upload.h. */
#include "util/upload.h"

#include <stdlib.h>
#include <string.h>

int rh_upload_feed(rh_upload *u, const char *data, size_t size, size_t max)
{
    if (!u->too_big && u->n + size > max) {
        u->too_big = true;   /* read on and drop, then answer 413 */
        free(u->body);
        u->body = NULL;
    }
    if (u->too_big) return 0;
    if (u->n + size + 1 > u->cap) {
        size_t cap = u->cap ? u->cap : 4096;
        while (cap < u->n + size + 1) cap *= 2;
        char *b = realloc(u->body, cap);
        if (!b) return -1;
        u->body = b;
        u->cap = cap;
    }
    memcpy(u->body + u->n, data, size);
    u->n += size;
    u->body[u->n] = '\0';
    return 0;
}

void rh_upload_free(rh_upload *u)
{
    free(u->body);
    u->body = NULL;
    u->n = u->cap = 0;
}
