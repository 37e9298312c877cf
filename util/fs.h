/* fs.h — small file-system helpers. */
#ifndef RH_FS_H
#define RH_FS_H

#include <stddef.h>

/* Creates `path` and any missing parents (mkdir -p). 0, or -1 with errno. */
int rh_mkdir_p(const char *path);

/* The running binary's directory (from /proc/self/exe), so data beside a
 * checkout's or an installed binary is found wherever the current
 * directory is. 0, or -1 when unreadable or longer than n. */
int rh_exe_dir(char *buf, size_t n);

#endif
