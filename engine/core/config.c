/* config.c — the core's knobs by their command-line names (SGLang's where
 * one exists), their defaults, validation and help. One table drives set,
 * foreach and help, so a knob cannot be settable yet missing from --help. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/core.h"
#include "util/args.h"

enum knob_kind { K_U32, K_U64, K_CHUNK, K_DOUBLE, K_BOOL, K_POLICY, K_PRESET, K_EVICT, K_STR, K_VLLM_POLICY, K_LORA_EVICT, K_HICACHE_WRITE };

typedef struct knob {
    const char *name, *alias;
    enum knob_kind kind;
    size_t off;
    const char *meta, *help;
} knob;

#define OFF(f) offsetof(core_config, f)
static const knob knobs[] = {
    {"page-size", "block-size", K_U32, OFF(page_size), "N",
     "tokens per KV page (16; SGLang's default is 1, which on the Mooncake trace gives the same hit rate, 0.382, "
     "and TTFT within 0.4% in 3x the time and memory)"},
    {"max-total-tokens", NULL, K_U64, OFF(max_total_tokens), "N", "KV pool size in tokens (16384 pages)"},
    {"chunked-prefill-size", "max-num-batched-tokens", K_CHUNK, OFF(chunked_prefill_size), "N",
     "prefill tokens per step, prompts cut in page-aligned chunks; -1: no chunking (8192)"},
    {"max-prefill-tokens", NULL, K_U32, OFF(max_prefill_tokens), "N",
     "prompt tokens admitted per step; the first request may exceed it (16384)"},
    {"long-prefill-token-threshold", NULL, K_U32, OFF(long_prefill_token_threshold), "N",
     "vllm scheduler: at most N prompt tokens of one request per step, so others share the budget; 0: off (0)"},
    {"max-running-requests", "max-num-seqs", K_U32, OFF(max_running_requests), "N", "requests prefilling or decoding at once (256)"},
    {"context-length", "max-model-len", K_U32, OFF(context_length), "N", "longest prompt + output accepted; 0: no limit (0)"},
    {"schedule-policy", NULL, K_POLICY, OFF(policy), "P",
     "waiting order: fcfs, lpm, lof, random, dfs-weight or lua; priority: fcfs with --enable-priority-scheduling "
     "(fcfs)"},
    {"enable-priority-scheduling", NULL, K_BOOL, OFF(enable_priority_scheduling), NULL,
     "fcfs and lof order the waiting queue by each request's priority first (higher values first), "
     "their own order within a priority"},
    {"schedule-low-priority-values-first", NULL, K_BOOL, OFF(low_priority_values_first), NULL,
     "with --enable-priority-scheduling: lower values first (vLLM's order)"},
    {"scheduling-policy", NULL, K_VLLM_POLICY, OFF(enable_priority_scheduling), "P",
     "vLLM's name: fcfs, or priority (lower values first, then arrival) (fcfs)"},
    {"schedule-conservativeness", NULL, K_DOUBLE, OFF(schedule_conservativeness), "X",
     "scales the new-token ratio reserved for running requests (1.0)"},
    {"disable-radix-cache", NULL, K_BOOL, OFF(disable_radix_cache), NULL, "no prefix cache: nothing is shared"},
    {"enable-mixed-chunk", NULL, K_BOOL, OFF(enable_mixed_chunk), NULL,
     "run decodes and a prefill chunk in one batch (sglang scheduler)"},
    {"scheduler", NULL, K_PRESET, OFF(preset), "S",
     "batch formation: sglang (prefill first) or vllm (one token budget, running first) (sglang)"},
    {"radix-eviction", "radix-eviction-policy", K_EVICT, OFF(evict), "E", "prefix-cache eviction: lru, lfu or slru (lru)"},
    {"seed", NULL, K_U64, OFF(seed), "N", "seed of the random policy and of Lua's math.random (0)"},
    {"speculative-num-steps", NULL, K_U32, OFF(spec_steps), "N", "draft forward passes per step; 0: off (0)"},
    {"speculative-num-draft-tokens", NULL, K_U32, OFF(spec_draft_tokens), "N",
     "tokens verified per decode, the sampled one included (steps + 1)"},
    {"speculative-disable-by-batch-size", NULL, K_U32, OFF(spec_disable_batch_size), "N",
     "no drafts while more requests run; 0: never (0)"},
    {"policy-script", NULL, K_STR, OFF(lua_policy_path), "FILE",
     "Lua file defining policy(waiting, state); implies --schedule-policy lua"},
    {"policy-max-instructions", NULL, K_U64, OFF(policy_max_instructions), "N",
     "Lua instructions one policy call may run before it falls back to fcfs (10000000)"},
    {"policy-max-memory", NULL, K_U64, OFF(policy_max_memory), "BYTES",
     "memory a --policy-script's Lua state may hold; past it calls fall back to fcfs (67108864)"},
    {"policy-max-seconds", NULL, K_DOUBLE, OFF(policy_max_seconds), "S",
     "wall time one policy call may take, C functions included, before it falls back to fcfs (1)"},
    {"policy-window", NULL, K_U32, OFF(policy_window), "N", "waiting requests shown to a Lua policy (256)"},
    {"policy-max-failures", NULL, K_U32, OFF(policy_max_failures), "N",
     "Lua policy failures in a row after which it is not called for a back-off of 64 steps, doubling while "
     "it keeps failing (fcfs meanwhile); 0: never (16)"},
    {"enable-lora", NULL, K_BOOL, OFF(enable_lora), NULL,
     "LoRA adapters: the adapter cap and slots below apply from the first step (a request naming an adapter "
     "turns them on too); the base model then holds a slot under the sglang scheduler"},
    {"max-loras-per-batch", "max-loras", K_U32, OFF(max_loras_per_batch), "N",
     "distinct LoRA adapters in one batch, and the GPU's adapter slots; the sglang scheduler counts the base "
     "model as one (SGLang's rule), vllm does not (vLLM's --max-loras); a request whose adapter would pass it "
     "waits (8)"},
    {"lora-eviction-policy", NULL, K_LORA_EVICT, OFF(lora_eviction), "P",
     "the adapter slot a load takes when none is free: lru or fifo (lru)"},
    {"enable-hierarchical-cache", NULL, K_BOOL, OFF(enable_hierarchical_cache), NULL,
     "a host-memory tier below the GPU's prefix cache (SGLang's HiCache): evicted prefixes stay in host memory "
     "and load back layer by layer (sglang scheduler)"},
    {"hicache-ratio", NULL, K_DOUBLE, OFF(hicache_ratio), "X", "host tier size as a multiple of the GPU pool (2)"},
    {"hicache-size", NULL, K_DOUBLE, OFF(hicache_size), "GB",
     "host tier size in GB per GPU; overrides --hicache-ratio when > 0 (needs a cost model that knows the KV's "
     "bytes per token) (0)"},
    {"hicache-write-policy", NULL, K_HICACHE_WRITE, OFF(hicache_write_policy), "P",
     "when a GPU page is copied to the host: write_through (on insert), write_through_selective (on its "
     "second use) or write_back (on eviction, which waits for it) (write_through)"},
};
#undef OFF
#define N_KNOBS (sizeof knobs / sizeof knobs[0])

/* vLLM's on/off flags for a knob of ours that says the opposite: each sets
 * the knob to `value` and takes no value itself. */
static const struct {
    const char *name, *knob;
    bool value;
    const char *help;
} switches[] = {
    {"enable-prefix-caching", "disable-radix-cache", false, "vLLM's name: the prefix cache on (the default)"},
    {"no-enable-prefix-caching", "disable-radix-cache", true, "vLLM's name for --disable-radix-cache"},
};
#define N_SWITCHES (sizeof switches / sizeof switches[0])

static const char *policy_names[] = {"fcfs", "lpm", "lof", "random", "lua", "dfs-weight"};
static const char *preset_names[] = {"sglang", "vllm"};
static const char *evict_names[] = {"lru", "lfu", "slru"};
static const char *lora_evict_names[] = {"lru", "fifo"};
static const char *hicache_write_names[] = {"write_through", "write_through_selective", "write_back"};

void core_config_default(core_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->page_size = 16;
    cfg->total_pages = 16384;
    cfg->chunked_prefill_size = 8192;
    cfg->max_prefill_tokens = 16384;
    cfg->max_running_requests = 256;
    cfg->policy = CORE_POLICY_FCFS;
    cfg->schedule_conservativeness = 1.0;
    cfg->preset = CORE_PRESET_SGLANG;
    cfg->evict = CORE_EVICT_LRU;
    cfg->lua_policy_ref = -1;
    cfg->policy_max_instructions = 10000000;
    cfg->policy_max_memory = 64u << 20;
    cfg->policy_max_seconds = 1.0;
    cfg->policy_window = 256;
    cfg->policy_max_failures = 16;
    cfg->max_loras_per_batch = 8;
    cfg->hicache_ratio = 2.0;
}

static const knob *find_knob(const char *name)
{
    char buf[64];
    if (rh_knob_name(name, buf, sizeof buf) < 0) return NULL;
    for (size_t i = 0; i < N_KNOBS; i++)
        if (!strcmp(buf, knobs[i].name) || (knobs[i].alias && !strcmp(buf, knobs[i].alias))) return &knobs[i];
    return NULL;
}

/* The switch called `name`, or -1. */
static int find_switch(const char *name)
{
    char buf[64];
    if (rh_knob_name(name, buf, sizeof buf) < 0) return -1;
    for (size_t i = 0; i < N_SWITCHES; i++)
        if (!strcmp(buf, switches[i].name)) return (int)i;
    return -1;
}

const char *core_config_canonical(const char *name)
{
    int sw = find_switch(name);
    if (sw >= 0) return switches[sw].knob;
    const knob *k = find_knob(name);
    return k ? k->name : NULL;
}

int core_config_takes_value(const char *name)
{
    if (find_switch(name) >= 0) return 0;
    const knob *k = find_knob(name);
    if (!k) return -1;
    return k->kind != K_BOOL;
}

static int parse_enum(const char *v, const char **names, int n, const knob *k, int *out, rh_err *e)
{
    for (int i = 0; i < n; i++)
        if (v && !strcmp(v, names[i])) {
            *out = i;
            return 0;
        }
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        strcat(list, names[i]);
        if (i + 1 < n) strcat(list, ", ");
    }
    return rh_fail(e, "--%s: '%s' is not one of %s", k->name, v ? v : "", list);
}

int core_config_set(core_config *cfg, const char *name, const char *value, rh_err *e)
{
    int sw = find_switch(name);
    if (sw >= 0) {
        bool on = true;   /* a flag, or a Lua key set to true */
        if (value && (!strcmp(value, "0") || !strcmp(value, "false"))) on = false;
        else if (value && strcmp(value, "1") && strcmp(value, "true"))
            return rh_fail(e, "--%s takes no value (got '%s')", switches[sw].name, value);
        *(bool *)((char *)cfg + find_knob(switches[sw].knob)->off) = on ? switches[sw].value : !switches[sw].value;
        return 1;
    }
    const knob *k = find_knob(name);
    if (!k) return 0;
    char what[80];
    snprintf(what, sizeof what, "--%s", k->name);
    char *field = (char *)cfg + k->off;
    if (k->kind != K_BOOL && !value) return rh_fail(e, "%s needs a value", what);
    unsigned long long u;
    long long s;
    double d;
    int en;
    switch (k->kind) {
    case K_U32:
        if (rh_parse_u64(value, what, &u, e) < 0) return -1;
        if (u > UINT32_MAX) return rh_fail(e, "%s: '%s' is too large", what, value);
        *(uint32_t *)field = (uint32_t)u;
        break;
    case K_U64:
        if (rh_parse_u64(value, what, &u, e) < 0) return -1;
        /* 0 inside the config means "not given": a 0 given is refused, not
         * silently read as the default pool. */
        if (u == 0 && field == (char *)&cfg->max_total_tokens)
            return rh_fail(e, "%s 0: give the pool's size in tokens, or leave it out for the default", what);
        *(uint64_t *)field = u;
        break;
    case K_CHUNK:
        if (rh_parse_i64(value, what, &s, e) < 0) return -1;
        if (s != -1 && (s < 1 || s > INT32_MAX)) return rh_fail(e, "%s: '%s' must be -1 or a positive size", what, value);
        *(int32_t *)field = (int32_t)s;
        break;
    case K_DOUBLE:
        if (rh_parse_double(value, what, &d, e) < 0) return -1;
        *(double *)field = d;
        break;
    case K_BOOL:
        if (!value || !*value || !strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "yes") ||
            !strcmp(value, "on"))
            *(bool *)field = true;
        else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "no") || !strcmp(value, "off"))
            *(bool *)field = false;
        else
            return rh_fail(e, "%s: '%s' is not a boolean (true or false)", what, value);
        break;
    case K_POLICY:
        if (value && !strcmp(value, "priority")) {   /* as SGLang's fcfs under --enable-priority-scheduling */
            cfg->policy = CORE_POLICY_FCFS;
            cfg->enable_priority_scheduling = true;
            break;
        }
        if (parse_enum(value, policy_names, 6, k, &en, e) < 0) return -1;
        cfg->policy = (core_policy)en;
        break;
    case K_PRESET:
        if (parse_enum(value, preset_names, 2, k, &en, e) < 0) return -1;
        cfg->preset = (core_preset)en;
        break;
    case K_EVICT:
        if (parse_enum(value, evict_names, 3, k, &en, e) < 0) return -1;
        cfg->evict = (core_evict)en;
        break;
    case K_VLLM_POLICY: {
        static const char *names[] = {"fcfs", "priority"};
        if (parse_enum(value, names, 2, k, &en, e) < 0) return -1;
        cfg->enable_priority_scheduling = cfg->low_priority_values_first = en == 1;
        break;
    }
    case K_LORA_EVICT:
        if (parse_enum(value, lora_evict_names, 2, k, &en, e) < 0) return -1;
        cfg->lora_eviction = (core_lora_evict)en;
        break;
    case K_HICACHE_WRITE:
        if (parse_enum(value, hicache_write_names, 3, k, &en, e) < 0) return -1;
        cfg->hicache_write_policy = (core_hicache_write)en;
        break;
    case K_STR:
        if (!*value) return rh_fail(e, "%s: empty path", what);
        *(const char **)field = value;
        cfg->policy = CORE_POLICY_LUA;
        break;
    }
    return 1;
}

const char *core_config_help(void)
{
    static char text[8192];
    if (text[0]) return text;
    size_t off = 0;
    for (size_t i = 0; i < N_KNOBS && off < sizeof text; i++) {
        char flag[64], also[80] = "";
        snprintf(flag, sizeof flag, "--%s%s%s", knobs[i].name, knobs[i].meta ? " " : "", knobs[i].meta ? knobs[i].meta : "");
        if (knobs[i].alias) snprintf(also, sizeof also, "; also --%s", knobs[i].alias);
        int w = snprintf(text + off, sizeof text - off, "  %-38s %s%s\n", flag, knobs[i].help, also);
        if (w < 0) break;
        off += (size_t)w;
    }
    for (size_t i = 0; i < N_SWITCHES && off < sizeof text; i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", switches[i].name);
        int w = snprintf(text + off, sizeof text - off, "  %-38s %s\n", flag, switches[i].help);
        if (w < 0) break;
        off += (size_t)w;
    }
    return text;
}

static uint64_t resolved_pages(const core_config *cfg)
{
    return cfg->max_total_tokens ? cfg->max_total_tokens / (cfg->page_size ? cfg->page_size : 1) : cfg->total_pages;
}

int core_config_validate(const core_config *cfg, rh_err *e)
{
    if (cfg->page_size < 1 || cfg->page_size > (1u << 20))
        return rh_fail(e, "--page-size %u: must be 1..1048576 tokens", cfg->page_size);
    uint64_t pages = resolved_pages(cfg);
    if (pages < 1) {
        if (cfg->max_total_tokens)
            return rh_fail(e, "--max-total-tokens %llu is smaller than one page of %u tokens",
                           (unsigned long long)cfg->max_total_tokens, cfg->page_size);
        return rh_fail(e, "the KV pool has no pages (set --max-total-tokens)");
    }
    if (pages >= UINT32_MAX)
        return rh_fail(e, "--max-total-tokens: %llu pages is more than the pool can index", (unsigned long long)pages);
    if (cfg->chunked_prefill_size != -1 && (cfg->chunked_prefill_size < 1 || (uint32_t)cfg->chunked_prefill_size < cfg->page_size))
        return rh_fail(e, "--chunked-prefill-size %d: must be -1 or at least one page (%u tokens)",
                       cfg->chunked_prefill_size, cfg->page_size);
    if (cfg->max_prefill_tokens < 1) return rh_fail(e, "--max-prefill-tokens must be at least 1");
    if (cfg->max_running_requests < 1 || cfg->max_running_requests > (1u << 24))
        return rh_fail(e, "--max-running-requests %u: must be 1..16777216", cfg->max_running_requests);
    if (!(cfg->schedule_conservativeness >= 0) || !isfinite(cfg->schedule_conservativeness))
        return rh_fail(e, "--schedule-conservativeness %g: must be a finite number >= 0", cfg->schedule_conservativeness);
    if ((unsigned)cfg->policy > CORE_POLICY_DFS_WEIGHT) return rh_fail(e, "--schedule-policy: unknown policy %d", (int)cfg->policy);
    if ((unsigned)cfg->preset > CORE_PRESET_VLLM) return rh_fail(e, "--scheduler: unknown preset %d", (int)cfg->preset);
    if ((unsigned)cfg->evict > CORE_EVICT_SLRU) return rh_fail(e, "--radix-eviction: unknown policy %d", (int)cfg->evict);
    if (cfg->policy == CORE_POLICY_LUA && !cfg->lua_policy_path && !(cfg->lua_state && cfg->lua_policy_ref > 0))
        return rh_fail(e, "--schedule-policy lua needs --policy-script FILE (or a Lua function from the caller)");
    if (cfg->policy != CORE_POLICY_LUA && cfg->lua_policy_path)
        return rh_fail(e, "--policy-script %s given but --schedule-policy is %s", cfg->lua_policy_path,
                       policy_names[cfg->policy]);
    if (cfg->spec_steps > 1024) return rh_fail(e, "--speculative-num-steps %u: at most 1024", cfg->spec_steps);
    if (cfg->spec_draft_tokens && !cfg->spec_steps)
        return rh_fail(e, "--speculative-num-draft-tokens needs --speculative-num-steps");
    if (cfg->spec_steps && cfg->spec_draft_tokens == 1)
        return rh_fail(e, "--speculative-num-draft-tokens 1 verifies no draft; use at least 2");
    if (cfg->spec_draft_tokens > 1025) return rh_fail(e, "--speculative-num-draft-tokens %u: at most 1025", cfg->spec_draft_tokens);
    if (cfg->policy_window < 1) return rh_fail(e, "--policy-window must be at least 1");
    if (cfg->policy_max_instructions < 1000 || cfg->policy_max_instructions > (1ull << 50))
        return rh_fail(e, "--policy-max-instructions %llu: must be 1000..2^50",
                       (unsigned long long)cfg->policy_max_instructions);
    if (cfg->policy_max_memory < (1u << 20) || cfg->policy_max_memory > (1ull << 40))
        return rh_fail(e, "--policy-max-memory %llu: must be 1 MiB..1 TiB (1048576..1099511627776 bytes)",
                       (unsigned long long)cfg->policy_max_memory);
    if (cfg->max_loras_per_batch < 1 || cfg->max_loras_per_batch > 65536)
        return rh_fail(e, "--max-loras-per-batch %u: must be 1..65536", cfg->max_loras_per_batch);
    if ((unsigned)cfg->lora_eviction > CORE_LORA_EVICT_FIFO)
        return rh_fail(e, "--lora-eviction-policy: unknown policy %d", (int)cfg->lora_eviction);
    if (cfg->enable_hierarchical_cache) {
        if (cfg->preset != CORE_PRESET_SGLANG)
            return rh_fail(e, "--enable-hierarchical-cache is SGLang's: it needs --scheduler sglang");
        if (cfg->disable_radix_cache)
            return rh_fail(e, "--enable-hierarchical-cache keeps the prefix cache's pages: drop --disable-radix-cache");
        if (!(cfg->hicache_ratio > 0 && cfg->hicache_ratio <= 1000))
            return rh_fail(e, "--hicache-ratio %g: must be > 0 and at most 1000", cfg->hicache_ratio);
        if (!(cfg->hicache_size >= 0 && cfg->hicache_size <= 1e6))
            return rh_fail(e, "--hicache-size %g: must be 0..1000000 GB", cfg->hicache_size);
        if (cfg->hicache_size > 0 && !(cfg->kv_bytes_per_token > 0))
            return rh_fail(e, "--hicache-size needs the KV's bytes per token, which this cost model does not know "
                              "(a roofline does); give --hicache-ratio instead");
    }
    if ((unsigned)cfg->hicache_write_policy > CORE_HICACHE_WRITE_BACK)
        return rh_fail(e, "--hicache-write-policy: unknown policy %d", (int)cfg->hicache_write_policy);
    if (!(cfg->policy_max_seconds >= 0.001 && cfg->policy_max_seconds <= 3600))
        return rh_fail(e, "--policy-max-seconds %g: must be 0.001..3600", cfg->policy_max_seconds);
    return 0;
}

void core_config_foreach(const core_config *cfg, void (*fn)(void *ctx, const char *name, const char *value), void *ctx)
{
    char v[64];
    for (size_t i = 0; i < N_KNOBS; i++) {
        const knob *k = &knobs[i];
        const char *field = (const char *)cfg + k->off;
        const char *s = v;
        /* the LoRA knobs only when set: headers of runs without them read as they always have */
        if ((field == (const char *)&cfg->enable_lora && !cfg->enable_lora) ||
            (field == (const char *)&cfg->max_loras_per_batch && cfg->max_loras_per_batch == 8) ||
            (field == (const char *)&cfg->lora_eviction && cfg->lora_eviction == CORE_LORA_EVICT_LRU))
            continue;
        /* the host tier's knobs only when it is on */
        if (!cfg->enable_hierarchical_cache &&
            (field == (const char *)&cfg->enable_hierarchical_cache || field == (const char *)&cfg->hicache_ratio ||
             field == (const char *)&cfg->hicache_size || field == (const char *)&cfg->hicache_write_policy))
            continue;
        switch (k->kind) {
        case K_U32: snprintf(v, sizeof v, "%u", *(const uint32_t *)field); break;
        case K_U64:
            if (!strcmp(k->name, "max-total-tokens"))
                snprintf(v, sizeof v, "%llu", (unsigned long long)(resolved_pages(cfg) * cfg->page_size));
            else
                snprintf(v, sizeof v, "%llu", (unsigned long long)*(const uint64_t *)field);
            break;
        case K_CHUNK: snprintf(v, sizeof v, "%d", *(const int32_t *)field); break;
        case K_DOUBLE: snprintf(v, sizeof v, "%.17g", *(const double *)field); break;
        case K_BOOL:
            /* the priority knobs only when on: a header of a run without them
             * reads as it always has */
            if (!cfg->enable_priority_scheduling && (field == (const char *)&cfg->enable_priority_scheduling ||
                                                     field == (const char *)&cfg->low_priority_values_first))
                continue;
            s = *(const bool *)field ? "true" : "false";
            break;
        case K_VLLM_POLICY: continue;   /* the two knobs above say it */
        case K_POLICY: s = policy_names[cfg->policy <= CORE_POLICY_DFS_WEIGHT ? cfg->policy : 0]; break;
        case K_PRESET: s = preset_names[cfg->preset <= CORE_PRESET_VLLM ? cfg->preset : 0]; break;
        case K_EVICT: s = evict_names[cfg->evict <= CORE_EVICT_SLRU ? cfg->evict : 0]; break;
        case K_HICACHE_WRITE:
            s = hicache_write_names[cfg->hicache_write_policy <= CORE_HICACHE_WRITE_BACK ? cfg->hicache_write_policy : 0];
            break;
        case K_LORA_EVICT: s = lora_evict_names[cfg->lora_eviction <= CORE_LORA_EVICT_FIFO ? cfg->lora_eviction : 0]; break;
        case K_STR:
            s = *(const char *const *)field;
            if (!s) continue;
            break;
        }
        fn(ctx, k->name, s);
    }
}
