/* spec.h — speculative decoding's drafters, for the engine's drafter seam
 * (spec_seam in seam.h).
 *
 *   NGRAM  prompt lookup: the longest suffix of the request's tokens (prompt
 *          and output so far), from --speculative-ngram-max-match-window-size
 *          down to the min, that occurred before; the tokens that followed its
 *          most recent occurrence are proposed; when nothing matches, the
 *          newest token repeated, so every draft slot is verified and a
 *          step computes what its record says. Free: no forward pass.
 *   DRAFT  a draft model run by the same runner code with its own paged KV:
 *          the target's first L layers with its LM head (self-speculation,
 *          --speculative-draft-layers), or a smaller model with the same
 *          vocabulary (--speculative-draft-model-path). One forward per draft
 *          position over every drafting request of the step; the draft KV
 *          keeps exactly the tokens that stood after each verify (rejected
 *          drafts roll back and their pages return to the draft pool).
 * Greedy requests get greedy drafts (q is a point mass); sampling requests
 * get drafts drawn from the draft model's own distribution under the
 * request's sampling parameters, with those probabilities handed back so the
 * engine's rejection sampler (verify.h) keeps the target's distribution.
 *
 * Contract: drafters never fail a step for want of memory: a request whose
 * draft KV cannot be placed gets no proposals that step. Single-threaded
 * like the engine that drives them. */
#ifndef RH_SPEC_H
#define RH_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/model/weights.h"
#include "engine/speculative/seam.h"
#include "kernels/kernels.h"
#include "util/err.h"

typedef enum spec_algorithm {
    SPEC_NONE = 0,
    SPEC_NGRAM,
    SPEC_DRAFT,
} spec_algorithm;

typedef struct spec_config {
    spec_algorithm algorithm;   /* --speculative-algorithm NGRAM|DRAFT */
    uint32_t ngram_min;         /* --speculative-ngram-min-match-window-size (1) */
    uint32_t ngram_max;         /* --speculative-ngram-max-match-window-size (12) */
    uint32_t draft_layers;      /* --speculative-draft-layers L: the target's first L layers;
                                   0: a quarter of the target's (at least 1) */
    const char *draft_model;    /* --speculative-draft-model-path: a preset, config.json or
                                   directory (its weights, else dummy weights from the
                                   engine's weight seed); NULL: self-speculation */
    const model *draft_m;       /* or a draft model the caller owns and keeps alive */
    uint64_t draft_seed;        /* --speculative-draft-seed: the draft's sampling streams (0) */
} spec_config;

/* No speculation; n-gram windows 1..12; self-speculation with a quarter of the layers. */
void spec_config_default(spec_config *c);
/* Sets one knob by its CLI name without dashes ("_" accepted for "-").
 * 1 set, 0 not a spec knob, -1 with a message naming the flag. Every spec
 * knob takes a value. Strings are kept as pointers (they must outlive the
 * engine's construction). */
int spec_config_set(spec_config *c, const char *name, const char *value, rh_err *e);
/* 1 if name (without dashes) is a spec knob, else 0: tells a front to
 * consume the next argument as its value. */
int spec_config_is_knob(const char *name);
/* One line per knob for --help texts. */
const char *spec_config_help(void);
/* Rejects impossible values (min window above max...). */
int spec_config_validate(const spec_config *c, rh_err *e);
/* Calls fn(name, value) for each knob that applies to the algorithm, for
 * trace headers; spec_config_set accepts every pair back. */
void spec_config_foreach(const spec_config *c, void (*fn)(void *ctx, const char *name, const char *value), void *ctx);
const char *spec_algorithm_name(spec_algorithm a);   /* "none", "NGRAM", "DRAFT" */

/* ---- n-gram lookup (pure) ----
 * Among suffixes of tokens[0..n) of length min_n..max_n, finds the longest
 * that also ends earlier in tokens (its most recent such occurrence) and
 * writes the up to k tokens that followed it to out. A match running into
 * the end continues with its own proposals (a periodic tail stays periodic),
 * so k tokens are proposed whenever anything matches. Returns how many. */
uint32_t spec_ngram_lookup(const int32_t *tokens, uint32_t n, uint32_t min_n, uint32_t max_n, uint32_t k,
                           int32_t *out);

/* ---- drafters ---- */

typedef struct spec_drafter spec_drafter;

/* What a drafter needs from the engine that runs it. */
typedef struct spec_env {
    const model *target;        /* the target model (vocabulary; its layers for self-speculation) */
    uint32_t page_size;         /* of the draft KV pool */
    uint32_t total_pages;       /* draft KV pool size (the engine gives its own pool's) */
    uint64_t mem_limit;         /* bytes the draft pool may take; 0: what is available */
    const kern_table *kernels;  /* NULL: the CPU backend */
    uint64_t weight_seed;       /* dummy weights of a draft model without its own */
} spec_env;

/* NULL with a message when the config cannot make a drafter (SPEC_NONE, a
 * draft model whose vocabulary differs from the target's, L out of range). */
spec_drafter *spec_drafter_new(const spec_config *c, const spec_env *env, rh_err *e);
void spec_drafter_free(spec_drafter *d);
/* The seam the engine calls; valid while d lives. */
const spec_seam *spec_drafter_seam(spec_drafter *d);
/* The draft model's name ("tiny-llama[0:1]" for self-speculation), or "" for n-gram. */
const char *spec_drafter_model(const spec_drafter *d);

/* Draft KV accounting (DRAFT; zeros for NGRAM): every page is free or held
 * by exactly one request, and each request holds exactly the pages its
 * standing tokens need. 0, or -1 naming what broke. */
typedef struct spec_draft_stats {
    uint32_t pages_total, pages_free;
    uint32_t requests;          /* requests with draft state */
    uint64_t evictions;         /* draft states dropped to make room */
    uint64_t forwards;          /* draft forward passes run */
} spec_draft_stats;
void spec_drafter_stats(const spec_drafter *d, spec_draft_stats *s);
int spec_drafter_check(const spec_drafter *d, rh_err *e);

#endif
