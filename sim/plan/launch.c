/* launch.c — the command lines that start a planned deployment: SGLang's
 * servers (and its router, or its prefill and decode servers behind the
 * router's PD mode), and vLLM's where vLLM runs the same thing.
 *
 * Names as each project spells them: sglang.launch_server's --tp-size,
 * --chunked-prefill-size, --max-running-requests, --speculative-*,
 * --disaggregation-mode; sglang_router.launch_router's --worker-urls,
 * --policy, --pd-disaggregation --prefill/--decode; vllm serve's
 * --tensor-parallel-size, --max-num-batched-tokens, --max-num-seqs,
 * --speculative-config. Expert parallelism is SGLang's --ep-size N and
 * vLLM's --enable-expert-parallel; data-parallel attention is SGLang's
 * --enable-dp-attention --dp-size N, and vLLM's --data-parallel-size N
 * over tensor-parallel 1 (its MoE layers then span all N GPUs). Replicas are numbered on consecutive ports and
 * GPUs, eight to a node, as a team would start them on one node; across
 * nodes the hosts change and the lines stay. */
#include "sim/plan/launch.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "engine/router/router.h"

/* sglang_router's policy for ours; NULL when it has none. */
static const char *sglang_router_policy(int p)
{
    switch ((router_policy)p) {
    case ROUTER_ROUND_ROBIN: return "round_robin";
    case ROUTER_CACHE_AWARE: return "cache_aware";
    case ROUTER_POWER_OF_TWO: return "power_of_two";
    default: return NULL;
    }
}

static void gpus_of(uint32_t first, uint32_t n, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%u", i ? "," : "", (first + i) % 8);
}

void plan_launch_lines(const plan_space *sp, const plan_cand *c, const char *model_path, FILE *f)
{
    uint32_t servers = c->replicas;
    /* DeepSeek's MTP drafts with the model's own layer; EAGLE needs its head. */
    bool own = !strcmp(sp->spec_algorithm, "NEXTN") || !strcmp(sp->spec_algorithm, "MTP");
    const char *draft = "DRAFT_MODEL_PATH";
    fprintf(f, "# SGLang: %u server%s of %u x %s%s\n", servers, servers == 1 ? "" : "s", c->tp,
            sp->gpus[c->gpu].name, c->prefill ? " (prefill-decode disaggregation)" : "");
    for (uint32_t i = 0; i < servers; i++) {
        char gpus[64];
        gpus_of(i * c->tp, c->tp, gpus, sizeof gpus);
        fprintf(f, "CUDA_VISIBLE_DEVICES=%s python -m sglang.launch_server --model-path %s --tp-size %u "
                   "--chunked-prefill-size %d --max-running-requests %u",
                gpus, model_path, c->tp, c->chunk, c->max_running);
        if (c->spec_steps)
            fprintf(f, " --speculative-algorithm %s%s%s --speculative-num-steps %u --speculative-eagle-topk 1 "
                       "--speculative-num-draft-tokens %u",
                    sp->spec_algorithm, own ? "" : " --speculative-draft-model-path ", own ? "" : draft,
                    c->spec_steps, c->spec_steps + 1);
        if (c->parallel & PLAN_PAR_EP) fprintf(f, " --ep-size %u", c->tp);
        if (c->parallel & PLAN_PAR_DP_ATTENTION) fprintf(f, " --enable-dp-attention --dp-size %u", c->tp);
        if (c->prefill) fprintf(f, " --disaggregation-mode %s", i < c->prefill ? "prefill" : "decode");
        fprintf(f, " --port %u &\n", 30000 + i);
    }
    const char *policy = sglang_router_policy(c->router);
    if (c->prefill) {
        fprintf(f, "python -m sglang_router.launch_router --pd-disaggregation");
        for (uint32_t i = 0; i < c->prefill; i++) fprintf(f, " --prefill http://127.0.0.1:%u", 30000 + i);
        for (uint32_t i = c->prefill; i < servers; i++) fprintf(f, " --decode http://127.0.0.1:%u", 30000 + i);
        if (policy && c->prefill >= 2) fprintf(f, " --policy %s", policy);
        fprintf(f, " --port 8000\n");
    } else if (servers >= 2) {
        fprintf(f, "python -m sglang_router.launch_router --worker-urls");
        for (uint32_t i = 0; i < servers; i++) fprintf(f, " http://127.0.0.1:%u", 30000 + i);
        if (policy) fprintf(f, " --policy %s", policy);
        fprintf(f, " --port 8000\n");
        if (!policy)
            fprintf(f, "# sglang_router has no %s policy; the plan simulated it: cache_aware, round_robin and "
                       "power_of_two are its own\n",
                    router_policy_name((router_policy)c->router));
    }
    if (c->prefill) {
        fprintf(f, "# vLLM: prefill-decode disaggregation needs a KV connector (--kv-transfer-config) and a proxy "
                   "of your choice; not written here\n");
        return;
    }
    fprintf(f, "# vLLM: the same servers (its scheduler is not SGLang's: check with rehearse sim --scheduler vllm)\n");
    for (uint32_t i = 0; i < servers; i++) {
        char gpus[64];
        gpus_of(i * c->tp, c->tp, gpus, sizeof gpus);
        bool dp = c->parallel & PLAN_PAR_DP_ATTENTION;
        fprintf(f, "CUDA_VISIBLE_DEVICES=%s vllm serve %s --tensor-parallel-size %u", gpus, model_path, dp ? 1 : c->tp);
        if (dp) fprintf(f, " --data-parallel-size %u", c->tp);
        if (c->parallel & PLAN_PAR_EP) fprintf(f, " --enable-expert-parallel");
        if (c->chunk > 0) fprintf(f, " --enable-chunked-prefill --max-num-batched-tokens %d", c->chunk);
        else fprintf(f, " --no-enable-chunked-prefill");
        fprintf(f, " --max-num-seqs %u", c->max_running);
        if (c->spec_steps) {
            const char *method = own ? "deepseek_mtp" : !strcmp(sp->spec_algorithm, "EAGLE3") ? "eagle3" : "eagle";
            fprintf(f, " --speculative-config '{\"method\": \"%s\"%s%s%s, \"num_speculative_tokens\": %u}'", method,
                    own ? "" : ", \"model\": \"", own ? "" : draft, own ? "" : "\"", c->spec_steps);
        }
        fprintf(f, " --port %u &\n", 30000 + i);
    }
}
