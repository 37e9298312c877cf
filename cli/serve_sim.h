/* serve_sim.h — the priced forward of `rehearse serve --backend sim`. */
#ifndef RH_CLI_SERVE_SIM_H
#define RH_CLI_SERVE_SIM_H

#include <stdint.h>

#include "engine/engine.h"
#include "sim/sim.h"
#include "sim/cost/cost.h"
#include "util/err.h"

typedef struct serve_sim serve_sim;

/* Loads the cost model and sets ec->pricer to it (and the KV pool from its
 * GPU when ec->core.max_total_tokens is 0); the pricer lives until free. */
/* serving: the serving flags (sim.h's serve_* fields of a sim_config;
 * the rest of it unused), resolved against the cost model. */
serve_sim *serve_sim_new(const char *cost_path, double noise, uint64_t seed, sim_config *serving, engine_config *ec,
                         rh_err *e);
void serve_sim_free(serve_sim *s);

#endif
