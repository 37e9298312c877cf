/* jobs.c — a plan on a cluster: the evaluations a round of the search
 * lacks, written down as jobs; a shard of them run where a job runs; the
 * results folded back into the resume folder (plan.h has the files). */
#include "sim/plan/internal.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/args.h"
#include "util/atomic_file.h"
#include "util/fs.h"
#include "util/hashmap.h"

static void path_of(char *buf, size_t n, const char *dir, const char *fmt, ...)
{
    int k = snprintf(buf, n, "%s/", dir);
    va_list ap;
    va_start(ap, fmt);
    if (k > 0 && (size_t)k < n) vsnprintf(buf + k, n - (size_t)k, fmt, ap);
    va_end(ap);
}

/* A growing text (the round's lines, a shard's results). */
typedef struct text {
    char *s;
    size_t len, cap;
} text;

static int text_add(text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return -1;
        if (t->s && t->len + (size_t)k < t->cap) {
            t->len += (size_t)k;
            return 0;
        }
        size_t nc = (t->cap ? 2 * t->cap : 4096) + (size_t)k;
        char *s2 = realloc(t->s, nc);
        if (!s2) return -1;
        t->s = s2;
        t->cap = nc;
    }
}

int plan_jobs_pending(const char *dir, uint32_t *round, uint32_t *shards, rh_err *e)
{
    char path[PATH_MAX];
    path_of(path, sizeof path, dir, "jobs/pending");
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : rh_fail(e, "%s: cannot open: %s", path, strerror(errno));
    int got = fscanf(f, "%u %u", round, shards);
    fclose(f);
    if (got != 2 || !*shards) return rh_fail(e, "%s: not \"ROUND SHARDS\"", path);
    return 1;
}

int plan_jobs_write(const char *dir, const plan_space *sp, const plan_cand *c, const plan_job *jobs,
                    const uint32_t *todo, uint32_t n, uint32_t *round, rh_err *e)
{
    char path[PATH_MAX];
    uint32_t k, s;
    int p = plan_jobs_pending(dir, &k, &s, e);
    if (p < 0) return -1;
    if (p) return rh_fail(e, "%s: round %u's jobs are pending: run them, then `rehearse plan --collect %s`", dir, k, dir);
    path_of(path, sizeof path, dir, "jobs");
    if (rh_mkdir_p(path) < 0) return rh_fail(e, "%s: cannot create: %s", path, strerror(errno));
    for (k = 0;; k++) {   /* the first round not written yet */
        path_of(path, sizeof path, dir, "jobs/round-%u.tsv", k);
        if (access(path, F_OK) != 0) break;
    }
    text t = {0};
    for (uint32_t i = 0; i < n; i++) {
        const plan_job *j = &jobs[todo[i]];
        char key[256];
        plan_eval_key(sp, &c[j->cand], j->requests, j->rate_scale, key, sizeof key);
        if (text_add(&t, "%u\t%u\t%.17g\t%s\n", j->cand, j->requests, j->rate_scale, key) < 0) {
            free(t.s);
            return rh_fail(e, "out of memory");
        }
    }
    int rc = rh_write_file_atomic(path, t.s, t.len, e);
    free(t.s);
    *round = k;
    return rc;
}

static char *abs_of(const char *p)
{
    char buf[PATH_MAX];
    return strdup(realpath(p, buf) ? buf : p);
}

int plan_jobs_scripts(const char *dir, uint32_t round, uint32_t n_jobs, uint32_t shards, const char *self,
                      const char *cwd, uint32_t *shards_out, rh_err *e)
{
    if (shards > n_jobs) shards = n_jobs;
    if (!shards) shards = 1;
    *shards_out = shards;
    char path[PATH_MAX];
    path_of(path, sizeof path, dir, "logs");
    if (rh_mkdir_p(path) < 0) return rh_fail(e, "%s: cannot create: %s", path, strerror(errno));
    char *dabs = abs_of(dir), *logs = abs_of(path);
    char *qdir = dabs ? rh_shell_quote(dabs) : NULL, *qself = rh_shell_quote(self), *qcwd = rh_shell_quote(cwd);
    text sb = {0}, par = {0};
    int rc = dabs && logs && qdir && qself && qcwd ? 0 : -1;
    /* One array task a shard; the log of each beside the results. Options
     * given to sbatch on its command line (a partition, a time limit)
     * override these lines. */
    if (rc == 0)
        rc = text_add(&sb,
                      "#!/bin/bash\n#SBATCH --job-name=rehearse-plan-%u\n#SBATCH --array=0-%u\n"
                      "#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=1\n#SBATCH --output=%s/round-%u-%%a.log\n"
                      "cd %s && exec %s plan --job %s --round %u --shard \"$SLURM_ARRAY_TASK_ID/%u\"\n",
                      round, shards - 1, logs, round, qcwd, qself, qdir, round, shards);
    for (uint32_t i = 0; i < shards && rc == 0; i++) {
        char log[PATH_MAX + 64];
        snprintf(log, sizeof log, "%s/round-%u-%u.log", logs, round, i);
        char *qlog = rh_shell_quote(log);
        rc = qlog ? text_add(&par, "cd %s && %s plan --job %s --round %u --shard %u/%u > %s 2>&1\n", qcwd, qself, qdir,
                             round, i, shards, qlog)
                  : -1;
        free(qlog);
    }
    if (rc < 0) rh_fail(e, "out of memory");
    if (rc == 0) {
        path_of(path, sizeof path, dir, "jobs/round-%u.sbatch", round);
        rc = rh_write_file_atomic(path, sb.s, sb.len, e);
    }
    if (rc == 0) {
        path_of(path, sizeof path, dir, "jobs/round-%u.parallel", round);
        rc = rh_write_file_atomic(path, par.s, par.len, e);
    }
    if (rc == 0) {   /* last: a round is pending only once everything to run it is there */
        char line[64];
        int k = snprintf(line, sizeof line, "%u %u\n", round, shards);
        path_of(path, sizeof path, dir, "jobs/pending");
        rc = rh_write_file_atomic(path, line, (size_t)k, e);
    }
    free(sb.s);
    free(par.s);
    free(dabs);
    free(logs);
    free(qdir);
    free(qself);
    free(qcwd);
    return rc;
}

/* The round's lines: candidate, requests, rate and key each (keys
 * malloc'd). -1 naming the file and line. */
typedef struct round_line {
    uint32_t cand, requests;
    double rate_scale;
    char *key;
} round_line;

static void lines_free(round_line *l, size_t n)
{
    for (size_t i = 0; i < n; i++) free(l[i].key);
    free(l);
}

static int read_round(const char *dir, uint32_t round, round_line **out, size_t *n_out, rh_err *e)
{
    char path[PATH_MAX];
    path_of(path, sizeof path, dir, "jobs/round-%u.tsv", round);
    FILE *f = fopen(path, "r");
    if (!f) return rh_fail(e, "%s: cannot open: %s", path, strerror(errno));
    round_line *l = NULL;
    size_t n = 0, cap = 0, lineno = 0, lcap = 0;
    char *line = NULL;
    ssize_t len;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &lcap, f)) > 0) {
        lineno++;
        if (line[len - 1] == '\n') line[--len] = '\0';
        unsigned cand, req;
        double rate;
        int at = 0;
        if (sscanf(line, "%u\t%u\t%lg\t%n", &cand, &req, &rate, &at) != 3 || !at || !line[at]) {
            rc = rh_fail(e, "%s:%zu: not CANDIDATE<tab>REQUESTS<tab>RATE<tab>KEY", path, lineno);
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            round_line *l2 = realloc(l, cap * sizeof *l2);
            if (!l2) {
                rc = rh_fail(e, "out of memory");
                break;
            }
            l = l2;
        }
        l[n] = (round_line){.cand = cand, .requests = req, .rate_scale = rate, .key = strdup(line + at)};
        if (!l[n++].key) rc = rh_fail(e, "out of memory");
    }
    free(line);
    fclose(f);
    if (rc < 0) {
        lines_free(l, n);
        return -1;
    }
    *out = l;
    *n_out = n;
    return 0;
}

int plan_jobs_run_shard(const plan_opts *o, const plan_space *sp, const tr_trace *trace, const char *dir,
                        uint32_t round, uint32_t shard, uint32_t shards, uint32_t *done, rh_err *e)
{
    *done = 0;
    if (!shards || shard >= shards) return rh_fail(e, "--shard %u/%u: the shard must be below the count", shard, shards);
    round_line *l = NULL;
    size_t n_lines = 0;
    if (read_round(dir, round, &l, &n_lines, e) < 0) return -1;
    tr_trace t;
    uint32_t dropped;
    plan_cand *c = NULL;
    uint32_t n_cand = 0;
    text out = {0};
    int rc = plan_servable(o, sp, trace, &t, &dropped, e);
    if (rc == 0) rc = plan_enumerate(sp, &c, &n_cand, e);
    for (size_t i = shard; i < n_lines && rc == 0; i += shards) {
        char key[256];
        if (l[i].cand < n_cand)
            plan_eval_key(sp, &c[l[i].cand], l[i].requests, l[i].rate_scale, key, sizeof key);
        if (l[i].cand >= n_cand || strcmp(key, l[i].key)) {
            rc = rh_fail(e, "%s/jobs/round-%u.tsv:%zu: candidate %u is not %s here: the jobs were written by another "
                            "plan (or another rehearse)",
                         dir, round, i + 1, l[i].cand, l[i].key);
            break;
        }
        plan_eval ev;
        if ((rc = plan_simulate(sp, o, &c[l[i].cand], &t, l[i].requests, l[i].rate_scale, &ev, e)) < 0) break;
        char *line = plan_eval_line(key, &ev);
        if (!line || text_add(&out, "%s\n", line) < 0) rc = rh_fail(e, "out of memory");
        free(line);
        (*done)++;
    }
    if (rc == 0) {
        char path[PATH_MAX];
        path_of(path, sizeof path, dir, "results");
        if (rh_mkdir_p(path) < 0) rc = rh_fail(e, "%s: cannot create: %s", path, strerror(errno));
        path_of(path, sizeof path, dir, "results/round-%u-shard-%u.jsonl", round, shard);
        if (rc == 0) rc = rh_write_file_atomic(path, out.s ? out.s : "", out.len, e);
    }
    free(out.s);
    free(c);
    free(t.requests);
    lines_free(l, n_lines);
    return rc;
}

/* Each line of a shard's results, by key; a missing file adds nothing. */
static int read_results(const char *path, rh_strmap *by_key, char ***kept, size_t *n_kept, size_t *cap, rh_err *e)
{
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : rh_fail(e, "%s: cannot open: %s", path, strerror(errno));
    char *line = NULL;
    size_t lcap = 0, lineno = 0;
    ssize_t len;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &lcap, f)) > 0) {
        lineno++;
        if (line[len - 1] == '\n') line[--len] = '\0';
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        plan_eval ev;
        const char *key = o ? plan_eval_parse(o, &ev) : NULL;
        if (!key) {
            rc = rh_fail(e, "%s:%zu: not an evaluation a plan job wrote", path, lineno);
        } else {
            if (*n_kept == *cap) {
                *cap = *cap ? 2 * *cap : 64;
                char **k2 = realloc(*kept, *cap * sizeof *k2);
                if (k2) *kept = k2;
                else rc = rh_fail(e, "out of memory");
            }
            if (rc == 0 && !((*kept)[*n_kept] = strdup(line))) rc = rh_fail(e, "out of memory");
            if (rc == 0) rh_strmap_put(by_key, key, strlen(key), (int64_t)(*n_kept)++);
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    return rc;
}

/* Appends the lines to DIR/evals.jsonl after its last whole line (a plan
 * killed mid-write leaves a torn one), and makes them last. */
static int append_evals(const char *dir, char **lines, const round_line *l, size_t n, const rh_strmap *by_key,
                        rh_err *e)
{
    char path[PATH_MAX];
    path_of(path, sizeof path, dir, "evals.jsonl");
    FILE *f = fopen(path, "a+");
    if (!f) return rh_fail(e, "%s: cannot open: %s", path, strerror(errno));
    long end = 0, last_nl = -1, at = 0;
    int ch;
    rewind(f);
    while ((ch = getc(f)) != EOF) {
        if (ch == '\n') last_nl = at;
        at++;
    }
    end = last_nl + 1;
    int rc = 0;
    if (end != at && ftruncate(fileno(f), end) < 0) rc = rh_fail(e, "%s: cannot cut its torn last line: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    for (size_t i = 0; i < n && rc == 0; i++) {
        int64_t k;
        rh_strmap_get(by_key, l[i].key, strlen(l[i].key), &k);
        if (fprintf(f, "%s\n", lines[k]) < 0) rc = rh_fail(e, "%s: cannot write: %s", path, strerror(errno));
    }
    if (rc == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0)) rc = rh_fail(e, "%s: cannot write: %s", path, strerror(errno));
    if (fclose(f) != 0 && rc == 0) rc = rh_fail(e, "%s: cannot write: %s", path, strerror(errno));
    return rc;
}

int plan_jobs_collect(const char *dir, uint32_t *round, rh_err *e)
{
    uint32_t shards;
    int p = plan_jobs_pending(dir, round, &shards, e);
    if (p < 0) return -1;
    if (!p) return rh_fail(e, "%s: no round of jobs is pending (written by `rehearse plan --emit-jobs %s`)", dir, dir);
    round_line *l = NULL;
    size_t n = 0, n_kept = 0, cap = 0;
    if (read_round(dir, *round, &l, &n, e) < 0) return -1;
    rh_strmap by_key = {0};
    char **kept = NULL;
    int rc = 0;
    for (uint32_t s = 0; s < shards && rc == 0; s++) {
        char path[PATH_MAX];
        path_of(path, sizeof path, dir, "results/round-%u-shard-%u.jsonl", *round, s);
        rc = read_results(path, &by_key, &kept, &n_kept, &cap, e);
    }
    /* Every line's result, or the shards to run again. */
    char missing[512] = "";
    size_t ml = 0;
    uint32_t n_missing = 0, first = 0;
    bool *shard_missing = calloc(shards, sizeof *shard_missing);
    if (rc == 0 && !shard_missing) rc = rh_fail(e, "out of memory");
    for (size_t i = 0; i < n && rc == 0; i++) {
        int64_t k;
        if (!rh_strmap_get(&by_key, l[i].key, strlen(l[i].key), &k)) shard_missing[i % shards] = true;
    }
    for (uint32_t s = 0; s < shards && rc == 0; s++) {
        if (!shard_missing[s]) continue;
        if (!n_missing++) first = s;
        if (ml + 16 < sizeof missing) ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "%s%u", ml ? ", " : "", s);
    }
    if (rc == 0 && n_missing)
        rc = rh_fail(e, "%s: round %u: %u of %u shards left no results (shard %s; logs in %s/logs/); run them again, "
                        "e.g. `rehearse plan --job %s --round %u --shard %u/%u`, then collect",
                     dir, *round, n_missing, shards, missing, dir, dir, *round, first, shards);
    if (rc == 0) rc = append_evals(dir, kept, l, n, &by_key, e);
    if (rc == 0) {
        char path[PATH_MAX];
        path_of(path, sizeof path, dir, "jobs/pending");
        if (unlink(path) < 0) rc = rh_fail(e, "%s: cannot remove: %s", path, strerror(errno));
    }
    free(shard_missing);
    for (size_t i = 0; i < n_kept; i++) free(kept[i]);
    free(kept);
    rh_strmap_free(&by_key);
    lines_free(l, n);
    return rc;
}
