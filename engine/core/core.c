/* core.c — request lifecycle, the step pair (schedule, complete), events and
 * the mechanics both presets share: admitting, growing page tables,
 * retracting, finishing. Batch formation itself is in sched_sglang.c and
 * sched_vllm.c; this file never decides who runs, only carries it out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/internal.h"
#include "util/hash.h"

/* --radix-eviction names the pool's order by value. */
_Static_assert((int)CORE_EVICT_LRU == KV_LRU && (int)CORE_EVICT_LFU == KV_LFU && (int)CORE_EVICT_SLRU == KV_SLRU,
               "core_evict and kv_order agree");

/* ---- id map: u64 id -> request, open addressing ---- */
#define MAP_EMPTY NULL

static core_req *map_get(const core *c, uint64_t id)
{
    uint64_t i = rh_mix64(id) & c->map_mask;
    while (c->map_reqs[i]) {
        if (c->map_ids[i] == id) return c->map_reqs[i];
        i = (i + 1) & c->map_mask;
    }
    return NULL;
}

static int map_grow(core *c)
{
    uint64_t old_cap = c->map_mask + 1, cap = old_cap * 2;
    uint64_t *ids = malloc(cap * sizeof *ids);
    core_req **reqs = calloc(cap, sizeof *reqs);
    if (!ids || !reqs) {
        free(ids);
        free(reqs);
        return -1;
    }
    for (uint64_t i = 0; i < old_cap; i++) {
        if (!c->map_reqs[i]) continue;
        uint64_t j = rh_mix64(c->map_ids[i]) & (cap - 1);
        while (reqs[j]) j = (j + 1) & (cap - 1);
        ids[j] = c->map_ids[i];
        reqs[j] = c->map_reqs[i];
    }
    free(c->map_ids);
    free(c->map_reqs);
    c->map_ids = ids;
    c->map_reqs = reqs;
    c->map_mask = cap - 1;
    return 0;
}

static int map_put(core *c, core_req *r)
{
    if ((c->map_n + 1) * 2 > c->map_mask + 1 && map_grow(c) < 0) return -1;
    uint64_t i = rh_mix64(r->id) & c->map_mask;
    while (c->map_reqs[i]) i = (i + 1) & c->map_mask;
    c->map_ids[i] = r->id;
    c->map_reqs[i] = r;
    c->map_n++;
    return 0;
}

static void map_del(core *c, uint64_t id)
{
    uint64_t mask = c->map_mask, i = rh_mix64(id) & mask;
    while (c->map_reqs[i] && c->map_ids[i] != id) i = (i + 1) & mask;
    if (!c->map_reqs[i]) return;
    c->map_n--;
    for (;;) {   /* backward shift, as in kv.c */
        c->map_reqs[i] = NULL;
        uint64_t j = i;
        for (;;) {
            j = (j + 1) & mask;
            if (!c->map_reqs[j]) return;
            uint64_t k = rh_mix64(c->map_ids[j]) & mask;
            bool stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
            if (!stays) {
                c->map_ids[i] = c->map_ids[j];
                c->map_reqs[i] = c->map_reqs[j];
                i = j;
                break;
            }
        }
    }
}

/* ---- waiting list ---- */
static void lof_append(core *c, core_req *r)
{
    r->lof_idx = KV_NONE;
    if (c->cfg.policy != CORE_POLICY_LOF || c->lof_failed) return;
    if (c->lof_n == c->lof_cap) {
        uint32_t cap = c->lof_cap ? 2 * c->lof_cap : 256;
        core_req **v = realloc(c->lof_v, (size_t)cap * sizeof *v), **t = v ? realloc(c->lof_tmp, (size_t)cap * sizeof *t) : NULL;
        if (v) c->lof_v = v;
        if (!v || !t) {
            c->lof_failed = true;   /* out of memory: lof serves as fcfs from now on */
            return;
        }
        c->lof_tmp = t;
        c->lof_cap = cap;
    }
    r->lof_idx = c->lof_n;
    c->lof_v[c->lof_n++] = r;
}

void wait_unlink(core *c, core_req *r)
{
    if (r->prev) r->prev->next = r->next;
    else c->wait_head = r->next;
    if (r->next) r->next->prev = r->prev;
    else c->wait_tail = r->prev;
    r->prev = r->next = NULL;
    c->n_waiting--;
    if (r->lof_idx != KV_NONE) {
        c->lof_v[r->lof_idx] = NULL;
        r->lof_idx = KV_NONE;
    }
}

void wait_push_back(core *c, core_req *r)
{
    r->next = NULL;
    r->prev = c->wait_tail;
    if (c->wait_tail) c->wait_tail->next = r;
    else c->wait_head = r;
    c->wait_tail = r;
    c->n_waiting++;
    r->qseq = ++c->qseq_back;
    lof_append(c, r);
}

void wait_push_front(core *c, core_req *r)
{
    r->prev = NULL;
    r->next = c->wait_head;
    if (c->wait_head) c->wait_head->prev = r;
    else c->wait_tail = r;
    c->wait_head = r;
    c->n_waiting++;
    r->qseq = --c->qseq_front;
    lof_append(c, r);
}

/* ---- events ---- */
void core_emit(core *c, int kind, core_req *r, double now)
{
    if (!c->hooks.on_event) return;
    core_event ev = {
        .kind = kind,
        .id = r->id,
        .user = r->user,
        .now = now,
        .output_len = r->out,
        .cached_tokens = r->cached_tokens, .cached_host = r->cached_host, .cached_storage = r->cached_storage,
        .retractions = r->retractions,
    };
    c->hooks.on_event(c->hooks.ctx, &ev);
}

void core_message(core *c, const char *msg)
{
    if (c->hooks.on_message) c->hooks.on_message(c->hooks.ctx, msg);
}

/* ---- requests ---- */
static void free_req(core_req *r)
{
    free(r->pages);
    free(r->keys);
    free(r->blocks);
    free(r->tok);
    free(r);
}

static void release_pages(core *c, core_req *r)
{
    for (uint32_t i = 0; i < r->n_pages; i++) kv_release(&c->kv, r->pages[i]);
    r->n_pages = r->n_tree = 0;
    r->kv = 0;
}

uint32_t core_spec_slots(const core *c, const core_req *r, uint32_t batch_size)
{
    uint32_t k = c->cfg.spec_steps ? c->cfg.spec_draft_tokens - 1 : 0;
    if (!k || (c->cfg.spec_disable_batch_size && batch_size > c->cfg.spec_disable_batch_size)) return 0;
    /* Never ask for slots past max_new_tokens: accepted + 1 must fit. */
    uint32_t left = r->max_new - r->out - 1;
    return k < left ? k : left;
}

int core_grow(core *c, core_req *r, uint64_t tokens)
{
    uint32_t need = pages_short(c, r, tokens);
    if (!need) return 0;
    if (r->n_pages + need > r->cap_pages) return -1;
    if (kv_alloc(&c->kv, need, r->pages + r->n_pages) < 0) return -1;
    r->n_pages += need;
    return 0;
}

int core_match_room(core *c, uint32_t pages)
{
    if (c->match_pages && pages <= c->cap_match) return 0;
    uint32_t cap = c->cap_match ? c->cap_match : 1024;
    while (cap < pages) cap *= 2;
    uint32_t *p = realloc(c->match_pages, (size_t)cap * sizeof *p);
    if (!p) return -1;
    c->match_pages = p;
    c->cap_match = cap;
    return 0;
}

void core_add_seq(core *c, core_req *r, uint32_t n_new, uint32_t n_spec, bool prefill)
{
    core_seq *s = &c->seqs[c->n_seqs++];
    s->req = r;
    s->id = r->id;
    s->user = r->user;
    s->start = r->kv;
    s->n_new = n_new;
    s->n_spec = n_spec;
    s->prefill = prefill;
    s->samples = !prefill || r->kv + n_new == req_fill(r);
    s->pages = r->pages;
    s->n_pages = r->n_pages;
    r->in_batch = true;
    tr_step *st = &c->step;
    if (prefill) {
        st->prefill_tokens += n_new;
        st->prefill_seqs++;
        st->prefill_context += r->kv;
        st->prefill_attn += (uint64_t)n_new * (r->kv + n_new);
    } else {
        st->decode_seqs++;
        st->decode_tokens += n_new;
        st->decode_context += r->kv;
    }
}

int core_admit(core *c, core_req *r, uint32_t m, uint32_t h, uint32_t s, uint64_t cover, double now)
{
    if (keys_fill_prompt(c, r) < 0) return -1;
    if (!c->kv.host || m + h > r->n_keys || s > h) h = s = 0;   /* cannot happen: the tiers matched keys */
    /* The host copies must outlive the evictions the allocation below may
     * cause (write_back puts evicted pages on the host, which may push out
     * its least recent pages): pinned now, and by the tree once the pages
     * join it, for as long as the GPU holds them. Storage pages are fetched
     * into the host first (SGLang: storage -> host -> GPU), taking host
     * slots; with none to take the admission fails. */
    for (uint32_t i = 0; i < h; i++) {
        if (kv_tier_pin(c->kv.host, r->keys[m + i]) >= 0) continue;
        while (i-- > 0) kv_tier_unpin(c->kv.host, r->keys[m + i]);
        return -1;
    }
    for (uint32_t i = h - s; i < h; i++) kv_tier_put(c->kv.storage, r->keys[m + i]);   /* read: recently used */
    if (!r->pages) {
        r->cap_pages = ceil_div((uint64_t)r->prompt_len + r->max_new - 1, c->ps);
        r->pages = malloc((size_t)r->cap_pages * sizeof *r->pages);
        if (!r->pages) return -1;
    }
    /* Hold the matched prefix first, so allocating the rest cannot evict it. */
    for (uint32_t i = 0; i < m; i++) {
        r->pages[i] = c->match_pages[i];
        kv_hold(&c->kv, r->pages[i]);
    }
    r->n_pages = r->n_tree = m;
    r->kv = m * c->ps;
    if (core_grow(c, r, cover) < 0) {
        for (uint32_t i = r->n_pages; i-- > 0;) kv_release(&c->kv, r->pages[i]);
        for (uint32_t i = 0; i < h; i++) kv_tier_unpin(c->kv.host, r->keys[m + i]);
        r->n_pages = r->n_tree = 0;
        r->kv = 0;
        return -1;
    }
    for (uint32_t i = 0; i < h; i++) kv_log_copy(&c->kv, r->pages[m + i], kv_tier_slot(c->kv.host, r->keys[m + i]), false);
    if (h) {
        /* Loaded back during the step: the pages hold the prefix's K and V
         * when the forward reads them (layer by layer), so they are the
         * request's context and the tree's from now on. */
        r->kv = (m + h) * c->ps;
        keys_cache_pages(c, r, KEYS_SHAREABLE);
        for (uint32_t i = r->n_tree; i < m + h; i++) kv_tier_unpin(c->kv.host, r->keys[i]);   /* a key collision */
        c->step.hicache_load_tokens += h * c->ps;
        c->step.hicache_storage_tokens += s * c->ps;
        c->st.load_back_tokens += (uint64_t)h * c->ps;
        c->st.storage_fetched_tokens += (uint64_t)s * c->ps;
    }
    r->cached_tokens = (m + h) * c->ps;
    r->cached_host = h * c->ps;
    r->cached_storage = s * c->ps;
    wait_unlink(c, r);
    r->phase = PH_PREFILL;
    c->n_active++;
    lora_admitted(c, r);
    if (!r->admitted_once) {
        r->admitted_once = true;
        c->st.prompt_tokens += r->prompt_len;
        c->st.cached_tokens += r->cached_tokens < r->prompt_len ? r->cached_tokens : r->prompt_len;
        c->st.host_cached_tokens += r->cached_host;
        c->st.storage_cached_tokens += r->cached_storage;
    }
    core_emit(c, CORE_EV_ADMITTED, r, now);
    return 0;
}

void core_admit_ready(core *c, core_req *r)
{
    r->kv = req_fill(r) - 1;   /* all but the last token, whose K and V its first decode computes */
    r->kv_ready = false;
    r->phase = PH_DECODE;
    c->run[c->n_run++] = r;
    r->in_run = true;
}

void core_retract(core *c, core_req *r, bool cache, bool front, double now)
{
    /* Keep what the request will re-match when it recomputes: with `cache`
     * (vLLM) every full page, else (SGLang) the prompt pages its prefill put
     * in the tree. */
    keys_cache_pages(c, r, cache ? KEYS_ALL : KEYS_PROMPT);
    release_pages(c, r);
    r->phase = PH_WAITING;
    r->in_run = false;
    r->retractions++;
    if (c->chunked == r) c->chunked = NULL;
    c->n_active--;
    c->st.retractions++;
    c->step.retractions++;
    if (front) wait_push_front(c, r);
    else wait_push_back(c, r);
    core_emit(c, CORE_EV_RETRACTED, r, now);
}

void run_remove_marked(core *c)
{
    uint32_t w = 0;
    for (uint32_t i = 0; i < c->n_run; i++)
        if (c->run[i]->in_run) c->run[w++] = c->run[i];
    c->n_run = w;
}

/* ---- lifecycle ---- */
core *core_new(const core_config *cfg, const core_hooks *hooks, rh_err *e)
{
    if (core_config_validate(cfg, e) < 0) return NULL;
    core *c = calloc(1, sizeof *c);
    if (!c) {
        rh_fail(e, "core: out of memory");
        return NULL;
    }
    c->cfg = *cfg;
    if (hooks) c->hooks = *hooks;
    c->ps = cfg->page_size;
    c->cfg.total_pages = cfg->max_total_tokens ? cfg->max_total_tokens / cfg->page_size : cfg->total_pages;
    c->cfg.max_total_tokens = c->cfg.total_pages * c->ps;
    if (cfg->spec_steps && !cfg->spec_draft_tokens) c->cfg.spec_draft_tokens = cfg->spec_steps + 1;
    c->radix = !cfg->disable_radix_cache;
    c->cfg.lua_policy_path = NULL;
    if (cfg->lua_policy_path && !(c->policy_path = strdup(cfg->lua_policy_path))) goto oom;
    c->cfg.lua_policy_path = c->policy_path;

    if (kv_init(&c->kv, (uint32_t)c->cfg.total_pages, c->ps, (kv_order)cfg->evict, e) < 0) goto fail;
    if (cfg->enable_hierarchical_cache) {
        /* SGLang's host pool: --hicache-size GB over the KV's bytes per
         * token, else --hicache-ratio times the GPU pool; whole pages. */
        double pages = cfg->hicache_size > 0 ? cfg->hicache_size * 1e9 / (cfg->kv_bytes_per_token * c->ps)
                                             : cfg->hicache_ratio * (double)c->cfg.total_pages;
        if (!(pages >= 1) || pages >= (double)UINT32_MAX) {
            rh_fail(e, "--enable-hierarchical-cache: a host tier of %.0f pages of %u tokens is not a tier", pages, c->ps);
            goto fail;
        }
        if (kv_tier_init(&c->host, (uint64_t)pages, e) < 0) goto fail;
        c->kv.host = &c->host;
        c->kv.storage = cfg->hicache_storage;
        c->kv.write_policy = (kv_write_policy)cfg->hicache_write_policy;
    }
    if (lora_init(c, e) < 0) goto fail;
    c->map_mask = 1023;
    c->map_ids = malloc((c->map_mask + 1) * sizeof *c->map_ids);
    c->map_reqs = calloc(c->map_mask + 1, sizeof *c->map_reqs);
    c->cap_run = c->cap_seqs = cfg->max_running_requests + 1;
    c->run = malloc((size_t)c->cap_run * sizeof *c->run);
    c->seqs = calloc(c->cap_seqs, sizeof *c->seqs);
    if (!c->map_ids || !c->map_reqs || !c->run || !c->seqs) goto oom;

    /* SGLang's schedule: reserve init_ratio of every running request's
     * remaining output, decaying to min_ratio over 600 decode steps. */
    c->ratio_init = CORE_INIT_RATIO * cfg->schedule_conservativeness;
    if (c->ratio_init > 1.0) c->ratio_init = 1.0;
    c->ratio_min = c->ratio_init * CORE_MIN_RATIO_FACTOR;
    if (c->ratio_min > 1.0) c->ratio_min = 1.0;
    c->ratio_decay = (c->ratio_init - c->ratio_min) / CORE_RATIO_DECAY_STEPS;
    c->ratio = c->ratio_init;
    c->rng = rh_hash64(cfg->seed);   /* the random policy's splitmix64 stream */

    if (cfg->policy == CORE_POLICY_LUA) {
        c->lua = c->policy_path ? clua_open_file(c, c->policy_path, e)
                                : clua_wrap(cfg->lua_state, cfg->lua_policy_ref, e);
        if (!c->lua) goto fail;
        breaker_init(&c->breaker, cfg->policy_max_failures);
    }
    return c;
oom:
    rh_fail(e, "core: out of memory");
fail:
    core_free(c);
    return NULL;
}

void core_free(core *c)
{
    if (!c) return;
    if (c->map_reqs)
        for (uint64_t i = 0; i <= c->map_mask; i++)
            if (c->map_reqs[i]) free_req(c->map_reqs[i]);
    for (core_req *z = c->zombies, *n; z; z = n) {
        n = z->zombie_next;
        free_req(z);
    }
    clua_close(c->lua);
    kv_destroy(&c->kv);
    kv_tier_destroy(&c->host);
    lora_free(c);
    free(c->map_ids);
    free(c->map_reqs);
    free(c->run);
    free(c->seqs);
    free(c->order);
    free(c->dfs_pages);
    free(c->dfs_off);
    free(c->dfs_weight);
    free(c->dfs_first);
    free(c->lof_v);
    free(c->lof_tmp);
    free(c->match_pages);
    free(c->policy_path);
    free(c);
}

const core_config *core_get_config(const core *c)
{
    return &c->cfg;
}

core_fit core_check_fit(const core *c, uint64_t id, uint32_t prompt_len, uint32_t max_new_tokens, rh_err *e)
{
    unsigned long long i = (unsigned long long)id;
    if (prompt_len < 1) {
        rh_fail(e, "request %llu: prompt_len is 0 (a request needs at least one prompt token)", i);
        return CORE_EMPTY;
    }
    if (max_new_tokens < 1) {
        rh_fail(e, "request %llu: max_new_tokens is 0 (a request must produce at least one token)", i);
        return CORE_EMPTY;
    }
    uint64_t total = (uint64_t)prompt_len + max_new_tokens;
    if (c->cfg.context_length && total > c->cfg.context_length) {
        rh_fail(e, "request %llu: prompt_len %u + max_new_tokens %u exceeds --context-length %u", i, prompt_len,
                max_new_tokens, c->cfg.context_length);
        return CORE_OVER_CONTEXT;
    }
    if (total > c->cfg.max_total_tokens) {
        rh_fail(e, "request %llu: prompt_len %u + max_new_tokens %u exceeds the KV pool of %llu tokens", i,
                prompt_len, max_new_tokens, (unsigned long long)c->cfg.max_total_tokens);
        return CORE_OVER_POOL;
    }
    return CORE_FITS;
}

core_req *core_add(core *c, const core_req_desc *d, double now, rh_err *e)
{
    unsigned long long id = (unsigned long long)d->id;
    if (core_check_fit(c, d->id, d->prompt_len, d->max_new_tokens, e) != CORE_FITS) return NULL;
    if (map_get(c, d->id)) {
        rh_fail(e, "request %llu: id already queued or running", id);
        return NULL;
    }
    core_req *r = calloc(1, sizeof *r);
    if (!r) {
        rh_fail(e, "request %llu: out of memory", id);
        return NULL;
    }
    r->id = d->id;
    r->user = d->user;
    r->arrival = now;
    r->prompt_len = d->prompt_len;
    r->max_new = d->max_new_tokens;
    r->priority = d->priority;
    r->kv_ready = d->kv_ready && c->cfg.preset == CORE_PRESET_SGLANG;
    if (lora_attach(c, r, d->adapter, e) < 0 || keys_init_req(c, r, d, e) < 0 || map_put(c, r) < 0) {
        if (!e || !e->msg[0]) rh_fail(e, "request %llu: out of memory", id);
        free_req(r);
        return NULL;
    }
    r->phase = PH_WAITING;
    wait_push_back(c, r);
    return r;
}

int core_abort(core *c, uint64_t id, double now)
{
    core_req *r = map_get(c, id);
    if (!r) return -1;
    if (r->phase == PH_WAITING) {
        wait_unlink(c, r);
    } else {
        c->n_active--;
        if (r->in_run) {
            uint32_t i = 0;
            while (c->run[i] != r) i++;
            memmove(c->run + i, c->run + i + 1, (size_t)(c->n_run - i - 1) * sizeof *c->run);
            c->n_run--;
            r->in_run = false;
        }
        if (c->chunked == r) c->chunked = NULL;
    }
    release_pages(c, r);
    c->st.aborted++;
    map_del(c, id);
    if (c->hooks.on_event) {
        core_event ev = {.kind = CORE_EV_ABORTED, .id = r->id, .user = r->user, .now = now, .output_len = r->out,
                         .cached_tokens = r->cached_tokens, .cached_host = r->cached_host, .cached_storage = r->cached_storage, .retractions = r->retractions, .finish = TR_FINISH_ABORT};
        c->hooks.on_event(c->hooks.ctx, &ev);
    }
    if (r->in_batch) {
        /* The runner may be computing it right now: its pages are back in
         * the pool (nothing allocates before core_complete), but the batch
         * still points at it. */
        r->phase = PH_ZOMBIE;
        r->zombie_next = c->zombies;
        c->zombies = r;
    } else {
        free_req(r);
    }
    return 0;
}

#ifdef RH_CORE_DEBUG
static void debug_check(core *c, const char *where)
{
    rh_err e;
    if (core_check(c, &e) == 0) return;
    char msg[1200];
    snprintf(msg, sizeof msg, "core_check failed after %s (step %llu): %s", where, (unsigned long long)c->step_index,
             e.msg);
    core_message(c, msg);
    abort();
}
#else
#define debug_check(c, where) ((void)0)
#endif

uint32_t core_schedule(core *c, double now, core_batch *out)
{
    memset(out, 0, sizeof *out);
    if (c->in_flight) return 0;
    c->n_seqs = 0;
    memset(&c->step, 0, sizeof c->step);
    c->step.index = c->step_index;
    c->step.start = now;
    c->sched_now = now;

    lora_step_begin(c);
    uint64_t written_back = c->kv.written_back;
    if (c->cfg.preset == CORE_PRESET_VLLM) sched_vllm(c, now);
    else sched_sglang(c, now);
    c->step.hicache_writeback_tokens = (uint32_t)((c->kv.written_back - written_back) * c->ps);

    if (c->n_seqs == 0) {
        /* Idle: SGLang starts the next busy period at the initial ratio. */
        if (core_idle(c)) c->ratio = c->ratio_init;
        debug_check(c, "an empty schedule");
        return 0;
    }
    c->step.waiting = c->n_waiting;
    c->step.running = c->n_active;
    c->step.pages_total = c->kv.n_pages;
    out->seqs = c->seqs;
    out->n = c->n_seqs;
    out->prefill_tokens = c->step.prefill_tokens;
    out->prefill_seqs = c->step.prefill_seqs;
    out->decode_seqs = c->step.decode_seqs;
    out->decode_tokens = c->step.decode_tokens;
    out->index = c->step_index;
    out->load_tokens = c->step.hicache_load_tokens;
    out->copies = c->kv.log;
    out->n_copies = c->kv.n_log;
    out->copies_lost = c->kv.log_failed;
    out->writeback_tokens = c->step.hicache_writeback_tokens;
    /* Background copies since the previous step was formed (the inserts of
     * its completion and this step's admissions). */
    c->step.hicache_backup_tokens = (uint32_t)((c->kv.backed_up - c->step_backed_up) * c->ps);
    out->backup_tokens = c->step.hicache_backup_tokens;
    out->storage_tokens = c->step.hicache_storage_tokens;
    c->step_backed_up = c->kv.backed_up;
    for (uint32_t i = 0; i < c->n_seqs && !out->spec_steps; i++)
        if (c->seqs[i].n_spec) out->spec_steps = c->cfg.spec_steps;
    lora_step_end(c, out);
    c->batch = *out;
    c->in_flight = true;
    c->step_index++;
    debug_check(c, "core_schedule");
    return c->n_seqs;
}

static void finish(core *c, core_req *r, uint8_t reason, double now, core_req **done)
{
    keys_cache_pages(c, r, KEYS_SHAREABLE);
    keys_drop_unique(c, r);
    release_pages(c, r);
    c->n_active--;
    c->st.finished++;
    c->step.finished++;
    r->in_run = false;
    if (c->chunked == r) c->chunked = NULL;
    map_del(c, r->id);
    if (c->hooks.on_event) {
        core_event ev = {.kind = CORE_EV_FINISHED, .id = r->id, .user = r->user, .now = now, .output_len = r->out,
                         .cached_tokens = r->cached_tokens, .cached_host = r->cached_host, .cached_storage = r->cached_storage, .retractions = r->retractions, .finish = reason};
        c->hooks.on_event(c->hooks.ctx, &ev);
    }
    r->zombie_next = *done;   /* freed once c->run no longer points at it */
    *done = r;
}

int core_complete(core *c, const core_batch *b, const core_seq_result *results, double now, rh_err *e)
{
    if (!c->in_flight || !b || b->seqs != c->seqs || b->n != c->n_seqs || b->index + 1 != c->step_index)
        return rh_fail(e, "core_complete: batch is not the one in flight");
    for (uint32_t i = 0; i < c->n_seqs && results; i++) {
        const core_seq *s = &c->seqs[i];
        if (!s->samples || s->req->phase == PH_ZOMBIE) continue;
        if (results[i].proposed > s->n_spec || results[i].accepted > results[i].proposed)
            return rh_fail(e, "core_complete: request %llu: %u drafts proposed and %u accepted for %u draft slots",
                           (unsigned long long)s->id, results[i].proposed, results[i].accepted, s->n_spec);
    }
    uint32_t ps = c->ps;
    core_req *done = NULL;
    bool sglang = c->cfg.preset == CORE_PRESET_SGLANG;
    kv_log_clear(&c->kv);   /* the runner ran them before the forward */
    for (uint32_t i = 0; i < c->n_seqs; i++) {
        const core_seq *s = &c->seqs[i];
        core_req *r = s->req;
        if (r->phase == PH_ZOMBIE) continue;
        r->in_batch = false;
        const core_seq_result *res = results ? &results[i] : NULL;
        uint32_t accepted = 0;
        if (s->prefill) {
            r->kv = s->start + s->n_new;
            if (!s->samples) {
                keys_cache_pages(c, r, KEYS_SHAREABLE);   /* a chunk: its full pages are shareable now */
                continue;
            }
        } else {
            accepted = res ? res->accepted : 0;
            r->kv = s->start + 1 + accepted;
            /* Rejected drafts roll back: free the pages past the new length. */
            uint32_t keep = ceil_div(r->kv, ps);
            while (r->n_pages > keep) kv_release(&c->kv, r->pages[--r->n_pages]);
            if (res) {
                c->step.spec_proposed += res->proposed;
                c->step.spec_accepted += accepted;
            }
        }
        if (r->tok) keys_commit(c, r, accepted + 1, res ? res->tokens : NULL);
        else r->out += accepted + 1;   /* keys_commit's whole work when no token chain is kept */
        if (c->hooks.on_event) {
            core_event ev = {.kind = CORE_EV_TOKENS, .id = r->id, .user = r->user, .now = now, .n_tokens = accepted + 1,
                             .output_len = r->out, .cached_tokens = r->cached_tokens, .cached_host = r->cached_host, .cached_storage = r->cached_storage,
                             .spec_proposed = (!s->prefill && res) ? res->proposed : 0, .spec_accepted = accepted,
                             .retractions = r->retractions};
            c->hooks.on_event(c->hooks.ctx, &ev);
        }
        if (s->prefill) {
            r->phase = PH_DECODE;
            keys_cache_pages(c, r, KEYS_SHAREABLE);   /* the whole prompt is cached once prefilled */
            if (sglang) {
                if (c->chunked == r) c->chunked = NULL;
                c->run[c->n_run++] = r;
                r->in_run = true;
            }
        }
        if ((res && res->stop) || r->out >= r->max_new)
            finish(c, r, (res && res->stop) ? TR_FINISH_STOP : TR_FINISH_LENGTH, now, &done);
    }
    if (done) {
        run_remove_marked(c);
        for (core_req *n; done; done = n) {
            n = done->zombie_next;
            free_req(done);
        }
    }
    for (core_req *n; c->zombies; c->zombies = n) {
        n = c->zombies->zombie_next;
        free_req(c->zombies);
    }
    c->in_flight = false;
    c->st.steps++;
    tr_step *st = &c->step;
    st->duration = now - c->sched_now;
    st->sched_time = 0;
    /* KV use as SGLang reports it: pages requests hold; cached pages no
     * request holds are evictable, so they count as room. */
    st->pages_used = (uint32_t)(c->kv.n_pages - kv_free_pages(&c->kv) - kv_cached_pages(&c->kv));
    if (c->hooks.on_step) c->hooks.on_step(c->hooks.ctx, st);
    debug_check(c, "core_complete");
    return 0;
}

void core_get_stats(const core *c, core_stats *s)
{
    *s = c->st;
    s->waiting = c->n_waiting;
    s->running = c->n_active;
    s->pages_total = c->kv.n_pages;
    s->pages_free = kv_free_pages(&c->kv);
    s->pages_cached = kv_cached_pages(&c->kv);
    s->pages_used = s->pages_total - s->pages_free - s->pages_cached;
    s->evicted_pages = c->kv.evicted;
    s->backup_pages = c->kv.backed_up;
    s->writeback_pages = c->kv.written_back;
    s->demoted_pages = c->kv.demoted;
    s->host_pages_total = c->host.cap;
    s->host_pages_used = c->host.n_used;
    s->stored_pages = c->kv.stored;
    s->new_token_ratio = c->ratio;
}

bool core_idle(const core *c)
{
    return c->n_waiting == 0 && c->n_active == 0;
}

int64_t core_flush_cache(core *c)
{
    if (!core_idle(c)) return -1;
    return (int64_t)kv_evict_all(&c->kv);
}

uint32_t core_lora_resident(const core *c, uint32_t *ids, uint32_t cap)
{
    return lora_resident(c, ids, cap);
}

const char *core_policy_error(const core *c)
{
    return c->policy_err[0] ? c->policy_err : NULL;
}
