/* engine_lora.c — the LoRA adapters an engine serves: a registry of PEFT
 * folders by name and id, and the backend copies of those the core keeps
 * in its GPU slots (engine/core/lora.c decides which; this file follows).
 * A request names an adapter by id; engine_add counts it against the
 * adapter, so an adapter with requests cannot be removed. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "engine/model/peft.h"

eadapter *engine_adapter(engine *g, uint32_t id)
{
    for (uint32_t i = 0; i < g->n_adapters; i++)
        if (g->adapters[i].id == id) return &g->adapters[i];
    return NULL;
}

uint32_t engine_lora_find(const engine *g, const char *name)
{
    for (uint32_t i = 0; i < g->n_adapters; i++)
        if (!strcmp(g->adapters[i].name, name)) return g->adapters[i].id;
    return 0;
}

uint32_t engine_lora_count(const engine *g)
{
    return g->n_adapters;
}

const char *engine_lora_name(const engine *g, uint32_t i, const char **path, uint32_t *id, uint32_t *requests)
{
    if (i >= g->n_adapters) return NULL;
    const eadapter *a = &g->adapters[i];
    if (path) *path = a->path;
    if (id) *id = a->id;
    if (requests) *requests = a->requests;
    return a->name;
}

uint64_t engine_lora_total(const engine *g, uint32_t i)
{
    return i < g->n_adapters ? g->adapters[i].total : 0;
}

int engine_lora_add(engine *g, const char *name, const char *path, rh_err *e)
{
    if (g->in_step) return rh_fail(e, "adapter %s: cannot be added while a batch runs", name);
    if (g->tp) return rh_fail(e, "adapter %s: LoRA under tensor parallel is not served", name);
    if (!*name || strlen(name) >= sizeof g->adapters[0].name || strchr(name, ':'))
        return rh_fail(e, "adapter '%s': a name is 1..127 characters without ':'", name);
    if (strlen(path) >= sizeof g->adapters[0].path) return rh_fail(e, "adapter %s: the path is too long", name);
    if (engine_lora_find(g, name)) return rh_fail(e, "adapter %s: already served", name);
    model_lora *l = model_lora_load(path, name, &g->m->cfg, g->cfg.max_lora_rank, e);
    if (!l) return -1;
    if (g->n_adapters == g->cap_adapters) {
        uint32_t cap = g->cap_adapters ? g->cap_adapters * 2 : 8;
        eadapter *a = realloc(g->adapters, cap * sizeof *a);
        if (!a) {
            model_lora_free(l);
            return rh_fail(e, "adapter %s: out of memory", name);
        }
        g->adapters = a;
        g->cap_adapters = cap;
    }
    eadapter *a = &g->adapters[g->n_adapters++];
    memset(a, 0, sizeof *a);
    a->id = ++g->next_adapter_id;
    snprintf(a->name, sizeof a->name, "%s", name);
    snprintf(a->path, sizeof a->path, "%s", path);
    a->host = l;
    return (int)a->id;
}

int engine_lora_remove(engine *g, const char *name, rh_err *e)
{
    if (g->in_step) return rh_fail(e, "adapter %s: cannot be removed while a batch runs", name);
    for (uint32_t i = 0; i < g->n_adapters; i++) {
        eadapter *a = &g->adapters[i];
        if (strcmp(a->name, name)) continue;
        if (a->requests)
            return rh_fail(e, "adapter %s: %u requests still use it; remove it when they finish", name, a->requests);
        if (a->dev) runner_lora_free(g->run, a->dev);
        model_lora_free(a->host);
        memmove(a, a + 1, (g->n_adapters - i - 1) * sizeof *a);
        g->n_adapters--;
        return 0;
    }
    return rh_fail(e, "adapter %s: not served", name);
}

int engine_lora_start(engine *g, rh_err *e)
{
    const char *list = g->cfg.lora_paths;
    if (!list || !*list) return 0;
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ", ");
        if (n) {
            char item[700];
            if (n >= sizeof item) return rh_fail(e, "--lora-paths: an item is too long");
            memcpy(item, p, n);
            item[n] = '\0';
            char *eq = strchr(item, '=');
            const char *name = item, *path = item;
            if (eq) {
                *eq = '\0';
                path = eq + 1;
            }
            if (engine_lora_add(g, name, path, e) < 0) return rh_prefix(e, "--lora-paths");
        }
        p += n;
        p += strspn(p, ", ");
    }
    return 0;
}

int engine_lora_prepare(engine *g, const core_batch *b, rh_err *e)
{
    if (!g->n_adapters || !g->run) return 0;
    /* the core evicted these from its slots: their copies go */
    uint32_t cap = core_get_config(g->c)->max_loras_per_batch, *resident = malloc((size_t)cap * sizeof *resident);
    if (!resident) return rh_fail(e, "engine: out of memory");
    uint32_t n = core_lora_resident(g->c, resident, cap);
    for (uint32_t i = 0; i < g->n_adapters; i++) {
        eadapter *a = &g->adapters[i];
        if (!a->dev) continue;
        bool in = false;
        for (uint32_t k = 0; k < n && !in; k++) in = resident[k] == a->id;
        if (!in) {
            runner_lora_free(g->run, a->dev);
            a->dev = NULL;
        }
    }
    free(resident);
    for (uint32_t i = 0; i < b->n; i++) {
        const ereq *q = b->seqs[i].user;
        if (!q->adapter) continue;
        eadapter *a = engine_adapter(g, q->adapter);
        if (!a) return rh_fail(e, "engine: request %llu names adapter %u, which is not served", (unsigned long long)q->id,
                               q->adapter);
        if (!a->dev && !(a->dev = runner_lora_load(g->run, a->host, e))) return -1;
    }
    return 0;
}

void engine_lora_free_all(engine *g)
{
    for (uint32_t i = 0; i < g->n_adapters; i++) {
        if (g->adapters[i].dev && g->run) runner_lora_free(g->run, g->adapters[i].dev);
        model_lora_free(g->adapters[i].host);
    }
    free(g->adapters);
    g->adapters = NULL;
    g->n_adapters = 0;
}
