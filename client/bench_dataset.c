/* bench_dataset.c — the generated datasets (random, shared-prefix), arrival
 * schedules and prompt ids. Trace datasets are in bench_dataset_trace.c. */
#include "client/bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/tokenizer.h"
#include "util/rng.h"
#include "traces/prompt.h"

static int alloc_items(bench_dataset *d, size_t n, size_t n_hashes, const char *name, rh_err *e)
{
    memset(d, 0, sizeof *d);
    d->items = calloc(n ? n : 1, sizeof *d->items);
    d->hash_pool = calloc(n_hashes ? n_hashes : 1, sizeof *d->hash_pool);
    d->name = strdup(name);
    if (!d->items || !d->hash_pool || !d->name) {
        bench_dataset_free(d);
        return rh_fail(e, "out of memory for a dataset of %zu requests", n);
    }
    d->n = n;
    d->vocab = BENCH_DEFAULT_VOCAB;
    for (size_t i = 0; i < n; i++) {
        d->items[i].id = i;
        d->items[i].after = -1;
    }
    return 0;
}

int bench_dataset_new(bench_dataset *d, size_t n, size_t n_hashes, const char *name, rh_err *e)
{
    return alloc_items(d, n, n_hashes, name, e);
}

/* A length drawn uniformly from [L(1-x), L(1+x)] (whole tokens, at least 1),
 * the random dataset's rule in vLLM's benchmark. */
static uint32_t draw_len(rh_rng *r, uint32_t len, double ratio)
{
    double lo = floor((double)len * (1.0 - ratio)), hi = ceil((double)len * (1.0 + ratio));
    if (lo < 1) lo = 1;
    if (hi < lo) hi = lo;
    uint64_t span = (uint64_t)(hi - lo) + 1;
    uint64_t v = (uint64_t)lo + rh_rng_below(r, span);
    return v > BENCH_MAX_TOKENS ? BENCH_MAX_TOKENS : (uint32_t)v;
}

int bench_dataset_random(bench_dataset *d, const bench_random_opts *o, uint32_t record_block_size, rh_err *e)
{
    if (o->num_prompts == 0) return rh_fail(e, "--num-prompts must be at least 1");
    if (o->input_len == 0 || o->output_len == 0)
        return rh_fail(e, "--random-input-len and --random-output-len must be at least 1");
    if (!(o->range_ratio >= 0 && o->range_ratio < 1))
        return rh_fail(e, "--random-range-ratio must be in [0, 1) (got %g)", o->range_ratio);
    if (alloc_items(d, o->num_prompts, 1, "random", e) < 0) return -1;
    rh_rng r;
    rh_rng_seed(&r, o->seed);
    /* The shared prefix is one "block" of prefix_len tokens generated from one
     * hash, so tr_prompt_tokens gives every prompt the same leading ids. */
    d->gen_block_size = o->prefix_len;
    d->trace_block_size = record_block_size;
    d->hash_pool[0] = rh_rng_u64(&r);
    for (size_t i = 0; i < d->n; i++) {
        bench_item *it = &d->items[i];
        it->input_len = o->prefix_len + draw_len(&r, o->input_len, o->range_ratio);
        it->output_len = draw_len(&r, o->output_len, o->range_ratio);
        if (o->prefix_len) {
            it->n_hashes = 1;
            it->hashes = d->hash_pool;
        }
    }
    return 0;
}

int bench_dataset_shared_prefix(bench_dataset *d, const bench_shared_prefix_opts *o, uint32_t record_block_size,
                                rh_err *e)
{
    if (o->num_groups == 0 || o->prompts_per_group == 0)
        return rh_fail(e, "--gsp-num-groups and --gsp-prompts-per-group must be at least 1");
    if (o->question_len == 0 || o->output_len == 0)
        return rh_fail(e, "--gsp-question-len and --gsp-output-len must be at least 1");
    size_t total = (size_t)o->num_groups * o->prompts_per_group;
    size_t n = o->num_prompts && o->num_prompts < total ? o->num_prompts : total;
    if (alloc_items(d, total, o->num_groups, "shared-prefix", e) < 0) return -1;
    rh_rng r;
    rh_rng_seed(&r, o->seed);
    for (uint32_t g = 0; g < o->num_groups; g++) d->hash_pool[g] = rh_rng_u64(&r);
    uint32_t *group = malloc(total * sizeof *group);
    if (!group) {
        bench_dataset_free(d);
        return rh_fail(e, "out of memory for %zu prompts", total);
    }
    for (size_t i = 0; i < total; i++) group[i] = (uint32_t)(i / o->prompts_per_group);
    /* Shuffled so the groups interleave, as SGLang's generator sends them:
     * a server sees a system prompt again only after others evicted it, or not. */
    for (size_t i = total; i > 1; i--) {
        size_t j = (size_t)rh_rng_below(&r, i);
        uint32_t t = group[i - 1];
        group[i - 1] = group[j];
        group[j] = t;
    }
    d->n = n;
    d->gen_block_size = o->system_prompt_len;
    d->trace_block_size = record_block_size;
    for (size_t i = 0; i < n; i++) {
        bench_item *it = &d->items[i];
        it->input_len = o->system_prompt_len + o->question_len;
        it->output_len = o->output_len;
        if (o->system_prompt_len) {
            it->n_hashes = 1;
            it->hashes = &d->hash_pool[group[i]];
        }
    }
    free(group);
    return 0;
}

void bench_dataset_set_rate(bench_dataset *d, double rate, double burstiness, uint64_t seed)
{
    rh_rng r;
    /* Its own stream, so changing the rate never changes the prompts. */
    rh_rng_seed(&r, seed ^ 0x5851f42d4c957f2dull);
    double t = 0;
    for (size_t i = 0; i < d->n; i++) {
        d->items[i].arrival = t;
        if (isfinite(rate) && rate > 0) t += rh_rng_gamma(&r, burstiness, 1.0 / (rate * burstiness));
    }
}

void bench_dataset_set_ramp(bench_dataset *d, int exponential, double start_rps, double end_rps, double burstiness,
                            uint64_t seed)
{
    rh_rng r;
    rh_rng_seed(&r, seed ^ 0x5851f42d4c957f2dull);
    double t = 0;
    for (size_t i = 0; i < d->n; i++) {
        d->items[i].arrival = t;
        /* request i's rate, by its place in the run (vLLM's ramp) */
        double x = d->n > 1 ? (double)i / (double)(d->n - 1) : 0;
        double rate = exponential ? start_rps * pow(end_rps / start_rps, x) : start_rps + (end_rps - start_rps) * x;
        if (rate > 0) t += rh_rng_gamma(&r, burstiness, 1.0 / (rate * burstiness));
    }
}

void bench_dataset_free(bench_dataset *d)
{
    free(d->items);
    free(d->hash_pool);
    free(d->text_pool);
    free(d->adapter_pool);
    free(d->name);
    memset(d, 0, sizeof *d);
}

void bench_item_tokens(const bench_dataset *d, size_t i, int32_t *out)
{
    const bench_item *it = &d->items[i];
    tr_request r;
    memset(&r, 0, sizeof r);
    r.id = it->id;
    r.input_len = it->input_len;
    r.n_hashes = it->n_hashes;
    r.hashes = it->hashes;
    tr_prompt_tokens(&r, d->gen_block_size, d->vocab ? d->vocab : 1, d->prompt_seed, out);
}

int bench_count_tokens(const tokenizer *tok, const char *s, size_t n, uint32_t *out, rh_err *e)
{
    if (!tok) {
        *out = (uint32_t)(n > BENCH_MAX_TOKENS ? BENCH_MAX_TOKENS : n);
        return 0;
    }
    int32_t *ids;
    size_t k;
    if (tok_encode(tok, s, n, 0, &ids, &k, e) < 0) return -1;
    free(ids);
    *out = (uint32_t)(k > BENCH_MAX_TOKENS ? BENCH_MAX_TOKENS : k);
    return 0;
}
