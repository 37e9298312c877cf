/* vllm_config.h — vLLM's --speculative-config, a JSON object, read into
 * what rehearse's speculative knobs say:
 *   {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
 *   {"model": "PATH", "num_speculative_tokens": 3}          (a draft model: method "draft_model")
 *   {"method": "eagle" | "eagle3" | "mtp" | "deepseek_mtp", "model": "PATH", "num_speculative_tokens": 2}
 * num_speculative_tokens is the drafts per decode (our
 * --speculative-num-steps: a chain of that many drafted tokens, each one
 * draft forward pass). A field vLLM knows that changes nothing here
 * (draft_tensor_parallel_size, ...) is accepted; an unknown one is refused
 * with its name. */
#ifndef RH_ENGINE_SPECULATIVE_VLLM_CONFIG_H
#define RH_ENGINE_SPECULATIVE_VLLM_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/core.h"
#include "engine/speculative/spec.h"
#include "util/err.h"

typedef struct spec_vllm {
    char method[32];         /* lower case: ngram, draft_model, eagle, eagle3, mtp, deepseek_mtp */
    bool drafts_by_model;    /* every method but ngram runs draft forward passes */
    uint32_t num_tokens;     /* num_speculative_tokens (>= 1) */
    uint32_t lookup_min, lookup_max;   /* ngram's window; 0: not given */
    char model[1024];        /* the draft model ("" none) */
} spec_vllm;

/* 0, or -1 with a message naming --speculative-config and the field. */
int spec_vllm_parse(const char *json, spec_vllm *out, rh_err *e);

/* The engine's drafting by it: ngram as NGRAM with its window, a draft
 * model as DRAFT (spec->draft_model points into v: keep v alive), and
 * num_speculative_tokens as --speculative-num-steps. The engine has no
 * EAGLE or MTP head: those are refused (the simulator prices them). */
int spec_vllm_apply(const spec_vllm *v, spec_config *spec, core_config *core, rh_err *e);

#endif
