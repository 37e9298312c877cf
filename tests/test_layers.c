/* test_layers.c — the layer check (scripts/check_layers.sh) on a scratch
 * copy of the tree: the tree as it is passes; an include of a folder above
 * the file's own, one that climbs out with "..", two folders that include
 * each other and a folder the order does not name each fail it, with the
 * file, the line and the include in the message. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

static char scratch[256];
static char out[1 << 16];

/* A fresh copy of what the check reads. */
static int copy_tree(void)
{
    char cmd[1024];
    tu_tmp_path("layers", scratch, sizeof scratch);
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && mkdir -p %s && tar -cf - README.md rehearse.c scripts/check_layers.sh util traces kernels "
             "engine client router sim cli | tar -xf - -C %s",
             scratch, scratch, scratch);
    return tu_run(cmd, out, sizeof out);
}

static int check(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "bash %s/scripts/check_layers.sh %s", scratch, scratch);
    return tu_run(cmd, out, sizeof out);
}

/* Appends a line to a file of the scratch copy. */
static void append(const char *file, const char *line)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", scratch, file);
    FILE *f = fopen(path, "a");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "%s\n", line);
    fclose(f);
}

static int count_lines(const char *file)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", scratch, file);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

static void test_tree_keeps_its_order(void)
{
    CU_ASSERT_EQUAL_FATAL(copy_tree(), 0);
    int rc = check();
    if (rc) printf("\n%s", out);
    CU_ASSERT_EQUAL(rc, 0);
}

static void test_upward_include_fails(void)
{
    CU_ASSERT_EQUAL_FATAL(copy_tree(), 0);
    append("util/err.c", "#include \"engine/core/core.h\"");
    int line = count_lines("util/err.c");
    CU_ASSERT_NOT_EQUAL(check(), 0);
    char want[256];
    snprintf(want, sizeof want, "util/err.c:%d: #include \"engine/core/core.h\": util includes engine/core", line);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    if (!strstr(out, want)) printf("\n  wanted: %s\n  got: %s", want, out);
    /* engine/core includes util, so the two now include each other */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "folders engine/core and util include each other"));
}

static void test_climbing_include_fails(void)
{
    CU_ASSERT_EQUAL_FATAL(copy_tree(), 0);
    append("traces/header.c", "#include \"../sim/sim.h\"");
    CU_ASSERT_NOT_EQUAL(check(), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "#include \"../sim/sim.h\": traces includes sim, which is above it"));
}

static void test_mutual_include_fails(void)
{
    CU_ASSERT_EQUAL_FATAL(copy_tree(), 0);
    /* traces/import includes traces; now traces includes traces/import too */
    append("traces/header.c", "#include \"traces/import/import.h\"");
    CU_ASSERT_NOT_EQUAL(check(), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "folders traces and traces/import include each other"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "traces/header.c:"));
}

static void test_unnamed_folder_fails(void)
{
    CU_ASSERT_EQUAL_FATAL(copy_tree(), 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/extra && printf '#include \"util/err.h\"\\n' > %s/extra/x.c", scratch, scratch);
    CU_ASSERT_EQUAL_FATAL(tu_run(cmd, NULL, 0), 0);
    CU_ASSERT_NOT_EQUAL(check(), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "extra/x.c: folder extra is not in the layer order"));
}

static void cleanup(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf %s", scratch);
    tu_run(cmd, NULL, 0);
}

static void test_cleanup(void)
{
    cleanup();
    CU_PASS("scratch copy removed");
}

void register_test_layers(void)
{
    CU_pSuite s = CU_add_suite("layers", NULL, NULL);
    CU_add_test(s, "the tree keeps its layer order", test_tree_keeps_its_order);
    CU_add_test(s, "an include of a folder above fails, naming file, line and include", test_upward_include_fails);
    CU_add_test(s, "an include that climbs out with .. fails", test_climbing_include_fails);
    CU_add_test(s, "two folders that include each other fail", test_mutual_include_fails);
    CU_add_test(s, "a folder the order does not name fails", test_unnamed_folder_fails);
    CU_add_test(s, "scratch copy removed", test_cleanup);
}
