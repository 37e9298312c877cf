/* cluster.c — reading a CLUSTER.json: see cluster.h. */
#include "sim/cluster.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/args.h"
#include "util/fs.h"

/* Knobs of the whole run, not of one server: a group may not set them. */
static bool run_wide(const char *knob)
{
    static const char *const names[] = {
        "rate-scale", "max-concurrency", "slo-ttft", "slo-tpot", "slo-e2e", "sim-seed", "series-points",
        "policy-fallback", "network-delay-ms", "cache-threshold", "balance-abs-threshold", "balance-rel-threshold",
        "pd-link", "pd-link-gbps", "pd-link-latency-us", "token-times", NULL};
    if (!strncmp(knob, "router", 6)) return true;   /* router, router-policy, router-script, ... */
    for (int i = 0; names[i]; i++)
        if (!strcmp(knob, names[i])) return true;
    return false;
}

/* Knobs the groups replace: how many replicas of which kind, at which TP. */
static bool counts(const char *knob)
{
    return !strcmp(knob, "replicas") || !strcmp(knob, "prefill-replicas") || !strcmp(knob, "decode-replicas") ||
           !strcmp(knob, "prefill-tp") || !strcmp(knob, "decode-tp");
}

/* f as a path: beside the CLUSTER.json at `path` unless absolute. */
static void beside(const char *path, const char *f, char *full, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (f[0] == '/' || !slash) snprintf(full, n, "%s", f);
    else snprintf(full, n, "%.*s/%s", (int)(slash - path), path, f);
}

/* A copy that lives as long as the cluster: the config keeps string knobs
 * (a script's path) by pointer. */
static const char *keep(sim_cluster *c, const char *s)
{
    if (c->n_kept == c->cap_kept) {
        size_t cap = c->cap_kept ? 2 * c->cap_kept : 8;
        char **v = realloc(c->kept, cap * sizeof *v);
        if (!v) return NULL;
        c->kept = v;
        c->cap_kept = cap;
    }
    char *d = strdup(s);
    if (d) c->kept[c->n_kept++] = d;
    return d;
}

/* A JSON number or boolean as a flag's text: "4096", "0.5", "true". */
static int knob_text(const json_t *v, char *buf, size_t n)
{
    if (json_is_integer(v)) snprintf(buf, n, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(buf, n, "%.17g", json_real_value(v));
    else if (json_is_boolean(v)) snprintf(buf, n, "%s", json_is_true(v) ? "true" : "false");
    else return -1;
    return 0;
}

/* One knob into c; `where` names its place in the file for messages. A
 * file a knob names (a script, a trace to take acceptance from) is read
 * beside the CLUSTER.json, as its cost models are. */
static int set_knob(sim_cluster *cl, sim_config *c, const char *path, const char *where, const char *key,
                    const json_t *v, bool group, rh_err *e)
{
    char knob[96], text[64];
    rh_knob_name(key, knob, sizeof knob);
    if (counts(knob))
        return rh_fail(e, "%s: %s%s: the groups give the replicas (their \"count\", \"role\" and \"tp\")", path, where,
                       key);
    if (group && run_wide(knob))
        return rh_fail(e, "%s: %s%s is a knob of the whole cluster: set it at the top of the file", path, where, key);
    const char *value = text;
    if (json_is_string(v)) {
        size_t n = strlen(knob);
        bool file = (n > 7 && !strcmp(knob + n - 7, "-script")) || (n > 5 && !strcmp(knob + n - 5, "-from"));
        char full[4096];
        if (file) beside(path, json_string_value(v), full, sizeof full);
        if (!(value = keep(cl, file ? full : json_string_value(v)))) return rh_fail(e, "out of memory");
    } else if (knob_text(v, text, sizeof text) < 0) {
        return rh_fail(e, "%s: %s%s must be a string, a number or a boolean", path, where, key);
    }
    int rc = sim_config_set(c, knob, value, e);
    if (rc == 0) return rh_fail(e, "%s: %s%s is not a knob (see rehearse sim --help)", path, where, key);
    if (rc < 0) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg);
        return rh_fail(e, "%s: %s%s: %s", path, where, key, why);
    }
    return 0;
}

/* A group's (or the top's) "cost": a file beside PATH, or the model inline. */
static cost_model *load_cost(const char *path, const char *where, const json_t *v, rh_err *e)
{
    cost_model *m = NULL;
    if (json_is_string(v)) {
        char full[4096];
        beside(path, json_string_value(v), full, sizeof full);
        m = cost_load(full, e);
    } else if (json_is_object(v)) {
        char *text = json_dumps(v, JSON_COMPACT);
        if (!text) {
            rh_fail(e, "out of memory");
            return NULL;
        }
        m = cost_parse(text, path, e);
        free(text);
    } else {
        rh_fail(e, "%s: %scost must be a file name or a cost model object", path, where);
        return NULL;
    }
    if (!m) {
        /* An inline model's message already opens with PATH. */
        size_t n = strlen(path);
        const char *msg = !strncmp(e->msg, path, n) && !strncmp(e->msg + n, ": ", 2) ? e->msg + n + 2 : e->msg;
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", msg);
        rh_fail(e, "%s: %scost: %s", path, where, why);
    }
    return m;
}

static int read_group(sim_cluster *c, const char *path, uint32_t i, const json_t *g, const cost_model *top_cost,
                      rh_err *e)
{
    char label[128], where[136];
    snprintf(label, sizeof label, "groups[%u]", i);
    snprintf(where, sizeof where, "%s.", label);
    if (!json_is_object(g)) return rh_fail(e, "%s: groups[%u] must be an object", path, i);
    sim_group *x = &c->groups[i];
    x->cfg = c->run;
    x->count = 1;
    x->role = SIM_ROLE_BOTH;
    x->cost = top_cost;
    const json_t *name = json_object_get(g, "name");
    if (name && !json_is_string(name)) return rh_fail(e, "%s: %sname must be a string", path, where);
    if (name) snprintf(label, sizeof label, "groups[%u] (%.80s)", i, json_string_value(name));
    snprintf(where, sizeof where, "%s.", label);
    /* An unnamed group goes by its place, in results and in messages. */
    if (!(c->names[i] = strdup(name ? json_string_value(name) : label))) return rh_fail(e, "out of memory");
    x->name = c->names[i];
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)g, key, v) {
        if (!strcmp(key, "name")) continue;
        if (!strcmp(key, "count")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 4096)
                return rh_fail(e, "%s: %scount must be an integer 1..4096", path, where);
            x->count = (uint32_t)json_integer_value(v);
        } else if (!strcmp(key, "role")) {
            const char *r = json_is_string(v) ? json_string_value(v) : "";
            if (!strcmp(r, "prefill")) x->role = SIM_ROLE_PREFILL;
            else if (!strcmp(r, "decode")) x->role = SIM_ROLE_DECODE;
            else if (!strcmp(r, "both")) x->role = SIM_ROLE_BOTH;
            else return rh_fail(e, "%s: %srole must be \"prefill\", \"decode\" or \"both\"", path, where);
        } else if (!strcmp(key, "cost")) {
            if (!(c->owned[i] = load_cost(path, where, v, e))) return -1;
            x->cost = c->owned[i];
        } else if (set_knob(c, &x->cfg, path, where, key, v, true, e) < 0) {
            return -1;
        }
    }
    if (!x->cost)
        return rh_fail(e, "%s: %s has no cost model: give \"cost\" in it, at the top of the file, or --cost", path,
                       label);
    if (core_config_validate(&x->cfg.core, e) < 0) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg);
        return rh_fail(e, "%s: %s: %s", path, label, why);
    }
    c->n_replicas += x->count;
    return 0;
}

int sim_cluster_load(const char *path, const sim_config *base, const cost_model *default_cost, sim_cluster *c,
                     rh_err *e)
{
    memset(c, 0, sizeof *c);
    json_error_t je;
    FILE *f = rh_fopen_regular(path, "cluster file", e);
    if (!f) return -1;
    json_t *o = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!o && je.line < 0) return rh_fail(e, "%s: %s", path, je.text);
    if (!o) return rh_fail(e, "%s:%d: %s", path, je.line, je.text);
    if (base->replicas > 1 || base->pd_prefill)
        return rh_fail(e, "%s gives the replicas: drop --replicas and --prefill-replicas (replicas=, prefill_replicas=)",
                       path);
    int rc = -1;
    const json_t *groups = json_object_get(o, "groups");
    c->run = *base;
    cost_model *top = NULL;
    if (!json_is_object(o)) {
        rh_fail(e, "%s: a cluster is a JSON object with \"groups\"", path);
        goto done;
    }
    if (!json_is_array(groups) || json_array_size(groups) == 0 || json_array_size(groups) > 4096) {
        rh_fail(e, "%s: \"groups\" must be a list of 1 to 4096 groups of replicas", path);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        if (!strcmp(key, "groups")) continue;
        if (!strcmp(key, "cost")) {
            if (!(top = load_cost(path, "", v, e))) goto done;
        } else if (set_knob(c, &c->run, path, "", key, v, false, e) < 0) {
            goto done;
        }
    }
    size_t n = json_array_size(groups);
    c->groups = calloc(n, sizeof *c->groups);
    c->owned = calloc(n + 1, sizeof *c->owned);
    c->names = calloc(n, sizeof *c->names);
    if (!c->groups || !c->owned || !c->names) {
        rh_fail(e, "out of memory");
        goto done;
    }
    c->n_groups = (uint32_t)n;
    c->owned[n] = top;   /* the top's model, freed with the groups' */
    top = NULL;
    for (uint32_t i = 0; i < n; i++)
        if (read_group(c, path, i, json_array_get(groups, i), c->owned[n] ? c->owned[n] : default_cost, e) < 0)
            goto done;
    if (c->n_replicas > 4096) {
        rh_fail(e, "%s: %u replicas in all; a cluster holds at most 4096", path, c->n_replicas);
        goto done;
    }
    if (!(c->path = strdup(path))) {
        rh_fail(e, "out of memory");
        goto done;
    }
    rc = 0;
done:
    cost_free(top);
    json_decref(o);
    if (rc < 0) sim_cluster_free(c);
    return rc;
}

void sim_cluster_free(sim_cluster *c)
{
    for (uint32_t i = 0; c->owned && i <= c->n_groups; i++) cost_free(c->owned[i]);
    for (uint32_t i = 0; c->names && i < c->n_groups; i++) free(c->names[i]);
    for (size_t i = 0; i < c->n_kept; i++) free(c->kept[i]);
    free(c->kept);
    free(c->path);
    free(c->owned);
    free(c->names);
    free(c->groups);
    memset(c, 0, sizeof *c);
}

int sim_cluster_run(const sim_cluster *c, const tr_trace *trace, sim_result *out, rh_err *e)
{
    if (sim_run_groups(&c->run, c->groups, c->n_groups, trace, out, e) == 0) return 0;
    /* What only the run checks (a group's TP, its pool, the mix of roles) still names the file. */
    return rh_prefix(e, "%s", c->path);
}
