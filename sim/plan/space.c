/* space.c — a plan's candidates: enumerated, named, and turned into the
 * knobs that simulate them (the same names `rehearse sim` takes, so a
 * candidate's flags reproduce its simulation). */
#include "sim/plan/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/router/router.h"

/* Prefill replicas of r under the ratio p:d (0 when colocated). */
static uint32_t prefill_of(uint32_t r, const uint32_t pd[2])
{
    if (!pd[0] || !pd[1]) return 0;
    long p = lround((double)r * pd[0] / (pd[0] + pd[1]));
    if (p < 1) p = 1;
    if (p > (long)r - 1) p = (long)r - 1;
    return (uint32_t)p;
}

/* Colocated replicas always; a prefill-decode split needs one of each. */
static int split_valid(const uint32_t pd[2], uint32_t r)
{
    return !(pd[0] && pd[1]) || r >= 2;
}

int plan_enumerate(const plan_space *sp, plan_cand **out, uint32_t *n_out, rh_err *e)
{
    size_t cap = 1024, n = 0;
    plan_cand *c = malloc(cap * sizeof *c);
    if (!c) return rh_fail(e, "out of memory");
    for (int g = 0; g < sp->n_gpus; g++)
        for (int t = 0; t < sp->n_tp; t++)
            for (uint32_t r = 1; r <= sp->max_replicas; r++) {
                uint32_t gpus = sp->tp[t] * r;
                if (sp->max_gpus && gpus > sp->max_gpus) break;
                for (int d = 0; d < sp->n_pd; d++) {
                    if (!split_valid(sp->pd[d], r)) continue;
                    uint32_t pre = prefill_of(r, sp->pd[d]);
                    /* Two ratios giving the same split of r replicas are one candidate. */
                    int seen = 0;
                    for (int d2 = 0; d2 < d && !seen; d2++)
                        seen = split_valid(sp->pd[d2], r) && prefill_of(r, sp->pd[d2]) == pre;
                    if (seen) continue;
                    for (int k = 0; k < sp->n_chunk; k++)
                        for (int m = 0; m < sp->n_max_running; m++)
                            for (int s = 0; s < sp->n_spec; s++)
                                for (int p = 0; p < (sp->n_parallel ? sp->n_parallel : 1); p++)
                                for (int q = 0; q < sp->n_routers; q++) {
                                    /* EP and DP attention split a replica's GPUs: none with one. */
                                    uint8_t par = sp->n_parallel ? sp->parallel[p] : 0;
                                    if (par && sp->tp[t] < 2) break;
                                    /* The router matters only where it picks among 2+ servers. */
                                    uint32_t pickable = pre ? pre : r;
                                    if (q > 0 && pickable < 2) break;
                                    if (n == cap) {
                                        plan_cand *c2 = realloc(c, 2 * cap * sizeof *c);
                                        if (!c2) {
                                            free(c);
                                            return rh_fail(e, "out of memory");
                                        }
                                        c = c2;
                                        cap *= 2;
                                    }
                                    c[n++] = (plan_cand){.gpu = (uint16_t)g, .tp = sp->tp[t], .replicas = r,
                                                         .prefill = pre, .chunk = sp->chunk[k],
                                                         .max_running = sp->max_running[m],
                                                         .spec_steps = sp->spec_steps[s], .parallel = par,
                                                         .router = sp->routers[q],
                                                         .gpus = gpus,
                                                         .usd_hour = gpus * sp->gpus[g].usd_per_gpu_hour,
                                                         .rung = -1, .score = NAN};
                                }
                }
            }
    *out = c;
    *n_out = (uint32_t)n;
    return 0;
}

void plan_cand_name(const plan_space *sp, const plan_cand *c, char *buf, size_t n)
{
    char layout[48];
    if (c->prefill)
        snprintf(layout, sizeof layout, "P%u+D%u", c->prefill, c->replicas - c->prefill);
    else
        snprintf(layout, sizeof layout, "x%u", c->replicas);
    uint32_t pickable = c->prefill ? c->prefill : c->replicas;
    char chunk[24];
    if (c->chunk > 0) snprintf(chunk, sizeof chunk, "chunk%d", c->chunk);
    else snprintf(chunk, sizeof chunk, "nochunk");
    snprintf(buf, n, "%s tp%u %s %s run%u spec%u%s%s%s%s", sp->gpus[c->gpu].name, c->tp, layout, chunk,
             c->max_running, c->spec_steps, c->parallel ? " " : "", c->parallel ? plan_parallel_name(c->parallel) : "",
             pickable >= 2 ? " " : "", pickable >= 2 ? router_policy_name((router_policy)c->router) : "");
}

int plan_cand_knobs(const plan_space *sp, const plan_cand *c, plan_knobs *k)
{
    k->n = 0;
#define KNOB(name, ...)                                                                 \
    do {                                                                               \
        k->kv[k->n][0] = name;                                                         \
        snprintf(k->val[k->n], sizeof k->val[k->n], __VA_ARGS__);                      \
        k->kv[k->n][1] = k->val[k->n];                                                 \
        k->n++;                                                                        \
    } while (0)
    KNOB("tp-size", "%u", c->tp);
    if (c->prefill) {
        KNOB("prefill-replicas", "%u", c->prefill);
        KNOB("decode-replicas", "%u", c->replicas - c->prefill);
    } else if (c->replicas > 1) {
        KNOB("replicas", "%u", c->replicas);
    }
    if ((c->prefill ? c->prefill : c->replicas) >= 2) KNOB("router", "%s", router_policy_name((router_policy)c->router));
    KNOB("chunked-prefill-size", "%d", c->chunk);
    KNOB("max-running-requests", "%u", c->max_running);
    if (c->spec_steps) {
        KNOB("speculative-algorithm", "%s", sp->spec_algorithm);
        KNOB("speculative-num-steps", "%u", c->spec_steps);
    }
    if (c->parallel & PLAN_PAR_EP) KNOB("ep-size", "%u", c->tp);
    if (c->parallel & PLAN_PAR_DP_ATTENTION) KNOB("enable-dp-attention", "%s", "");   /* a switch: bare */
#undef KNOB
    return k->n;
}

void plan_cand_flags(const plan_space *sp, const plan_cand *c, char *buf, size_t n)
{
    plan_knobs k;
    plan_cand_knobs(sp, c, &k);
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < k.n && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s--%s%s%s", i ? " " : "", k.kv[i][0], k.kv[i][1][0] ? " " : "",
                                k.kv[i][1]);
}

int plan_cand_config(const plan_space *sp, const plan_cand *c, const sim_config *base, sim_config *cfg, rh_err *e)
{
    *cfg = *base;
    plan_knobs k;
    plan_cand_knobs(sp, c, &k);
    for (int i = 0; i < k.n; i++)
        if (sim_config_set(cfg, k.kv[i][0], k.kv[i][1], e) != 1)
            return rh_prefix(e, "--%s %s", k.kv[i][0], k.kv[i][1]);
    return 0;
}

void plan_space_default(plan_space *sp)
{
    *sp = (plan_space){.tp = {1, 2, 4, 8}, .n_tp = 4, .max_replicas = 16, .max_gpus = 64,
                       .chunk = {2048, 4096, 8192}, .n_chunk = 3, .max_running = {64, 128, 256, 512},
                       .n_max_running = 4, .spec_steps = {0, 3}, .n_spec = 2, .routers = {ROUTER_CACHE_AWARE},
                       .n_routers = 1, .pd = {{0, 0}}, .n_pd = 1, .parallel = {0}, .n_parallel = 1};
    snprintf(sp->spec_algorithm, sizeof sp->spec_algorithm, "EAGLE");
}

static const char *const parallel_names[4] = {"tp", "ep", "dp-attention", "ep+dp-attention"};

const char *plan_parallel_name(int parallel)
{
    return parallel >= 0 && parallel < 4 ? parallel_names[parallel] : "?";
}

int plan_parallel_parse(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, parallel_names[i])) return i;
    return -1;
}

bool plan_model_has_experts(const cost_model *m)
{
    /* The cost model's own check refuses --ep-size for a model without
     * experts; tried at 8 GPUs, where every preset's layout divides. */
    cost_serving sv;
    cost_serving_default(m, 8, &sv);
    sv.ep = 8;
    rh_err ignored;
    return cost_serving_check(m, 8, &sv, &ignored) == 0;
}
