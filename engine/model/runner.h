/* runner.h — runs a model on batches: owns the KV pool and the activations.
 *
 * The scheduler core owns page ids; the runner owns the memory they name: per
 * layer a K pool and a V pool of total_pages pages of
 * [page_size][n_kv_heads][head_dim] f32. A batch is plain arrays, one
 * runner_seq per sequence, mixing prefill chunks and decodes freely:
 *
 *   runner_seq s = {tokens, n_new, start, pages, n_pages, n_logits};
 *     positions start .. start+n_new-1 are computed; their K and V go into
 *     the pages; attention sees positions 0 .. start+n_new-1 through the same
 *     page table (so positions < start must already be in the pages: an
 *     earlier chunk, or a prefix another request computed);
 *     logits come back for the last n_logits of the new positions.
 *
 * runner_forward checks every id, position and page before computing and
 * fails with one message naming the sequence (nothing is written then), so
 * outside input can never crash it. Logits are rows of vocab_size floats,
 * sequence after sequence, in host memory, valid until the next call.
 * A runner is driven by one thread at a time (the engine's step loop).
 *
 * Backends whose memory is not the host's get their own copy of the weights
 * (model_shard_new: their dtype, and one rank's slice under tensor parallel),
 * and where the backend records graphs, a decode-only batch (one new token
 * and one logit row per sequence) seen before with the same number of
 * sequences and context bucket is replayed from a recording. */
#ifndef RH_MODEL_RUNNER_H
#define RH_MODEL_RUNNER_H

#include <stdint.h>

#include "engine/model/weights.h"
#include "kernels/kernels.h"
#include "util/err.h"

typedef struct runner_config {
    uint32_t page_size;          /* tokens per page */
    uint32_t total_pages;        /* pool size in pages */
    uint64_t mem_limit;          /* bytes the KV pool may take; 0: what is available */
    const kern_table *kernels;   /* NULL: the CPU backend */
} runner_config;

typedef struct runner_seq {
    const int32_t *tokens;       /* n_new token ids */
    uint32_t n_new;
    uint32_t start;              /* position of tokens[0] = tokens already in the pages */
    const uint32_t *pages;       /* page table: page i holds positions [i*page_size, (i+1)*page_size) */
    uint32_t n_pages;
    uint32_t n_logits;           /* logits for the last n_logits new positions (0 .. n_new) */
    const struct runner_lora *lora;   /* the LoRA adapter it runs under (runner_lora_load); NULL: the base */
} runner_seq;

typedef struct runner runner;
typedef struct runner_lora runner_lora;
struct model_lora;

/* An adapter's weights copied into the backend's memory: what loading it
 * into a GPU slot is. Sequences under it then add (x·Aᵀ)·Bᵀ at each of its
 * modules, one shrink and one expand GEMM per run of consecutive sequences
 * under the same adapter. Not under tensor parallel (refused). */
runner_lora *runner_lora_load(runner *r, const struct model_lora *l, rh_err *e);
void runner_lora_free(runner *r, runner_lora *h);
uint64_t runner_lora_bytes(const runner_lora *h);

/* Fails before allocating when the pool does not fit the memory limit. */
runner *runner_new(const model *m, const runner_config *rc, rh_err *e);
/* One rank of a tensor-parallel group (comm NULL: runner_new). */
runner *runner_new_tp(const model *m, const runner_config *rc, const kern_comm *comm, rh_err *e);
/* Decode graphs on (the default where the backend records them) or off. */
void runner_set_graphs(runner *r, int on);
void runner_free(runner *r);

/* Computes one batch. *logits: sum(n_logits) rows of vocab floats. */
int runner_forward(runner *r, const runner_seq *seqs, uint32_t n, const float **logits, rh_err *e);

/* Tensor parallel: rank 0 drives runner_forward, which first broadcasts the
 * batch; every other rank loops on runner_follow, which receives it and
 * computes that rank's share (no logits). runner_follow returns 1 after a
 * batch, 0 once rank 0 called runner_release_followers. */
int runner_follow(runner *r, rh_err *e);
void runner_release_followers(runner *r);

/* Draws a token from one row of logits with the request's own stream. */
int32_t runner_sample(runner *r, const float *row, const kern_sampling *p, uint64_t *rng);
/* Rejects sampling parameters outside their ranges, naming the field. */
int runner_sampling_check(const kern_sampling *p, rh_err *e);

const model_config *runner_model(const runner *r);
/* The host KV tier (--enable-hierarchical-cache): `pages` pages of every
 * layer's K and V in host memory, slots 0 .. pages-1. Not under tensor
 * parallel. -1 naming the size when memory is short. */
int runner_host_tier(runner *r, uint32_t pages, rh_err *e);
/* Copies pages between the pool and the host tier, in order (the core's
 * log, engine/core/kv.h kv_copy: the same layout). Every id is checked
 * first; nothing is copied when one is out of range. */
typedef struct runner_page_copy {
    uint32_t gpu_page, host_slot;
    uint8_t to_host;
} runner_page_copy;
int runner_copy_pages(runner *r, const runner_page_copy *c, uint32_t n, rh_err *e);
uint32_t runner_page_size(const runner *r);
uint32_t runner_total_pages(const runner *r);

#endif
