/* cost_impl.h — what the cost-model kinds share, not for other modules.
 *
 * A kind is one file that defines a parse function and is named by one line
 * in the registry of cost.c. The parse function receives the whole JSON
 * object, already checked for "kind" and "version", and validates every
 * field it reads with the cj_* helpers below, so each message names the file
 * and the field ("cost.json: field 'tp.2.base_s': ..."). */
#ifndef RH_COST_IMPL_H
#define RH_COST_IMPL_H

#include <jansson.h>
#include <stdint.h>

#include "sim/cost/cost.h"

/* Where a JSON object came from: label names it in messages, dir is the
 * directory that relative preset paths in it resolve against. */
typedef struct cost_src {
    const char *label;
    const char *dir;
} cost_src;

typedef cost_model *(*cost_parse_fn)(json_t *root, const cost_src *src, rh_err *e);

cost_model *cost_linear_parse(json_t *root, const cost_src *src, rh_err *e);
cost_model *cost_roofline_parse(json_t *root, const cost_src *src, rh_err *e);
cost_model *cost_table_parse(json_t *root, const cost_src *src, rh_err *e);

/* Summed context of the i-th draft forward (0-based) of a batch: the
 * decodes' mean context times draft_seqs, plus i tokens per sequence. */
uint64_t cost_draft_context(const cost_batch *b, uint32_t i);

/* Roofline presets from a JSON object (roofline_presets.c). A model object
 * may be a Hugging Face config.json: unknown keys are ignored there. */
struct rl_model;
struct rl_gpu;
struct rl_host;
int rl_model_from_json(json_t *o, const cost_src *src, struct rl_model *m, rh_err *e);
int rl_gpu_from_json(json_t *o, const cost_src *src, struct rl_gpu *g, rh_err *e);
/* Finds and loads the preset a cost file names in field `key` of category
 * "models" or "gpus"; messages name the cost file's field or the preset's. */
int rl_model_resolve(const char *name, const char *key, const cost_src *src, struct rl_model *m, rh_err *e);
int rl_gpu_resolve(const char *name, const char *key, const cost_src *src, struct rl_gpu *g, rh_err *e);
int rl_host_resolve(const char *name, const char *key, const cost_src *src, struct rl_host *h, rh_err *e);

/* Sets m->path from src (a copy) and the defaults every model shares. */
int cost_model_init(cost_model *m, const cost_ops *ops, const cost_src *src);

/* ---- JSON field helpers ----
 * `at` is the dotted path of the object holding the field ("" at the top),
 * so nested fields are named in full. Each returns 0, or -1 with a message. */

/* A number in [lo, hi]. Absent: the default when !required, else an error. */
int cj_number(json_t *obj, const char *at, const char *key, int required, double def,
              double lo, double hi, double *out, const cost_src *src, rh_err *e);
/* An integer in [lo, hi]. */
int cj_uint(json_t *obj, const char *at, const char *key, int required, uint32_t def,
            uint32_t lo, uint32_t hi, uint32_t *out, const cost_src *src, rh_err *e);
/* A string; absent: def when !required (def may be NULL). */
int cj_string(json_t *obj, const char *at, const char *key, int required, const char *def,
              const char **out, const cost_src *src, rh_err *e);
/* A boolean; absent: def. */
int cj_bool(json_t *obj, const char *at, const char *key, int def, int *out,
            const cost_src *src, rh_err *e);
/* Fails naming the first member of obj not listed in allowed (NULL-ended). */
int cj_only_keys(json_t *obj, const char *at, const char *const *allowed,
                 const cost_src *src, rh_err *e);
/* A message "LABEL: field 'AT.KEY': ..." and -1. */
int cj_fail(const cost_src *src, const char *at, const char *key, rh_err *e,
            const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* What a kind without its own check_serving prices: none of the expert or
 * data parallelism, no LoRA (a kind's check may lay its own over it). */
int cost_serving_check_default(const cost_model *m, uint32_t tp, const cost_serving *s, rh_err *e);

#endif
