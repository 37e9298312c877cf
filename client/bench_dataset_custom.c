/* bench_dataset_custom.c — vLLM's `custom` dataset: a JSONL file, one
 * {"prompt": TEXT} a line (an "output_tokens" count, when a line has one,
 * is its output length; else the run's), each prompt sent as text;
 * shuffled with the seed, then the first num_prompts. Errors name the file
 * and the line. */
#include "client/bench.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/tokenizer.h"
#include "util/rng.h"

typedef struct custom_line {
    char *text;
    size_t len;
    uint32_t in, out;
} custom_line;

/* One line into l (text owned by l); -1 with the line named. */
static int read_line(const char *path, size_t no, const char *buf, size_t n, const bench_custom_opts *o,
                     custom_line *l, rh_err *e)
{
    json_error_t je;
    json_t *j = json_loadb(buf, n, 0, &je);
    json_t *p = json_object_get(j, "prompt"), *ot = json_object_get(j, "output_tokens");
    int rc = 0;
    if (!json_is_object(j)) rc = rh_fail(e, "%s:%zu: not a JSON object%s%s", path, no, j ? "" : ": ", j ? "" : je.text);
    else if (!json_is_string(p) || json_string_length(p) == 0)
        rc = rh_fail(e, "%s:%zu: \"prompt\" must be a non-empty string", path, no);
    else if (ot && (!json_is_integer(ot) || json_integer_value(ot) < 1 ||
                    json_integer_value(ot) > (json_int_t)BENCH_MAX_TOKENS))
        rc = rh_fail(e, "%s:%zu: \"output_tokens\" must be a count in [1, %u]", path, no, BENCH_MAX_TOKENS);
    if (rc == 0) {
        l->len = json_string_length(p);
        l->out = ot ? (uint32_t)json_integer_value(ot) : o->output_len;
        if (!(l->text = malloc(l->len + 1))) rc = rh_fail(e, "out of memory");
    }
    if (rc == 0) {
        memcpy(l->text, json_string_value(p), l->len + 1);
        if (bench_count_tokens(o->tok, l->text, l->len, &l->in, e) < 0) rc = rh_prefix(e, "%s:%zu", path, no);
        else if (l->in == 0) l->in = 1;
    }
    json_decref(j);
    return rc;
}

int bench_dataset_custom(bench_dataset *d, const char *path, const bench_custom_opts *o, rh_err *e)
{
    memset(d, 0, sizeof *d);
    if (o->num_prompts == 0) return rh_fail(e, "--num-prompts must be at least 1");
    FILE *f = fopen(path, "r");
    if (!f) return rh_fail(e, "%s: cannot open: %s", path, strerror(errno));
    custom_line *lines = NULL;
    size_t n = 0, cap = 0, no = 0, linecap = 0;
    char *buf = NULL;
    ssize_t got;
    int rc = 0;
    while (rc == 0 && (got = getline(&buf, &linecap, f)) >= 0) {
        no++;
        size_t k = (size_t)got;
        while (k && (buf[k - 1] == '\n' || buf[k - 1] == '\r' || buf[k - 1] == ' ')) k--;
        if (!k) continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            custom_line *g = realloc(lines, nc * sizeof *g);
            if (!g) {
                rc = rh_fail(e, "out of memory");
                break;
            }
            lines = g;
            cap = nc;
        }
        memset(&lines[n], 0, sizeof lines[n]);
        if ((rc = read_line(path, no, buf, k, o, &lines[n], e)) == 0) n++;
    }
    free(buf);
    fclose(f);
    if (rc == 0 && n == 0) rc = rh_fail(e, "%s: no {\"prompt\": ...} line", path);
    /* shuffled with the seed (vLLM's), then the first num_prompts */
    rh_rng r;
    rh_rng_seed(&r, o->seed);
    for (size_t i = n; rc == 0 && i > 1; i--) {
        size_t j = (size_t)rh_rng_below(&r, i);
        custom_line t = lines[i - 1];
        lines[i - 1] = lines[j];
        lines[j] = t;
    }
    size_t keep = n < o->num_prompts ? n : o->num_prompts, bytes = 0;
    for (size_t i = 0; i < keep; i++) bytes += lines[i].len + 1;
    if (rc == 0 && bench_dataset_new(d, keep, 1, "custom", e) < 0) rc = -1;
    if (rc == 0 && !(d->text_pool = malloc(bytes))) rc = rh_fail(e, "out of memory");
    for (size_t i = 0, at = 0; rc == 0 && i < keep; i++) {
        memcpy(d->text_pool + at, lines[i].text, lines[i].len + 1);
        d->items[i].text = d->text_pool + at;
        d->items[i].input_len = lines[i].in;
        d->items[i].output_len = lines[i].out;
        at += lines[i].len + 1;
    }
    if (rc < 0) bench_dataset_free(d);
    for (size_t i = 0; i < n; i++) free(lines[i].text);
    free(lines);
    return rc;
}
