/* cost_import.c — `rehearse cost import vidur PROFILE --model M -o COST`: a
 * table cost model from Vidur's measured operators (sim/cost/vidur_import.h),
 * so a user without that GPU simulates with its measured kernels. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sim/cost/cost.h"
#include "sim/cost/vidur_import.h"
#include "util/args.h"
#include "util/json_file.h"

static const char *help =
    "usage: rehearse cost import vidur PROFILE --model M -o COST [--tp N] [--gpu GPU]\n\n"
    "Writes a table cost model (COST.md, \"table\") from Vidur's measured per-operator\n"
    "times: PROFILE is an mlp.csv or its directory, e.g.\n"
    "../shared/gpu-profiles/vidur/compute/h100/meta-llama/Llama-2-7b-hf. Norms, the\n"
    "QKV, output, gate/up and down projections, rope, SiLU and the embedding are as\n"
    "measured; attention, the LM head and the all-reduce (no measurements of them\n"
    "come with the profiles) are the roofline's of M on the GPU, with its fitted\n"
    "kernels and measured collectives.\n"
    "  --model M   the model preset the profile measured (its shapes are checked)\n"
    "  --tp N      the tensor-parallel size whose rows to take (default 1)\n"
    "  --gpu GPU   the GPU preset (default: from the path, h100 -> h100-sxm, a100 -> a100-80g)\n"
    "  -o COST     the table cost file to write\n";

int cost_import_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        fputs(help, stdout);
        return 0;
    }
    rh_err e = {{0}};
    if (argc < 3 || strcmp(argv[2], "vidur")) {
        rh_fail(&e, "cost import reads 'vidur' profiles (see --help)");
        goto bad;
    }
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 3;
    const char *model = NULL, *gpu = NULL, *out = NULL, *name;
    unsigned long long tp = 1;
    while ((name = rh_args_next(&a))) {
        const char *v = rh_args_value(&a, &e);
        if (!v) goto bad;
        if (!strcmp(name, "model")) model = v;
        else if (!strcmp(name, "gpu")) gpu = v;
        else if (!strcmp(name, "o") || !strcmp(name, "output")) out = v;
        else if (!strcmp(name, "tp") || !strcmp(name, "tp-size")) {
            if (rh_parse_u64(v, "--tp", &tp, &e) < 0) goto bad;
            if (tp < 1 || tp > 64) {
                rh_fail(&e, "--tp must be 1..64 (got %s)", v);
                goto bad;
            }
        } else {
            rh_fail(&e, "unknown flag --%s (see --help)", name);
            goto bad;
        }
    }
    if (a.npos != 1 || !model || !out) {
        rh_fail(&e, "give one PROFILE, --model M and -o COST (see --help)");
        goto bad;
    }
    json_t *t = vidur_import_table(a.pos[0], model, gpu, (uint32_t)tp, &e);
    if (!t) goto bad;
    /* What is written must load: the table reader checks every grid. */
    char *text = json_dumps(t, JSON_COMPACT | JSON_REAL_PRECISION(10));
    cost_model *check = text ? cost_parse(text, out, &e) : NULL;
    free(text);
    if (!check) {
        json_decref(t);
        goto bad;
    }
    cost_free(check);
    int rc = rh_json_save(t, out, JSON_INDENT(1) | JSON_REAL_PRECISION(10), "the table cost model", &e);
    json_decref(t);
    if (rc < 0) goto bad;
    printf("wrote %s: a table of %s from %s\n", out, model, a.pos[0]);
    return 0;
bad:
    fprintf(stderr, "rehearse cost import: %s\n", e.msg);
    return 1;
}
