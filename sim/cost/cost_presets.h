/* cost_presets.h — finding preset data files (models, GPUs) by name.
 *
 * A preset is named by a short name ("llama-3-70b") or by a file path (any
 * name holding a '/' or ending in ".json"; relative paths resolve against
 * the directory of the cost file that names them). A short name is looked
 * up as CATEGORY/NAME.json in, in order:
 *   1. each directory of $REHEARSE_PRESETS (colon-separated),
 *   2. <directory of the rehearse binary>/sim/cost/presets   (a source checkout),
 *   3. <directory of the binary>/../share/rehearse/presets (`make install`). */
#ifndef RH_COST_PRESETS_H
#define RH_COST_PRESETS_H

#include <stddef.h>

#include "util/err.h"

/* Resolves name in category ("models" or "gpus") to a readable file path.
 * base_dir is the directory relative paths start from (NULL: cwd). On
 * failure the message says what was searched and which names exist. */
int cost_preset_find(const char *category, const char *name, const char *base_dir, char *path,
                     size_t n, rh_err *e);
/* The preset names of a category on the search path, sorted, comma-separated. */
void cost_preset_list(const char *category, char *out, size_t n);

#endif
