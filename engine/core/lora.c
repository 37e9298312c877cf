/* lora.c — which LoRA adapters a batch may hold, and which sit in the GPU's
 * adapter slots.
 *
 * Admission (one rule, two presets): the adapters of the running requests
 * and of those admitted this step form the step's set; a waiting request
 * whose adapter is not in it is skipped (it keeps its place and is tried
 * again next step) when adding it would pass --max-loras-per-batch. SGLang
 * counts the base model as one adapter whenever a base request is in the
 * set (server_args.py: "include base-only request"); vLLM's --max-loras
 * counts adapters only. Nothing is retracted to free a slot: a request
 * waits until some adapter's requests finish, as both servers do.
 *
 * Slots: there are --max-loras-per-batch of them (SGLang's LoRAMemoryPool,
 * vLLM's active adapters). After a batch is formed every adapter of the
 * set is made resident: an adapter already in a slot costs nothing, any
 * other takes an empty slot or evicts one whose adapter is not in the set
 * (adapters in use are pinned), real adapters before SGLang's base slot,
 * the least recently used first (--lora-eviction-policy lru) or the first
 * loaded (fifo). Each load is counted in the batch, for the runner or the
 * cost model to price (the weights' bytes over the host link).
 *
 * Until a request with an adapter arrives (or from the start with
 * --enable-lora) nothing here runs, so a core without LoRA traffic
 * schedules exactly as it did before. */
#include <stdlib.h>

#include "engine/core/internal.h"

#define LORA_NONE UINT32_MAX

/* The record of adapter `id`, created on first sight; its index, or
 * LORA_NONE when memory runs out. Index 0 is the base model. */
static uint32_t lora_index(core *c, uint32_t id)
{
    if (id == 0) return 0;
    int inserted = 0;
    uint64_t *v = rh_map64_slot(&c->lora_map, id, c->n_lora_ads, &inserted);
    if (!v) return LORA_NONE;
    if (!inserted) return (uint32_t)*v;
    if (c->n_lora_ads == c->cap_lora_ads) {
        uint32_t cap = c->cap_lora_ads ? c->cap_lora_ads * 2 : 64;
        lora_ad *a = realloc(c->lora_ads, (size_t)cap * sizeof *a);
        if (!a) {
            *v = LORA_NONE;   /* never handed out: a later request tries again */
            return LORA_NONE;
        }
        c->lora_ads = a;
        c->cap_lora_ads = cap;
    }
    c->lora_ads[c->n_lora_ads] = (lora_ad){.id = id, .slot = LORA_NONE};
    return c->n_lora_ads++;
}

int lora_init(core *c, rh_err *e)
{
    uint32_t n = c->cfg.max_loras_per_batch;
    c->lora_slot = malloc((size_t)n * sizeof *c->lora_slot);
    c->lora_stamp = calloc(n, sizeof *c->lora_stamp);
    c->cap_lora_ads = 64;
    c->lora_ads = malloc((size_t)c->cap_lora_ads * sizeof *c->lora_ads);
    if (!c->lora_slot || !c->lora_stamp || !c->lora_ads) return rh_fail(e, "core: out of memory");
    for (uint32_t i = 0; i < n; i++) c->lora_slot[i] = LORA_NONE;
    c->lora_ads[0] = (lora_ad){.id = 0, .slot = LORA_NONE};
    c->n_lora_ads = 1;
    c->lora_seen = c->cfg.enable_lora;
    return 0;
}

void lora_free(core *c)
{
    free(c->lora_slot);
    free(c->lora_stamp);
    free(c->lora_ads);
    rh_map64_free(&c->lora_map);
}

int lora_attach(core *c, core_req *r, uint32_t adapter, rh_err *e)
{
    r->adapter = adapter;
    r->lora = 0;
    if (!adapter) return 0;
    uint32_t i = lora_index(c, adapter);
    if (i == LORA_NONE) return rh_fail(e, "request %llu: out of memory", (unsigned long long)r->id);
    r->lora = i;
    c->lora_seen = true;
    return 0;
}

/* Whether this preset counts r's adapter against the cap. */
static inline bool counted(const core *c, const core_req *r)
{
    return r->lora != 0 || c->cfg.preset == CORE_PRESET_SGLANG;
}

static void set_add(core *c, const core_req *r)
{
    lora_ad *a = &c->lora_ads[r->lora];
    if (!counted(c, r) || a->in_set == c->lora_gen) return;
    a->in_set = c->lora_gen;
    c->n_lora_set++;
}

void lora_step_begin(core *c)
{
    if (!c->lora_seen) return;
    c->lora_gen++;
    c->n_lora_set = 0;
    for (uint32_t i = 0; i < c->n_run; i++) set_add(c, c->run[i]);
    if (c->chunked) set_add(c, c->chunked);
}

bool lora_admits(const core *c, const core_req *r)
{
    if (!c->lora_seen || !counted(c, r)) return true;
    return c->lora_ads[r->lora].in_set == c->lora_gen || c->n_lora_set < c->cfg.max_loras_per_batch;
}

void lora_admitted(core *c, const core_req *r)
{
    if (c->lora_seen) set_add(c, r);
}

/* A slot for adapter record a: empty, else the best victim outside the set
 * (real adapters before the base, then by stamp). LORA_NONE: every slot
 * holds an adapter of the set (the admission rule makes that impossible). */
static uint32_t pick_slot(const core *c, uint32_t a)
{
    uint32_t best = LORA_NONE;
    for (uint32_t s = 0; s < c->cfg.max_loras_per_batch; s++) {
        uint32_t h = c->lora_slot[s];
        if (h == LORA_NONE) return s;
        if (h == a || c->lora_ads[h].in_set == c->lora_gen) continue;
        if (best == LORA_NONE) {
            best = s;
            continue;
        }
        uint32_t b = c->lora_slot[best];
        bool h_base = h == 0, b_base = b == 0;
        if (h_base != b_base ? b_base : c->lora_stamp[s] < c->lora_stamp[best]) best = s;
    }
    return best;
}

void lora_step_end(core *c, core_batch *out)
{
    if (!c->lora_seen) return;
    /* The set may hold adapters of requests retracted while the batch
     * formed: they stay resident this step, which only keeps them longer. */
    uint64_t gen = c->lora_gen;
    for (uint32_t i = 0; i < c->n_seqs; i++) {
        core_req *r = c->seqs[i].req;
        if (r->lora) out->adapter_tokens += c->seqs[i].n_new;
        if (!counted(c, r)) continue;
        lora_ad *a = &c->lora_ads[r->lora];
        if (a->in_batch == gen) continue;
        a->in_batch = gen;
        if (r->lora) out->n_adapters++;
        if (a->slot == LORA_NONE) {
            uint32_t s = pick_slot(c, r->lora);
            if (s == LORA_NONE) continue;   /* unreachable under the admission rule */
            uint32_t h = c->lora_slot[s];
            if (h != LORA_NONE) c->lora_ads[h].slot = LORA_NONE;
            c->lora_slot[s] = r->lora;
            a->slot = s;
            c->lora_stamp[s] = c->step_index;   /* fifo: the load */
            if (r->lora) {
                out->adapter_loads++;
                c->st.adapter_loads++;
            }
        }
        if (c->cfg.lora_eviction == CORE_LORA_EVICT_LRU) c->lora_stamp[a->slot] = c->step_index;
    }
    c->step.adapters = out->n_adapters;
    c->step.adapter_loads = out->adapter_loads;
    c->step.adapter_tokens = out->adapter_tokens;
}

uint32_t lora_resident(const core *c, uint32_t *ids, uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < c->cfg.max_loras_per_batch; s++) {
        uint32_t h = c->lora_slot[s];
        if (h == LORA_NONE || h == 0) continue;
        if (n < cap) ids[n] = c->lora_ads[h].id;
        n++;
    }
    return n;
}
