/* bench_calibrate.c — how long a full CPU calibration of tiny-llama takes,
 * and how well the table it writes predicts the engine's real steps.
 *
 * The check: runner_forward (plus sampling of every logit row, as a step
 * does) is timed on a spread of batches — prefill chunks of various lengths
 * and contexts, several chunks in one batch, decodes at various batch sizes
 * and contexts, and mixes — and compared with the table's prediction for
 * the same batch. The runner has no scheduler, so the table's `schedule`
 * term is left out of the prediction. Two predictions are reported: from
 * the batch's exact aggregates (what the simulator gives the model) and from
 * only the fields a step record keeps (what `validate-steps` gives it).
 *
 * Then the issue's own check, now that `rehearse replay` exists: a recorded
 * run of the engine on a shared trace slice, every step priced by
 * `rehearse validate-steps` (skipped without ../shared/traces).
 *
 * REHEARSE_CALIB_TABLE=path reuses a table instead of calibrating (the
 * calibration time is then not measured). Prints a table; writes
 * reports/bench/calibrate.json (and the table, when calibrated, to
 * reports/bench/calibrate-tiny-llama.json). Timings on a shared machine are
 * noisy: each batch is the median of repeated runs, and the spread is shown. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/runner.h"
#include "sim/calibrate/calibrate.h"
#include "sim/cost/cost.h"
#include "sim/cost/cost_fit.h"
#include "sim/cost/cost_table.h"
#include "util/progress.h"
#include "util/stats.h"

#define MAX_SEQS 300
#define PAGE 16

typedef struct chunk {
    uint32_t n, ctx;
} chunk;

typedef struct bench_batch {
    char what[96];
    uint32_t n;
    chunk seq[MAX_SEQS];     /* n = 1: decode */
    bool prefill[MAX_SEQS];
    double measured, spread, pred, pred_record;
    int cls;
} bench_batch;

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t lo, uint32_t hi)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (uint32_t)(rng % (hi - lo + 1));
}

static void add_prefill(bench_batch *b, uint32_t n, uint32_t ctx)
{
    b->seq[b->n] = (chunk){n, ctx};
    b->prefill[b->n++] = true;
}

static void add_decodes(bench_batch *b, uint32_t count, uint32_t lo, uint32_t hi)
{
    for (uint32_t i = 0; i < count; i++) {
        b->seq[b->n] = (chunk){1, rnd(lo, hi)};
        b->prefill[b->n++] = false;
    }
}

static size_t make_batches(bench_batch *out)
{
    size_t k = 0;
    static const uint32_t pf[][2] = {{32, 0},    {100, 0},   {256, 0},  {512, 0},  {1000, 0},
                                     {2048, 0},  {128, 512}, {300, 1000}, {700, 700}, {64, 1900}};
    for (size_t i = 0; i < sizeof pf / sizeof pf[0]; i++, k++) {
        memset(&out[k], 0, sizeof out[k]);
        snprintf(out[k].what, sizeof out[k].what, "prefill %u @ %u", pf[i][0], pf[i][1]);
        add_prefill(&out[k], pf[i][0], pf[i][1]);
    }
    memset(&out[k], 0, sizeof out[k]);
    snprintf(out[k].what, sizeof out[k].what, "prefill 200 + 50 + 400 @ 0");
    add_prefill(&out[k], 200, 0), add_prefill(&out[k], 50, 0), add_prefill(&out[k], 400, 0);
    memset(&out[++k], 0, sizeof out[k]);
    snprintf(out[k].what, sizeof out[k].what, "prefill 256 @ 1024 + 100 @ 0");
    add_prefill(&out[k], 256, 1024), add_prefill(&out[k], 100, 0);
    memset(&out[++k], 0, sizeof out[k]);
    snprintf(out[k].what, sizeof out[k].what, "prefill 2 x 512 @ 0");
    add_prefill(&out[k], 512, 0), add_prefill(&out[k], 512, 0);
    k++;
    static const uint32_t dec[] = {1, 2, 5, 8, 16, 33, 64, 100, 180, 256};
    for (size_t i = 0; i < sizeof dec / sizeof dec[0]; i++, k++) {
        memset(&out[k], 0, sizeof out[k]);
        uint32_t hi = i % 2 && dec[i] <= 100 ? 1800 : 700;
        snprintf(out[k].what, sizeof out[k].what, "decode %u @ 16..%u", dec[i], hi);
        add_decodes(&out[k], dec[i], 16, hi);
    }
    static const uint32_t mx[][3] = {{256, 0, 8}, {512, 512, 32}, {64, 0, 100}, {1024, 0, 4}, {128, 256, 256},
                                     {32, 1000, 16}};
    for (size_t i = 0; i < sizeof mx / sizeof mx[0]; i++, k++) {
        memset(&out[k], 0, sizeof out[k]);
        snprintf(out[k].what, sizeof out[k].what, "prefill %u @ %u + decode %u", mx[i][0], mx[i][1], mx[i][2]);
        add_prefill(&out[k], mx[i][0], mx[i][1]);
        add_decodes(&out[k], mx[i][2], 16, 700);
    }
    return k;
}

/* The engine's KV pages hold what earlier steps wrote. A freshly allocated
 * pool is zero pages the kernel maps to one shared page, which a read of the
 * context would find in cache; so the runner here allocates memory that is
 * written through, as a pool in use is. */
static void *alloc_written(size_t bytes)
{
    float *p = malloc(bytes ? bytes : 1);
    if (!p) return NULL;
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < bytes / sizeof *p; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (float)((double)(s >> 40) / 16777216.0 - 0.5);
    }
    return p;
}

typedef struct run_state {
    runner *r;
    bench_batch *bs;
    const uint32_t *pages;
    const int32_t *tokens;
    runner_seq seqs[MAX_SEQS];
    uint32_t n;
    uint64_t rng;
    int failed;
    rh_err e;
} run_state;

/* Batch i's sequences over pages from 0 (every batch reuses the pool). */
static int step_set(void *p, uint32_t i)
{
    run_state *s = p;
    const bench_batch *b = &s->bs[i];
    uint32_t pg = 0;
    for (uint32_t j = 0; j < b->n; j++) {
        uint32_t need = (b->seq[j].ctx + b->seq[j].n + PAGE - 1) / PAGE;
        s->seqs[j] = (runner_seq){s->tokens, b->seq[j].n, b->seq[j].ctx, s->pages + pg, need, 1};
        pg += need;
    }
    s->n = b->n;
    return 0;
}

/* One step as the engine runs it: the forward pass, then a token sampled
 * from every row of logits. */
static double step_sample(void *p, uint32_t iters, double *spent)
{
    run_state *s = p;
    const model_config *c = runner_model(s->r);
    kern_sampling greedy = {0, 1, 0};
    double t0 = rh_now();
    for (uint32_t it = 0; it < iters && !s->failed; it++) {
        const float *logits;
        if (runner_forward(s->r, s->seqs, s->n, &logits, &s->e) < 0) {
            s->failed = 1;
            break;
        }
        for (uint32_t i = 0; i < s->n; i++) runner_sample(s->r, logits + (size_t)i * c->vocab_size, &greedy, &s->rng);
    }
    return *spent = rh_now() - t0;
}

static rh_progress bar;
static void step_done(void *arg)
{
    (void)arg;
    rh_progress_update(&bar, bar.done + 1);
}

/* The step record of a batch: only its aggregates. */
static void record_of(const cost_batch *b, tr_step *st)
{
    memset(st, 0, sizeof *st);
    st->prefill_tokens = b->prefill_tokens, st->prefill_seqs = b->prefill_seqs;
    st->decode_seqs = b->decode_seqs, st->decode_tokens = b->decode_tokens;
    st->prefill_context = b->prefill_context, st->prefill_attn = b->prefill_attn;
    st->decode_context = b->decode_context;
}

static void summarize_class(bench_batch *bs, size_t n, int cls, int record, cost_err_summary *out)
{
    double v[64];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (bs[i].cls == cls) {
            double p = record ? bs[i].pred_record : bs[i].pred;
            v[k++] = fabs(p - bs[i].measured) / bs[i].measured;
        }
    rh_summary s;
    rh_summarize(v, k, &s);
    *out = (cost_err_summary){k, s.median, s.p90, s.max, s.mean};
}

/* The issue's own check: `rehearse replay` on a slice of a shared trace
 * (the demo's: 40 Azure conversation requests at a tenth of their lengths,
 * three times their rate, decodes mixed with prefill chunks), then
 * `rehearse validate-steps` of the recording against the table. Returns the
 * number of steps compared, 0 when the shared trace is absent, -1 on error. */
static long replay_check(const char *table, cost_err_summary out[COST_N_CLASSES])
{
    const char *bin = getenv("REHEARSE_BIN"), *shared = getenv("REHEARSE_SHARED_TRACES");
    if (!bin || !*bin) bin = "./rehearse";
    if (!shared || !*shared) shared = "../shared/traces";
    char src[1024], cmd[4096];
    snprintf(src, sizeof src, "%s/AzureLLMInferenceTrace_conv.csv", shared);
    FILE *t = fopen(src, "r");
    if (!t) return 0;
    fclose(t);
    snprintf(cmd, sizeof cmd,
             "mkdir -p build/tmp && %s trace slice %s --first 40 --length-scale 0.1 --rate-scale 3 "
             "-o build/tmp/bench-slice.rhtr >/dev/null && %s replay build/tmp/bench-slice.rhtr --model tiny-llama "
             "--max-total-tokens 65536 --enable-mixed-chunk -o build/tmp/bench-recorded.rhtr >/dev/null && "
             "%s validate-steps build/tmp/bench-recorded.rhtr %s --json --no-plot -o build/tmp/bench-validate",
             bin, src, bin, bin, table);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    json_error_t je;
    json_t *j = json_loadf(p, 0, &je);
    if (pclose(p) != 0 || !j) {
        json_decref(j);
        return -1;
    }
    long n = (long)json_integer_value(json_object_get(j, "steps"));
    for (int c = 0; c < COST_N_CLASSES; c++) {
        json_t *o = json_object_get(json_object_get(j, "error"), cost_class_name(c));
        out[c] = (cost_err_summary){(size_t)json_integer_value(json_object_get(o, "steps")),
                                    json_number_value(json_object_get(o, "median")),
                                    json_number_value(json_object_get(o, "p90")),
                                    json_number_value(json_object_get(o, "max")),
                                    json_number_value(json_object_get(o, "mean"))};
    }
    json_decref(j);
    return n;
}

int main(void)
{
    rh_err e;
    model_config c;
    if (model_preset("tiny-llama", &c, &e) < 0) return fprintf(stderr, "%s\n", e.msg), 1;
    const char *table_path = getenv("REHEARSE_CALIB_TABLE");
    double calib_s = NAN;
    uint32_t points = 0, unconverged = 0;
    if (!table_path || !*table_path) {
        calib_backend be;
        calib_opts o;
        calib_report rep;
        calib_opts_default(&o);
        if (calib_backend_find("cpu", &be, &e) < 0) return fprintf(stderr, "%s\n", e.msg), 1;
        fprintf(stderr, "bench_calibrate: calibrating tiny-llama on the CPU...\n");
        json_t *t = calib_run(&be, &c, &o, &rep, &e);
        table_path = "reports/bench/calibrate-tiny-llama.json";
        if (!t || calib_save(t, table_path, &e) < 0) return fprintf(stderr, "bench_calibrate: %s\n", e.msg), 1;
        json_decref(t);
        calib_s = rep.seconds, points = rep.points, unconverged = rep.unconverged;
    }
    cost_model *m = cost_load(table_path, &e);
    if (!m) return fprintf(stderr, "bench_calibrate: %s\n", e.msg), 1;

    static bench_batch bs[64];
    size_t nb = make_batches(bs);
    uint32_t max_pages = 0;
    for (size_t i = 0; i < nb; i++) {
        uint32_t p = 0;
        for (uint32_t j = 0; j < bs[i].n; j++) p += (bs[i].seq[j].ctx + bs[i].seq[j].n + PAGE - 1) / PAGE;
        if (p > max_pages) max_pages = p;
    }
    model *mod = model_new_dummy(&c, 1, 0, &e);
    kern_table written = *kern_cpu();
    written.alloc = alloc_written;
    runner_config rc = {PAGE, max_pages, 0, &written};
    static run_state st;
    st.r = mod ? runner_new(mod, &rc, &e) : NULL;
    if (!st.r) return fprintf(stderr, "bench_calibrate: %s\n", e.msg), 1;
    uint32_t *pages = malloc((size_t)max_pages * sizeof *pages);
    int32_t *tokens = malloc(4096 * sizeof *tokens);
    if (!pages || !tokens) return 1;
    for (uint32_t i = 0; i < max_pages; i++) pages[i] = i;
    for (uint32_t i = 0; i < 4096; i++) tokens[i] = (int32_t)(i * 7 % c.vocab_size);

    /* Every batch is sampled in rounds, like the calibration's points, so a
     * change of load on the machine falls on all of them alike. */
    calib_rule rule = {.min_samples = 5, .max_samples = 15, .tolerance = 0.03, .sample_s = 0.02, .point_budget_s = 6};
    st.bs = bs, st.pages = pages, st.tokens = tokens;
    calib_point *pt = calloc(nb, sizeof *pt);
    rh_progress_begin(&bar, "steps", nb);
    if (!pt || calib_measure_points(&rule, (uint32_t)nb, step_set, step_sample, &st, pt, step_done, NULL) < 0 ||
        st.failed)
        return fprintf(stderr, "bench_calibrate: %s\n", st.failed ? st.e.msg : "out of memory"), 1;
    rh_progress_end(&bar);
    for (size_t i = 0; i < nb; i++) {
        bench_batch *b = &bs[i];
        b->measured = pt[i].seconds, b->spread = pt[i].spread;
        cost_seq cs[MAX_SEQS];
        for (uint32_t j = 0; j < b->n; j++) cs[j] = (cost_seq){b->seq[j].n, b->seq[j].ctx, b->prefill[j]};
        cost_batch cb = {.seqs = cs, .n = b->n};
        cost_batch_summarize(&cb);
        double sched = cost_table_op_time(m, CT_SCHEDULE, (double)cb.prefill_seqs + cb.decode_seqs, 0);
        b->pred = cost_step_time(m, &cb) - sched;
        tr_step rec;
        record_of(&cb, &rec);
        cost_batch rb;
        cost_batch_from_step(&rb, &rec);
        b->pred_record = cost_step_time(m, &rb) - sched;
        b->cls = cost_step_class(&rec);
    }
    free(pt);

    printf("%-34s %8s %12s %12s %8s %12s %8s\n", "batch (tiny-llama, cpu)", "class", "measured ms", "table ms",
           "error", "record ms", "error");
    for (size_t i = 0; i < nb; i++)
        printf("%-34s %8s %12.3f %12.3f %7.1f%% %12.3f %7.1f%%   (spread %.1f%%)\n", bs[i].what,
               cost_class_name(bs[i].cls), bs[i].measured * 1e3, bs[i].pred * 1e3,
               100 * (bs[i].pred - bs[i].measured) / bs[i].measured, bs[i].pred_record * 1e3,
               100 * (bs[i].pred_record - bs[i].measured) / bs[i].measured, 100 * bs[i].spread);
    cost_err_summary es[2][COST_N_CLASSES];
    for (int rec = 0; rec < 2; rec++)
        for (int cl = 0; cl < COST_N_CLASSES; cl++) summarize_class(bs, nb, cl, rec, &es[rec][cl]);
    printf("\nrelative error of the table's prediction (target: median <= 5%%, p90 <= 15%% per class)\n");
    printf("  %-8s %6s   %-26s   %-26s\n", "class", "steps", "exact aggregates med/p90/max",
           "step-record fields med/p90/max");
    for (int cl = 0; cl < COST_N_CLASSES; cl++)
        printf("  %-8s %6zu   %6.1f%% %6.1f%% %6.1f%%      %6.1f%% %6.1f%% %6.1f%%\n", cost_class_name(cl), es[0][cl].n,
               100 * es[0][cl].median, 100 * es[0][cl].p90, 100 * es[0][cl].max, 100 * es[1][cl].median,
               100 * es[1][cl].p90, 100 * es[1][cl].max);
    cost_err_summary rep[COST_N_CLASSES];
    fprintf(stderr, "bench_calibrate: rehearse replay of a shared trace slice, then validate-steps...\n");
    long replayed = replay_check(table_path, rep);
    if (replayed > 0) {
        printf("\nrehearse replay (40 Azure conv requests, lengths x0.1, rate x3, mixed chunks) + validate-steps:\n");
        for (int cl = 0; cl < COST_N_CLASSES; cl++)
            printf("  %-8s %6zu   %6.1f%% %6.1f%% %6.1f%%\n", cost_class_name(cl), rep[cl].n, 100 * rep[cl].median,
                   100 * rep[cl].p90, 100 * rep[cl].max);
    } else {
        printf("\nrehearse replay check: %s\n", replayed == 0 ? "skipped (no shared trace)" : "failed");
    }
    if (!isnan(calib_s))
        printf("\nfull calibration of tiny-llama: %.1f s (%u points, %u not converged; target < 180 s)\n", calib_s,
               points, unconverged);

    FILE *f = fopen("reports/bench/calibrate.json.tmp", "w");
    if (!f) return 1;
    fprintf(f, "{\n  \"bench\": \"calibrate\",\n  \"model\": \"tiny-llama\",\n  \"table\": \"%s\",\n", table_path);
    if (!isnan(calib_s))
        fprintf(f, "  \"calibration_seconds\": %.2f,\n  \"points\": %u,\n  \"unconverged\": %u,\n", calib_s, points,
                unconverged);
    for (int rec = 0; rec < 2; rec++) {
        fprintf(f, "  \"%s\": {", rec ? "error_from_record" : "error");
        for (int cl = 0; cl < COST_N_CLASSES; cl++)
            fprintf(f, "%s\"%s\": {\"steps\": %zu, \"median\": %.4f, \"p90\": %.4f, \"max\": %.4f}", cl ? ", " : "",
                    cost_class_name(cl), es[rec][cl].n, es[rec][cl].median, es[rec][cl].p90, es[rec][cl].max);
        fprintf(f, "},\n");
    }
    if (replayed > 0) {
        fprintf(f, "  \"replay_validate_steps\": {\"steps\": %ld", replayed);
        for (int cl = 0; cl < COST_N_CLASSES; cl++)
            fprintf(f, ", \"%s\": {\"steps\": %zu, \"median\": %.4f, \"p90\": %.4f, \"max\": %.4f}",
                    cost_class_name(cl), rep[cl].n, rep[cl].median, rep[cl].p90, rep[cl].max);
        fprintf(f, "},\n");
    }
    fprintf(f, "  \"batches\": [\n");
    for (size_t i = 0; i < nb; i++)
        fprintf(f, "    {\"batch\": \"%s\", \"class\": \"%s\", \"measured_s\": %.6g, \"spread\": %.4f, "
                   "\"predicted_s\": %.6g, \"predicted_from_record_s\": %.6g}%s\n",
                bs[i].what, cost_class_name(bs[i].cls), bs[i].measured, bs[i].spread, bs[i].pred, bs[i].pred_record,
                i + 1 < nb ? "," : "");
    fprintf(f, "  ]\n}\n");
    if (fclose(f) != 0 || rename("reports/bench/calibrate.json.tmp", "reports/bench/calibrate.json") != 0) return 1;
    free(pages);
    free(tokens);
    runner_free(st.r);
    model_free(mod);
    cost_free(m);
    return 0;
}
