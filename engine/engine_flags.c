/* engine_flags.c — the engine's own flags (see engine.h), parsed in one
 * place so serve, replay and validate spell and check them alike. One table
 * drives takes-value, set and help, as engine/core/config.c's does for the
 * scheduler's knobs: a flag is parsed by its kind, never by falling through
 * to whichever branch happens to come last. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/kernels.h"
#include "util/args.h"

enum flag_kind { F_STR, F_U64, F_U32, F_FRACTION, F_BACKEND, F_ADDR };

typedef struct flag {
    const char *name, *alias, *vllm;   /* vllm: vLLM's spelling, when it has another */
    enum flag_kind kind;
    size_t off;                 /* into engine_config */
    uint32_t lo, hi;            /* F_U32 */
    const char *meta, *help;
} flag;

#define OFF(f) offsetof(engine_config, f)
static const flag flags[] = {
    {"model", NULL, NULL, F_STR, OFF(model), 0, 0, "MODEL", "preset name, config.json or Hugging Face directory (required; under --backend sim, the model the cost file names when it names one)"},
    {"weights", NULL, NULL, F_STR, OFF(weights), 0, 0, "PATH", "safetensors weights (default: MODEL's own, else dummy)"},
    {"weight-seed", NULL, NULL, F_U64, OFF(weight_seed), 0, 0, "S", "seed of dummy weights (0)"},
    {"backend", NULL, NULL, F_BACKEND, OFF(kernels), 0, 0, "cpu|cuda",
     "the kernels (default cpu; cuda needs a GPU and an nvcc build)"},
    {"mem-fraction-static", NULL, "gpu-memory-utilization", F_FRACTION, OFF(mem_fraction), 0, 0, "F",
     "KV pool share of free memory without --max-total-tokens (0.3)"},
    {"tp-size", "tp", "tensor-parallel-size", F_U32, OFF(tp.tp_size), 1, 4096, "N",
     "heads and MLP split over N ranks, an all-reduce after each (NCCL on GPUs; threads on the CPU) (1)"},
    {"nnodes", NULL, NULL, F_U32, OFF(tp.nnodes), 1, 4096, "M",
     "N/M ranks on each of M nodes (1; cuda only; every node needs --max-total-tokens)"},
    {"node-rank", NULL, NULL, F_U32, OFF(tp.node_rank), 0, 4095, "K", "this node's rank; nodes other than 0 follow node 0 (0)"},
    {"dist-init-addr", NULL, NULL, F_ADDR, OFF(tp.dist_init_addr), 0, 0, "HOST:PORT",
     "where the nodes meet (NCCL's bootstrap; needed with --nnodes)"},
    {"lora-paths", NULL, "lora-modules", F_STR, OFF(lora_paths), 0, 0, "NAME=PATH,...",
     "LoRA adapters (PEFT folders) to serve; a bare PATH is named by itself; requests pick one by "
     "model \"BASE:NAME\" or \"NAME\" (see --max-loras-per-batch)"},
    {"max-lora-rank", NULL, NULL, F_U32, OFF(max_lora_rank), 0, 4096, "R",
     "the largest adapter rank accepted; 0: any (0)"},
};
#undef OFF
#define N_FLAGS (sizeof flags / sizeof flags[0])

static const flag *find(const char *name)
{
    for (size_t i = 0; i < N_FLAGS; i++)
        if (!strcmp(name, flags[i].name) || (flags[i].alias && !strcmp(name, flags[i].alias)) ||
            (flags[i].vllm && !strcmp(name, flags[i].vllm)))
            return &flags[i];
    return NULL;
}

int engine_flag_takes_value(const char *name)
{
    return find(name) != NULL;
}

int engine_flag_set(engine_config *c, const char *name, const char *v, rh_err *e)
{
    const flag *f = find(name);
    if (!f) return 0;
    char what[64];
    snprintf(what, sizeof what, "--%s", f->name);
    void *at = (char *)c + f->off;
    switch (f->kind) {
    case F_STR:
        *(const char **)at = v;
        break;
    case F_U64: {
        unsigned long long u;
        if (rh_parse_u64(v, what, &u, e) < 0) return -1;
        *(uint64_t *)at = u;
        break;
    }
    case F_U32:
        if (rh_parse_u32(v, what, f->lo, f->hi, (uint32_t *)at, e) < 0) return -1;
        break;
    case F_FRACTION: {
        double d;
        if (rh_parse_double(v, what, &d, e) < 0) return -1;
        if (!(d > 0 && d <= 1)) return rh_fail(e, "%s must be in (0, 1] (got %s)", what, v);
        *(double *)at = d;
        break;
    }
    case F_BACKEND:
        /* The forward runs on the thread that steps the engine (or the
         * server's runner thread); a CUDA context comes up lazily on each
         * thread that calls a kernel. */
        if (!strcmp(v, "cpu")) {
            *(const kern_table **)at = kern_cpu();
        } else if (!strcmp(v, "cuda")) {
            const char *why = NULL;
            if (!(*(const kern_table **)at = kern_cuda(&why)))
                return rh_fail(e, "--backend cuda: %s", why && *why ? why : "the CUDA backend is not available");
        } else {
            return rh_fail(e, "--backend: '%s' is not cpu or cuda", v);
        }
        break;
    case F_ADDR: {
        const char *colon = strrchr(v, ':');
        if (!colon || colon == v || !colon[1]) return rh_fail(e, "%s: '%s' is not HOST:PORT", what, v);
        *(const char **)at = v;
        break;
    }
    }
    return 1;
}

const char *engine_flags_help(void)
{
    static char text[4096];
    if (text[0]) return text;
    size_t n = 0;
    for (size_t i = 0; i < N_FLAGS && n < sizeof text; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s %s", flags[i].name, flags[i].meta);
        n += (size_t)snprintf(text + n, sizeof text - n, "  %-26s  %s%s%s\n", left, flags[i].help,
                              flags[i].vllm ? "; also --" : "", flags[i].vllm ? flags[i].vllm : "");
    }
    return text;
}
