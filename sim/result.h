/* result.h — a simulation result as JSON: the one form results travel in
 * (to Lua tables, between sweep workers, to files and back from job folders).
 *   {"metrics": {vLLM-style summary}, "series": {"t": [...], "batch_size": [...], ...},
 *    "requests": {"id": [...], "ttft": [...], ...}, "wall_s": x, "config": {...}}
 * A cluster run adds "replicas": [{metrics of the requests it served, under
 * the same names, + replica, routed, steps, busy_s, series}] and
 * "imbalance_requests", "imbalance_busy" (most / mean; 1 is even), and
 * "requests" a "replica" column.
 * Column arrays rather than arrays of objects keep large results compact. */
#ifndef RH_SIM_RESULT_H
#define RH_SIM_RESULT_H

#include <jansson.h>

#include "sim/sim.h"

json_t *sim_result_to_json(const sim_result *r, int with_requests);
/* The per-replica metrics alone (no series): an array, empty for one server. */
json_t *sim_replicas_to_json(const sim_result *r);

#endif
