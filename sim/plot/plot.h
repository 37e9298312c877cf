/* plot.h — comparison plots drawn by gnuplot, from CSV files.
 *
 * A plot is a CSV with a header row, a kind, the columns to draw and labels.
 * This module reads the CSV, shapes the data for the kind (series per group,
 * a matrix for a heatmap, sorted values for a CDF), writes it next to the
 * output as OUT.dat, and runs gnuplot (an external program) on a template
 * from scripts/plot/KIND.gp, writing OUT.png and OUT.svg. Every plot has a
 * title, axis labels (with units, as the caller gives them) and a legend.
 * Without gnuplot it fails with a message saying so; the CSV is untouched.
 *
 * Kinds:
 *   lines       y (one or more columns, comma-separated) against x, one line per
 *               column and per distinct value of `by`
 *   timeseries  the same, drawn without point markers (x is time)
 *   scatter     points of y against x per group; `diagonal` adds y = x
 *   cdf         the empirical CDF of column y, one curve per group
 *   heatmap     z over the grid of distinct x and y values, cells labelled
 *   bars        grouped bars: one cluster per x value, one bar per group */
#ifndef RH_PLOT_H
#define RH_PLOT_H

#include <math.h>

#include "util/err.h"

typedef enum plot_kind {
    PLOT_LINES = 0,
    PLOT_TIMESERIES,
    PLOT_SCATTER,
    PLOT_CDF,
    PLOT_HEATMAP,
    PLOT_BARS,
} plot_kind;

typedef struct plot_spec {
    plot_kind kind;
    const char *csv;          /* input CSV with a header row */
    const char *x, *y, *z;    /* column names; y may list several, comma-separated */
    const char *by;           /* group column, or NULL */
    const char *title, *xlabel, *ylabel, *zlabel;
    const char *out;          /* output path without extension */
    int logx, logy;
    int diagonal;             /* scatter: draw y = x */
    double hline;             /* a horizontal reference line (e.g. an SLO); NAN: none */
    const char *hline_label;
    double vline;             /* a vertical reference line; NAN: none */
    const char *vline_label;
    int png, svg;             /* formats; both 0 means both */
} plot_spec;

void plot_spec_init(plot_spec *s);
int plot_kind_parse(const char *name, plot_kind *k);
const char *plot_kind_name(plot_kind k);

/* Draws the plot; 0, or -1 with a message (missing gnuplot, a missing column,
 * no numeric data, gnuplot's own error). */
int plot_draw(const plot_spec *s, rh_err *e);

/* Where the gnuplot templates live: $REHEARSE_SCRIPTS/plot, else
 * <dir of the binary>/scripts/plot, else <dir>/../share/rehearse/scripts/plot. */
const char *plot_template_dir(void);

#endif
