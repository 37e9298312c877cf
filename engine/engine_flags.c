/* engine_flags.c — the engine's own flags (see engine.h), parsed in one
 * place so serve, replay and validate spell and check them alike. */
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/kernels.h"
#include "util/args.h"

static const char *const flags[] = {"model",      "weights", "weight-seed", "backend",       "mem-fraction-static",
                                    "tp-size",    "tp",      "nnodes",      "node-rank",     "dist-init-addr"};

int engine_flag_takes_value(const char *name)
{
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(name, flags[i])) return 1;
    return 0;
}

int engine_flag_set(engine_config *c, const char *name, const char *v, rh_err *e)
{
    if (!engine_flag_takes_value(name)) return 0;
    if (!strcmp(name, "model")) c->model = v;
    else if (!strcmp(name, "weights")) c->weights = v;
    else if (!strcmp(name, "dist-init-addr")) {
        const char *colon = strrchr(v, ':');
        if (!colon || colon == v || !colon[1]) return rh_fail(e, "--dist-init-addr: '%s' is not HOST:PORT", v);
        c->tp.dist_init_addr = v;
    } else if (!strcmp(name, "weight-seed")) {
        unsigned long long u;
        if (rh_parse_u64(v, "--weight-seed", &u, e) < 0) return -1;
        c->weight_seed = u;
    } else if (!strcmp(name, "backend")) {
        /* The forward runs on the thread that steps the engine (or the
         * server's runner thread); a CUDA context comes up lazily on each
         * thread that calls a kernel. */
        if (!strcmp(v, "cpu")) {
            c->kernels = kern_cpu();
        } else if (!strcmp(v, "cuda")) {
            const char *why = NULL;
            if (!(c->kernels = kern_cuda(&why)))
                return rh_fail(e, "--backend cuda: %s", why && *why ? why : "the CUDA backend is not available");
        } else {
            return rh_fail(e, "--backend: '%s' is not cpu or cuda", v);
        }
    } else if (!strcmp(name, "mem-fraction-static")) {
        double d;
        if (rh_parse_double(v, "--mem-fraction-static", &d, e) < 0) return -1;
        if (!(d > 0 && d <= 1)) return rh_fail(e, "--mem-fraction-static must be in (0, 1] (got %s)", v);
        c->mem_fraction = d;
    } else if (!strcmp(name, "tp-size") || !strcmp(name, "tp")) {
        if (rh_parse_u32(v, "--tp-size", 1, 4096, &c->tp.tp_size, e) < 0) return -1;
    } else if (!strcmp(name, "nnodes")) {
        if (rh_parse_u32(v, "--nnodes", 1, 4096, &c->tp.nnodes, e) < 0) return -1;
    } else {
        if (rh_parse_u32(v, "--node-rank", 0, 4095, &c->tp.node_rank, e) < 0) return -1;
    }
    return 1;
}

const char *engine_flags_help(void)
{
    return "  --model MODEL               preset name, config.json or Hugging Face directory (required)\n"
           "  --weights PATH              safetensors weights (default: MODEL's own, else dummy)\n"
           "  --weight-seed S             seed of dummy weights (0)\n"
           "  --backend cpu|cuda          the kernels (default cpu; cuda needs a GPU and an nvcc build)\n"
           "  --mem-fraction-static F     KV pool share of free memory without --max-total-tokens (0.3)\n"
           "  --tp-size N                 tensor parallel over N ranks: heads and MLP split, an all-reduce\n"
           "                              after each (GPUs with NCCL; threads on the CPU backend) (1)\n"
           "  --nnodes M, --node-rank K   N/M ranks on each of M nodes, this one K (1, 0; cuda only;\n"
           "                              nodes other than 0 follow node 0; all need --max-total-tokens)\n"
           "  --dist-init-addr HOST:PORT  where the nodes meet (NCCL's bootstrap; needed with --nnodes)\n";
}
