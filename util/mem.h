/* mem.h — how much memory this process may still allocate.
 *
 * Used to refuse a model or KV pool that cannot fit before allocating it, so
 * the failure is one clear message instead of the OOM killer. */
#ifndef RH_MEM_H
#define RH_MEM_H

#include <stdint.h>

/* The smaller of MemAvailable (/proc/meminfo) and the cgroup's remaining
 * limit, else physical memory; 0 when nothing can be read. */
uint64_t rh_mem_available(void);

/* "12.3 GB" style text for messages (decimal units). */
const char *rh_fmt_bytes(uint64_t bytes, char *buf, int n);

#endif
