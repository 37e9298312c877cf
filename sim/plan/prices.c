/* prices.c — what a GPU hour costs, from the user's PRICES.json:
 *
 *   {"currency": "USD",
 *    "gpus": {"h100-sxm": {"usd_per_gpu_hour": 2.99, "source": "..."}, ...}}
 *
 * A GPU the plan searches must have a price; an entry's other keys are
 * free text (its source, the date it was read). */
#include "sim/plan/plan.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int plan_price_of(const char *path, const char *gpu, double *usd, rh_err *e)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return rh_fail(e, "%s:%d: %s", path, je.line, je.text);
    int rc = 0;
    json_t *gpus = json_object_get(root, "gpus");
    json_t *cur = json_object_get(root, "currency");
    if (!json_is_object(gpus)) {
        rc = rh_fail(e, "%s: field 'gpus': an object of GPU preset names to {\"usd_per_gpu_hour\": N} expected", path);
    } else if (cur && !(json_is_string(cur) && !strcmp(json_string_value(cur), "USD"))) {
        rc = rh_fail(e, "%s: field 'currency': only \"USD\" is read", path);
    } else {
        json_t *g = json_object_get(gpus, gpu);
        json_t *p = g ? json_object_get(g, "usd_per_gpu_hour") : NULL;
        if (!g) rc = rh_fail(e, "%s: no price for GPU '%s' (field gpus.%s)", path, gpu, gpu);
        else if (!json_is_number(p) || !(json_number_value(p) > 0) || !isfinite(json_number_value(p)))
            rc = rh_fail(e, "%s: field gpus.%s.usd_per_gpu_hour: a price > 0 expected", path, gpu);
        else *usd = json_number_value(p);
    }
    json_decref(root);
    return rc;
}

int plan_price_names(const char *path, char names[][48], int max, rh_err *e)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return rh_fail(e, "%s:%d: %s", path, je.line, je.text);
    json_t *gpus = json_object_get(root, "gpus");
    int n = 0;
    const char *k;
    json_t *v;
    if (json_is_object(gpus))
        json_object_foreach(gpus, k, v) {
            (void)v;
            if (n == max) break;
            snprintf(names[n++], 48, "%s", k);
        }
    json_decref(root);
    return n ? n : rh_fail(e, "%s: field 'gpus' names no GPU", path);
}

int plan_gpus_load(const char *model, char names[][48], int n, const char *prices, plan_gpu *gpus,
                   cost_model **costs, rh_err *e)
{
    for (int g = 0; g < n; g++) costs[g] = NULL;
    for (int g = 0; g < n; g++) {
        char text[512];
        snprintf(text, sizeof text, "{\"kind\": \"roofline\", \"version\": 1, \"model\": \"%.200s\", \"gpu\": \"%.47s\"}",
                 model, names[g]);
        if (!(costs[g] = cost_parse(text, "plan", e))) return rh_prefix(e, "model %s on GPU %s", model, names[g]);
        gpus[g] = (plan_gpu){.cost = costs[g]};
        snprintf(gpus[g].name, sizeof gpus[g].name, "%.47s", names[g]);
        memcpy(gpus[g].text, text, sizeof gpus[g].text);
        gpus[g].cost_text = gpus[g].text;
        if (plan_price_of(prices, names[g], &gpus[g].usd_per_gpu_hour, e) < 0) return -1;
    }
    return 0;
}
