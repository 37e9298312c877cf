/* generate.c — see generate.h. */
#include "engine/model/generate.h"

#include <stdlib.h>

int64_t gen_run(runner *r, const int32_t *prompt, uint32_t n_prompt, const gen_params *p, int32_t *out, rh_err *e)
{
    if (!n_prompt) return rh_fail(e, "generate: the prompt is empty");
    if (runner_sampling_check(&p->sampling, e)) return -1;
    uint32_t ps = runner_page_size(r), total = runner_total_pages(r);
    uint64_t len = (uint64_t)n_prompt + p->max_new;
    if ((len + ps - 1) / ps > total)
        return rh_fail(e, "generate: %llu tokens need more than the pool's %u pages of %u", (unsigned long long)len,
                       total, ps);
    uint32_t *pages = malloc((size_t)total * sizeof *pages);
    if (!pages) return rh_fail(e, "generate: out of memory");
    for (uint32_t i = 0; i < total; i++) pages[i] = i;

    uint64_t rng = kern_rng_init(p->seed);
    uint32_t chunk = p->chunk ? p->chunk : n_prompt;
    const float *logits;
    int64_t made = 0;
    for (uint32_t at = 0; at < n_prompt; at += chunk) {
        uint32_t n = n_prompt - at < chunk ? n_prompt - at : chunk;
        int last = at + n == n_prompt;
        runner_seq s = {prompt + at, n, at, pages, total, last && p->max_new ? 1 : 0, NULL};
        if (runner_forward(r, &s, 1, &logits, e)) goto fail;
        if (p->progress) rh_progress_update(p->progress, at + n);
    }
    while ((uint64_t)made < p->max_new) {
        int32_t tok = runner_sample(r, logits, &p->sampling, &rng);
        out[made++] = tok;
        if (p->progress) rh_progress_update(p->progress, n_prompt + (uint64_t)made);
        if (tok == p->stop_id || (uint64_t)made == p->max_new) break;
        runner_seq s = {&out[made - 1], 1, n_prompt + (uint32_t)made - 1, pages, total, 1, NULL};
        if (runner_forward(r, &s, 1, &logits, e)) goto fail;
    }
    free(pages);
    return made;
fail:
    free(pages);
    return -1;
}
