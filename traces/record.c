/* record.c — the rules every record obeys, shared by the writer, the reader
 * and the importers, so a file we write is always a file we can read. */
#include "traces/trace.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const finish_names[] = {"none", "length", "stop", "abort", "error"};

const char *tr_finish_name(int finish)
{
    if (finish < 0 || finish > TR_FINISH_ERROR) return "?";
    return finish_names[finish];
}

const char *tr_adapter_name(const tr_header *h, uint32_t adapter, char *buf, size_t n)
{
    char key[32];
    snprintf(key, sizeof key, "adapter.%u", adapter);
    const char *v = h ? tr_header_get(h, key) : NULL;
    if (v && *v) return v;
    snprintf(buf, n, "lora-%u", adapter);
    return buf;
}

int tr_finish_parse(const char *name)
{
    for (int i = 0; i <= TR_FINISH_ERROR; i++)
        if (!strcmp(name, finish_names[i])) return i;
    return -1;
}

double tr_round_ns(double seconds)
{
    if (!isfinite(seconds) || fabs(seconds) > 4e9) return seconds;
    return (double)llround(seconds * 1e9) / 1e9;
}

uint32_t tr_blocks(uint32_t len, uint32_t block_size)
{
    if (block_size == 0) return 0;
    return (uint32_t)(((uint64_t)len + block_size - 1) / block_size);
}

int tr_check_request(const tr_request *r, uint32_t block_size, rh_err *e)
{
    if (!isfinite(r->arrival)) return rh_fail(e, "field 'arrival' is not a finite number");
    if (r->input_len > TR_MAX_TOKENS)
        return rh_fail(e, "field 'input_len' is %u, above the limit of %u tokens", r->input_len, TR_MAX_TOKENS);
    if (r->output_len > TR_MAX_TOKENS)
        return rh_fail(e, "field 'output_len' is %u, above the limit of %u tokens", r->output_len, TR_MAX_TOKENS);
    if (r->n_hashes) {
        if (!block_size) return rh_fail(e, "field 'hashes': block hashes in a trace whose header has block_size 0");
        if (r->n_hashes > tr_blocks(r->input_len, block_size))
            return rh_fail(e, "field 'hashes': %u block hashes for a %u-token prompt (at most %u blocks of %u)",
                           r->n_hashes, r->input_len, tr_blocks(r->input_len, block_size), block_size);
        if (!r->hashes) return rh_fail(e, "field 'hashes' is missing");
    }
    if (r->finish > TR_FINISH_ERROR) return rh_fail(e, "field 'finish' is %u, not a finish reason", r->finish);
    if (r->cached_storage > r->cached_host)
        return rh_fail(e, "field 'cached_storage' is %u, more than the %u host-tier tokens it is part of",
                       r->cached_storage, r->cached_host);
    if (r->cached_host > r->cached_tokens)
        return rh_fail(e, "field 'cached_host' is %u, more than the %u cached tokens it is part of", r->cached_host,
                       r->cached_tokens);
    if (!isfinite(r->ttft)) return rh_fail(e, "field 'ttft' is not a finite number");
    if (!isfinite(r->e2e)) return rh_fail(e, "field 'e2e' is not a finite number");
    if (r->n_times) {
        if (r->n_times > r->output_len)
            return rh_fail(e, "field 'token_times': %u times for %u output tokens", r->n_times, r->output_len);
        if (!r->token_times) return rh_fail(e, "field 'token_times' is missing");
        for (uint32_t i = 0; i < r->n_times; i++)
            if (!isfinite(r->token_times[i])) return rh_fail(e, "field 'token_times'[%u] is not a finite number", i);
    }
    return 0;
}

int tr_check_step(const tr_step *s, rh_err *e)
{
    if (!isfinite(s->start)) return rh_fail(e, "field 'start' is not a finite number");
    if (!isfinite(s->duration)) return rh_fail(e, "field 'duration' is not a finite number");
    if (!isfinite(s->sched_time)) return rh_fail(e, "field 'sched_time' is not a finite number");
    return 0;
}
