/* slice.c — see slice.h. */
#include "traces/tools/slice.h"
#include "util/hashmap.h"
#include "util/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tr_slicer {
    tr_slice_opts o;
    tr_sink down;
    int reshapes;               /* a scale is applied: measurements dropped */
    int keep_steps;
    uint32_t block_size;        /* the trace's, from its header */
    uint64_t position, kept;
    rh_map64 renumber;         /* rescaled block keys -> ids in order of first use */
    uint64_t next_id;
    uint64_t *hashes;
    size_t hashes_cap;
};

void tr_slice_opts_init(tr_slice_opts *o)
{
    memset(o, 0, sizeof *o);
    o->sample = 1;
    o->seed = 1;
    o->rate_scale = o->input_scale = o->output_scale = 1;
}

int tr_slice_check(const tr_slice_opts *o, rh_err *e)
{
    if (!isfinite(o->from) || !isfinite(o->to)) return rh_fail(e, "--from/--to: not finite");
    if (!(o->sample > 0 && o->sample <= 1)) return rh_fail(e, "--sample: %g is not a fraction in (0, 1]", o->sample);
    if (!(o->rate_scale > 0 && o->rate_scale < 1e9)) return rh_fail(e, "--rate-scale: %g is not positive", o->rate_scale);
    if (!(o->input_scale > 0 && o->input_scale < 1e6))
        return rh_fail(e, "--input-scale: %g is not positive", o->input_scale);
    if (!(o->output_scale > 0 && o->output_scale < 1e6))
        return rh_fail(e, "--output-scale: %g is not positive", o->output_scale);
    return 0;
}

static int window(const tr_slicer *s, double t)
{
    return t >= s->o.from && (s->o.to <= s->o.from || t < s->o.to);
}

static int sl_header(void *ctx, const tr_header *h, rh_err *e)
{
    tr_slicer *s = ctx;
    tr_header copy;
    s->block_size = h->block_size;
    if (tr_header_copy(&copy, h) < 0) return rh_fail(e, "out of memory");
    char desc[384];
    int n = snprintf(desc, sizeof desc, "from=%.17g to=%.17g first=%llu sample=%.17g seed=%llu rate_scale=%.17g "
                     "input_scale=%.17g output_scale=%.17g", s->o.from, s->o.to, (unsigned long long)s->o.first,
                     s->o.sample, (unsigned long long)s->o.seed, s->o.rate_scale, s->o.input_scale,
                     s->o.output_scale);
    /* Only when given, so a slice without them describes itself as before. */
    if (s->o.max_input_len || s->o.max_total_len)
        snprintf(desc + n, sizeof desc - (size_t)n, " max_input_len=%u max_total_len=%u", s->o.max_input_len,
                 s->o.max_total_len);
    int rc = tr_header_set(&copy, "slice", desc);
    if (rc == 0 && s->down.header) rc = s->down.header(s->down.ctx, &copy, e);
    else if (rc < 0) rh_fail(e, "out of memory");
    tr_header_free(&copy);
    return rc;
}

static uint32_t scale_len(uint32_t v, double f)
{
    if (v == 0 || f == 1) return v;
    double x = llround((double)v * f);
    if (x < 1) return 1;
    return x > TR_MAX_TOKENS ? TR_MAX_TOKENS : (uint32_t)x;
}

/* New block j ends at token (j+1)*B-1 of the rescaled prompt, which is
 * token floor(that / scale) of the original: the original block holding it
 * fixes the prefix, so (its hash, j) names the new block. */
static int rescale_hashes(tr_slicer *s, tr_request *r, rh_err *e)
{
    uint32_t block_size = s->block_size;
    if (!r->n_hashes || s->o.input_scale == 1 || !block_size) return 0;
    uint32_t n_old = r->n_hashes;
    uint64_t cap = (uint64_t)ceil(n_old * s->o.input_scale);
    uint32_t n = tr_blocks(r->input_len, block_size);
    if (cap < n) n = (uint32_t)cap;
    if (n < 1) n = 1;
    if (n > s->hashes_cap) {
        uint64_t *h = realloc(s->hashes, (size_t)n * 2 * sizeof *h);
        if (!h) return rh_fail(e, "out of memory");
        s->hashes = h;
        s->hashes_cap = (size_t)n * 2;
    }
    for (uint32_t j = 0; j < n; j++) {
        double last = floor(((double)(j + 1) * block_size - 1) / s->o.input_scale);
        uint64_t k = (uint64_t)(last / block_size);
        if (k >= n_old) k = n_old - 1;
        uint64_t key = rh_hash64(r->hashes[k] ^ rh_hash64(j));
        int fresh;
        uint64_t *id = rh_map64_slot(&s->renumber, key, s->next_id, &fresh);
        if (!id) return rh_fail(e, "out of memory");
        s->next_id += fresh;
        s->hashes[j] = *id;
    }
    r->n_hashes = n;
    r->hashes = s->hashes;
    return 0;
}

static void drop_measurements(tr_request *r)
{
    r->flags &= ~TR_REQ_MEASURED;
    r->ttft = r->e2e = 0;
    r->cached_tokens = r->spec_proposed = r->spec_accepted = r->retractions = 0;
    r->finish = 0;
    r->n_times = 0;
    r->token_times = NULL;
}

static int sl_record(void *ctx, const tr_record *rec, rh_err *e)
{
    tr_slicer *s = ctx;
    if (rec->kind == TR_STEP) {
        if (!s->keep_steps || !window(s, rec->step.start)) return 0;
        tr_record c = *rec;
        c.step.start = tr_round_ns(c.step.start - s->o.from);
        return s->down.record(s->down.ctx, &c, e);
    }
    if (s->o.first && s->kept >= s->o.first) return 1;
    if (!window(s, rec->req.arrival)) return 0;
    uint64_t pos = s->position++;
    if (s->o.sample < 1) {
        uint64_t x = rh_hash64(s->o.seed ^ rh_hash64(pos));
        if ((double)(x >> 11) * 0x1.0p-53 >= s->o.sample) return 0;
    }
    tr_record c = *rec;
    tr_request *r = &c.req;
    r->arrival = tr_round_ns((r->arrival - s->o.from) / s->o.rate_scale);
    if (s->reshapes) {
        drop_measurements(r);
        r->input_len = scale_len(r->input_len, s->o.input_scale);
        r->output_len = scale_len(r->output_len, s->o.output_scale);
        if (rescale_hashes(s, r, e) < 0) return -1;
    }
    if (s->o.max_input_len && r->input_len > s->o.max_input_len) return 0;
    if (s->o.max_total_len && (uint64_t)r->input_len + r->output_len > s->o.max_total_len) return 0;
    s->kept++;
    return s->down.record(s->down.ctx, &c, e);
}

tr_slicer *tr_slicer_new(const tr_slice_opts *o, const tr_sink *down)
{
    tr_slicer *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->o = *o;
    s->down = *down;
    s->reshapes = o->rate_scale != 1 || o->input_scale != 1 || o->output_scale != 1;
    s->keep_steps = !s->reshapes && !o->first && o->sample >= 1 && !o->max_input_len && !o->max_total_len;
    return s;
}

tr_sink tr_slicer_sink(tr_slicer *s)
{
    return (tr_sink){s, sl_header, sl_record};
}

uint64_t tr_slicer_kept(const tr_slicer *s)
{
    return s->kept;
}

void tr_slicer_free(tr_slicer *s)
{
    if (!s) return;
    rh_map64_free(&s->renumber);
    free(s->hashes);
    free(s);
}

int tr_slice_file(const char *in, const tr_import_opts *io, const tr_slice_opts *o, const char *out, uint64_t *kept,
                  rh_err *e)
{
    if (tr_slice_check(o, e) < 0) return -1;
    tr_writer_sink ws;
    tr_sink down = tr_writer_sink_make(&ws, out, 0);
    tr_slicer *s = tr_slicer_new(o, &down);
    if (!s) return rh_fail(e, "out of memory");
    tr_sink sink = tr_slicer_sink(s);
    int rc = tr_read(in, io, &sink, NULL, e);
    rc = tr_writer_sink_finish(&ws, rc == 0, e);
    if (rc == 0 && kept) *kept = s->kept;
    tr_slicer_free(s);
    return rc;
}
