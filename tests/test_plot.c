/* test_plot.c — CSV reading, and every plot kind drawn by gnuplot into real
 * PNG and SVG files that carry the title and legend; missing gnuplot and
 * missing columns give clear messages. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/csv.h"
#include "sim/plot/plot.h"
#include "testutil.h"

static const char *CSV =
    "chunk,max_running,p99_ttft_ms,label\n"
    "2048,64,1200,\"a, quoted\"\n"
    "2048,128,900,b\r\n"
    "4096,64,800,\"say \"\"hi\"\"\"\n"
    "4096,128,700,d\n"
    "\n"
    "8192,64,1500,e\n"
    "8192,128,1300";

static void test_csv_reader(void)
{
    char path[256];
    tu_tmp_path("plot.csv", path, sizeof path);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, CSV, strlen(CSV)), 0);
    rh_csv_table t;
    rh_err e;
    CU_ASSERT_EQUAL_FATAL(rh_csv_read(path, &t, &e), 0);
    CU_ASSERT_EQUAL(t.ncol, 4);
    CU_ASSERT_EQUAL(t.nrow, 6);
    CU_ASSERT_STRING_EQUAL(rh_csv_cell(&t, 0, 3), "a, quoted");
    CU_ASSERT_STRING_EQUAL(rh_csv_cell(&t, 1, 3), "b");
    CU_ASSERT_STRING_EQUAL(rh_csv_cell(&t, 2, 3), "say \"hi\"");
    CU_ASSERT_STRING_EQUAL(rh_csv_cell(&t, 5, 3), "");    /* missing trailing field */
    int ok;
    CU_ASSERT_DOUBLE_EQUAL(rh_csv_num(&t, 5, rh_csv_col(&t, "p99_ttft_ms"), &ok), 1300, 0);
    CU_ASSERT(ok);
    rh_csv_num(&t, 0, 3, &ok);
    CU_ASSERT(!ok);
    CU_ASSERT_EQUAL(rh_csv_col(&t, "nope"), -1);
    rh_csv_free(&t);
    CU_ASSERT_EQUAL(rh_csv_read("build/tmp/does-not-exist.csv", &t, &e), -1);
    CU_ASSERT(strstr(e.msg, "does-not-exist.csv") != NULL);
}

static int file_has(const char *path, const char *needle, size_t n_needle)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    for (size_t i = 0; i + n_needle <= n; i++)
        if (!memcmp(buf + i, needle, n_needle)) return 1;
    return 0;
}

static void draw_kind(const char *csv, plot_kind k, const char *title)
{
    char out[256], png[300], svg[300];
    tu_tmp_path(plot_kind_name(k), out, sizeof out);
    plot_spec s;
    plot_spec_init(&s);
    s.kind = k;
    s.csv = csv;
    s.out = out;
    s.title = title;
    s.x = "chunk";
    s.y = k == PLOT_HEATMAP ? "max_running" : "p99_ttft_ms";
    s.z = "p99_ttft_ms";
    s.by = (k == PLOT_HEATMAP || k == PLOT_CDF) ? NULL : "max_running";
    s.xlabel = "chunked-prefill size (tokens)";
    s.ylabel = "p99 TTFT (ms)";
    s.hline = 1000;
    s.hline_label = "SLO";
    rh_err e = {{0}};
    int rc = plot_draw(&s, &e);
    if (rc != 0) printf("\n  plot %s: %s\n", plot_kind_name(k), e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    snprintf(png, sizeof png, "%s.png", out);
    snprintf(svg, sizeof svg, "%s.svg", out);
    CU_ASSERT(file_has(png, "\x89PNG", 4));
    CU_ASSERT(file_has(svg, title, strlen(title)));
    if (k != PLOT_HEATMAP) CU_ASSERT(file_has(svg, k == PLOT_CDF ? "p99_ttft_ms" : "max_running=64", k == PLOT_CDF ? 11 : 14));
}

static void test_every_kind(void)
{
    char path[256];
    tu_tmp_path("plot-kinds.csv", path, sizeof path);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, CSV, strlen(CSV)), 0);
    draw_kind(path, PLOT_LINES, "Lines title");
    draw_kind(path, PLOT_TIMESERIES, "Series title");
    draw_kind(path, PLOT_SCATTER, "Scatter title");
    draw_kind(path, PLOT_CDF, "CDF title");
    draw_kind(path, PLOT_HEATMAP, "Heatmap title");
    draw_kind(path, PLOT_BARS, "Bars title");
}

static void test_clear_failures(void)
{
    char path[256], out[256];
    tu_tmp_path("plot-fail.csv", path, sizeof path);
    tu_tmp_path("plot-fail", out, sizeof out);
    CU_ASSERT_EQUAL_FATAL(tu_write_file(path, CSV, strlen(CSV)), 0);
    plot_spec s;
    plot_spec_init(&s);
    s.kind = PLOT_LINES;
    s.csv = path;
    s.out = out;
    s.x = "chunk";
    s.y = "p50_ttft_ms";
    rh_err e;
    CU_ASSERT_EQUAL(plot_draw(&s, &e), -1);
    CU_ASSERT(strstr(e.msg, "p50_ttft_ms") != NULL);

    s.y = "p99_ttft_ms";
    setenv("REHEARSE_GNUPLOT", "/nonexistent/gnuplot", 1);
    CU_ASSERT_EQUAL(plot_draw(&s, &e), -1);
    unsetenv("REHEARSE_GNUPLOT");
    CU_ASSERT(strstr(e.msg, "gnuplot not found") != NULL);
    CU_ASSERT(tu_file_exists(path));      /* the CSV is kept */

    /* The CLI says the same and exits 1. */
    char cmd[1024], outbuf[2048];
    snprintf(cmd, sizeof cmd, "%s plot pie %s -o %s", tu_bin(), path, out);
    CU_ASSERT_EQUAL(tu_run(cmd, outbuf, sizeof outbuf), 1);
    CU_ASSERT(strstr(outbuf, "unknown plot kind 'pie'") != NULL);
}

void register_test_plot(void)
{
    CU_pSuite s = CU_add_suite("plot", NULL, NULL);
    CU_add_test(s, "csv reader", test_csv_reader);
    CU_add_test(s, "every kind draws png and svg", test_every_kind);
    CU_add_test(s, "clear failures", test_clear_failures);
}
