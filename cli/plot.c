/* plot.c — `rehearse plot KIND CSV -o OUT [--x COL --y COL[,COL] ...]`. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "sim/plot/plot.h"
#include "util/args.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: rehearse plot KIND CSV -o OUT [options]\n\n"
               "Draws OUT.png and OUT.svg from a CSV with a header row, using gnuplot and the\n"
               "templates in scripts/plot/ (OUT.gp is kept so the plot can be tweaked).\n\n"
               "kinds: lines, timeseries, scatter, cdf, heatmap, bars\n"
               "  --x COL              x column (categories for heatmap and bars)\n"
               "  --y COL[,COL...]     y column(s); for cdf the value column\n"
               "  --z COL              heatmap value column\n"
               "  --by COL             one series per distinct value of COL\n"
               "  --title T, --xlabel T, --ylabel T, --zlabel T   (give units: \"TTFT (ms)\")\n"
               "  --logx, --logy       logarithmic axes\n"
               "  --hline Y [--hline-label T]   a horizontal reference line (an SLO)\n"
               "  --vline X [--vline-label T]   a vertical reference line\n"
               "  --diagonal           scatter: draw y = x\n"
               "  --png, --svg         only that format (default: both)\n");
}

int plot_main(int argc, char **argv)
{
    if (rh_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    plot_spec s;
    plot_spec_init(&s);
    rh_args a;
    rh_args_init(&a, argc, argv);
    a.i = 1;
    rh_err e = {{0}};
    const char *name;
    while ((name = rh_args_next(&a))) {
        const char **slot = NULL;
        if (!strcmp(name, "logx")) s.logx = 1;
        else if (!strcmp(name, "logy")) s.logy = 1;
        else if (!strcmp(name, "diagonal")) s.diagonal = 1;
        else if (!strcmp(name, "png")) s.png = 1;
        else if (!strcmp(name, "svg")) s.svg = 1;
        else if (!strcmp(name, "x")) slot = &s.x;
        else if (!strcmp(name, "y")) slot = &s.y;
        else if (!strcmp(name, "z")) slot = &s.z;
        else if (!strcmp(name, "by")) slot = &s.by;
        else if (!strcmp(name, "title")) slot = &s.title;
        else if (!strcmp(name, "xlabel")) slot = &s.xlabel;
        else if (!strcmp(name, "ylabel")) slot = &s.ylabel;
        else if (!strcmp(name, "zlabel")) slot = &s.zlabel;
        else if (!strcmp(name, "o") || !strcmp(name, "output")) slot = &s.out;
        else if (!strcmp(name, "hline-label")) slot = &s.hline_label;
        else if (!strcmp(name, "vline-label")) slot = &s.vline_label;
        else if (!strcmp(name, "hline") || !strcmp(name, "vline")) {
            const char *v = rh_args_value(&a, &e);
            if (!v || rh_parse_double(v, name[0] == 'h' ? "--hline" : "--vline",
                                      name[0] == 'h' ? &s.hline : &s.vline, &e) < 0)
                goto bad;
        } else {
            rh_fail(&e, "unknown flag --%s (see rehearse plot --help)", name);
            goto bad;
        }
        if (slot && !(*slot = rh_args_value(&a, &e))) goto bad;
    }
    if (a.npos != 2) {
        rh_fail(&e, "plot takes KIND and CSV (got %d words); see rehearse plot --help", a.npos);
        goto bad;
    }
    if (plot_kind_parse(a.pos[0], &s.kind) < 0) {
        rh_fail(&e, "unknown plot kind '%s' (lines, timeseries, scatter, cdf, heatmap, bars)", a.pos[0]);
        goto bad;
    }
    s.csv = a.pos[1];
    if (!s.out) {
        rh_fail(&e, "plot needs -o OUT (written as OUT.png and OUT.svg)");
        goto bad;
    }
    if (plot_draw(&s, &e) < 0) goto bad;
    printf("%s.png %s.svg\n", s.out, s.out);
    return 0;
bad:
    fprintf(stderr, "rehearse plot: %s\n", e.msg);
    return 1;
}
