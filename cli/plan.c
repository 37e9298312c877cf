/* plan.c — `rehearse plan TRACE --model M --slo-ttft-ms T --slo-tpot-ms P ...`:
 * the cheapest deployment of M that serves TRACE within its SLOs
 * (sim/plan/plan.h), with its launch lines. */
#include "cli/cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/router/router.h"
#include "sim/cost/cost_presets.h"
#include "sim/plan/launch.h"
#include "sim/plan/plan.h"
#include "sim/plan/report.h"
#include "traces/import/import.h"
#include "util/args.h"
#include "util/atomic_file.h"
#include "util/fs.h"
#include "util/progress.h"

static const char plan_help[] =
    "usage: rehearse plan TRACE --model M --slo-ttft-ms T --slo-tpot-ms P [flags] [knobs]\n\n"
    "Searches for the cheapest deployment of model M that serves TRACE within the SLOs:\n"
    "GPU type x tensor-parallel size x replicas (or prefill and decode pools) x chunked\n"
    "prefill x max running requests x speculative steps x router, each candidate a\n"
    "simulation of the trace. Candidates whose weights leave no KV pool are refused,\n"
    "those that cannot keep up with the trace's tokens even at their best rates are\n"
    "pruned, and the rest go through successive halving: all on a prefix of the trace,\n"
    "the best quarter on a prefix four times longer, ..., the last rung the whole trace\n"
    "(and those dropped that met the SLOs, when cheaper ones miss them on the whole).\n"
    "Prints the ranked table, each GPU type's cheapest deployment with the highest rate\n"
    "it sustains, and the winner's launch lines (SGLang, vLLM).\n\n"
    "the question:\n"
    "  --model M                 a model preset (rehearse cost presets)\n"
    "  --slo-ttft-ms T, --slo-tpot-ms P   the SLOs (both required)\n"
    "  --slo-quantile Q          the quantile that must be within them (default 0.99)\n"
    "  --slo-attainment A        instead: at least A of the requests within both\n"
    "  --prices FILE             PRICES.json: {\"gpus\": {\"h100-sxm\": {\"usd_per_gpu_hour\": 2.99}}}\n"
    "                            (default: the sample scripts/prices.json, list prices with sources)\n"
    "  --rate-scale X            the trace's arrivals X times faster (default 1)\n"
    "  --target-rate QPS         the trace at QPS requests a second (instead of --rate-scale)\n"
    "  --first N                 plan on the trace's first N requests\n"
    "the space (comma-separated lists):\n"
    "  --gpus LIST               GPU presets (default: every GPU the prices file lists)\n"
    "  --tp LIST                 tensor-parallel sizes (default 1,2,4,8)\n"
    "  --max-replicas N          1..N replicas (default 16)\n"
    "  --max-gpus N              at most N GPUs a deployment (default 64)\n"
    "  --chunked-prefill-sizes LIST   (default 2048,4096,8192; -1 or off: prompts prefilled whole)\n"
    "  --max-running-requests-list LIST   (default 64,128,256,512)\n"
    "  --speculative-steps LIST  draft steps, 0 for off (default 0,3)\n"
    "  --speculative-algorithm A the drafter when steps > 0 (default EAGLE; NEXTN for DeepSeek)\n"
    "  --routers LIST            router policies for 2+ replicas (default cache-aware)\n"
    "  --parallel LIST           tp, ep, dp-attention, ep+dp-attention: experts spread (--ep-size) and\n"
    "                            data-parallel attention, for tp >= 2 (default: all four for a model\n"
    "                            with experts, tp alone otherwise)\n"
    "  --pd LIST                 none, or prefill:decode ratios such as 1:1,1:3 (default none)\n"
    "the search:\n"
    "  --rungs N, --eta E        successive halving: N rungs, each keeping 1/E (default: enough rungs for\n"
    "                            the candidates to come down to --top, ceil(log_E(n / top)); E 4)\n"
    "  --top N                   table rows, and the fewest a rung keeps (default 10)\n"
    "  --min-requests N          the first rung's prefix has at least N requests (default 200)\n"
    "  --workers N               simulations at once (default: the processors)\n"
    "  --resume DIR              keep every evaluation in DIR as it finishes; rerun with the\n"
    "                            same DIR after a kill to go on where it stopped\n"
    "  --no-rate-search          skip the highest rate per GPU type\n"
    "on a cluster (each round of the search a Slurm array or a GNU parallel list):\n"
    "  --emit-jobs DIR           write the first round's simulations as jobs in DIR/jobs/ instead of\n"
    "                            running them (DIR/jobs/round-K.sbatch, round-K.parallel)\n"
    "  --shards N                at most N jobs a round (default 100; each runs its share in turn)\n"
    "  --collect DIR             after a round's jobs ran: fold their results in and write the next\n"
    "                            round, or, when none is needed, print and write the plan itself\n"
    "                            (scripts/plan_jobs.sh DIR runs every round with sbatch --wait)\n"
    "prediction intervals:\n"
    "  --gpu-cost GPU=FILE       price GPU with FILE (a cost file `rehearse fit` wrote from a probe of\n"
    "                            your deployment, with its residuals) instead of the preset roofline\n"
    "  --intervals K             the best (--top) run K more times each, steps and fitted terms drawn\n"
    "                            as `rehearse sim --intervals` draws them; one meets an SLO only if the\n"
    "                            p95 of its quantile does (--slo-quantile 0.5, 0.9 or 0.99)\n"
    "  --step-noise SIGMA        the per-step noise for every GPU (default: each cost file's fit)\n"
    "output:\n"
    "  -o DIR                    plan.json, candidates.csv, launch.sh and the Pareto plots\n"
    "  --json                    print plan.json instead of the table\n"
    "  --model-path P            what the launch lines load (default: the preset's Hugging Face id)\n"
    "  --progress                progress bars even when stderr is not a terminal\n"
    "Any other `rehearse sim` knob (--scheduler, --speculative-accept-rate, --schedule-policy,\n"
    "...) is every candidate's.\n";

/* Knobs the plan searches: a single value would fight the search. */
static const char *const searched[] = {"tp-size", "tp", "tensor-parallel-size", "replicas", "chunked-prefill-size",
                                       "ep-size", "expert-parallel-size", "enable-dp-attention",
                                       "max-running-requests", "speculative-num-steps", "router", "router-policy",
                                       "prefill-replicas", "decode-replicas", "max-num-seqs", "max-num-batched-tokens"};

static int parse_u32_list(const char *flag, const char *v, uint32_t lo, uint32_t hi, uint32_t *out, int *n,
                          rh_err *e)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", v);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == PLAN_MAX_LIST) return rh_fail(e, "--%s: at most %d values", flag, PLAN_MAX_LIST);
        char what[64];
        snprintf(what, sizeof what, "--%s", flag);
        if (rh_parse_u32(tok, what, lo, hi, &out[(*n)++], e) < 0) return -1;
    }
    return *n ? 0 : rh_fail(e, "--%s: an empty list", flag);
}

/* A comma-separated list's values (each under 48 bytes), at most max. The
 * count, or -1 naming the flag. */
static int split_list(const char *flag, const char *v, int max, char toks[][48], rh_err *e)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", v);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == max) return rh_fail(e, "--%s: at most %d values", flag, max);
        if (strlen(tok) >= 48) return rh_fail(e, "--%s: '%s' is too long", flag, tok);
        snprintf(toks[n++], 48, "%s", tok);
    }
    return n ? n : rh_fail(e, "--%s: an empty list", flag);
}

/* The Hugging Face id in a model preset's "source" URL, else its name. */
static void model_path_of(const char *model, char *buf, size_t n)
{
    snprintf(buf, n, "%s", model);
    char path[PATH_MAX];
    rh_err e = {{0}};
    if (cost_preset_find("models", model, NULL, path, sizeof path, &e) < 0) return;
    json_t *j = json_load_file(path, 0, NULL);
    const char *src = j ? json_string_value(json_object_get(j, "source")) : NULL;
    const char *at = src ? strstr(src, "huggingface.co/") : NULL;
    if (at) {
        at += strlen("huggingface.co/");
        const char *slash = strchr(at, '/'), *end = slash ? strpbrk(slash + 1, "/ ") : NULL;
        size_t len = end ? (size_t)(end - at) : strlen(at);
        if (slash && len < n) snprintf(buf, n, "%.*s", (int)len, at);
    }
    json_decref(j);
}

/* What a run from a jobs folder does instead of the whole plan. */
typedef struct plan_mode {
    const char *jobs_dir;            /* --job: run one shard of this folder's pending round */
    uint32_t round, shard, shards;
    bool collecting;                 /* --collect: a round was folded in; go on from there */
} plan_mode;

static int plan_cmd(int argc, char **argv, const plan_mode *mode);

static int self_path(char *buf, size_t n)
{
    ssize_t k = readlink("/proc/self/exe", buf, n - 1);
    if (k <= 0) return -1;
    buf[k] = '\0';
    return 0;
}

/* The first --emit-jobs: DIR/command.txt keeps where the plan was asked
 * from and its arguments (--emit-jobs left out), so each job and each
 * --collect asks the same question wherever it runs. */
static int start_jobs_dir(const char *dir, const char *question, int argc, char **argv, rh_err *e)
{
    uint32_t round, shards;
    int p = plan_jobs_pending(dir, &round, &shards, e);
    if (p < 0) return -1;
    if (p)
        return rh_fail(e, "%s: round %u's jobs are pending: run them, then `rehearse plan --collect %s`", dir, round,
                       dir);
    if (rh_mkdir_p(dir) < 0) return rh_fail(e, "%s: cannot create: %s", dir, strerror(errno));
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/question.txt", dir);
    size_t n;
    rh_err ignored;
    char *kept = access(path, F_OK) == 0 ? rh_read_regular(path, "a plan's question", 1 << 20, &n, &ignored) : NULL;
    int other = kept && strcmp(kept, question);
    free(kept);
    if (other)   /* its command.txt is that plan's: keep it */
        return rh_fail(e, "%s holds the evaluations of another plan (its question.txt differs from this one's); "
                          "give a new folder to --emit-jobs",
                       dir);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return rh_fail(e, "cannot read the current folder: %s", strerror(errno));
    size_t cap = strlen(cwd) + 2, len = 0;
    for (int i = 1; i < argc; i++) cap += strlen(argv[i]) + 1;
    char *text = malloc(cap);
    if (!text) return rh_fail(e, "out of memory");
    len += (size_t)sprintf(text, "%s\n", cwd);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--emit-jobs")) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--emit-jobs=", 12)) continue;
        if (strchr(argv[i], '\n')) {
            free(text);
            return rh_fail(e, "--emit-jobs: an argument holds a newline; a job could not ask the same question");
        }
        len += (size_t)sprintf(text + len, "%s\n", argv[i]);
    }
    snprintf(path, sizeof path, "%s/command.txt", dir);
    int rc = rh_write_file_atomic(path, text, len, e);
    free(text);
    return rc;
}

/* After plan_run wrote a round: its Slurm array and parallel list, and
 * what to run. */
static int emitted(const char *dir, const plan_result *res, uint32_t shards, FILE *out, rh_err *e)
{
    char self[PATH_MAX], cwd[PATH_MAX];
    if (self_path(self, sizeof self) < 0) snprintf(self, sizeof self, "rehearse");
    if (!getcwd(cwd, sizeof cwd)) return rh_fail(e, "cannot read the current folder: %s", strerror(errno));
    uint32_t n_shards;
    if (plan_jobs_scripts(dir, res->jobs_round, res->jobs, shards, self, cwd, &n_shards, e) < 0) return -1;
    fprintf(out,
            "plan: round %u: %u simulations to run, as %u jobs (%s/jobs/round-%u.tsv)\n"
            "  run them:  sbatch --wait %s/jobs/round-%u.sbatch      or: parallel < %s/jobs/round-%u.parallel\n"
            "  then:      rehearse plan --collect %s\n"
            "  (scripts/plan_jobs.sh %s runs every round so, and collects)\n",
            res->jobs_round, res->jobs, n_shards, dir, res->jobs_round, dir, res->jobs_round, dir, res->jobs_round,
            dir, dir);
    return 0;
}

/* --collect DIR [flags] and --job DIR --round K --shard I/N: the question
 * DIR/command.txt holds, asked again from where it was first asked. */
static int plan_from_dir(int argc, char **argv)
{
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    plan_mode mode = {0};
    const char *name, *dir = NULL, *v;
    char **extra = calloc((size_t)argc + 1, sizeof *extra), **args = NULL, *text = NULL;
    int n_extra = 0, rc = 1, collect = 0, n_args = 0;
    char dir_abs[PATH_MAX];
    if (!extra) {
        rh_fail(&e, "out of memory");
        goto out;
    }
    while ((name = rh_args_next(&a))) {
        if (!strcmp(name, "collect") || !strcmp(name, "job")) {
            if (dir) {
                rh_fail(&e, "give --collect or --job once");
                goto out;
            }
            if (!(dir = rh_args_value(&a, &e))) goto out;
            collect = !strcmp(name, "collect");
        } else if (!strcmp(name, "round")) {
            if (!(v = rh_args_value(&a, &e)) || rh_parse_u32(v, "--round", 0, 1u << 20, &mode.round, &e) < 0) goto out;
        } else if (!strcmp(name, "shard")) {
            unsigned i, n;
            char tail;
            if (!(v = rh_args_value(&a, &e))) goto out;
            if (sscanf(v, "%u/%u%c", &i, &n, &tail) != 2 || !n || i >= n) {
                rh_fail(&e, "--shard: I/N with I below N expected (got %s)", v);
                goto out;
            }
            mode.shard = i;
            mode.shards = n;
        } else {
            /* --collect takes output flags (--json, --progress, --workers, ...) after the stored question. */
            extra[n_extra++] = argv[a.i - 1];
            if (a.i < argc && argv[a.i][0] != '-' && !a.inline_val) extra[n_extra++] = argv[a.i++];
        }
    }
    if (a.npos) {
        rh_fail(&e, "--collect and --job take the question from DIR/command.txt: no TRACE");
        goto out;
    }
    if (!collect && (!mode.shards || n_extra)) {
        rh_fail(&e, "--job DIR takes --round K and --shard I/N only (the lines of DIR/jobs/round-K.parallel)");
        goto out;
    }
    if (collect && mode.shards) {
        rh_fail(&e, "--shard belongs to --job, not --collect");
        goto out;
    }
    if (!realpath(dir, dir_abs)) {
        rh_fail(&e, "%s: %s", dir, strerror(errno));
        goto out;
    }
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/command.txt", dir_abs);
    size_t n;
    if (!(text = rh_read_regular(path, "the plan's question", 1 << 20, &n, &e))) goto out;
    args = calloc(n + 8 + (size_t)n_extra, sizeof *args);
    if (!args) {
        rh_fail(&e, "out of memory");
        goto out;
    }
    char *cwd = text, *nl = strchr(text, '\n');
    if (!nl) {
        rh_fail(&e, "%s: not a folder --emit-jobs wrote (no question in it)", path);
        goto out;
    }
    *nl = '\0';
    args[n_args++] = "plan";
    for (char *p = nl + 1; *p;) {
        char *end = strchr(p, '\n');
        if (!end) break;
        *end = '\0';
        args[n_args++] = p;
        p = end + 1;
    }
    if (chdir(cwd) < 0) {
        rh_fail(&e, "%s: cannot enter %s, where the plan was asked from: %s", path, cwd, strerror(errno));
        goto out;
    }
    if (collect) {
        uint32_t round;
        if (plan_jobs_collect(dir_abs, &round, &e) < 0) goto out;
        fprintf(stderr, "rehearse plan: collected round %u from %s\n", round, dir_abs);
        for (int i = 0; i < n_extra; i++) args[n_args++] = extra[i];
        args[n_args++] = "--emit-jobs";
        args[n_args++] = dir_abs;
        mode.collecting = true;
    } else {
        mode.jobs_dir = dir_abs;
    }
    free(extra);
    extra = NULL;
    rc = plan_cmd(n_args, args, &mode);
out:
    if (rc && e.msg[0]) fprintf(stderr, "rehearse plan: %s\n", e.msg);
    free(extra);
    free(args);
    free(text);
    return rc;
}

int plan_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        fputs(plan_help, stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--collect") || !strcmp(argv[i], "--job")) return plan_from_dir(argc, argv);
    return plan_cmd(argc, argv, NULL);
}

static int plan_cmd(int argc, char **argv, const plan_mode *mode)
{
    plan_opts o;
    plan_opts_default(&o);
    o.step_noise = -1;
    plan_space sp;
    plan_space_default(&sp);
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    const char *name, *model = NULL, *prices = NULL, *gpu_list = NULL, *out_dir = NULL, *model_path = NULL;
    double target_rate = 0;
    const char *gpu_cost[64];
    int n_gpu_cost = 0;
    char *gpu_cost_text[64] = {0};
    uint32_t first = 0, top = 10;
    int json = 0;
    char question[8192];
    size_t qlen = 0;
    question[0] = '\0';
    plan_gpu gpus[64];
    cost_model *costs[64] = {0};
    int n_gpus = 0, rc = 1;
    const char *emit_dir = NULL;
    char knobs[2048] = "";   /* the knobs given for every candidate, as `rehearse sim` takes them */
    size_t klen = 0;
    bool parallel_given = false;
    uint32_t shards = 100;
    tr_trace t;
    tr_trace_init(&t);
    plan_result res = {0};
    while ((name = rh_args_next(&a))) {
        const char *v = NULL;
        uint32_t u;
        int n;
        char toks[PLAN_MAX_LIST][48];
        /* What changes no result stays out of the question a resume folder checks. */
        bool asks = true;
        if (!strcmp(name, "json") || !strcmp(name, "progress") || !strcmp(name, "no-rate-search")) {
            if (rh_args_no_value(&a, &e) < 0) goto bad;
            if (!strcmp(name, "json")) json = 1, asks = false;
            else if (!strcmp(name, "progress")) rh_progress_force(1), asks = false;
            else o.rate_search = false;
        } else if (!strcmp(name, "model")) {
            if (!(v = model = rh_args_value(&a, &e))) goto bad;
        } else if (!strcmp(name, "prices")) {
            if (!(v = prices = rh_args_value(&a, &e))) goto bad;
        } else if (!strcmp(name, "gpus")) {
            if (!(v = gpu_list = rh_args_value(&a, &e))) goto bad;
        } else if (!strcmp(name, "o") || !strcmp(name, "output")) {
            if (!(v = out_dir = rh_args_value(&a, &e))) goto bad;
            asks = false;
        } else if (!strcmp(name, "resume")) {
            if (!(v = o.resume_dir = rh_args_value(&a, &e))) goto bad;
            asks = false;
        } else if (!strcmp(name, "emit-jobs")) {
            if (!(v = emit_dir = rh_args_value(&a, &e))) goto bad;
            asks = false;
        } else if (!strcmp(name, "shards")) {
            if (!(v = rh_args_value(&a, &e)) || rh_parse_u32(v, "--shards", 1, 1000, &shards, &e) < 0) goto bad;
            asks = false;
        } else if (!strcmp(name, "model-path")) {
            if (!(v = model_path = rh_args_value(&a, &e))) goto bad;
            asks = false;
        } else if (!strcmp(name, "slo-ttft-ms") || !strcmp(name, "slo-tpot-ms") || !strcmp(name, "slo-quantile") ||
                   !strcmp(name, "slo-attainment") || !strcmp(name, "target-rate")) {
            double x;
            char what[64];
            snprintf(what, sizeof what, "--%s", name);
            if (!(v = rh_args_value(&a, &e)) || rh_parse_double(v, what, &x, &e) < 0) goto bad;
            bool frac = !strcmp(name, "slo-quantile") || !strcmp(name, "slo-attainment");
            if (!(x > 0) || !isfinite(x) || (frac && !(x < 1) && strcmp(name, "slo-attainment")) || (frac && x > 1)) {
                rh_fail(&e, "--%s must be %s (got %s)", name, frac ? "in (0, 1)" : "> 0", v);
                goto bad;
            }
            if (!strcmp(name, "slo-ttft-ms")) o.slo.ttft_ms = x;
            else if (!strcmp(name, "slo-tpot-ms")) o.slo.tpot_ms = x;
            else if (!strcmp(name, "slo-quantile")) o.slo.quantile = x;
            else if (!strcmp(name, "slo-attainment")) o.slo.attainment = x;
            else target_rate = x;
        } else if (!strcmp(name, "intervals")) {
            if (!(v = rh_args_value(&a, &e)) || rh_parse_u32(v, "--intervals", 2, 10000, &o.interval_runs, &e) < 0)
                goto bad;
        } else if (!strcmp(name, "step-noise")) {
            if (!(v = rh_args_value(&a, &e)) || rh_parse_double(v, "--step-noise", &o.step_noise, &e) < 0) goto bad;
            if (!(o.step_noise >= 0 && o.step_noise <= 5)) {
                rh_fail(&e, "--step-noise must be in [0, 5] (got %s)", v);
                goto bad;
            }
        } else if (!strcmp(name, "gpu-cost")) {
            if (!(v = rh_args_value(&a, &e))) goto bad;
            if (!strchr(v, '=') || n_gpu_cost == 64) {
                rh_fail(&e, "--gpu-cost: GPU=FILE expected (got %s)", v);
                goto bad;
            }
            gpu_cost[n_gpu_cost++] = v;
        } else if (!strcmp(name, "tp")) {
            if (!(v = rh_args_value(&a, &e)) || parse_u32_list(name, v, 1, 64, sp.tp, &sp.n_tp, &e) < 0) goto bad;
        } else if (!strcmp(name, "chunked-prefill-sizes")) {
            /* -1 (SGLang's spelling) or off: each prompt prefilled whole. */
            if (!(v = rh_args_value(&a, &e)) || (n = split_list(name, v, PLAN_MAX_LIST, toks, &e)) < 0) goto bad;
            for (sp.n_chunk = 0; sp.n_chunk < n; sp.n_chunk++) {
                uint32_t u = 0;
                const char *tok = toks[sp.n_chunk];
                if (strcmp(tok, "-1") && strcmp(tok, "off") &&
                    rh_parse_u32(tok, "--chunked-prefill-sizes", 1, 1u << 24, &u, &e) < 0)
                    goto bad;
                sp.chunk[sp.n_chunk] = u ? (int32_t)u : -1;
            }
        } else if (!strcmp(name, "max-running-requests-list")) {
            if (!(v = rh_args_value(&a, &e)) ||
                parse_u32_list(name, v, 1, 1u << 20, sp.max_running, &sp.n_max_running, &e) < 0)
                goto bad;
        } else if (!strcmp(name, "speculative-steps")) {
            if (!(v = rh_args_value(&a, &e)) || parse_u32_list(name, v, 0, 64, sp.spec_steps, &sp.n_spec, &e) < 0)
                goto bad;
        } else if (!strcmp(name, "speculative-algorithm")) {
            if (!(v = rh_args_value(&a, &e))) goto bad;
            snprintf(sp.spec_algorithm, sizeof sp.spec_algorithm, "%s", v);
            sim_config probe;
            sim_config_default(&probe);
            if (sim_config_set(&probe, "speculative-algorithm", v, &e) < 0) goto bad;
        } else if (!strcmp(name, "routers")) {
            if (!(v = rh_args_value(&a, &e)) || (n = split_list(name, v, PLAN_MAX_LIST, toks, &e)) < 0) goto bad;
            for (sp.n_routers = 0; sp.n_routers < n; sp.n_routers++) {
                int p = router_policy_parse(toks[sp.n_routers]);
                if (p < 0 || p == ROUTER_LUA) {
                    rh_fail(&e, "--routers: '%s' is not a router policy here (round-robin, least-outstanding, "
                                "least-kv, power-of-two, cache-aware)", toks[sp.n_routers]);
                    goto bad;
                }
                sp.routers[sp.n_routers] = p;
            }
        } else if (!strcmp(name, "parallel")) {
            if (!(v = rh_args_value(&a, &e)) || (n = split_list(name, v, 4, toks, &e)) < 0) goto bad;
            for (sp.n_parallel = 0; sp.n_parallel < n; sp.n_parallel++) {
                int p = plan_parallel_parse(toks[sp.n_parallel]);
                if (p < 0) {
                    rh_fail(&e, "--parallel: '%s' is not one of tp, ep, dp-attention, ep+dp-attention",
                            toks[sp.n_parallel]);
                    goto bad;
                }
                sp.parallel[sp.n_parallel] = (uint8_t)p;
            }
            parallel_given = true;
        } else if (!strcmp(name, "pd")) {
            if (!(v = rh_args_value(&a, &e)) || (n = split_list(name, v, PLAN_MAX_LIST, toks, &e)) < 0) goto bad;
            for (sp.n_pd = 0; sp.n_pd < n; sp.n_pd++) {
                unsigned p = 0, d = 0;
                char tail;
                const char *tok = toks[sp.n_pd];
                if (!strcmp(tok, "none")) {
                    sp.pd[sp.n_pd][0] = sp.pd[sp.n_pd][1] = 0;
                } else if (sscanf(tok, "%u:%u%c", &p, &d, &tail) == 2 && p >= 1 && d >= 1 && p <= 64 && d <= 64) {
                    sp.pd[sp.n_pd][0] = p;
                    sp.pd[sp.n_pd][1] = d;
                } else {
                    rh_fail(&e, "--pd: '%s' is neither none nor PREFILL:DECODE (such as 1:3)", tok);
                    goto bad;
                }
            }
        } else if (!strcmp(name, "max-replicas") || !strcmp(name, "max-gpus") || !strcmp(name, "first") ||
                   !strcmp(name, "rungs") || !strcmp(name, "eta") || !strcmp(name, "top") ||
                   !strcmp(name, "min-requests") || !strcmp(name, "workers")) {
            char what[64];
            snprintf(what, sizeof what, "--%s", name);
            uint32_t lo = !strcmp(name, "eta") ? 2 : !strcmp(name, "rungs") ? 0 : 1;
            uint32_t hi = !strcmp(name, "rungs") ? 8 : 1u << 30;
            if (!(v = rh_args_value(&a, &e)) || rh_parse_u32(v, what, lo, hi, &u, &e) < 0) goto bad;
            if (!strcmp(name, "max-replicas")) sp.max_replicas = u;
            else if (!strcmp(name, "max-gpus")) sp.max_gpus = u;
            else if (!strcmp(name, "first")) first = u;
            else if (!strcmp(name, "rungs")) o.rungs = u;
            else if (!strcmp(name, "eta")) o.eta = u;
            else if (!strcmp(name, "top")) top = o.keep = u;
            else if (!strcmp(name, "min-requests")) o.min_requests = u;
            else o.workers = (int)u, asks = false;
        } else {
            for (size_t i = 0; i < sizeof searched / sizeof *searched; i++)
                if (!strcmp(name, searched[i])) {
                    rh_fail(&e, "--%s is what the plan searches; give its values as a list (see rehearse plan --help)",
                            name);
                    goto bad;
                }
            if (sim_config_takes_value(name) == 0) v = a.inline_val ? rh_args_value(&a, &e) : "true";
            else if (!(v = rh_args_value(&a, &e))) goto bad;
            if (!v) goto bad;
            n = sim_config_set(&o.base, name, v, &e);
            if (n < 0) goto bad;
            if (n == 0) {
                rh_fail(&e, "unknown flag --%s (see rehearse plan --help)", name);
                goto bad;
            }
            /* Every candidate's: the winner's `rehearse sim` line repeats it. */
            char *qv = rh_shell_quote(v);
            if (qv && klen < sizeof knobs)
                klen += (size_t)snprintf(knobs + klen, sizeof knobs - klen, " --%s%s%s", name,
                                         sim_config_takes_value(name) == 0 && !strcmp(v, "true") ? "" : " ",
                                         sim_config_takes_value(name) == 0 && !strcmp(v, "true") ? "" : qv);
            free(qv);
        }
        if (asks && qlen < sizeof question)
            qlen += (size_t)snprintf(question + qlen, sizeof question - qlen, "--%s %s\n", name, v ? v : "");
    }
    if (a.npos != 1) {
        rh_fail(&e, "plan takes one TRACE (got %d); see rehearse plan --help", a.npos);
        goto bad;
    }
    if (!model || !(o.slo.ttft_ms > 0) || !(o.slo.tpot_ms > 0)) {
        rh_fail(&e, "plan needs --model, --slo-ttft-ms and --slo-tpot-ms; see rehearse plan --help");
        goto bad;
    }
    if (core_config_validate(&o.base.core, &e) < 0) goto bad;
    if (emit_dir) {
        if (o.resume_dir && strcmp(o.resume_dir, emit_dir)) {
            rh_fail(&e, "--emit-jobs keeps the evaluations in its own folder: drop --resume or give it the same DIR");
            goto bad;
        }
        o.resume_dir = emit_dir;
        o.emit_jobs = true;
    }
    char prices_buf[PATH_MAX];
    if (!prices) {
        if (rh_scripts_path("prices.json", prices_buf, sizeof prices_buf) < 0) {
            rh_fail(&e, "plan needs --prices PRICES.json (the sample scripts/prices.json is not beside this binary)");
            goto bad;
        }
        prices = prices_buf;
        fprintf(stderr, "rehearse plan: prices from %s (list prices with their sources); give yours with --prices\n",
                prices);
    }
    char names[64][48];
    if (gpu_list) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", gpu_list);
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (n_gpus == 64) {
                rh_fail(&e, "--gpus: at most 64");
                goto bad;
            }
            snprintf(names[n_gpus++], 48, "%s", tok);
        }
    } else if ((n_gpus = plan_price_names(prices, names, 64, &e)) < 0) {
        n_gpus = 0;
        goto bad;
    }
    if (plan_gpus_load(model, names, n_gpus, prices, gpus, costs, &e) < 0) goto bad;
    for (int k = 0; k < n_gpu_cost; k++) {
        const char *eq = strchr(gpu_cost[k], '='), *file = eq + 1;
        int g = 0;
        while (g < n_gpus && (strlen(gpus[g].name) != (size_t)(eq - gpu_cost[k]) ||
                              strncmp(gpus[g].name, gpu_cost[k], (size_t)(eq - gpu_cost[k]))))
            g++;
        if (g == n_gpus) {
            rh_fail(&e, "--gpu-cost %s: the plan searches no GPU of that name (--gpus)", gpu_cost[k]);
            goto bad;
        }
        json_error_t je;
        json_t *j = json_load_file(file, 0, &je);
        gpu_cost_text[g] = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
        json_decref(j);
        if (!gpu_cost_text[g]) {
            if (je.line > 0) rh_fail(&e, "--gpu-cost %s:%d: %s", file, je.line, je.text);
            else rh_fail(&e, "--gpu-cost %s: %s", file, je.text);
            goto bad;
        }
        cost_free(costs[g]);
        if (!(costs[g] = cost_parse(gpu_cost_text[g], file, &e))) goto bad;
        gpus[g].cost = costs[g];
        gpus[g].cost_text = gpu_cost_text[g];
    }
    if (o.interval_runs && (o.slo.attainment > 0 || (o.slo.quantile != 0.5 && o.slo.quantile != 0.9 &&
                                                     o.slo.quantile != 0.99))) {
        rh_fail(&e, "--intervals bounds the p50, p90 or p99: give --slo-quantile 0.5, 0.9 or 0.99, not an attainment");
        goto bad;
    }
    sp.gpus = gpus;
    sp.n_gpus = n_gpus;
    bool experts = plan_model_has_experts(gpus[0].cost);
    if (!parallel_given && experts) {
        for (int p = 0; p < 4; p++) sp.parallel[p] = (uint8_t)p;
        sp.n_parallel = 4;
    }
    for (int p = 0; p < sp.n_parallel && !experts; p++)
        if (sp.parallel[p] & PLAN_PAR_EP) {
            rh_fail(&e, "--parallel %s: %s has no experts to spread", plan_parallel_name(sp.parallel[p]), model);
            goto bad;
        }

    tr_trace_free(&t);   /* the load starts it afresh (and leaves it freeable when it fails) */
    if (tr_trace_load(a.pos[0], &t, &e) < 0) goto bad;
    if (first && first < t.n_requests) t.n_requests = first;
    if (t.n_requests < 2) {
        rh_fail(&e, "%s: a plan needs at least 2 requests", a.pos[0]);
        goto bad;
    }
    if (target_rate > 0) {
        double span = t.requests[t.n_requests - 1].arrival - t.requests[0].arrival;
        if (!(span > 0)) {
            rh_fail(&e, "--target-rate: %s's requests all arrive at once", a.pos[0]);
            goto bad;
        }
        o.base.rate_scale = target_rate / (t.n_requests / span);
    }
    if (qlen < sizeof question)
        snprintf(question + qlen, sizeof question - qlen, "trace %s, %zu requests\n", a.pos[0], t.n_requests);
    o.question = question;
    o.progress = 1;
    char model_buf[256];
    if (!model_path) {
        model_path_of(model, model_buf, sizeof model_buf);
        model_path = model_buf;
    }
    if (emit_dir && !(mode && mode->collecting) && start_jobs_dir(emit_dir, question, argc, argv, &e) < 0) goto bad;
    if (mode && mode->jobs_dir) {
        uint32_t done;
        o.progress = 0;
        if (plan_jobs_run_shard(&o, &sp, &t, mode->jobs_dir, mode->round, mode->shard, mode->shards, &done, &e) < 0)
            goto bad;
        fprintf(stderr, "rehearse plan: round %u, shard %u/%u: %u simulations, results in %s/results/\n", mode->round,
                mode->shard, mode->shards, done, mode->jobs_dir);
        rc = 0;
        goto bad;
    }
    double t0 = rh_now();
    int ran = plan_run(&o, &sp, &t, &res, &e);
    if (ran < 0) goto bad;
    if (ran > 0) {
        if (emitted(emit_dir, &res, shards, json ? stderr : stdout, &e) < 0) goto bad;
        rc = 0;
        goto bad;
    }
    double wall = rh_now() - t0;
    if (json) {
        json_t *j = plan_to_json(&o, &sp, &res, model_path);
        json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        printf("\n");
        json_decref(j);
    } else {
        printf("plan: %zu requests of %s at %.3f req/s, %s on %d GPU type%s", t.n_requests - res.dropped_too_long,
               a.pos[0], res.trace_rate, model, n_gpus, n_gpus == 1 ? "" : "s");
        if (res.dropped_too_long)
            printf(" (%u longer than the model's context left out)", res.dropped_too_long);
        printf("\n");
        plan_print(stdout, &o, &sp, &res, top);
        printf("\n%llu simulations in %.1f s (%.1f s of simulation)%s\n", (unsigned long long)res.simulations, wall,
               res.sim_cpu_s, res.resumed ? "" : "");
        if (res.resumed) printf("%llu evaluations read back from %s\n", (unsigned long long)res.resumed, o.resume_dir);
        if (res.n_ranked && plan_judge(&o.slo, &res.c[res.ranked[0]].ev).ok) {
            const plan_cand *w = &res.c[res.ranked[0]];
            char flags[512];
            plan_cand_flags(&sp, w, flags, sizeof flags);
            printf("\nthe winner, simulated again on its own:\n  rehearse sim %s --cost <roofline %s on %s> %s%s "
                   "--rate-scale %.6g --slo-ttft %g --slo-tpot %g\n",
                   a.pos[0], model, sp.gpus[w->gpu].name, flags, knobs, o.base.rate_scale, o.slo.ttft_ms,
                   o.slo.tpot_ms);
            printf("\nits launch lines:\n");
            plan_launch_lines(&sp, w, model_path, stdout);
        }
    }
    if (out_dir) {
        if (plan_write(out_dir, &o, &sp, &res, model_path, &e) < 0) goto bad;
        if (!json) printf("\nwrote %s/plan.json, candidates.csv, launch.sh, pareto-ttft.png, pareto-goodput.png\n",
                          out_dir);
    }
    rc = 0;
bad:
    if (rc) fprintf(stderr, "rehearse plan: %s\n", e.msg);
    plan_result_free(&res);
    tr_trace_free(&t);
    for (int g = 0; g < n_gpus; g++) {
        if (costs[g]) cost_free(costs[g]);
        free(gpu_cost_text[g]);
    }
    return rc;
}
