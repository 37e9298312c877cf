/* cost_presets.c — the preset search path (see cost_presets.h). */
#include "sim/cost/cost_presets.h"
#include "util/fs.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DIRS 16
#define PATH_N 4096

/* The search directories, in order; returns how many. */
static int search_dirs(char dirs[MAX_DIRS][PATH_N])
{
    int n = 0;
    const char *env = getenv("REHEARSE_PRESETS");
    if (env && *env) {
        const char *p = env;
        while (*p && n < MAX_DIRS - 2) {
            const char *colon = strchr(p, ':');
            size_t len = colon ? (size_t)(colon - p) : strlen(p);
            if (len > 0 && len < PATH_N) snprintf(dirs[n++], PATH_N, "%.*s", (int)len, p);
            if (!colon) break;
            p = colon + 1;
        }
    }
    /* The binary's own directory: works from a checkout and after install,
     * wherever the current directory is. */
    char exe[PATH_N];
    if (rh_exe_dir(exe, sizeof exe) == 0) {
        snprintf(dirs[n++], PATH_N, "%.3000s/sim/cost/presets", exe);
        snprintf(dirs[n++], PATH_N, "%.3000s/../share/rehearse/presets", exe);
    }
    return n;
}

/* A readable regular file: a device or a directory named as a preset
 * (/dev/zero, /dev/stdin) would hang or mislead the JSON reader. */
static int readable_file(const char *path)
{
    struct stat st;
    return access(path, R_OK) == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_path_name(const char *name)
{
    size_t len = strlen(name);
    return strchr(name, '/') || (len > 5 && !strcmp(name + len - 5, ".json"));
}

static int is_plain_name(const char *name)
{
    if (!*name || strlen(name) > 100) return 0;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
              *p == '-' || *p == '_'))
            return 0;
    return 1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void cost_preset_list(const char *category, char *out, size_t n)
{
    char dirs[MAX_DIRS][PATH_N];
    int nd = search_dirs(dirs);
    char *names[256];
    int nn = 0;
    for (int i = 0; i < nd; i++) {
        char d[PATH_N + 64];
        snprintf(d, sizeof d, "%.4000s/%.40s", dirs[i], category);
        DIR *dir = opendir(d);
        if (!dir) continue;
        struct dirent *de;
        while ((de = readdir(dir)) && nn < 256) {
            size_t len = strlen(de->d_name);
            if (len <= 5 || strcmp(de->d_name + len - 5, ".json")) continue;
            char *s = strndup(de->d_name, len - 5);
            if (!s) continue;
            int dup = 0;
            for (int k = 0; k < nn && !dup; k++) dup = !strcmp(names[k], s);
            if (dup) free(s);
            else names[nn++] = s;
        }
        closedir(dir);
    }
    qsort(names, (size_t)nn, sizeof names[0], cmp_str);
    if (n) out[0] = '\0';
    for (int k = 0; k < nn; k++) {
        size_t used = strlen(out);
        if (used + 1 < n) snprintf(out + used, n - used, "%s%s", k ? ", " : "", names[k]);
        free(names[k]);
    }
    if (n && !out[0]) snprintf(out, n, "none");
}

int cost_preset_find(const char *category, const char *name, const char *base_dir, char *path, size_t n,
                     rh_err *e)
{
    if (is_path_name(name)) {
        if (name[0] == '/' || !base_dir || !strcmp(base_dir, ".")) snprintf(path, n, "%s", name);
        else snprintf(path, n, "%s/%s", base_dir, name);
        if (readable_file(path)) return 0;
        return rh_fail(e, "preset file '%s' cannot be read (or is not a regular file)", path);
    }
    char known[1024];
    if (!is_plain_name(name)) {
        cost_preset_list(category, known, sizeof known);
        return rh_fail(e, "'%s' is not a preset name (known %s: %s)", name, category, known);
    }
    char dirs[MAX_DIRS][PATH_N];
    int nd = search_dirs(dirs);
    char searched[2048] = "";
    for (int i = 0; i < nd; i++) {
        snprintf(path, n, "%s/%s/%s.json", dirs[i], category, name);
        if (readable_file(path)) return 0;
        size_t used = strlen(searched);
        snprintf(searched + used, sizeof searched - used, "%s%s/%s", i ? ", " : "", dirs[i], category);
    }
    cost_preset_list(category, known, sizeof known);
    const char *what = !strcmp(category, "gpus") ? "GPU" : !strcmp(category, "models") ? "model" : category;
    return rh_fail(e, "no %s preset '%s' (searched %s; set REHEARSE_PRESETS to add a directory; known: %s)",
                   what, name, searched, known);
}
