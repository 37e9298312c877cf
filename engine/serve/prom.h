/* prom.h — the server's metrics in Prometheus text format, under vLLM's
 * names so existing dashboards and scrapers read them unchanged.
 *
 * Histograms (seconds): vllm:time_to_first_token_seconds,
 * vllm:inter_token_latency_seconds (every gap between deliveries),
 * vllm:time_per_output_token_seconds (per request, (e2e - ttft) / (n - 1)),
 * vllm:e2e_request_latency_seconds, vllm:request_queue_time_seconds.
 * Gauges: vllm:num_requests_running, vllm:num_requests_waiting,
 * vllm:kv_cache_usage_perc (0..1; also as vllm:gpu_cache_usage_perc),
 * vllm:gpu_prefix_cache_hit_rate. Counters: vllm:prompt_tokens_total,
 * vllm:generation_tokens_total, vllm:request_success_total{finished_reason},
 * vllm:num_preemptions_total, vllm:prefix_cache_queries_total and
 * vllm:prefix_cache_hits_total (tokens), vllm:spec_decode_num_drafts_total,
 * vllm:spec_decode_num_draft_tokens_total,
 * vllm:spec_decode_num_accepted_tokens_total and
 * vllm:spec_decode_num_accepted_tokens_per_pos_total{position}; and the
 * scheduler's own rehearse:steps_total, rehearse:steps_sched_hidden_total,
 * rehearse:step_sched_seconds_total. Also vLLM's per-request
 * histograms vllm:request_prompt_tokens, vllm:request_generation_tokens,
 * vllm:request_prefill_time_seconds (first scheduled to first token),
 * vllm:request_decode_time_seconds, vllm:request_inference_time_seconds,
 * vllm:iteration_tokens_total (per step), vllm:time_per_prefill_token_request_seconds,
 * vllm:request_max_num_generation_tokens, vllm:request_params_n,
 * vllm:request_params_max_tokens and vllm:cache_config_info; and
 * SGLang's names: sglang:num_running_reqs, sglang:num_queue_reqs,
 * sglang:num_used_tokens, sglang:token_usage, sglang:cache_hit_rate,
 * sglang:gen_throughput (the last 40 decode steps), sglang:spec_accept_length,
 * sglang:spec_accept_rate, sglang:max_total_num_tokens, sglang:num_retracted_reqs
 * (the last 40 steps) and sglang:num_retracted_requests_total,
 * sglang:new_token_ratio, sglang:decode_sum_seq_lens, sglang:utilization,
 * sglang:{prompt,generation,cached}_tokens_total (with a host tier, cached
 * by cache_source="device"|"host", and sglang:hicache_host_used_tokens,
 * sglang:hicache_host_total_tokens, sglang:evicted_tokens_total,
 * sglang:load_back_tokens_total, rehearse:hicache_backup_tokens_total and
 * rehearse:hicache_write_back_tokens_total), sglang:num_requests_total
 * and the histograms sglang:time_to_first_token_seconds,
 * sglang:inter_token_latency_seconds, sglang:e2e_request_latency_seconds,
 * sglang:queue_time_seconds (the same measurements as vLLM's). Every sample
 * carries model_name; vLLM's also engine="0", as its v1 engine labels them.
 *
 * Thread-safe: the scheduler thread records, HTTP threads render. */
#ifndef RH_PROM_H
#define RH_PROM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/core.h"
#include "traces/trace.h"

#define PROM_SPEC_POSITIONS 16

typedef struct prom prom;

/* Speculative decoding's counters, as deltas. The server adds the engine's
 * (engine_get_spec_stats) after every step; anything with more to tell (a
 * drafter's own view) adds through prom_spec_add too. */
typedef struct prom_spec_counters {
    uint64_t drafts;            /* verifications that carried at least one draft token */
    uint64_t draft_tokens;      /* draft tokens proposed */
    uint64_t accepted_tokens;   /* draft tokens accepted */
    uint64_t accepted_at[PROM_SPEC_POSITIONS];   /* accepted drafts by position in the proposal */
} prom_spec_counters;

/* One finished request: its times on the server's clock (s). */
typedef struct prom_request {
    double arrival, admitted;   /* admitted: first left the waiting queue (arrival when never) */
    const double *token_times;  /* each output token's time, ascending */
    uint32_t n_tokens;
    uint32_t prompt_tokens;
    int finish;                 /* enum tr_finish */
} prom_request;

prom *prom_new(const char *model_name);
void prom_free(prom *p);

void prom_request_done(prom *p, const prom_request *r);
/* A prompt's request once all its n choices ended (vLLM's parent request):
 * its n and max_tokens, and the most tokens one of its choices generated. */
void prom_request_params(prom *p, uint32_t n, uint32_t max_tokens, uint32_t max_generation_tokens);
/* Max running requests, the bound sglang:utilization divides by. */
void prom_max_running(prom *p, uint32_t max_running);
/* The KV pool for vllm:cache_config_info: page size, pages, prefix caching. */
void prom_cache_config(prom *p, uint32_t block_size, uint64_t blocks, bool prefix_caching);
/* A step record (its sched_time and flags as the server measured them). */
void prom_step(prom *p, const tr_step *s);
/* The core's state now: queue lengths, KV use, prefix-cache totals. */
void prom_core(prom *p, const core_stats *st);
void prom_spec_add(prom *p, const prom_spec_counters *d);
/* LoRA adapters now: --max-loras-per-batch and, per adapter served, its
 * requests running and waiting. Rendered as vLLM's vllm:lora_requests_info
 * (a gauge whose value is the time of the scrape and whose labels list the
 * adapters with requests running and waiting) and, per adapter,
 * rehearse:lora_requests_running and _waiting, and the requests each has
 * taken, rehearse:lora_requests_total. n 0 with max_lora 0: off. */
void prom_lora(prom *p, uint32_t max_lora, const char *const *names, const uint32_t *running, const uint32_t *waiting,
               const uint64_t *total, uint32_t n);

/* The exposition text; malloc'd, NULL when out of memory. */
char *prom_render(prom *p, size_t *len);

#endif
