/* report.h — a plan as people read it: the ranked table, the best of each
 * GPU type, every candidate as CSV, the plan as JSON (deterministic: no
 * wall times, so a resumed or collected plan equals the first byte for
 * byte), and the Pareto plots of cost against p99 TTFT and goodput per
 * dollar. */
#ifndef RH_SIM_PLAN_REPORT_H
#define RH_SIM_PLAN_REPORT_H

#include <jansson.h>
#include <stdio.h>

#include "sim/plan/plan.h"

void plan_print(FILE *f, const plan_opts *o, const plan_space *sp, const plan_result *r, uint32_t top);
json_t *plan_to_json(const plan_opts *o, const plan_space *sp, const plan_result *r, const char *model_path);
/* DIR/candidates.csv (every candidate: refused, pruned or its last
 * evaluation), DIR/plan.json, DIR/launch.sh (the winner), and the plots
 * DIR/pareto-ttft.{png,svg} and DIR/pareto-goodput.{png,svg} (without
 * gnuplot: said on stderr, the rest written). */
int plan_write(const char *dir, const plan_opts *o, const plan_space *sp, const plan_result *r,
               const char *model_path, rh_err *e);

#endif
