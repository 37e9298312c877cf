/* test_readme.c — the README's walk-through is what runs: the command in
 * the first ```sh block under "## A walk through one experiment" is run as
 * written (`rehearse` the binary under test, ../shared/traces/ the shared
 * traces, its reports in a scratch folder) and must print, as one line of
 * its output, the line of the ``` block that follows it. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* The first fenced block after `from` in text (its body, malloc'd), and
 * where it ends in *next. */
static char *fenced_after(const char *text, const char *from, const char **next)
{
    const char *open = strstr(from, "```");
    if (!open) return NULL;
    const char *body = strchr(open, '\n');
    if (!body) return NULL;
    body++;
    const char *close = strstr(body, "```");
    if (!close) return NULL;
    *next = close + 3;
    (void)text;
    return strndup(body, (size_t)(close - body));
}

/* Replaces every `what` in s by `with` (a new string; s is freed). */
static char *replace(char *s, const char *what, const char *with)
{
    size_t n = 0, lw = strlen(what), lr = strlen(with);
    for (const char *p = s; (p = strstr(p, what)); p += lw) n++;
    char *out = malloc(strlen(s) + n * lr + 1), *o = out;
    const char *p = s, *q;
    while ((q = strstr(p, what))) {
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, with, lr);
        o += lr;
        p = q + lw;
    }
    strcpy(o, p);
    free(s);
    return out;
}

static void test_walk_through_prints_its_line(void)
{
    const char *traces = tu_shared_traces("the README's walk-through reads the Azure conversation trace");
    if (!traces) return;
    FILE *f = fopen("README.md", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static char text[1 << 18];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *section = strstr(text, "## A walk through one experiment");
    CU_ASSERT_PTR_NOT_NULL_FATAL(section);
    const char *next = NULL;
    char *cmd = fenced_after(text, section, &next);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cmd);
    char *expect = fenced_after(text, next, &next);
    CU_ASSERT_PTR_NOT_NULL_FATAL(expect);
    char *nl = strchr(expect, '\n');
    if (nl) *nl = '\0';
    CU_ASSERT_FATAL(strncmp(cmd, "rehearse ", 9) == 0);
    CU_ASSERT(strlen(expect) > 20);

    /* As written, with the binary under test, the shared traces wherever
     * they are, and the reports out of the tree. */
    char bin[512], dir[512], out_dir[256];
    snprintf(bin, sizeof bin, "%s ", tu_bin());
    snprintf(dir, sizeof dir, "%s/", traces);
    tu_tmp_path("readme-walk", out_dir, sizeof out_dir);
    cmd = replace(cmd, "\\\n", " ");
    cmd = replace(cmd, "\n", " ");
    cmd = replace(cmd, "../shared/traces/", dir);
    char *run = malloc(strlen(cmd) + strlen(bin) + strlen(out_dir) + 16);
    sprintf(run, "%s%s out=%s", bin, cmd + 9, out_dir);
    static char out[1 << 16];
    int rc = tu_run(run, out, sizeof out);
    if (rc != 0) printf("\n  %s\n  %s\n", run, out);
    CU_ASSERT_EQUAL(rc, 0);
    /* The README's line, whole, as a line of the output. */
    int found = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        if (!strcmp(line, expect)) found = 1;
    if (!found) printf("\n  the README says: %s\n  it printed:\n%s\n", expect, out);
    CU_ASSERT(found);
    free(run);
    free(cmd);
    free(expect);
}

void register_test_readme(void)
{
    CU_pSuite s = CU_add_suite("readme", NULL, NULL);
    CU_add_test(s, "the walk-through prints the line the README shows", test_walk_through_prints_its_line);
}
