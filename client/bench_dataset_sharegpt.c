/* bench_dataset_sharegpt.c — a ShareGPT file as a dataset of text prompts;
 * see bench.h for the format and the filters (vLLM's). */
#include "client/bench.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/tokenizer.h"
#include "util/rng.h"

#define MIN_LEN 4
#define MAX_PROMPT 1024
#define MAX_TOTAL 2048

/* The value of turn k of a conversation, or NULL. */
static json_t *turn(json_t *conv, size_t k)
{
    json_t *v = json_object_get(json_array_get(conv, k), "value");
    return json_is_string(v) ? v : NULL;
}

int bench_dataset_sharegpt(bench_dataset *d, const char *path, const bench_sharegpt_opts *o, rh_err *e)
{
    memset(d, 0, sizeof *d);
    if (o->num_prompts == 0) return rh_fail(e, "--num-prompts must be at least 1");
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return rh_fail(e, "%s: not a ShareGPT file (line %d: %s)", path, je.line, je.text);
    if (!json_is_array(root)) {
        json_decref(root);
        return rh_fail(e, "%s: a ShareGPT file is a JSON array of conversations", path);
    }
    size_t n = json_array_size(root);
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!order) {
        json_decref(root);
        return rh_fail(e, "out of memory");
    }
    for (size_t i = 0; i < n; i++) order[i] = i;
    rh_rng r;
    rh_rng_seed(&r, o->seed);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rh_rng_below(&r, i);
        size_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    /* First pass: which entries pass the filters, their lengths and text size. */
    size_t keep = 0, bytes = 0;
    size_t *chosen = malloc((n ? n : 1) * sizeof *chosen);
    uint32_t *in = malloc((n ? n : 1) * sizeof *in), *out = malloc((n ? n : 1) * sizeof *out);
    int rc = chosen && in && out ? 0 : rh_fail(e, "out of memory");
    for (size_t k = 0; rc == 0 && k < n && keep < o->num_prompts; k++) {
        json_t *entry = json_array_get(root, order[k]);
        json_t *conv = json_object_get(entry, "conversations");
        if (!conv) conv = json_object_get(entry, "conversation");
        if (!json_is_object(entry) || (conv && !json_is_array(conv))) {
            rc = rh_fail(e, "%s: entry %zu is not {\"conversations\": [...]}", path, order[k]);
            break;
        }
        if (!conv || json_array_size(conv) < 2 || !turn(conv, 0) || !turn(conv, 1)) continue;
        json_t *p = turn(conv, 0), *c = turn(conv, 1);
        uint32_t pl, cl;
        if (bench_count_tokens(o->tok, json_string_value(p), json_string_length(p), &pl, e) < 0 ||
            bench_count_tokens(o->tok, json_string_value(c), json_string_length(c), &cl, e) < 0) {
            rc = rh_prefix(e, "%s: entry %zu", path, order[k]);
            break;
        }
        if (o->output_len) cl = o->output_len;
        else if (pl < MIN_LEN || cl < MIN_LEN || pl > MAX_PROMPT || pl + cl > MAX_TOTAL) continue;
        if (pl == 0) continue;
        chosen[keep] = order[k];
        in[keep] = pl;
        out[keep++] = cl;
        bytes += json_string_length(p) + 1;
    }
    if (rc == 0 && keep == 0) rc = rh_fail(e, "%s: no conversation passes the filters (two turns, 4 to 1024 prompt "
                                              "tokens, at most 2048 with the reply)", path);
    if (rc == 0 && bench_dataset_new(d, keep, 1, "sharegpt", e) < 0) rc = -1;
    if (rc == 0 && !(d->text_pool = malloc(bytes))) rc = rh_fail(e, "out of memory");
    for (size_t i = 0, at = 0; rc == 0 && i < keep; i++) {
        json_t *entry = json_array_get(root, chosen[i]);
        json_t *conv = json_object_get(entry, "conversations");
        if (!conv) conv = json_object_get(entry, "conversation");
        json_t *p = turn(conv, 0);
        size_t len = json_string_length(p);
        /* a NUL inside the text would cut it: such a prompt is sent up to it */
        memcpy(d->text_pool + at, json_string_value(p), len);
        d->text_pool[at + len] = '\0';
        d->items[i].text = d->text_pool + at;
        d->items[i].input_len = in[i];
        d->items[i].output_len = out[i];
        at += len + 1;
    }
    if (rc < 0) bench_dataset_free(d);
    free(order);
    free(chosen);
    free(in);
    free(out);
    json_decref(root);
    return rc;
}
