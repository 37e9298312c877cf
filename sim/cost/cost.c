/* cost.c — loading any cost-model kind, and the parts of pricing a step
 * that every kind shares: the batch aggregates and speculative drafting. */
#include "sim/cost/cost.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/peft.h"
#include "sim/cost/cost_impl.h"
#include "util/fs.h"

/* The registry: a kind is one file with a parse function, and one line here.
 * "fit" names the linear formula with fitted coefficients: what `rehearse
 * fit` writes, read as a kind of its own so a file says where it came from. */
typedef struct cost_kind {
    const char *name;
    uint32_t version;       /* the newest file version this build reads */
    cost_parse_fn parse;
} cost_kind;

static const cost_kind kinds[] = {
    {"linear", 1, cost_linear_parse},
    {"fit", 1, cost_linear_parse},
    {"roofline", 1, cost_roofline_parse},
    {"table", 1, cost_table_parse},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

int cost_model_init(cost_model *m, const cost_ops *ops, const cost_src *src)
{
    m->ops = ops;
    m->draft_ratio = COST_DRAFT_RATIO_DEFAULT;
    m->over = (cost_overheads){0};
    m->path = strdup(src && src->label ? src->label : "");
    return m->path ? 0 : -1;
}

/* The "overheads" object. A kind may have set step_s from a field of its
 * own (the roofline's step_overhead_s); giving both is an error. */
static int parse_overheads(json_t *o, cost_model *m, const cost_src *src, rh_err *e)
{
    static const char *const keys[] = {"step_s", "forward_s", "request_s", "arrival_s", "output_token_s",
                                       "comment", "sources", NULL};
    if (!json_is_object(o))
        return cj_fail(src, "", "overheads", e, "must be an object of seconds: step_s, forward_s, request_s, "
                       "arrival_s, output_token_s");
    if (cj_only_keys(o, "overheads", keys, src, e) < 0) return -1;
    if (m->over.step_s > 0 && json_object_get(o, "step_s"))
        return cj_fail(src, "overheads", "step_s", e, "given twice: also as step_overhead_s");
    cost_overheads v = m->over;
    if (cj_number(o, "overheads", "step_s", 0, v.step_s, 0, 10, &v.step_s, src, e) < 0 ||
        cj_number(o, "overheads", "forward_s", 0, v.forward_s, 0, 10, &v.forward_s, src, e) < 0 ||
        cj_number(o, "overheads", "request_s", 0, v.request_s, 0, 100, &v.request_s, src, e) < 0 ||
        cj_number(o, "overheads", "arrival_s", 0, v.arrival_s, 0, 100, &v.arrival_s, src, e) < 0 ||
        cj_number(o, "overheads", "output_token_s", 0, v.output_token_s, 0, 10, &v.output_token_s, src, e) < 0)
        return -1;
    m->over = v;
    return 0;
}

static cost_model *parse_root(json_t *root, const cost_src *src, rh_err *e)
{
    if (!json_is_object(root)) {
        rh_fail(e, "%s: a cost file is a JSON object with a \"kind\" field", src->label);
        return NULL;
    }
    const char *kind;
    if (cj_string(root, "", "kind", 1, NULL, &kind, src, e) < 0) return NULL;
    const cost_kind *k = NULL;
    for (size_t i = 0; i < N_KINDS && !k; i++)
        if (!strcmp(kinds[i].name, kind)) k = &kinds[i];
    if (!k) {
        char known[256] = "";
        for (size_t i = 0; i < N_KINDS; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                     kinds[i].name);
        cj_fail(src, "", "kind", e, "unknown kind '%s' (known: %s)", kind, known);
        return NULL;
    }
    uint32_t version;
    if (cj_uint(root, "", "version", 1, 0, 0, UINT32_MAX, &version, src, e) < 0) return NULL;
    if (version < 1 || version > k->version) {
        cj_fail(src, "", "version", e, "version %u of kind '%s' is not readable by this build (it reads 1..%u)",
                version, k->name, k->version);
        return NULL;
    }
    /* Every kind's overheads, read here once: the kind never sees them. */
    json_t *over = json_incref(json_object_get(root, "overheads"));
    json_object_del(root, "overheads");
    cost_model *m = k->parse(root, src, e);
    if (m && over && parse_overheads(over, m, src, e) < 0) {
        cost_free(m);
        m = NULL;
    }
    json_decref(over);
    return m;
}

/* The directory of a file path, where relative preset paths start. */
static void dir_of(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, n, ".");
    else if (slash == path) snprintf(dir, n, "/");
    else snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

cost_model *cost_load(const char *path, rh_err *e)
{
    FILE *f = rh_fopen_regular(path, "cost file", e);
    if (!f) return NULL;
    json_error_t je;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root) {
        rh_fail(e, "%s: line %d column %d: %s", path, je.line, je.column, je.text);
        return NULL;
    }
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    cost_src src = {path, dir};
    cost_model *m = parse_root(root, &src, e);
    json_decref(root);
    return m;
}

cost_model *cost_parse(const char *json_text, const char *label, rh_err *e)
{
    json_error_t je;
    char dir[4096];
    dir_of(label ? label : "", dir, sizeof dir);
    cost_src src = {label ? label : "cost", dir};
    json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        rh_fail(e, "%s: line %d column %d: %s", src.label, je.line, je.column, je.text);
        return NULL;
    }
    cost_model *m = parse_root(root, &src, e);
    json_decref(root);
    return m;
}

int cost_memory_of(const cost_model *m, uint32_t tp, cost_memory *out)
{
    return cost_memory_of_serving(m, tp, NULL, out);
}

int cost_memory_of_serving(const cost_model *m, uint32_t tp, const cost_serving *sv, cost_memory *out)
{
    memset(out, 0, sizeof *out);
    if (!m->ops->memory) return 0;
    m->ops->memory(m, tp, sv, out);
    return 1;
}

void cost_free(cost_model *m)
{
    if (!m) return;
    free(m->path);
    m->ops->free(m);
}

void cost_batch_summarize(cost_batch *b)
{
    b->prefill_tokens = b->prefill_seqs = b->decode_seqs = b->decode_tokens = 0;
    b->decode_context = b->prefill_context = b->prefill_attn = b->prefill_causal = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        const cost_seq *s = &b->seqs[i];
        uint64_t n = s->n_new, c = s->context;
        if (s->prefill) {
            b->prefill_tokens += s->n_new;
            b->prefill_seqs++;
            b->prefill_context += c;
            b->prefill_attn += n * (c + n);
            b->prefill_causal += n * c + n * (n + 1) / 2;
        } else {
            b->decode_tokens += s->n_new;
            b->decode_seqs++;
            b->decode_context += c;
        }
    }
}

void cost_batch_from_step(cost_batch *b, const tr_step *s)
{
    memset(b, 0, sizeof *b);
    b->prefill_tokens = s->prefill_tokens;
    b->prefill_seqs = s->prefill_seqs;
    b->decode_seqs = s->decode_seqs;
    b->decode_tokens = s->decode_tokens;
    b->decode_context = s->decode_context;
    b->prefill_context = s->prefill_context;
    b->prefill_attn = s->prefill_attn;
    b->lora_adapters = s->adapters;
    b->lora_loads = s->adapter_loads;
    b->lora_tokens = s->adapter_tokens;
    b->load_tokens = s->hicache_load_tokens;
    b->writeback_tokens = s->hicache_writeback_tokens;
    b->backup_tokens = s->hicache_backup_tokens;
    b->storage_tokens = s->hicache_storage_tokens;
    if (s->decode_seqs && s->decode_tokens > s->decode_seqs) {
        b->draft_steps = (s->decode_tokens - s->decode_seqs) / s->decode_seqs;
        b->draft_seqs = b->draft_steps ? s->decode_seqs : 0;
    }
}

static int batch_empty(const cost_batch *b)
{
    return b->prefill_tokens == 0 && b->decode_seqs == 0;
}

int cost_check_tp(const cost_model *m, uint32_t tp, rh_err *e)
{
    if (!m->ops->check_tp) return 0;
    return m->ops->check_tp(m, tp, e);
}

double cost_draft_fallback(const cost_model *m, uint32_t n, uint64_t context, uint32_t tp)
{
    if (!n || m->draft_ratio == 0) return 0;
    cost_batch d;
    memset(&d, 0, sizeof d);
    d.tp = tp;
    d.decode_seqs = d.decode_tokens = n;
    d.decode_context = context;
    return m->draft_ratio * m->ops->step_time(m, &d);
}

/* The i-th draft forward (0-based) runs after i draft tokens were appended
 * to each sequence, so its summed context grows by draft_seqs per pass. The
 * drafted sequences are taken to have the decodes' mean context. */
uint64_t cost_draft_context(const cost_batch *b, uint32_t i)
{
    double ctx0 = b->decode_seqs ? (double)b->decode_context * b->draft_seqs / b->decode_seqs : 0;
    return (uint64_t)llround(ctx0) + (uint64_t)i * b->draft_seqs;
}

double cost_draft_time(const cost_model *m, const cost_batch *b)
{
    if (!b->draft_steps || !b->draft_seqs || batch_empty(b)) return 0;
    /* A pass over a tree's width: as many one-token rows per sequence, each
     * at the sequence's context. */
    uint32_t w = b->draft_width > 1 ? b->draft_width : 1, n = b->draft_seqs * w;
    double t = 0;
    for (uint32_t i = 0; i < b->draft_steps; i++) {
        uint64_t ctx = cost_draft_context(b, i) * w;
        t += m->ops->draft_time ? m->ops->draft_time(m, n, ctx, b->tp) : cost_draft_fallback(m, n, ctx, b->tp);
    }
    return t;
}

uint32_t cost_forwards(const cost_batch *b)
{
    return 1 + (b->draft_seqs ? b->draft_steps : 0);
}

/* The step's CPU time and its forward passes' launches. */
static double overhead_time(const cost_model *m, const cost_batch *b)
{
    return m->over.step_s + m->over.forward_s * cost_forwards(b);
}

double cost_step_parts(const cost_model *m, const cost_batch *b, cost_parts *p)
{
    *p = (cost_parts){0};
    if (batch_empty(b)) return 0;
    if (m->ops->parts) {
        m->ops->parts(m, b, p);
    } else {
        p->forward_s = m->ops->step_time(m, b);
        p->draft_s = cost_draft_time(m, b);
    }
    p->exposed_s += overhead_time(m, b);
    return p->forward_s + p->draft_s + p->launch_s + p->exposed_s + p->hidden_s;
}

double cost_parts_duration(const cost_parts *p, bool overlap, double prev_gpu_s)
{
    double hidden = overlap ? fmax(0, p->hidden_s - prev_gpu_s) : p->hidden_s;
    return p->forward_s + p->draft_s + p->launch_s + p->exposed_s + hidden;
}

double cost_step_time(const cost_model *m, const cost_batch *b)
{
    cost_parts p;
    return cost_step_parts(m, b, &p);
}

void cost_serving_default(const cost_model *m, uint32_t tp, cost_serving *out)
{
    *out = (cost_serving){.ep = 1, .dp = 1, .expert_imbalance = 1, .overlap = true};
    if (m->ops->serving) m->ops->serving(m, tp, out);
}

int cost_lora_targets_parse(const char *list, uint32_t *bits, rh_err *e)
{
    _Static_assert(COST_LORA_Q == 1u << LORA_Q && COST_LORA_DOWN == 1u << LORA_DOWN && COST_LORA_ALL == LORA_ALL_MODULES,
                   "the cost model's LoRA module bits are the engine's");
    return lora_targets_parse(list, bits, e);
}

int cost_serving_check(const cost_model *m, uint32_t tp, const cost_serving *s, rh_err *e)
{
    if (m->ops->check_serving) return m->ops->check_serving(m, tp, s, e);
    return cost_serving_check_default(m, tp, s, e);
}

int cost_serving_check_default(const cost_model *m, uint32_t tp, const cost_serving *s, rh_err *e)
{
    (void)tp;
    const char *what = s->ep > 1 ? "--ep-size" : s->dp > 1 ? "--enable-dp-attention" : s->deepep ? "--moe-a2a-backend"
                       : s->two_batch_overlap ? "--enable-two-batch-overlap"
                       : s->expert_imbalance > 1 ? "--expert-imbalance"
                       : s->redundant_experts ? "--ep-num-redundant-experts" : NULL;
    if (!what && s->lora_rank)
        return rh_fail(e, "%s: a %s cost model prices no LoRA adapters (a roofline does; --max-lora-rank 0 "
                          "simulates the adapter cap with the adapters' work free)",
                       m->path[0] ? m->path : "cost model", m->ops->kind);
    if (!what && s->hicache)
        return rh_fail(e, "%s: a %s cost model prices no host-tier copies (--enable-hierarchical-cache needs a "
                          "roofline)", m->path[0] ? m->path : "cost model", m->ops->kind);
    if (what)
        return rh_fail(e, "%s: a %s cost model prices no expert or data parallelism (%s needs a roofline)",
                       m->path[0] ? m->path : "cost model", m->ops->kind, what);
    return 0;
}

int cost_breakdown(const cost_model *m, const cost_batch *b, cost_term *terms, int max)
{
    if (max <= 0) return 0;
    int n;
    if (batch_empty(b)) {
        terms[0] = (cost_term){"empty batch", 0, 0, 0, ""};
        return 1;
    }
    cost_parts p;
    cost_step_parts(m, b, &p);
    if (m->ops->breakdown) {
        n = m->ops->breakdown(m, b, terms, max);
    } else {
        terms[0] = (cost_term){"step", m->ops->step_time(m, b), 0, 0, ""};
        n = 1;
    }
    if (p.draft_s > 0 && n < max) terms[n++] = (cost_term){"drafting", p.draft_s, 0, 0, ""};
    if (p.launch_s > 0 && n < max) terms[n++] = (cost_term){"eager launches (host)", p.launch_s, 0, 0, "host"};
    double fw = p.exposed_s - overhead_time(m, b);
    if (fw > 1e-15 && n < max) terms[n++] = (cost_term){"host per step", fw, 0, 0, "host"};
    if (p.hidden_s > 0 && n < max) terms[n++] = (cost_term){"host scheduling", p.hidden_s, 0, 0, "host"};
    if (m->over.step_s > 0 && n < max) terms[n++] = (cost_term){"step cpu", m->over.step_s, 0, 0, ""};
    double launches = m->over.forward_s * cost_forwards(b);
    if (launches > 0 && n < max) terms[n++] = (cost_term){"launches", launches, 0, 0, ""};
    return n;
}
