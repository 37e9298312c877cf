/* launch.h — a planned deployment as the command lines that start it
 * (SGLang's servers and router; vLLM's servers where it runs the same). */
#ifndef RH_SIM_PLAN_LAUNCH_H
#define RH_SIM_PLAN_LAUNCH_H

#include <stdio.h>

#include "sim/plan/plan.h"

/* model_path: the Hugging Face id or folder the servers load. */
void plan_launch_lines(const plan_space *sp, const plan_cand *c, const char *model_path, FILE *f);

#endif
