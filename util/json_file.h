/* json_file.h — a JSON file written whole or not at all. */
#ifndef RH_UTIL_JSON_FILE_H
#define RH_UTIL_JSON_FILE_H

#include <jansson.h>
#include <stddef.h>

#include "util/err.h"

/* Dumps o (jansson flags) as the whole of PATH (util/atomic_file.h: a
 * failure never leaves half a file behind). -1 with "PATH: cannot write
 * WHAT" and why. */
int rh_json_save(const json_t *o, const char *path, size_t flags, const char *what, rh_err *e);

#endif
