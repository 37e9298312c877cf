/* csvout.c — see csvout.h. */
#include "traces/csvout.h"
#include "traces/num.h"

int tr_csv_request_header(FILE *f)
{
    return fputs("id,arrival,input_len,output_len,session_id,turn,flags,n_hashes,ttft,e2e,cached_tokens,"
                 "spec_proposed,spec_accepted,retractions,finish\n", f) < 0 ? -1 : 0;
}

int tr_csv_request(FILE *f, const tr_request *r)
{
    char a[32], t[32], e2e[32];
    tr_format_f64(a, r->arrival);
    tr_format_f64(t, r->ttft);
    tr_format_f64(e2e, r->e2e);
    return fprintf(f, "%llu,%s,%u,%u,%llu,%u,%u,%u,%s,%s,%u,%u,%u,%u,%s\n", (unsigned long long)r->id, a,
                   r->input_len, r->output_len, (unsigned long long)r->session_id, r->turn, r->flags, r->n_hashes, t,
                   e2e, r->cached_tokens, r->spec_proposed, r->spec_accepted, r->retractions,
                   tr_finish_name(r->finish)) < 0 ? -1 : 0;
}

int tr_csv_step_header(FILE *f)
{
    return fputs("index,start,duration,prefill_tokens,prefill_seqs,decode_seqs,decode_tokens,prefill_context,"
                 "prefill_attn,decode_context,spec_proposed,spec_accepted,pages_used,pages_total,waiting,running,"
                 "retractions,finished,sched_time,flags\n", f) < 0 ? -1 : 0;
}

int tr_csv_step(FILE *f, const tr_step *s)
{
    char st[32], d[32], sc[32];
    tr_format_f64(st, s->start);
    tr_format_f64(d, s->duration);
    tr_format_f64(sc, s->sched_time);
    return fprintf(f, "%llu,%s,%s,%u,%u,%u,%u,%llu,%llu,%llu,%u,%u,%u,%u,%u,%u,%u,%u,%s,%u\n",
                   (unsigned long long)s->index, st, d, s->prefill_tokens, s->prefill_seqs, s->decode_seqs,
                   s->decode_tokens, (unsigned long long)s->prefill_context, (unsigned long long)s->prefill_attn,
                   (unsigned long long)s->decode_context, s->spec_proposed, s->spec_accepted, s->pages_used,
                   s->pages_total, s->waiting, s->running, s->retractions, s->finished, sc, s->flags) < 0 ? -1 : 0;
}
