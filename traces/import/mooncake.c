/* mooncake.c — Mooncake traces (FAST'25 release).
 *
 * One JSON object per line: timestamp (ms from the trace start),
 * input_length, output_length, hash_ids (one id per block of 512 prompt
 * tokens; equal leading ids mean a shared prefix). Other keys are ignored. */
#include "traces/import/importers.h"
#include "traces/import/jsonline.h"
#include "traces/num.h"

#include <stdlib.h>

static int need_num(tr_lines *l, const jl_obj *j, const char *key, const jl_field **f, rh_err *e)
{
    *f = jl_get(j, key);
    if (!*f) return rh_fail(e, "%s: line %llu: missing field '%s'", l->name, (unsigned long long)l->line_no, key);
    if ((*f)->type != JL_NUM)
        return rh_fail(e, "%s: line %llu: field '%s' is not a number", l->name, (unsigned long long)l->line_no, key);
    return 0;
}

int tr_import_mooncake(tr_lines *l, const tr_import_opts *o, tr_spool *sp, rh_err *e)
{
    uint32_t bs = o->block_size ? o->block_size : 512;
    sp->header.block_size = bs;
    jl_obj j;
    jl_init(&j);
    uint64_t *hashes = NULL;
    size_t hcap = 0;
    const char *line;
    size_t n;
    int rc;
    while ((rc = tr_lines_next(l, &line, &n, e)) > 0) {
        if (n == 0) continue;
        if (jl_parse(&j, line, n, l->line_no, e) < 0) {
            rh_prefix(e, "%s", l->name);
            rc = -1;
            break;
        }
        const jl_field *ts, *in, *out;
        tr_spool_row row = {0};
        if (need_num(l, &j, "timestamp", &ts, e) < 0 || need_num(l, &j, "input_length", &in, e) < 0 ||
            need_num(l, &j, "output_length", &out, e) < 0 ||
            tr_field_seconds(l, "timestamp", jl_text(&j, ts->text), ts->text.len, 6, &row.ns, e) < 0 ||
            tr_field_count(l, "input_length", jl_text(&j, in->text), in->text.len, &row.input_len, e) < 0 ||
            tr_field_count(l, "output_length", jl_text(&j, out->text), out->text.len, &row.output_len, e) < 0) {
            rc = -1;
            break;
        }
        const jl_field *h = jl_get(&j, "hash_ids");
        if (h && h->type != JL_ARR && h->type != JL_NULL) {
            rc = rh_fail(e, "%s: line %llu: field 'hash_ids' is not an array", l->name, (unsigned long long)l->line_no);
            break;
        }
        if (h && h->type == JL_ARR && h->count) {
            uint32_t max = tr_blocks(row.input_len, bs);
            if (h->count > max) {
                rc = rh_fail(e, "%s: line %llu: field 'hash_ids' has %u ids for a %u-token prompt (at most %u blocks of %u; "
                             "see --block-size)", l->name, (unsigned long long)l->line_no, h->count, row.input_len, max, bs);
                break;
            }
            if (h->count > hcap) {
                hcap = h->count * 2;
                uint64_t *nh = realloc(hashes, hcap * sizeof *nh);
                if (!nh) {
                    rc = rh_fail(e, "out of memory");
                    break;
                }
                hashes = nh;
            }
            for (uint32_t i = 0; i < h->count && rc > 0; i++) {
                jl_span s = j.elems[h->first + i];
                if (tr_parse_u64(jl_text(&j, s), s.len, &hashes[i]) < 0)
                    rc = rh_fail(e, "%s: line %llu: field 'hash_ids'[%u] is not a non-negative integer ('%.*s')", l->name,
                                 (unsigned long long)l->line_no, i, (int)(s.len > 30 ? 30 : s.len), jl_text(&j, s));
            }
            if (rc < 0) break;
            row.n_hashes = h->count;
        }
        if (tr_spool_add(sp, l, &row, hashes, e) < 0) {
            rc = -1;
            break;
        }
    }
    free(hashes);
    jl_free(&j);
    return rc < 0 ? -1 : 0;
}
