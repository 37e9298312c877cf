/* plot.c — see plot.h. Shapes CSV data for each plot kind, writes a small
 * gnuplot preamble (data file, titles, labels, reference lines) followed by
 * `load` of the kind's template, and runs gnuplot on it. The generated OUT.gp
 * is kept beside the plot so a person can tweak and re-run it. */
#include "sim/plot/plot.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/csv.h"
#include "util/fs.h"

static const char *kind_names[] = {"lines", "timeseries", "scatter", "cdf", "heatmap", "bars"};

void plot_spec_init(plot_spec *s)
{
    memset(s, 0, sizeof *s);
    s->hline = NAN;
    s->vline = NAN;
}

int plot_kind_parse(const char *name, plot_kind *k)
{
    for (int i = 0; i < (int)(sizeof kind_names / sizeof kind_names[0]); i++)
        if (!strcmp(name, kind_names[i])) {
            *k = (plot_kind)i;
            return 0;
        }
    return -1;
}

const char *plot_kind_name(plot_kind k)
{
    return kind_names[k];
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *plot_template_dir(void)
{
    static char dir[PATH_MAX];
    if (rh_scripts_path("plot", dir, sizeof dir) == 0 && is_dir(dir)) return dir;
    snprintf(dir, sizeof dir, "scripts/plot");
    return dir;
}

/* The gnuplot program: $REHEARSE_GNUPLOT, else `gnuplot` on PATH. */
static int find_gnuplot(char *out, size_t n)
{
    const char *env = getenv("REHEARSE_GNUPLOT");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    const char *p = path;
    while (*p) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        snprintf(out, n, "%.*s/gnuplot", (int)len, p);
        if (access(out, X_OK) == 0) return 0;
        p += len + (colon ? 1 : 0);
    }
    return -1;
}

/* A gnuplot double-quoted string. */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if (*s == '\n') {
            fputs("\\n", f);
            continue;
        }
        fputc(*s, f);
    }
    fputc('"', f);
}

/* ------------------------------------------------------------ shaping -- */

typedef struct groups {
    int n;
    const char **name;     /* distinct values, first-appearance order */
    int *of_row;           /* group index of each row */
} groups;

static int group_rows(const rh_csv_table *t, int col, groups *g)
{
    memset(g, 0, sizeof *g);
    g->of_row = calloc(t->nrow ? t->nrow : 1, sizeof *g->of_row);
    g->name = calloc(t->nrow ? t->nrow : 1, sizeof *g->name);
    if (!g->of_row || !g->name) return -1;
    if (col < 0) {
        g->n = 1;
        g->name[0] = "";
        return 0;
    }
    for (size_t r = 0; r < t->nrow; r++) {
        const char *v = rh_csv_cell(t, r, col);
        int k = 0;
        while (k < g->n && strcmp(g->name[k], v)) k++;
        if (k == g->n) g->name[g->n++] = v;
        g->of_row[r] = k;
    }
    return 0;
}

static void groups_free(groups *g)
{
    free(g->name);
    free(g->of_row);
}

typedef struct xy {
    double x, y;
} xy;

static int cmp_xy(const void *a, const void *b)
{
    double p = ((const xy *)a)->x, q = ((const xy *)b)->x;
    return (p > q) - (p < q);
}

/* Splits "a,b,c" into column indices; -1 and a message on an unknown name. */
static int y_columns(const rh_csv_table *t, const char *list, int *cols, int max, const char *path, rh_err *e)
{
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == max) return rh_fail(e, "too many y columns (at most %d)", max);
        int c = rh_csv_col(t, tok);
        if (c < 0) return rh_fail(e, "%s: no column '%s'", path, tok);
        cols[n++] = c;
    }
    if (n == 0) return rh_fail(e, "no y column given");
    return n;
}

static int need_col(const rh_csv_table *t, const char *name, const char *role, const char *path, rh_err *e)
{
    if (!name || !*name) return rh_fail(e, "the %s column is required for this plot", role);
    int c = rh_csv_col(t, name);
    if (c < 0) return rh_fail(e, "%s: no column '%s' (the %s)", path, name, role);
    return c;
}

/* The group column (--by), or -1 without one; -2 with a message when the
 * CSV lacks it. */
static int group_col(const plot_spec *s, const rh_csv_table *t, rh_err *e)
{
    if (!s->by) return -1;
    int bc = rh_csv_col(t, s->by);
    if (bc < 0) return rh_fail(e, "%s: no column '%s' (the group)", s->csv, s->by), -2;
    return bc;
}

/* The x column, the y columns and the group column of series and bars. */
static int xy_cols(const plot_spec *s, const rh_csv_table *t, const char *x_role, int *xc, int ycols[16], int *ny,
                   int *bc, rh_err *e)
{
    if ((*xc = need_col(t, s->x, x_role, s->csv, e)) < 0) return -1;
    if ((*ny = y_columns(t, s->y, ycols, 16, s->csv, e)) < 0) return -1;
    return (*bc = group_col(s, t, e)) == -2 ? -1 : 0;
}

/* Series of (x, y): one per group and y column. Writes blocks separated by
 * two blank lines (gnuplot's `index`), and the titles into the preamble. */
static int shape_series(const plot_spec *s, const rh_csv_table *t, FILE *dat, FILE *pre, rh_err *e)
{
    int xc, ycols[16], ny, bc;
    if (xy_cols(s, t, "x", &xc, ycols, &ny, &bc, e) < 0) return -1;
    groups g;
    if (group_rows(t, bc, &g) < 0) return rh_fail(e, "out of memory");
    xy *pts = malloc((t->nrow ? t->nrow : 1) * sizeof *pts);
    if (!pts) {
        groups_free(&g);
        return rh_fail(e, "out of memory");
    }
    int nseries = 0, total = 0;
    fprintf(pre, "array T[%d]\n", g.n * ny);
    for (int gi = 0; gi < g.n; gi++)
        for (int yi = 0; yi < ny; yi++) {
            size_t n = 0;
            for (size_t r = 0; r < t->nrow; r++) {
                if (g.of_row[r] != gi) continue;
                int ok1, ok2;
                double x = rh_csv_num(t, r, xc, &ok1), y = rh_csv_num(t, r, ycols[yi], &ok2);
                if (ok1 && ok2) pts[n++] = (xy){x, y};
            }
            if (s->kind != PLOT_SCATTER) qsort(pts, n, sizeof *pts, cmp_xy);
            if (nseries) fputs("\n\n", dat);
            fprintf(dat, "# series %d\n", nseries + 1);
            for (size_t i = 0; i < n; i++) fprintf(dat, "%.10g\t%.10g\n", pts[i].x, pts[i].y);
            if (n == 0) fputs("nan\tnan\n", dat);
            char title[256];
            if (bc >= 0 && ny > 1) snprintf(title, sizeof title, "%s=%s %s", s->by, g.name[gi], t->names[ycols[yi]]);
            else if (bc >= 0) snprintf(title, sizeof title, "%s=%s", s->by, g.name[gi]);
            else snprintf(title, sizeof title, "%s", t->names[ycols[yi]]);
            fprintf(pre, "T[%d] = ", ++nseries);
            put_str(pre, title);
            fputc('\n', pre);
            total += (int)n;
        }
    fprintf(pre, "nseries = %d\n", nseries);
    free(pts);
    groups_free(&g);
    if (total == 0) return rh_fail(e, "%s: no numeric data in columns '%s' and '%s'", s->csv, s->x, s->y);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double p = *(const double *)a, q = *(const double *)b;
    return (p > q) - (p < q);
}

/* Empirical CDF per group: sorted values against i/n. */
static int shape_cdf(const plot_spec *s, const rh_csv_table *t, FILE *dat, FILE *pre, rh_err *e)
{
    int yc = need_col(t, s->y, "value (y)", s->csv, e);
    if (yc < 0) return -1;
    int bc = group_col(s, t, e);
    if (bc == -2) return -1;
    groups g;
    if (group_rows(t, bc, &g) < 0) return rh_fail(e, "out of memory");
    double *v = malloc((t->nrow ? t->nrow : 1) * sizeof *v);
    if (!v) {
        groups_free(&g);
        return rh_fail(e, "out of memory");
    }
    int total = 0;
    fprintf(pre, "array T[%d]\n", g.n);
    for (int gi = 0; gi < g.n; gi++) {
        size_t n = 0;
        for (size_t r = 0; r < t->nrow; r++) {
            int ok;
            double x = rh_csv_num(t, r, yc, &ok);
            if (g.of_row[r] == gi && ok) v[n++] = x;
        }
        qsort(v, n, sizeof *v, cmp_double);
        if (gi) fputs("\n\n", dat);
        for (size_t i = 0; i < n; i++) fprintf(dat, "%.10g\t%.10g\n", v[i], (double)(i + 1) / (double)n);
        if (n == 0) fputs("nan\tnan\n", dat);
        fprintf(pre, "T[%d] = ", gi + 1);
        put_str(pre, bc >= 0 ? g.name[gi] : t->names[yc]);
        fputc('\n', pre);
        total += (int)n;
    }
    fprintf(pre, "nseries = %d\n", g.n);
    free(v);
    groups_free(&g);
    if (total == 0) return rh_fail(e, "%s: no numeric data in column '%s'", s->csv, s->y);
    return 0;
}

/* Distinct values of a column, numerically sorted when all are numbers. */
typedef struct axis {
    int n;
    const char **label;
} axis;

static int axis_index(const axis *a, const char *v)
{
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->label[i], v)) return i;
    return -1;
}

static int cmp_label(const void *a, const void *b)
{
    double x = strtod(*(const char *const *)a, NULL), y = strtod(*(const char *const *)b, NULL);
    return (x > y) - (x < y);
}

static int make_axis(const rh_csv_table *t, int col, axis *a)
{
    a->n = 0;
    a->label = calloc(t->nrow ? t->nrow : 1, sizeof *a->label);
    if (!a->label) return -1;
    int numeric = 1;
    for (size_t r = 0; r < t->nrow; r++) {
        const char *v = rh_csv_cell(t, r, col);
        int ok;
        rh_csv_num(t, r, col, &ok);
        numeric &= ok;
        if (axis_index(a, v) < 0) a->label[a->n++] = v;
    }
    if (numeric) qsort(a->label, (size_t)a->n, sizeof *a->label, cmp_label);
    return 0;
}

static void put_tics(FILE *pre, const char *which, const axis *a)
{
    fprintf(pre, "set %s (", which);
    for (int i = 0; i < a->n; i++) {
        if (i) fputs(", ", pre);
        put_str(pre, a->label[i]);
        fprintf(pre, " %d", i);
    }
    fputs(")\n", pre);
}

static int shape_heatmap(const plot_spec *s, const rh_csv_table *t, FILE *dat, FILE *pre, rh_err *e)
{
    int xc = need_col(t, s->x, "x", s->csv, e);
    if (xc < 0) return -1;
    int yc = need_col(t, s->y, "y", s->csv, e);
    if (yc < 0) return -1;
    int zc = need_col(t, s->z, "value (z)", s->csv, e);
    if (zc < 0) return -1;
    axis ax = {0}, ay = {0};
    if (make_axis(t, xc, &ax) < 0 || make_axis(t, yc, &ay) < 0) {
        free(ax.label);
        free(ay.label);
        return rh_fail(e, "out of memory");
    }
    int any = 0;
    double zmin = INFINITY, zmax = -INFINITY;
    for (size_t r = 0; r < t->nrow; r++) {
        int ok;
        double z = rh_csv_num(t, r, zc, &ok);
        if (!ok) continue;
        fprintf(dat, "%d\t%d\t%.10g\n", axis_index(&ax, rh_csv_cell(t, r, xc)), axis_index(&ay, rh_csv_cell(t, r, yc)), z);
        any = 1;
        if (z < zmin) zmin = z;
        if (z > zmax) zmax = z;
    }
    /* Values spanning orders of magnitude (a saturated corner of the grid)
     * would wash every other cell into one colour: use a log colour scale. */
    if (any && zmin > 0 && zmax / zmin > 100) fputs("set logscale cb\n", pre);
    put_tics(pre, "xtics", &ax);
    put_tics(pre, "ytics", &ay);
    fprintf(pre, "set xrange [-0.5:%d.5]\nset yrange [-0.5:%d.5]\n", ax.n - 1, ay.n - 1);
    fprintf(pre, "nseries = 1\narray T[1]\nT[1] = ");
    put_str(pre, s->zlabel ? s->zlabel : s->z);
    fputc('\n', pre);
    free(ax.label);
    free(ay.label);
    if (!any) return rh_fail(e, "%s: no numeric data in column '%s'", s->csv, s->z);
    return 0;
}

/* Grouped bars: a row per x value, a column per group (or y column). */
static int shape_bars(const plot_spec *s, const rh_csv_table *t, FILE *dat, FILE *pre, rh_err *e)
{
    int xc, ycols[16], ny, bc;
    if (xy_cols(s, t, "x (categories)", &xc, ycols, &ny, &bc, e) < 0) return -1;
    if (bc >= 0 && ny > 1) return rh_fail(e, "bars take either several y columns or a group column, not both");
    axis ax = {0};
    groups g;
    if (make_axis(t, xc, &ax) < 0 || group_rows(t, bc, &g) < 0) {
        free(ax.label);
        return rh_fail(e, "out of memory");
    }
    int ncols = bc >= 0 ? g.n : ny;
    fprintf(pre, "array T[%d]\n", ncols);
    for (int c = 0; c < ncols; c++) {
        char title[256];
        if (bc >= 0) snprintf(title, sizeof title, "%s=%s", s->by, g.name[c]);
        else snprintf(title, sizeof title, "%s", t->names[ycols[c]]);
        fprintf(pre, "T[%d] = ", c + 1);
        put_str(pre, title);
        fputc('\n', pre);
    }
    fprintf(pre, "nseries = %d\n", ncols);
    for (int xi = 0; xi < ax.n; xi++) {
        fprintf(dat, "\"%s\"", ax.label[xi]);
        for (int c = 0; c < ncols; c++) {
            double v = NAN;
            for (size_t r = 0; r < t->nrow; r++) {
                if (strcmp(rh_csv_cell(t, r, xc), ax.label[xi])) continue;
                if (bc >= 0 && g.of_row[r] != c) continue;
                int ok;
                double y = rh_csv_num(t, r, ycols[bc >= 0 ? 0 : c], &ok);
                if (ok) v = y;
            }
            fprintf(dat, "\t%.10g", v);
        }
        fputc('\n', dat);
    }
    free(ax.label);
    groups_free(&g);
    return 0;
}

/* ------------------------------------------------------------ drawing -- */

static int run_gnuplot(const char *gnuplot, const char *script, rh_err *e)
{
    char errpath[PATH_MAX + 16];
    snprintf(errpath, sizeof errpath, "%.*s.log", PATH_MAX, script);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return rh_fail(e, "cannot start gnuplot: %s", strerror(errno));
    if (pid == 0) {
        FILE *err = freopen(errpath, "w", stderr);
        (void)err;
        execl(gnuplot, "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return rh_fail(e, "waiting for gnuplot: %s", strerror(errno));
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        remove(errpath);
        return 0;
    }
    /* Quote gnuplot's own last line: it names the problem. */
    char last[512] = "", line[512];
    FILE *f = fopen(errpath, "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (line[0] != '\n') snprintf(last, sizeof last, "%s", line);
        fclose(f);
    }
    last[strcspn(last, "\n")] = '\0';
    return rh_fail(e, "gnuplot failed on %s: %s (log: %s)", script, last[0] ? last : "no message", errpath);
}

/* True when every numeric value of column `x` is a power of two. */
static int x_all_powers_of_two(const rh_csv_table *t, const char *x)
{
    int c = x ? rh_csv_col(t, x) : -1;
    if (c < 0) return 0;
    for (size_t r = 0; r < t->nrow; r++) {
        int ok;
        double v = rh_csv_num(t, r, c, &ok);
        if (!ok) continue;
        if (!(v >= 1) || v != floor(v) || v > 9.007199254740992e15) return 0;
        unsigned long long u = (unsigned long long)v;
        if (u & (u - 1)) return 0;
    }
    return 1;
}

int plot_draw(const plot_spec *s, rh_err *e)
{
    if (!s->csv || !s->out) return rh_fail(e, "a plot needs an input CSV and an output path");
    char gnuplot[PATH_MAX];
    if (find_gnuplot(gnuplot, sizeof gnuplot) < 0)
        return rh_fail(e, "gnuplot not found (install gnuplot-nox); %s was not plotted, its CSV is kept", s->out);
    char tpl[PATH_MAX];
    snprintf(tpl, sizeof tpl, "%s/%s.gp", plot_template_dir(), plot_kind_name(s->kind == PLOT_TIMESERIES ? PLOT_LINES : s->kind));
    if (access(tpl, R_OK) != 0) return rh_fail(e, "plot template %s is missing (set REHEARSE_SCRIPTS)", tpl);
    rh_csv_table t;
    if (rh_csv_read(s->csv, &t, e) < 0) return -1;
    if (t.nrow == 0) {
        rh_csv_free(&t);
        return rh_fail(e, "%s: no data rows to plot", s->csv);
    }
    char datp[PATH_MAX + 8], gpp[PATH_MAX + 8];
    snprintf(datp, sizeof datp, "%s.dat", s->out);
    snprintf(gpp, sizeof gpp, "%s.gp", s->out);
    FILE *dat = fopen(datp, "w"), *pre = fopen(gpp, "w");
    if (!dat || !pre) {
        if (dat) fclose(dat);
        if (pre) fclose(pre);
        rh_csv_free(&t);
        return rh_fail(e, "%s: cannot write the plot files", s->out);
    }
    fprintf(pre, "# %s plot of %s, drawn by rehearse plot; edit and run `gnuplot %s` to redraw.\n",
            plot_kind_name(s->kind), s->csv, gpp);
    fputs("datafile = ", pre);
    put_str(pre, datp);
    fputs("\noutbase = ", pre);
    put_str(pre, s->out);
    int png = s->png || !s->svg, svg = s->svg || !s->png;
    fprintf(pre, "\nwant_png = %d\nwant_svg = %d\n", png, svg);
    fprintf(pre, "points = %d\n", s->kind != PLOT_TIMESERIES);
    fputs("tpldir = ", pre);
    put_str(pre, plot_template_dir());
    fputc('\n', pre);
    fputs("set title ", pre);
    put_str(pre, s->title ? s->title : "");
    /* A long title shrinks rather than running off the image. */
    size_t tl = s->title ? strlen(s->title) : 0;
    fputs(" noenhanced\n", pre);
    fprintf(pre, "title_font = \",%d\"\n", tl > 100 ? 10 : tl > 75 ? 12 : 14);
    fputs("set xlabel ", pre);
    put_str(pre, s->xlabel ? s->xlabel : (s->x ? s->x : ""));
    fputs(" noenhanced\nset ylabel ", pre);
    put_str(pre, s->ylabel ? s->ylabel : (s->kind == PLOT_CDF ? "fraction of requests" : (s->y ? s->y : "")));
    fputs(" noenhanced\n", pre);
    if (s->kind == PLOT_HEATMAP) {
        fputs("set cblabel ", pre);
        put_str(pre, s->zlabel ? s->zlabel : (s->z ? s->z : ""));
        fputs(" noenhanced\n", pre);
    }
    if (s->logx) {
        /* Powers of two (prompt lengths, concurrency) read best in base 2;
         * anything else in base 10 with SI prefixes (250k, 1M). */
        if (x_all_powers_of_two(&t, s->x)) fputs("set logscale x 2\n", pre);
        else fputs("set logscale x 10\nset format x \"%.0s%c\"\n", pre);
    }
    if (s->logy) fputs("set logscale y 10\n", pre);
    if (!isnan(s->hline)) {
        fprintf(pre, "set arrow from graph 0, first %.10g to graph 1, first %.10g nohead dt 2 lw 2 lc rgb \"#c00000\"\n",
                s->hline, s->hline);
        fprintf(pre, "set label ");
        put_str(pre, s->hline_label ? s->hline_label : "");
        fprintf(pre, " at graph 0.01, first %.10g offset 0,0.6 tc rgb \"#c00000\" noenhanced\n", s->hline);
    }
    if (!isnan(s->vline)) {
        fprintf(pre, "set arrow from first %.10g, graph 0 to first %.10g, graph 1 nohead dt 2 lw 2 lc rgb \"#c00000\"\n",
                s->vline, s->vline);
        fprintf(pre, "set label ");
        put_str(pre, s->vline_label ? s->vline_label : "");
        fprintf(pre, " at first %.10g, graph 0.95 offset 0.5,0 tc rgb \"#c00000\" noenhanced\n", s->vline);
    }
    fprintf(pre, "diagonal = %d\n", s->diagonal);
    int rc;
    switch (s->kind) {
    case PLOT_CDF: rc = shape_cdf(s, &t, dat, pre, e); break;
    case PLOT_HEATMAP: rc = shape_heatmap(s, &t, dat, pre, e); break;
    case PLOT_BARS: rc = shape_bars(s, &t, dat, pre, e); break;
    default: rc = shape_series(s, &t, dat, pre, e); break;
    }
    rh_csv_free(&t);
    fprintf(pre, "load ");
    put_str(pre, tpl);
    fputc('\n', pre);
    int closed = (fclose(dat) == 0) & (fclose(pre) == 0);
    if (rc < 0) return -1;
    if (!closed) return rh_fail(e, "%s: writing the plot files failed (disk full?)", s->out);
    return run_gnuplot(gnuplot, gpp, e);
}
