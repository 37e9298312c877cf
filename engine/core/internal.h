/* internal.h — the core's private state, shared by its files (never include
 * this outside engine/core/).
 *
 * Who holds a request:
 *   waiting    the doubly linked waiting list, in queue order;
 *   running    c->run[] in running order (admission order, or for SGLang the
 *              order prefills completed), decoding or, for vLLM, prefilling;
 *   chunked    c->chunked (SGLang only): the one partially prefilled request;
 *   in batch   SGLang requests admitted this step whose whole prompt is in
 *              the batch; they join c->run at core_complete;
 *   zombie     aborted while in the batch in flight; freed by core_complete.
 * Every live request is also in the id map. */
#ifndef RH_CORE_INTERNAL_H
#define RH_CORE_INTERNAL_H

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "engine/core/breaker.h"
#include "engine/core/core.h"
#include "engine/core/kv.h"
#include "util/hashmap.h"

/* SGLang's constants: the estimate of a request's future tokens is clipped so
 * a huge max_new_tokens does not block admission; retraction frees room for
 * this many decode steps of every survivor; lpm turns into fcfs past this
 * many waiting requests (matching them all would cost too much). */
#define CORE_CLIP_MAX_NEW 4096u
#define CORE_RETRACT_DECODE_STEPS 20u
#define CORE_LPM_FCFS_THRESHOLD 128u
/* SGLang's load_back_threshold: a host hit shorter than this is recomputed. */
#define CORE_LOAD_BACK_THRESHOLD 10u
#define CORE_INIT_RATIO 0.7
#define CORE_MIN_RATIO_FACTOR 0.14
#define CORE_RATIO_DECAY_STEPS 600.0

enum req_phase { PH_WAITING = 0, PH_PREFILL, PH_DECODE, PH_ZOMBIE };
enum key_mode { KEYS_NONE = 0, KEYS_TOKENS, KEYS_BLOCKS };

struct core_req {
    uint64_t id;
    void *user;
    double arrival;
    uint32_t prompt_len, max_new;
    uint32_t out;              /* output tokens committed */
    uint32_t kv;               /* tokens whose K and V are in the pages */
    uint8_t phase;             /* enum req_phase */
    uint8_t key_mode;          /* enum key_mode */
    bool in_batch;             /* a sequence of the batch in flight */
    bool admitted_once;        /* first admission counted in the stats */
    bool in_run;               /* listed in c->run */
    bool kv_ready;             /* core_req_desc.kv_ready, until admitted or retracted */
    uint32_t retractions;
    uint32_t cached_tokens;    /* matched at the latest admission */
    uint32_t cached_host;      /* of which loaded back from the host tier */
    uint32_t cached_storage;   /* of which fetched from storage first */

    /* page table: pages[0..n_pages), the first n_tree of them tree pages */
    uint32_t *pages;
    uint32_t n_pages, cap_pages, n_tree;

    /* page keys: keys[0..n_keys) known (prompt pages from admission on, output
     * pages as they fill); the n_content leading pages are keyed from content
     * (tokens, or block hashes on the fly before admission) and can match
     * another request; the rest carry unique keys only this request can match */
    uint64_t *keys;
    uint32_t n_keys, cap_keys, n_content;
    uint64_t *blocks;
    uint32_t n_blocks, block_size;
    XXH64_state_t *tok;        /* hash of the partial page so far (token keys) */

    core_req *prev, *next;     /* waiting list */
    int64_t qseq;              /* queue position key: the list is in ascending qseq */
    int32_t priority;          /* core_req_desc.priority */
    uint32_t adapter;          /* core_req_desc.adapter */
    uint32_t lora;             /* its record in c->lora_ads (0: the base model) */
    uint32_t lof_idx;          /* slot in c->lof_v, or KV_NONE */
    core_req *zombie_next;
    /* Each field below means one thing, for the one sort or check that
     * sets it just before it reads it. */
    uint32_t sort_pos;         /* position in the list being ordered (the waiting queue for a
                                  policy, the running batch for retraction): ties go by it */
    uint32_t lpm_pages;        /* lpm: prefix pages the cache holds for it */
    uint32_t check_marks;      /* core_check: queues it was found in (must be exactly 1) */
};

typedef struct core_lua core_lua;

/* One LoRA adapter the core has seen (lora.c). */
typedef struct lora_ad {
    uint32_t id;
    uint32_t slot;              /* its GPU slot, or UINT32_MAX */
    uint64_t in_set;            /* c->lora_gen when it joined this step's set */
    uint64_t in_batch;          /* c->lora_gen when this step's batch first counted it */
} lora_ad;

struct core {
    core_config cfg;
    char *policy_path;
    core_hooks hooks;
    kv_pool kv;
    kv_tier host;               /* with --enable-hierarchical-cache (kv.host points here) */
    uint32_t match_host;        /* keys_match: host-tier pages right after the GPU match */
    uint32_t match_storage;     /* keys_match: storage pages right after those */
    uint64_t step_backed_up;    /* kv.backed_up when the previous step was formed */
    uint32_t ps;
    bool radix;                 /* prefix cache on */

    /* id map: open addressing, u64 id -> request */
    uint64_t *map_ids;
    core_req **map_reqs;
    uint64_t map_mask, map_n;

    core_req *wait_head, *wait_tail;
    uint32_t n_waiting;
    int64_t qseq_back, qseq_front;
    /* lof keeps its order across steps: lof_v[0..lof_sorted) sorted, then
     * requests queued since (NULL: left the queue); merged when needed, so
     * a step costs a linear pass, not a sort of the whole queue. */
    core_req **lof_v, **lof_tmp;
    uint32_t lof_n, lof_sorted, lof_cap;
    bool lof_failed;
    core_req **run;
    uint32_t n_run, cap_run;
    core_req *chunked;
    uint32_t n_active;          /* requests holding a running slot */
    core_req *zombies;

    /* the batch in flight */
    core_seq *seqs;
    uint32_t n_seqs, cap_seqs;
    core_batch batch;
    bool in_flight;
    double sched_now;
    tr_step step;

    /* buffers reused every step */
    core_req **order;
    uint32_t cap_order;
    uint32_t *match_pages;      /* one page table's worth, for admission */
    uint32_t cap_match;
    /* dfs-weight (policy.c): each waiting request's matched pages, back to
     * back (dfs_off by sort_pos), and per page the requests whose match
     * passes through it and the first queue position among them */
    uint32_t *dfs_pages;
    uint64_t *dfs_off, cap_dfs_pages;
    uint32_t cap_dfs_off;
    uint32_t *dfs_weight, *dfs_first;   /* by page; zero outside a call */

    double ratio, ratio_init, ratio_min, ratio_decay;
    uint64_t rng;
    uint64_t nonce, step_index;
    core_stats st;

    /* LoRA (lora.c): adapters by id, the step's set, the GPU slots */
    bool lora_seen;             /* a request with an adapter arrived: from then on the rule applies */
    rh_map64 lora_map;          /* adapter id -> index in lora_ads */
    lora_ad *lora_ads;          /* [0] is the base model */
    uint32_t n_lora_ads, cap_lora_ads;
    uint64_t lora_gen;          /* the step being formed */
    uint32_t n_lora_set;        /* adapters (and the SGLang base) in this step's set */
    uint32_t *lora_slot;        /* per slot: index in lora_ads, or UINT32_MAX */
    uint64_t *lora_stamp;       /* per slot: step of last use (lru) or of the load (fifo) */

    core_lua *lua;
    breaker breaker;            /* around the Lua policy */
    char policy_err[512];
};

/* ---- core.c: shared mechanics used by both presets ---- */
static inline uint32_t ceil_div(uint64_t a, uint32_t b) { return (uint32_t)((a + b - 1) / b); }
static inline uint32_t req_fill(const core_req *r) { return r->prompt_len + r->out; }
void core_emit(core *c, int kind, core_req *r, double now);
void core_message(core *c, const char *msg);
void wait_unlink(core *c, core_req *r);
void wait_push_back(core *c, core_req *r);
void wait_push_front(core *c, core_req *r);
/* Draft slots a decode of r asks for this step (0 when speculation is off
 * for this batch size). */
uint32_t core_spec_slots(const core *c, const core_req *r, uint32_t batch_size);
/* Pages r needs beyond its table to hold `tokens` positions. */
static inline uint32_t pages_short(const core *c, const core_req *r, uint64_t tokens)
{
    uint32_t need = ceil_div(tokens, c->ps);
    return need > r->n_pages ? need - r->n_pages : 0;
}
/* Grows r's table to cover `tokens` positions (the pool was checked). */
int core_grow(core *c, core_req *r, uint64_t tokens);
/* Room for a match of `pages` pages in c->match_pages. */
int core_match_room(core *c, uint32_t pages);
void core_add_seq(core *c, core_req *r, uint32_t n_new, uint32_t n_spec, bool prefill);
/* Takes r out of the waiting list into a running slot with its matched
 * prefix held (m pages from c->match_pages) and pages covering `cover`
 * positions, of which the h after the m matched load back from the host tier
 * (keys_match's c->match_host), the last s of those h fetched from storage
 * into the host first (c->match_storage): they join the tree and r's
 * context. -1 with nothing changed when the pool cannot cover them. */
int core_admit(core *c, core_req *r, uint32_t m, uint32_t h, uint32_t s, uint64_t cover, double now);
/* After core_admit of a kv_ready request: its prompt is in the pages, and
 * it joins the running batch to decode. */
void core_admit_ready(core *c, core_req *r);
/* Frees r's pages (after caching its full pages when `cache`), sends it back
 * to the waiting queue (front or back) for recompute. */
void core_retract(core *c, core_req *r, bool cache, bool front, double now);
void run_remove_marked(core *c);

/* ---- keys.c: page keys ---- */
int keys_init_req(core *c, core_req *r, const core_req_desc *d, rh_err *e);
/* Fills keys for every prompt page (first admission). */
int keys_fill_prompt(core *c, core_req *r);
/* Output tokens committed: keys of the pages they complete. */
void keys_commit(core *c, core_req *r, uint32_t n, const int32_t *tokens);
/* Longest cached prefix of r in pages (at most so that one token is left to
 * compute), pages into out (may be NULL); *n_cached counts the matched pages
 * that no request holds (they stop being evictable once held). With a host
 * tier, c->match_host is set to how many pages after those the host has in
 * a row, and c->match_storage how many after those storage has (within the
 * same limit). */
uint32_t keys_match(core *c, core_req *r, uint32_t *out, uint32_t *n_cached);
/* Puts r's full computed pages into the tree (sharing pages already there). */
/* Which of a request's pages keys_cache_pages puts in the tree. */
enum keys_cache_scope {
    KEYS_SHAREABLE,   /* content-keyed pages only: what another request could match */
    KEYS_PROMPT,      /* and the unique-keyed prompt pages (a retraction re-matches them) */
    KEYS_ALL,         /* every full computed page */
};
void keys_cache_pages(core *c, core_req *r, enum keys_cache_scope scope);
/* Takes the request's unique-keyed pages back out of the tree (from the
 * last), as far as only it holds them: nobody else can ever match them, so
 * caching them past the request's life would only cost evictions. */
void keys_drop_unique(core *c, core_req *r);

/* ---- policy.c: ordering the waiting queue ---- */
typedef struct cand_list {
    core_req **v;               /* NULL: walk the waiting list itself (fcfs) */
    uint32_t n;
} cand_list;

/* The idx-th candidate of a waiting order: from the policy's list, or
 * without one (fcfs) the next of the waiting list, walked through *walk,
 * which moves on before admission unlinks the request. NULL with *end set:
 * the list ran out; NULL alone: skip this index (it left the queue). */
static inline core_req *cand_at(const cand_list *cl, uint32_t idx, core_req **walk, bool *end)
{
    if (cl->v) return cl->v[idx];
    core_req *r = *walk;
    if (!r) {
        *end = true;
        return NULL;
    }
    *walk = r->next;
    return r;
}

void policy_order(core *c, double now, cand_list *out);

/* ---- policy_lua.c ---- */
/* A script in its own sandboxed state, under c's policy knobs (memory cap,
 * budget, time limit). */
core_lua *clua_open_file(const core *c, const char *path, rh_err *e);
core_lua *clua_wrap(void *lua_state, int ref, rh_err *e);
void clua_close(core_lua *l);
/* Orders reqs[0..n) (a copy of the first waiting requests, fcfs order) into
 * out[]; returns how many to consider, or -1 with err filled. */
int clua_order(core *c, core_lua *l, double now, core_req **reqs, uint32_t n, core_req **out, char *err,
               size_t errn);

/* ---- lora.c: adapters per batch and in slots ---- */
int lora_init(core *c, rh_err *e);
void lora_free(core *c);
int lora_attach(core *c, core_req *r, uint32_t adapter, rh_err *e);
void lora_step_begin(core *c);                       /* the set: the running requests' adapters */
bool lora_admits(const core *c, const core_req *r);  /* r may join this step's set */
void lora_admitted(core *c, const core_req *r);      /* r joined it (core_admit) */
void lora_step_end(core *c, core_batch *out);        /* slots for the batch; loads counted */
uint32_t lora_resident(const core *c, uint32_t *ids, uint32_t cap);

/* ---- sched_sglang.c / sched_vllm.c ---- */
void sched_sglang(core *c, double now);
void sched_vllm(core *c, double now);

#endif
