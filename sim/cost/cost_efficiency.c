/* cost_efficiency.c — roofline efficiency factors from a measured table
 * (see cost_efficiency.h). */
#include "sim/cost/cost_efficiency.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost/cost_table.h"
#include "util/json_file.h"

/* Which roofline operator each measured table operator belongs to. */
static const struct {
    const char *table;
    int op;
} into[] = {
    {"embedding", RL_EMBED},      {"rmsnorm", RL_NORM},         {"q_proj", RL_QKV_PROJ},
    {"kv_proj", RL_QKV_PROJ},     {"prefill_attention", RL_ATTN_PREFILL},
    {"decode_attention", RL_ATTN_DECODE}, {"o_proj", RL_O_PROJ}, {"gate_up_proj", RL_MLP},
    {"silu_mul", RL_ACT},         {"down_proj", RL_MLP},        {"lm_head", RL_LM_HEAD},
    {"rope", RL_ROPE},
    {"allreduce", RL_ALLREDUCE},
};

static int op_of(const char *table_name)
{
    for (size_t i = 0; i < sizeof into / sizeof into[0]; i++)
        if (!strcmp(into[i].table, table_name)) return into[i].op;
    return -1;
}

int cost_efficiency_measure(const cost_model *table, uint32_t hidden, const cost_model *pure,
                            cost_eff_row rows[RL_N_OPS], rh_err *e)
{
    const rl_model *md = roofline_model(pure);
    if (!md) return rh_fail(e, "%s: not a roofline cost model", pure->path);
    if (strcmp(table->ops->kind, "table")) return rh_fail(e, "%s: not a table cost model", table->path);
    if (cost_table_layers(table) != md->layers || hidden != md->hidden)
        return rh_fail(e, "%s measured %u layers of hidden size %u; the roofline's model '%s' has %u of %u", table->path,
                       cost_table_layers(table), hidden, md->name, md->layers, md->hidden);
    bool ep;
    uint32_t tp = roofline_tp(pure, &ep);
    if (cost_check_tp(table, tp, e) < 0) return -1;
    for (int op = 0; op < RL_N_OPS; op++) rows[op] = (cost_eff_row){.op = op};

    static const uint32_t chunks[] = {256, 1024, 2048}, decodes[] = {1, 8, 32, 128};
    enum { N_PROBES = 7, MAX_SEQS = 128 };
    cost_seq seqs[MAX_SEQS];
    for (int p = 0; p < N_PROBES; p++) {
        cost_batch b = {.seqs = seqs, .tp = tp};
        if (p < 3) {
            seqs[0] = (cost_seq){chunks[p], 0, true};
            b.n = 1;
        } else {
            for (uint32_t i = 0; i < decodes[p - 3]; i++) seqs[i] = (cost_seq){1, 1024, false};
            b.n = decodes[p - 3];
        }
        cost_batch_summarize(&b);
        rl_breakdown bd;
        if (roofline_breakdown(pure, &b, &bd, e) < 0) return -1;
        for (int op = 0; op < RL_N_OPS; op++) rows[op].roofline_s += bd.op[op].seconds;
        cost_term terms[64];
        int n = cost_breakdown(table, &b, terms, 64);
        for (int i = 0; i < n; i++) {
            int op = op_of(terms[i].name);
            if (op >= 0 && isfinite(terms[i].seconds)) rows[op].measured_s += terms[i].seconds;
        }
    }
    for (int op = 0; op < RL_N_OPS; op++) {
        cost_eff_row *r = &rows[op];
        if (r->measured_s > 0 && r->roofline_s > 0)
            r->efficiency = fmax(COST_EFF_MIN, fmin(1.0, r->roofline_s / r->measured_s));
    }
    return 0;
}

int cost_efficiency_file(const char *table_path, const char *roof_path, const char *out, cost_eff_row rows[RL_N_OPS],
                         rh_err *e)
{
    json_error_t je;
    json_t *tj = json_load_file(table_path, 0, &je), *rj = json_load_file(roof_path, 0, &je);
    cost_model *table = NULL, *pure = NULL;
    char *text = NULL;
    int rc = -1;
    if (!tj || !rj) {
        rh_fail(e, "%s: line %d: %s", tj ? roof_path : table_path, je.line, je.text);
        goto done;
    }
    if (!(table = cost_load(table_path, e))) goto done;
    json_object_del(rj, "efficiency");   /* the pure roofline */
    if (!(text = json_dumps(rj, 0)) || !(pure = cost_parse(text, roof_path, e))) goto done;
    json_t *hid = json_object_get(json_object_get(tj, "model"), "hidden_size");
    if (cost_efficiency_measure(table, (uint32_t)json_integer_value(hid), pure, rows, e) < 0) goto done;
    json_t *eff = json_object();
    for (int op = 0; op < RL_N_OPS; op++)
        if (rows[op].efficiency > 0) json_object_set_new(eff, rl_op_name(op), json_real(rows[op].efficiency));
    json_object_set_new(rj, "efficiency", eff);
    if (rh_json_save(rj, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6), "the cost file", e) < 0)
        goto done;
    rc = 0;
done:
    free(text);
    cost_free(table);
    cost_free(pure);
    json_decref(tj);
    json_decref(rj);
    return rc;
}
