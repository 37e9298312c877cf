/* result.h — a simulation result as JSON: the one form results travel in
 * (to Lua tables, between sweep workers, to files and back from job folders).
 *   {"metrics": {vLLM-style summary}, "series": {"t": [...], "batch_size": [...], ...},
 *    "requests": {"id": [...], "ttft": [...], ...}, "wall_s": x, "config": {...}}
 * Column arrays rather than arrays of objects keep large results compact. */
#ifndef RH_SIM_RESULT_H
#define RH_SIM_RESULT_H

#include <jansson.h>

#include "sim/sim.h"

json_t *sim_result_to_json(const sim_result *r, int with_requests);

#endif
