/* cost_efficiency.h — a roofline's efficiency factors set from a measured
 * table (`rehearse cost efficiency TABLE --roofline ROOF -o OUT`).
 *
 * For a few probe batches (prefill chunks of 256, 1024 and 2048 tokens;
 * decodes of 1, 8, 32 and 128 sequences at 1024 tokens of context each) the
 * table's measured operator times are summed into the roofline's operators
 * (q and kv projections into qkv_proj; gate/up, SiLU·mul and down into mlp;
 * ...) and set against the pure roofline's (every efficiency 1): an
 * operator's efficiency is roofline seconds / measured seconds over all
 * probes, kept within a roofline file's range [COST_EFF_MIN, 1]. With those factors the roofline prices each operator
 * on the probes as the table measured it (a collective's fixed latency
 * aside). Work the roofline does not count (RoPE, the KV write, sampling,
 * batch preparation, scheduling) stays out. Both files must describe the
 * same model (layers and hidden size) at the same tensor-parallel size. */
#ifndef RH_COST_EFFICIENCY_H
#define RH_COST_EFFICIENCY_H

#include "sim/cost/cost.h"
#include "sim/cost/roofline.h"
#include "util/err.h"

/* The smallest factor a roofline file takes (sim/cost/cost_roofline.c). */
#define COST_EFF_MIN 1e-6

typedef struct cost_eff_row {
    int op;                  /* enum rl_op */
    double roofline_s;       /* pure roofline, summed over the probes */
    double measured_s;       /* the table, summed over the probes */
    double efficiency;       /* roofline_s / measured_s within [COST_EFF_MIN, 1]; 0: not measured */
} cost_eff_row;

/* rows[op] for every enum rl_op. pure must be a roofline with every
 * efficiency 1, table a table model; hidden is the table's hidden size. */
int cost_efficiency_measure(const cost_model *table, uint32_t hidden, const cost_model *pure,
                            cost_eff_row rows[RL_N_OPS], rh_err *e);
/* The whole of `rehearse cost efficiency`: loads TABLE and ROOF, measures
 * the factors (rows) and writes OUT, ROOF with its "efficiency" replaced
 * (whole or not at all). */
int cost_efficiency_file(const char *table_path, const char *roof_path, const char *out, cost_eff_row rows[RL_N_OPS],
                         rh_err *e);

#endif
