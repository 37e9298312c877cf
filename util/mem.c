/* mem.c — see mem.h. */
#include "util/mem.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int read_u64_file(const char *path, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    unsigned long long v;
    int ok = fscanf(f, "%llu", &v) == 1;   /* "max" fails the scan: no limit */
    fclose(f);
    if (!ok) return -1;
    *out = v;
    return 0;
}

static uint64_t meminfo_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long v;
        if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
            kb = v;
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

uint64_t rh_mem_available(void)
{
    uint64_t avail = meminfo_available();
    if (!avail) {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psz > 0) avail = (uint64_t)pages * (uint64_t)psz;
    }
    /* A container's cgroup limit is the real ceiling when it is tighter. */
    uint64_t max, cur;
    if (read_u64_file("/sys/fs/cgroup/memory.max", &max) == 0 &&
        read_u64_file("/sys/fs/cgroup/memory.current", &cur) == 0) {
        uint64_t left = max > cur ? max - cur : 0;
        if (!avail || left < avail) avail = left;
    }
    return avail;
}

const char *rh_fmt_bytes(uint64_t bytes, char *buf, int n)
{
    static const char *units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1000.0 && u < 5) {
        v /= 1000.0;
        u++;
    }
    if (u == 0) snprintf(buf, (size_t)n, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, (size_t)n, "%.1f %s", v, units[u]);
    return buf;
}
